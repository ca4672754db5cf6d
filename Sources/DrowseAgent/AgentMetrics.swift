#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem

/// The daemon's counters, fed where things happen (the fetch, notification and transfer
/// services, the handler runs, the MQTT session's events). Used only from the agent's executor
/// (it is not Sendable): no lock, no thread, no timer. Reading the process's own memory and CPU
/// time happens only when the text is asked for.
package final class AgentMetrics {
    package private(set) var registry = MetricsRegistry()
    /// Something happened that the textfile should show (a wake window, a handler's or a
    /// transfer's end, a notification): the agent writes it once this turn ends.
    var onFlush: (() -> Void)?
    /// The wake window last counted as planned, so that re-arming the same one is not a new plan.
    private var lastPlannedAt: Double?

    /// Outcomes of notifications as `drowse_notifications_total{outcome}` counts them.
    package enum NotificationOutcome: String, CaseIterable {
        /// Arrived on an app's notify topic (every one of the others started here).
        case received
        /// Recorded: its handler runs (now, or later when deferred).
        case accepted
        case duplicate
        case refused
        /// Not silent (no aps.content-available = 1): nothing to do.
        case ignored
        /// Held back by the app's hourly budget.
        case deferred
        /// Held back for its rollout delay (`spread`); it runs (or starts its download) later.
        case spread
        /// Dropped because a newer one with the same collapse-id arrived.
        case collapsed
        /// Dropped while deferred (or waiting for its rollout delay) because it expired.
        case expired
        /// Dropped while waiting because its app had `[notifications] max_deferred` waiting already
        /// (the lowest-priority, oldest one goes).
        case evicted
    }

    /// Why a notification was refused, as `drowse_notifications_refused_total{reason}` counts it.
    package enum RefusalReason: String, CaseIterable {
        case unknownApp = "unknown_app"
        case tooLarge = "too_large"
        case badSignature = "bad_signature"
        case unsigned
        case malformed
        case expired
    }

    package init() {
        var r = MetricsRegistry()
        r.declare("drowse_wake_windows_planned_total", .counter, help: "Fetch wake windows the scheduler planned (a timer set for a new time).")
        r.declare("drowse_wake_windows_opened_total", .counter, help: "Scheduled fetch wake windows that opened.")
        r.declare("drowse_fetch_runs_total", .counter, help: "Fetch handler runs by app and result (new-data, no-data, failed).")
        r.declare("drowse_handler_runs_total", .counter, help: "Handler runs (and resident deliveries) by app and event.")
        r.declare("drowse_handler_seconds_total", .counter, help: "Seconds handlers ran, by app.")
        r.declare("drowse_notifications_total", .counter, help: "Silent notifications by outcome.")
        r.declare("drowse_notifications_refused_total", .counter, help: "Notifications refused, by reason.")
        r.declare("drowse_transfer_bytes_total", .counter, help: "Bytes moved by background transfers, by app and direction.")
        r.declare("drowse_transfer_resumes_total", .counter, help: "Transfer attempts that resumed from bytes already moved.")
        r.declare("drowse_transfer_retries_total", .counter, help: "Transfer attempts that failed and will be retried.")
        r.declare("drowse_transfer_failures_total", .counter, help: "Transfers that failed for good, by reason.")
        r.declare("drowse_mqtt_connects_total", .counter, help: "MQTT sessions established (CONNACK accepted).")
        r.declare("drowse_mqtt_disconnects_total", .counter, help: "MQTT sessions lost or closed.")
        r.declare("drowse_mqtt_pings_total", .counter, help: "Keepalive pings drowsed had libmosquitto send (PINGREQ when due).")
        r.declare("drowse_mqtt_connected", .gauge, help: "1 while the MQTT session is connected.")
        r.declare("drowse_apps", .gauge, help: "Valid apps loaded.")
        r.declare("drowse_running_handlers", .gauge, help: "Handlers running now.")
        r.declare("drowse_queued_handlers", .gauge, help: "Handler runs waiting for a slot.")
        r.declare("process_cpu_seconds_total", .counter, help: "User and system CPU time drowsed spent, in seconds.")
        r.declare("process_resident_memory_bytes", .gauge, help: "Resident memory size in bytes.")
        r.declare("process_virtual_memory_bytes", .gauge, help: "Virtual memory size in bytes.")
        r.declare("drowse_process_pss_bytes", .gauge, help: "Proportional set size in bytes (shared pages divided among their users).")
        for name in ["drowse_wake_windows_planned_total", "drowse_wake_windows_opened_total", "drowse_transfer_resumes_total",
                     "drowse_transfer_retries_total", "drowse_mqtt_connects_total", "drowse_mqtt_disconnects_total",
                     "drowse_mqtt_pings_total", "drowse_mqtt_connected"] {
            r.seed(name)
        }
        for o in NotificationOutcome.allCases { r.seed("drowse_notifications_total", [("outcome", o.rawValue)]) }
        for why in RefusalReason.allCases { r.seed("drowse_notifications_refused_total", [("reason", why.rawValue)]) }
        for why in TransferFailureReason.allCases { r.seed("drowse_transfer_failures_total", [("reason", why.rawValue)]) }
        registry = r
    }

    private func flush() { onFlush?() }

    // MARK: fetch windows and handlers

    /// The scheduler set its wake timer for `at`.
    func windowPlanned(at: Double) {
        guard at != lastPlannedAt else { return }
        lastPlannedAt = at
        registry.add("drowse_wake_windows_planned_total")
    }

    func windowOpened() {
        registry.add("drowse_wake_windows_opened_total")
        flush()
    }

    /// A handler run (or a resident app's delivery) ended.
    func handlerEnded(app: String, event: HandlerEvent, result: FetchResult, seconds: Double) {
        registry.add("drowse_handler_runs_total", [("app", app), ("event", event.rawValue)])
        registry.add("drowse_handler_seconds_total", [("app", app)], max(0, seconds))
        if event == .fetch { registry.add("drowse_fetch_runs_total", [("app", app), ("result", result.rawValue)]) }
        flush()
    }

    // MARK: notifications

    func notification(_ outcome: NotificationOutcome) {
        registry.add("drowse_notifications_total", [("outcome", outcome.rawValue)])
        flush()
    }

    func notificationRefused(_ why: RefusalReason) {
        registry.add("drowse_notifications_total", [("outcome", NotificationOutcome.refused.rawValue)])
        registry.add("drowse_notifications_refused_total", [("reason", why.rawValue)])
        flush()
    }

    // MARK: transfers

    func transferBytes(app: String, kind: Transfer.Kind, _ n: Int64) {
        guard n > 0 else { return }
        registry.add("drowse_transfer_bytes_total", [("app", app), ("direction", kind == .download ? "download" : "upload")], Double(n))
    }

    func transferResumed() { registry.add("drowse_transfer_resumes_total") }

    func transferRetried(_ n: Int) { registry.add("drowse_transfer_retries_total", [], Double(n)) }

    func transferFailed(reason: String) {
        registry.add("drowse_transfer_failures_total", [("reason", TransferFailureReason.classify(reason).rawValue)])
    }

    /// A transfer finished (completed, failed or cancelled).
    func transferFinished() { flush() }

    // MARK: MQTT

    func mqttConnected() {
        registry.add("drowse_mqtt_connects_total")
        registry.set("drowse_mqtt_connected", 1)
        flush()
    }

    func mqttDisconnected() {
        registry.add("drowse_mqtt_disconnects_total")
        registry.set("drowse_mqtt_connected", 0)
        flush()
    }

    func mqttPinged() { registry.add("drowse_mqtt_pings_total") }

    // MARK: the text

    /// The exposition with the gauges read now: the agent's own, and the process's memory and
    /// CPU time from /proc (read here, only when asked for).
    func exposition(apps: Int, runningHandlers: Int, queuedHandlers: Int) -> String {
        var r = registry
        r.set("drowse_apps", Double(apps))
        r.set("drowse_running_handlers", Double(runningHandlers))
        r.set("drowse_queued_handlers", Double(queuedHandlers))
        if let p = Self.readProcessStats() {
            r.set("process_cpu_seconds_total", p.cpuSeconds)
            r.set("process_resident_memory_bytes", p.residentBytes)
            r.set("process_virtual_memory_bytes", p.virtualBytes)
            if let pss = p.pssBytes { r.set("drowse_process_pss_bytes", pss) }
        }
        return r.exposition()
    }

    static func readProcessStats() -> ProcessStats? {
        guard let stat = try? FileSystem.readText("/proc/self/stat", limit: 4096),
              let statm = try? FileSystem.readText("/proc/self/statm", limit: 4096)
        else { return nil }
        let rollup = try? FileSystem.readText("/proc/self/smaps_rollup", limit: 16384)
        return ProcessStats.parse(stat: stat, statm: statm, smapsRollup: rollup,
                                  pageSize: Double(sysconf(Int32(_SC_PAGESIZE))), ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))))
    }
}
