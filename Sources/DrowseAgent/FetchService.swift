#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// What the fetch service needs of the store: the apps as it remembers them, and uses.
package protocol FetchStore: AnyObject {
    func schedulerApp(_ id: String, interval: Double?, now: Double) throws(StoreError) -> FetchScheduler.App
    func recordUse(app: String, at: Double) throws(StoreError)
}

extension Store: FetchStore {}

/// What the fetch service needs of the rest of the daemon, as closures: the agent builds them
/// on its own executor, a test builds them over in-memory doubles.
package struct FetchHost {
    /// The daemon's one source of "now".
    package var now: () -> Double
    /// Queue the app's fetch handler for one of the shared handler slots; `done` gets the outcome.
    package var enqueueFetch: (_ app: String, _ trigger: String, _ done: HandlerRun) -> Void
    /// A scheduled window opens: deferred notifications and the MQTT keepalive ride it.
    package var windowOpened: () -> Void
    /// Fresh conditions at a window boundary (no polling in between).
    package var readConditions: () -> FetchScheduler.Conditions
    /// Wake the service (`windowTimerFired`) at this time; nil cancels.
    package var setWakeTimer: (_ at: Double?) -> Void

    package init(now: @escaping () -> Double, enqueueFetch: @escaping (String, String, HandlerRun) -> Void,
                 windowOpened: @escaping () -> Void, readConditions: @escaping () -> FetchScheduler.Conditions,
                 setWakeTimer: @escaping (Double?) -> Void) {
        self.now = now
        self.enqueueFetch = enqueueFetch
        self.windowOpened = windowOpened
        self.readConditions = readConditions
        self.setWakeTimer = setWakeTimer
    }
}

/// Fetch scheduling as a service: it owns the `FetchScheduler` (every decision about fetch
/// windows), the trace, and nothing else; it feeds the scheduler what happens and carries out
/// its actions through `FetchStore` and `FetchHost`. Used only from the agent's executor (it is
/// not Sendable), so a notification or a handler's end reaches it without a hop.
package final class FetchService {
    package private(set) var scheduler: FetchScheduler
    let store: FetchStore
    let host: FetchHost
    let trace: SchedulerTrace?
    let logger: Logger
    /// Wake windows planned and opened are counted here (the agent hands over its own).
    package var metrics = AgentMetrics()

    package init(scheduler: FetchScheduler, store: FetchStore, host: FetchHost, trace: SchedulerTrace?, logger: Logger) {
        self.scheduler = scheduler
        self.store = store
        self.host = host
        self.trace = trace
        self.logger = logger
    }

    /// Starts the scheduler with these apps (id and interval in seconds, nil: never) as the
    /// store remembers them.
    package func start(apps: [(id: String, interval: Double?)], conditions: FetchScheduler.Conditions) {
        let t = host.now()
        schedule(.started(apps: remembered(apps, now: t), conditions: conditions, now: t))
    }

    /// The app files were read again: the scheduler takes the apps as they are now.
    package func appsChanged(_ apps: [(id: String, interval: Double?)]) {
        let t = host.now()
        schedule(.appsChanged(apps: remembered(apps, now: t), now: t))
    }

    func remembered(_ apps: [(id: String, interval: Double?)], now t: Double) -> [FetchScheduler.App] {
        apps.sorted { $0.id < $1.id }.compactMap { app -> FetchScheduler.App? in
            do { return try store.schedulerApp(app.id, interval: app.interval, now: t) } catch {
                logger.error("store: app \(app.id) not scheduled: \(error)")
                return nil
            }
        }
    }

    /// Feeds one event to the scheduler and carries out its actions. Returns the manual fetch it
    /// started (for `drowse fetch`, which waits), or why it refused.
    @discardableResult
    package func schedule(_ event: FetchScheduler.Event) -> (run: HandlerRun?, refused: String?) {
        let actions = scheduler.handle(event)
        trace?.write(event, actions)
        return perform(actions)
    }

    @discardableResult
    func perform(_ actions: [FetchScheduler.Action]) -> (run: HandlerRun?, refused: String?) {
        var manual: HandlerRun?
        var refused: String?
        for action in actions {
            switch action {
            case let .startFetch(ids, trigger):
                if trigger == .scheduled {
                    logger.info("fetch window opens", metadata: ["apps": "\(ids)"])
                    metrics.windowOpened()
                    host.windowOpened()
                }
                for id in ids {
                    let done = HandlerRun()
                    if trigger == .manual { manual = done }
                    host.enqueueFetch(id, trigger.rawValue, done)
                }
            case let .refuseFetch(_, reason):
                refused = reason
            case let .setTimer(at):
                let delay = max(0, at - host.now())
                logger.debug("next fetch window in \(DurationText.format(.milliseconds(Int64(saturating: delay * 1000, rounding: .up))))",
                             metadata: ["apps": "\(scheduler.planned?.apps ?? [])"])
                metrics.windowPlanned(at: at)
                host.setWakeTimer(at)
            case .cancelTimer:
                host.setWakeTimer(nil)
            case .save:
                // Written with the run, in its one transaction (`handlerEnded` returns it).
                break
            case let .explain(app, reason):
                logger.info("fetch plan: \(reason)", metadata: ["app.id": "\(app)"])
            }
        }
        return (manual, refused)
    }

    /// The wake timer fired: conditions are read afresh, then the window opens if one is due.
    package func windowTimerFired() {
        let t = host.now()
        let fresh = host.readConditions()
        if fresh != scheduler.conditions { schedule(.conditionsChanged(fresh, now: t)) }
        schedule(.timerFired(now: t))
    }

    package func conditionsChanged(_ c: FetchScheduler.Conditions) {
        if c != scheduler.conditions { schedule(.conditionsChanged(c, now: host.now())) }
    }

    /// The wall clock was set: habits by time of day are now read at `utcOffset` from the timeline.
    package func timeOfDayChanged(utcOffset: Double) {
        if utcOffset != scheduler.utcOffset { schedule(.timeOfDayChanged(utcOffset: utcOffset, now: host.now())) }
    }

    /// Something is using the network now (a handler, a transfer): due fetches may ride along.
    package func radioUsed() {
        schedule(.radioUsed(now: host.now()))
    }

    /// A handler ended: the scheduler's new bookkeeping for a fetch comes back, to be written in
    /// the run's own transaction; the rest of its actions are carried out by `finish`.
    package func handlerEnded(app: String, fetch: FetchScheduler.FetchEnding?, startedAt: Double, endedAt: Double)
        -> (record: FetchScheduler.Record?, finish: [FetchScheduler.Action])
    {
        let event = FetchScheduler.Event.handlerEnded(app: app, fetch: fetch, startedAt: startedAt, endedAt: endedAt)
        let actions = scheduler.handle(event)
        trace?.write(event, actions)
        let record = actions.lazy.compactMap { if case .save(_, let r) = $0 { r } else { nil } }.first
        return (record, actions)
    }

    /// Carries out what `handlerEnded` returned, once the run is recorded.
    package func finish(_ actions: [FetchScheduler.Action]) { perform(actions) }

    /// A fetch the scheduler started never ran (its app went away, or drowsed is stopping).
    package func abandoned(_ app: String) {
        schedule(.fetchAbandoned(app: app, now: host.now()))
    }

    /// `drowse fetch ID`: starts it now, or says why not; the run gives the outcome.
    package func fetchNow(_ id: String) throws(APIError) -> HandlerRun {
        let (run, refused) = schedule(.fetchRequested(app: id, now: host.now()))
        guard let run else { throw APIError(409, "busy", refused ?? "a fetch of '\(id)' is already running") }
        return run
    }

    /// `drowse used ID`.
    package func used(_ id: String) throws(APIError) {
        let t = host.now()
        do { try store.recordUse(app: id, at: t) } catch { throw .internal("\(error)") }
        schedule(.used(app: id, now: t))
    }

    // MARK: what status and `drowse apps` show

    package var plannedWindow: FetchPlanner.Window? { scheduler.planned }
    package var running: Set<String> { scheduler.running }
    package func plans() -> [FetchPlanner.AppPlan] { scheduler.plans(now: host.now()) }
}

/// `drowsed --scheduler-trace FILE`: every event fed to the fetch scheduler and the actions it
/// returned, one JSON line each, after a first line with the scheduler's settings.
/// `drowse simulate --replay FILE` replays it.
package final class SchedulerTrace: @unchecked Sendable {
    let fd: Int32

    package init(path: String, header: JSON) throws(SystemError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw SystemError("scheduler trace \(path)", errno: errno) }
        self.fd = fd
        line(header.serialized)
    }

    deinit { Sys.close(fd, ignoringErrors: .bestEffort) }

    func write(_ event: FetchScheduler.Event, _ actions: [FetchScheduler.Action]) {
        line(JSON.object([("event", event.json), ("actions", .array(actions.map(\.json)))]).serialized)
    }

    private func line(_ text: String) {
        // A full disk costs trace lines, never the daemon; replay then reports the gap as a mismatch.
        try? FileSystem.writeAll(fd, Array((text + "\n").utf8), what: "scheduler trace")
    }
}
