#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// How an app's processes are frozen, thawed and killed: its cgroup v2 (`CgroupSuspension`), or,
/// where no cgroup v2 is writable, SIGSTOP/SIGCONT of the process groups drowsed started
/// (`SignalSuspension`).
package protocol AppSuspension: AnyObject {
    /// "cgroup-v2", "sigstop" or "none".
    var mechanism: String { get }
    /// The cgroup drowsed's apps live under, if any.
    var cgroupBase: String? { get }
    /// Apps whose resident process outlived the previous drowsed (found in their cgroups); every
    /// app cgroup is thawed and leftover handler runs are killed. Called once at start.
    func adopt(apps: [String]) -> Set<String>
    /// A cgroup for one process of the app (a handler run, or "resident"); nil without cgroups.
    func leaf(app: String, name: String) -> String?
    /// The leaf's processes are gone: remove it.
    func leafEnded(_ leaf: String)
    func freeze(app: String, processGroups: [pid_t])
    func thaw(app: String, processGroups: [pid_t])
    /// Kills every process of the app, children that called setsid included.
    func killAll(app: String, processGroups: [pid_t])
    /// Kills the processes of one leaf (a resident process and its children); without cgroups,
    /// its process groups.
    func killLeaf(_ leaf: String?, processGroups: [pid_t])
    /// The leaf of a resident process adopted from a previous drowsed.
    func adoptedLeaf(app: String) -> String?
    /// An adopted resident process has ended: stop watching, remove its leaf.
    func adoptedEnded(app: String)
    /// Calls `exited` (on some thread) when an adopted resident's cgroup empties.
    func watchAdopted(app: String, exited: @escaping @Sendable () -> Void)
    /// Sets the app's limits on its cgroup where it can; returns which of them it holds (the
    /// others are set as rlimits in each process).
    func limit(app: String, _ limits: AppLimits) -> (processes: Bool, memory: Bool)
    /// The controllers ("pids", "memory") enabled down to the app cgroups at start.
    var limitControllers: Set<String> { get }
}

/// SIGSTOP/SIGCONT to the process groups drowsed started (each handler and resident process
/// leads its own group). A child that left its group (setsid) is not stopped: this is the
/// fallback, and `drowse status` says it is in use.
final class SignalSuspension: AppSuspension {
    var mechanism: String { "sigstop" }
    var cgroupBase: String? { nil }
    func adopt(apps: [String]) -> Set<String> { [] }
    func leaf(app: String, name: String) -> String? { nil }
    func leafEnded(_ leaf: String) {}
    func freeze(app: String, processGroups: [pid_t]) { SignalFreezer().stop(processGroups: processGroups) }
    func thaw(app: String, processGroups: [pid_t]) { SignalFreezer().resume(processGroups: processGroups) }
    func killAll(app: String, processGroups: [pid_t]) {
        // SIGKILL ends a stopped process too; SIGCONT lets it be reaped at once.
        for g in processGroups where g > 1 {
            // drowsed's own children's groups: gone already is fine, and nothing else can fail.
            Sys.killpgOwn(g, SIGKILL)
            Sys.killpgOwn(g, SIGCONT)
        }
    }
    func watchAdopted(app: String, exited: @escaping @Sendable () -> Void) {}
    func killLeaf(_ leaf: String?, processGroups: [pid_t]) { killAll(app: "", processGroups: processGroups) }
    func adoptedLeaf(app: String) -> String? { nil }
    func adoptedEnded(app: String) {}
    func limit(app: String, _ limits: AppLimits) -> (processes: Bool, memory: Bool) { (false, false) }
    var limitControllers: Set<String> { [] }
}

extension Agent {
    func makeLifecycleService() -> LifecycleService {
        var settings = AppLifecycle.Settings()
        settings.suspendAfter = config.lifecycle.suspendAfter.seconds
        settings.taskAllowance = config.lifecycle.backgroundTaskTime.seconds
        settings.taskExpiryWarning = config.lifecycle.taskExpiryWarning.seconds
        settings.eventDeadline = config.scheduler.handlerDeadline.seconds
        let host = LifecycleHost(
            now: { self.now() },
            startProcess: { self.startResident($0) },
            killProcess: { app in
                let groups = self.residents[app]?.pid.map { [$0] } ?? []
                self.suspension.killLeaf(self.residentLeaves[app] ?? self.suspension.adoptedLeaf(app: app), processGroups: groups)
            },
            killApp: { app in self.suspension.killAll(app: app, processGroups: self.processGroups(of: app)) },
            freeze: { app in self.suspension.freeze(app: app, processGroups: self.processGroups(of: app)) },
            thaw: { app in self.suspension.thaw(app: app, processGroups: self.processGroups(of: app)) },
            overran: { app in self.taskOverran(app) },
            setTimer: { at in
                self.lifecycleTimer?.cancel()
                self.lifecycleTimer = nil
                guard let at else { return }
                self.lifecycleTimer = self.clock.wake(after: max(0, at - self.now())) { Task { await self.lifecycleTimerFired() } }
            },
            wall: { [timeline] in timeline.wall($0) })
        return LifecycleService(settings: settings, host: host, logger: logger)
    }

    func lifecycleTimerFired() {
        lifecycleTimer = nil
        lifecycle.timerFired()
    }

    /// Process groups drowsed started for the app and that still run (for signal suspension).
    func processGroups(of app: String) -> [pid_t] {
        ([residents[app]?.pid] + (handlerRuns[app] ?? [:]).values.map(\.pid)).compactMap { $0 }
    }

    /// Sets up suspension and the lifecycle at start: adopt what a killed drowsed left, then
    /// start the resident apps that are not running.
    func startLifecycle() {
        let adopted = suspension.adopt(apps: apps.keys.sorted())
        for id in adopted.sorted() {
            if apps[id]?.isResident == true {
                logger.info("adopted the resident process a previous drowsed left running", metadata: ["app.id": "\(id)"])
                suspension.watchAdopted(app: id) { Task { await self.adoptedResidentExited(id) } }
            }
        }
        lifecycle.configure(apps.values.sorted { $0.id < $1.id }, adopted: adopted.filter { apps[$0]?.isResident == true })
    }

    func adoptedResidentExited(_ app: String) {
        suspension.adoptedEnded(app: app)
        guard residents[app] == nil else { return }
        lifecycle.processExited(app, description: "exited (adopted from a previous drowsed: status unknown)")
    }

    /// Starts an app's resident process: the app's user, its cgroup, no deadline.
    func startResident(_ id: String) {
        guard !stopping, let app = apps[id], let argv = app.processCommand else { return }
        if residents[id] != nil { return }
        var env: [String: String] = [
            "DROWSE_APP": app.id, "DROWSE_EVENT": HandlerEvent.resident.rawValue, "DROWSE_SOCKET": config.socket,
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
        ]
        if app.user == nil, let home = getenv("HOME") { env["HOME"] = String(cString: home) }
        var request = LaunchRequest(
            app: app.id, event: .resident, argv: argv, user: app.user,
            workingDirectory: app.workingDirectory ?? ConfigPath.directory(of: app.file),
            environment: env, stdin: [], deadline: .infinity)
        // A fresh leaf per process (see CgroupSuspension.killAll), named for this drowsed.
        handlerSeq += 1
        let leaf = suspension.leaf(app: id, name: "resident-\(getpid())-\(handlerSeq)")
        request.cgroup = leaf
        applyLimits(app, to: &request)
        residentLeaves[id] = leaf
        let log = logger
        let run = launcher.start(request) { line, isErr in
            log.info("\(line)", metadata: ["app.id": "\(id)", "handler.stream": isErr ? "stderr" : "stdout"])
        }
        if run.pid == nil {
            // It could not start: the outcome is already there.
            Task {
                let outcome = await run.outcome()
                self.residentEnded(id, outcome: outcome)
            }
            return
        }
        residents[id] = run
        logger.info("started the resident process", metadata: ["app.id": "\(id)"])
        lifecycle.processStarted(id)
        Task {
            let outcome = await run.outcome()
            self.residentEnded(id, outcome: outcome)
        }
    }

    func residentEnded(_ id: String, outcome: HandlerOutcome) {
        residents[id] = nil
        if let leaf = residentLeaves.removeValue(forKey: id) { suspension.leafEnded(leaf) }
        let level: Logger.Level = stopping ? .info : .warning
        logger.log(level: level, "resident process ended: \(outcome.summary)", metadata: ["app.id": "\(id)"])
        if stopping { residentsIdle() ; return }
        lifecycle.processExited(id, description: outcome.summary)
    }

    private func residentsIdle() {
        if residents.isEmpty {
            for c in residentsStopped { c.resume() }
            residentsStopped.removeAll()
        }
    }

    /// Shutdown: resident processes are thawed and asked to stop (SIGTERM, SIGKILL after the grace).
    func stopResidents() async {
        lifecycle.stop()
        guard !residents.isEmpty else { return }
        for (id, run) in residents {
            suspension.thaw(app: id, processGroups: processGroups(of: id))
            run.terminate()
        }
        await withCheckedContinuation { residentsStopped.append($0) }
    }

    /// An app overran its background-task allowance: it counts like a fetch killed at its deadline.
    func taskOverran(_ app: String) {
        let t = now()
        let (record, next) = fetch.handlerEnded(app: app, fetch: FetchScheduler.FetchEnding(result: .failed, timedOut: true), startedAt: t, endedAt: t)
        let run = RunRecord(app: app, event: .fetch, trigger: "task-overrun", result: .failed,
                            ending: "background task time ran out", startedAt: t, endedAt: t, timedOut: true)
        do { try store.record(run, fetch: record, handlingNotification: nil) } catch { logger.error("store: \(error)") }
        fetch.finish(next)
        runResulted(app: app, failed: true)
    }

    /// A resident app's event, as its stream line's members (besides event, id and deadline).
    static func eventMembers(_ event: HandlerEvent, stdin: [UInt8]) -> [(String, JSON)] {
        let parsed = try? JSON.parse(bytes: stdin)
        switch event {
        case .notification:
            return [("payload", parsed ?? .string(String(decoding: stdin, as: UTF8.self)))]
        default:
            guard case .object(let m)? = parsed else { return [] }
            return m.filter { $0.0 != "event" && $0.0 != "app" }
        }
    }

    // MARK: API

    package func openEventStream(_ id: String, caller: Caller, sink: EventSink) throws(APIError) {
        _ = try app(id, for: caller)
        lifecycle.openStream(id, sink: sink)
    }

    package func eventStreamClosed(_ id: String, sink: EventSink) {
        lifecycle.streamClosed(id, sink: sink)
    }

    package func completeEvent(_ id: String, event: String, result: FetchResult, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        try lifecycle.complete(id, event: event, result: result)
    }

    package func beginTask(_ id: String, name: String?, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycle.beginTask(id, name: name).json(now: now(), wall: timeline.skew)
    }

    package func endTask(_ id: String, task: String, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycle.endTask(id, id: task).json(now: now(), wall: timeline.skew)
    }

    package func task(_ id: String, task: String, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycle.task(id, id: task).json(now: now(), wall: timeline.skew)
    }

    package func activate(_ id: String, _ on: Bool, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        _ = lifecycle.activate(id, on)
        return .object([("id", .string(id))] + stateMembers(id))
    }

    func stateMembers(_ id: String) -> [(String, JSON)] {
        let s = lifecycle.state(of: id)
        return [("state", JSON(s?.state.rawValue)), ("state_reason", JSON(s?.reason)), ("state_since", JSON(wall(s?.since)))]
    }

    func lifecycleStatus() -> JSON {
        .object([
            ("suspension", .string(suspension.mechanism)), ("cgroup", JSON(suspension.cgroupBase)),
            ("memory_pressure", .string(memoryPressureStatus)),
        ])
    }
}
