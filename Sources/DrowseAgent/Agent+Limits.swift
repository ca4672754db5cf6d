import DrowseCore
import DrowseSystem

/// Per-app `[limits]`: on the app's cgroup where its tree has the pids and memory controllers,
/// else as rlimits of each process drowsed starts for the app.
extension Agent {
    func limits(of app: AppDefinition) -> AppLimits { app.limits.resolved(defaults: config.limits) }

    /// Sets the app's limits before one of its processes starts: written to its cgroup each time
    /// (a reload may have changed them; two small writes), and whatever the cgroup cannot hold
    /// goes into the request as rlimits.
    func applyLimits(_ app: AppDefinition, to request: inout LaunchRequest) {
        let l = limits(of: app)
        let held = suspension.limit(app: app.id, l)
        limitHolders[app.id] = held
        request.processLimit = held.processes ? nil : l.processes
        request.dataLimit = held.memory ? nil : l.memory
    }

    /// `limits` of `drowse apps show --json`: the values, and what holds each ("cgroup", or
    /// "rlimit" — RLIMIT_NPROC counts every process of the app's user, RLIMIT_DATA each process
    /// on its own): as at the app's last start, before it by the controllers the tree has.
    func limitsJSON(_ app: AppDefinition) -> JSON {
        let l = limits(of: app)
        let held = limitHolders[app.id]
        let controllers = suspension.limitControllers
        func by(_ h: Bool) -> String { h ? "cgroup" : "rlimit" }
        return .object([
            ("processes", JSON(l.processes)), ("memory", JSON(l.memory)),
            ("memory_text", .string(AppLimits.formatMemory(l.memory))),
            ("processes_enforced_by", .string(by(held?.processes ?? controllers.contains("pids")))),
            ("memory_enforced_by", .string(by(held?.memory ?? controllers.contains("memory")))),
        ])
    }
}
