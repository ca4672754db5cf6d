#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem
import Logging

/// Suspension through each app's cgroup v2 (`AppCgroups`): `cgroup.freeze` stops every process
/// of the app, children that called setsid included, and `cgroup.kill` ends them.
final class CgroupSuspension: AppSuspension {
    func removeLeftovers() { tree.removeEmptyTree() }

    let tree: AppCgroups
    let logger: Logger
    /// Adopted residents' cgroups being watched for their end.
    var watches: [String: PopulatedWatch] = [:]
    /// The leaf of each adopted resident process.
    var adoptedLeaves: [String: String] = [:]
    var limitControllers: Set<String> = []

    init(tree: AppCgroups, logger: Logger) {
        self.tree = tree
        self.logger = logger
    }

    var mechanism: SuspensionMechanism { tree.mechanism }
    var cgroupBase: String? { tree.base }

    func adopt(apps: [String]) -> Set<String> {
        var adopted: Set<String> = []
        let known = Set(apps)
        for app in tree.existingApps() {
            // Nothing is left frozen without a reason: the lifecycle freezes again what it must.
            do { try tree.thaw(app: app) } catch { logger.warning("cannot thaw \(tree.appPath(app)): \(error)") }
            // Leaves of another drowsed that runs now are its own (two agents share a base only
            // when both run in the root cgroup, as tests and benchmarks do): left alone.
            let leaves = tree.leaves(app: app).filter { !AppCgroups.ownedByAnotherLiveDrowsed($0) }
            guard known.contains(app) else {
                // An app that is gone: whatever it left is ended.
                if leaves.count == tree.leaves(app: app).count, !tree.removeApp(app) {
                    logger.warning("processes of a removed app are left in \(tree.appPath(app))")
                }
                continue
            }
            for leaf in leaves {
                let path = tree.appPath(app) + "/" + leaf
                if leaf.hasPrefix("resident"), tree.isPopulated(path), adoptedLeaves[app] == nil {
                    adopted.insert(app)
                    adoptedLeaves[app] = path
                    continue
                }
                // A handler run of the killed drowsed: its event is run again (it was not recorded as handled).
                if tree.isPopulated(path) {
                    logger.info("ending a handler run left by a previous drowsed (\(path))", metadata: ["app.id": "\(app)"])
                    tree.kill(path)
                    _ = AppCgroups.waitForEvents(path, timeout: 2) { $0["populated"] == false }
                }
                _ = tree.removeLeafIfEmpty(path)
            }
        }
        return adopted
    }

    func leaf(app: String, name: String) -> String? {
        do { return try tree.makeLeaf(app: app, name: name) } catch {
            logger.warning("cannot make cgroup \(tree.appPath(app))/\(name): \(error); the process runs outside it", metadata: ["app.id": "\(app)"])
            return nil
        }
    }

    func leafEnded(_ leaf: String) {
        // A leaf still holding processes (a run's leftovers being killed) stays until the next start.
        _ = tree.removeLeafIfEmpty(leaf)
    }

    func isReusable(_ leaf: String) -> Bool { tree.isReusable(leaf) }

    func freeze(app: String, processGroups: [pid_t]) {
        do { try tree.freeze(app: app) } catch { logger.warning("cannot freeze: \(error)", metadata: ["app.id": "\(app)"]) }
    }

    func thaw(app: String, processGroups: [pid_t]) {
        do { try tree.thaw(app: app) } catch { logger.warning("cannot thaw: \(error)", metadata: ["app.id": "\(app)"]) }
    }

    /// Each leaf is killed on its own, never the app's cgroup as a whole: Linux 6.18 kills at
    /// once every process later cloned (CLONE_INTO_CGROUP) into a cgroup that was killed, or
    /// below one (seen: a restarted resident died with SIGKILL at its clone3). For the same
    /// reason a leaf that was killed never takes another process (`AppCgroups.wasKilled`).
    func killAll(app: String, processGroups: [pid_t]) {
        for leaf in tree.leaves(app: app) { tree.kill(tree.appPath(app) + "/" + leaf) }
    }

    func killLeaf(_ leaf: String?, processGroups: [pid_t]) {
        if let leaf { tree.kill(leaf) }
    }

    func adoptedLeaf(app: String) -> String? { adoptedLeaves[app] }

    func watchAdopted(app: String, exited: @escaping @Sendable () -> Void) {
        guard let leaf = adoptedLeaves[app] else { return exited() }
        switch PopulatedWatch.start(path: leaf, onEmpty: exited) {
        case .success(let w): watches[app] = w
        case .failure(let e):
            logger.warning("cannot watch the adopted resident process: \(e); it is ended and started again", metadata: ["app.id": "\(app)"])
            tree.kill(leaf)
            exited()
        }
    }

    func limit(app: String, _ limits: AppLimits) -> (processes: Bool, memory: Bool) {
        tree.setLimits(app: app, processes: limits.processes, memory: limits.memory)
    }

    func adoptedEnded(app: String) {
        watches.removeValue(forKey: app)
        if let leaf = adoptedLeaves.removeValue(forKey: app) { _ = tree.removeLeafIfEmpty(leaf) }
    }
}

/// The app cgroups when a cgroup v2 is writable, else signals.
func makeSuspension(_ setting: CgroupSetting, logger: Logger) -> AppSuspension {
    switch AppCgroups.setUp(setting: setting) {
    case .success(let tree):
        logger.info("apps are suspended by freezing their cgroups under \(tree.base)")
        let controllers = tree.enableControllers()
        if controllers.count < 2 {
            logger.notice("app cgroups have no \(["pids", "memory"].filter { !controllers.contains($0) }.joined(separator: "/")) controller: those [limits] are set as rlimits (RLIMIT_NPROC counts per user)")
        }
        let suspension = CgroupSuspension(tree: tree, logger: logger)
        suspension.limitControllers = controllers
        return suspension
    case .failure(let error):
        logger.notice("no app cgroups (\(error)): apps are suspended with SIGSTOP/SIGCONT of their process groups")
        return SignalSuspension()
    }
}
