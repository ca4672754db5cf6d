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
    /// drowsed stops: whatever it made and nothing uses any more goes (empty cgroup folders).
    func removeLeftovers()
    /// How apps are frozen (shown as "cgroup-v2" or "sigstop").
    var mechanism: SuspensionMechanism { get }
    /// The cgroup drowsed's apps live under, if any.
    var cgroupBase: String? { get }
    /// Apps whose resident process outlived the previous drowsed (found in their cgroups); every
    /// app cgroup is thawed and leftover handler runs are killed. Called once at start.
    func adopt(apps: [String]) -> Set<String>
    /// A cgroup for one process of the app (a handler run, or "resident"); nil without cgroups.
    func leaf(app: String, name: String) -> String?
    /// The leaf's processes are gone: remove it.
    func leafEnded(_ leaf: String)
    /// The leaf of a handler run that ended may take another run of its app.
    func isReusable(_ leaf: String) -> Bool
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
    func removeLeftovers() {}

    var mechanism: SuspensionMechanism { .signals }
    var cgroupBase: String? { nil }
    func adopt(apps: [String]) -> Set<String> { [] }
    func leaf(app: String, name: String) -> String? { nil }
    func leafEnded(_ leaf: String) {}
    func isReusable(_ leaf: String) -> Bool { false }
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
