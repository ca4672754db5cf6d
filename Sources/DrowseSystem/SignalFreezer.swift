#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// The fallback where no cgroup v2 is writable: SIGSTOP / SIGCONT to each of an app's process
/// groups (its resident process and its handlers each run in a group of their own). A child
/// that left its group with `setsid` escapes this; `drowse status` says `sigstop`.
package struct SignalFreezer: Sendable {
    package init() {}

    /// Stops every process in each group; returns the groups that could not be signalled (gone).
    @discardableResult
    package func stop(processGroups: [pid_t]) -> [pid_t] { send(SIGSTOP, processGroups) }

    /// Lets each group run again; returns the groups that could not be signalled.
    @discardableResult
    package func resume(processGroups: [pid_t]) -> [pid_t] { send(SIGCONT, processGroups) }

    private func send(_ sig: Int32, _ groups: [pid_t]) -> [pid_t] {
        groups.filter { $0 <= 1 || killpg($0, sig) != 0 }
    }
}
