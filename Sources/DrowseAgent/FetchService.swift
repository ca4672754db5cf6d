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
    /// A run with the scheduler's bookkeeping after it, in one transaction.
    func record(_ run: RunRecord, fetch: FetchScheduler.Record?, handlingNotification: Int64?, durable: Bool) throws(StoreError)
}

extension Store: FetchStore {}

/// Where the fetch service reads the board's conditions afresh, at a window boundary (no
/// polling in between): the conditions part, or a test's double.
@DaemonActor package protocol SchedulerConditionsSource: AnyObject {
    /// The conditions as last read.
    var forScheduler: FetchScheduler.Conditions { get }
    func readForScheduler() -> FetchScheduler.Conditions
}

/// The apps the fetch scheduler plans for, with their intervals in seconds (nil: never): the
/// registry, or a test's list.
@DaemonActor package protocol FetchIntervals: AnyObject {
    var fetchIntervals: [(id: String, interval: Double?)] { get }
}

/// Fetch scheduling as a service: it owns the `FetchScheduler` (every decision about fetch
/// windows), the trace, and nothing else; it feeds the scheduler what happens and carries out
/// its actions: fetches go to the handler queue (`RunQueue`), whose owner of their start and
/// end it is (`RunOwner`); an opened window is posted as a `DaemonEvent`, and the next window is
/// its own wake on the clock. It hears other runs' ends, the radio's use, the conditions and the
/// clock as events. On the daemon's executor, so a notification or a handler's end reaches it
/// without a hop.
@DaemonActor package final class FetchService: DaemonPart, NextWindowSource, RunOwner {
    package private(set) var scheduler: FetchScheduler
    let store: FetchStore
    let clock: AgentClock
    let events: DaemonEvents
    let conditions: SchedulerConditionsSource
    /// The apps it starts with.
    let apps: FetchIntervals
    /// Where fetches are queued (the handler runner).
    let runs: RunQueue
    let wake: ServiceWake
    let trace: SchedulerTrace?
    let logger: Logger
    /// Wake windows planned and opened are counted here.
    let metrics: AgentMetrics
    /// What each fetch's end leaves for the scheduler to carry out once the run is recorded.
    private var afterRecord: [String: [FetchScheduler.Action]] = [:]

    package nonisolated var partName: String { "fetch" }

    package init(scheduler: FetchScheduler, store: FetchStore, clock: AgentClock, events: DaemonEvents,
                 conditions: SchedulerConditionsSource, apps: FetchIntervals, runs: RunQueue, trace: SchedulerTrace?, metrics: AgentMetrics = AgentMetrics(),
                 logger: Logger) {
        self.scheduler = scheduler
        self.store = store
        self.clock = clock
        self.events = events
        self.conditions = conditions
        self.apps = apps
        self.runs = runs
        wake = ServiceWake(clock: clock)
        self.trace = trace
        self.metrics = metrics
        self.logger = logger
        events.listen { [unowned self] event in
            switch event {
            case .radioUsed: radioUsed()
            case .conditionsChanged: conditionsChanged(conditions.forScheduler)
            case .clockStepped: timeOfDayChanged(utcOffset: Double(localUTCOffset()) + clock.timeline.skew)
            case let .runEnded(app, event, _, startedAt, endedAt) where event != .fetch:
                // Another run's time counts against the app's daily budget and keeps the radio awake.
                finish(handlerEnded(app: app, fetch: nil, startedAt: startedAt, endedAt: endedAt).finish)
            case .taskOverran(let app): recordOverrun(app)
            case .windowOpened, .runEnded, .conditionsRead, .appsReloaded: break
            }
        }
    }

    func now() -> Double { clock.timeline.now() }

    /// Shutdown: no window opens any more.
    package func stop() async { wake.close() }

    /// Start-up: the scheduler starts with the apps as the store remembers them.
    package func start() { start(apps: apps.fetchIntervals, conditions: conditions.forScheduler) }

    /// Starts the scheduler with these apps (id and interval in seconds, nil: never) as the
    /// store remembers them.
    package func start(apps: [(id: String, interval: Double?)], conditions: FetchScheduler.Conditions) {
        let t = now()
        schedule(.started(apps: remembered(apps, now: t), conditions: conditions, now: t))
    }

    /// The app files were read again: the scheduler takes the apps as they are now.
    package func appsChanged(_ apps: [(id: String, interval: Double?)]) {
        let t = now()
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

    /// Carries out the scheduler's actions in their order, as one turn: the window's fetches are
    /// queued before anyone hears that it opened.
    @discardableResult
    func perform(_ actions: [FetchScheduler.Action]) -> (run: HandlerRun?, refused: String?) {
        events.turn { performNow(actions) }
    }

    private func performNow(_ actions: [FetchScheduler.Action]) -> (run: HandlerRun?, refused: String?) {
        var manual: HandlerRun?
        var refused: String?
        for action in actions {
            switch action {
            case let .startFetch(ids, trigger):
                if trigger == .scheduled {
                    logger.info("fetch window opens", metadata: ["apps": "\(ids)"])
                    metrics.windowOpened()
                    events.post(.windowOpened)
                }
                for id in ids {
                    let done = HandlerRun()
                    if trigger == .manual { manual = done }
                    runs.enqueue(.fetch(app: id, trigger: trigger, done: done), owner: self)
                }
            case let .refuseFetch(_, reason):
                refused = reason
            case let .setTimer(at):
                let delay = max(0, at - now())
                logger.debug("next fetch window in \(DurationText.format(.milliseconds(Int64(saturating: delay * 1000, rounding: .up))))",
                             metadata: ["apps": "\(scheduler.planned?.apps ?? [])"])
                metrics.windowPlanned(at: at)
                wake.set(at) { [weak self] in self?.windowTimerFired() }
            case .cancelTimer:
                wake.cancel()
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
        let t = now()
        let fresh = conditions.readForScheduler()
        if fresh != scheduler.conditions { schedule(.conditionsChanged(fresh, now: t)) }
        schedule(.timerFired(now: t))
    }

    package func conditionsChanged(_ c: FetchScheduler.Conditions) {
        if c != scheduler.conditions { schedule(.conditionsChanged(c, now: now())) }
    }

    /// The wall clock was set: habits by time of day are now read at `utcOffset` from the timeline.
    package func timeOfDayChanged(utcOffset: Double) {
        if utcOffset != scheduler.utcOffset { schedule(.timeOfDayChanged(utcOffset: utcOffset, now: now())) }
    }

    /// Something is using the network now (a handler, a transfer): due fetches may ride along.
    package func radioUsed() {
        schedule(.radioUsed(now: now()))
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
        schedule(.fetchAbandoned(app: app, now: now()))
    }

    // MARK: a fetch's run (`RunOwner`)

    package func starting(_ run: QueuedRun, app: AppDefinition?) -> RunStart? {
        guard app == nil else { return RunStart(attempt: 1) }
        notRun(run, why: "app '\(run.app)' is gone")
        return nil
    }

    package func notStarted(_ run: QueuedRun) {}

    package func ending(_ run: QueuedRun, _ outcome: HandlerOutcome, cutShort: Bool) -> RunEffects {
        let (record, next) = handlerEnded(
            app: run.app, fetch: FetchScheduler.FetchEnding(result: outcome.result, timedOut: outcome.ending == .timedOut),
            startedAt: outcome.startedAt, endedAt: outcome.endedAt)
        afterRecord[run.app] = next
        return RunEffects(fetch: record)
    }

    package func ended(_ run: QueuedRun, _ outcome: HandlerOutcome) {
        finish(afterRecord.removeValue(forKey: run.app) ?? [])
        if case .fetch(_, _, let done) = run { done.finish(outcome) }
    }

    package func notRun(_ run: QueuedRun) { notRun(run, why: "drowsed is stopping") }

    private func notRun(_ run: QueuedRun, why: String) {
        abandoned(run.app)
        if case .fetch(_, _, let done) = run { done.finish(HandlerOutcome(ending: .launchFailed(why), startedAt: now(), endedAt: now())) }
    }

    /// An app overran its background-task allowance: it counts like a fetch killed at its deadline.
    func recordOverrun(_ app: String) {
        let t = now()
        let (record, next) = handlerEnded(app: app, fetch: FetchScheduler.FetchEnding(result: .failed, timedOut: true), startedAt: t, endedAt: t)
        let run = RunRecord(app: app, event: .fetch, trigger: .taskOverrun, result: .failed,
                            ending: "background task time ran out", startedAt: t, endedAt: t, timedOut: true)
        do { try store.record(run, fetch: record, handlingNotification: nil, durable: true) } catch { logger.error("store: \(error)") }
        finish(next)
        events.post(.runEnded(app: app, event: .fetch, failed: true, startedAt: t, endedAt: t))
    }

    /// `drowse fetch ID` of an app as the registry has it: refused for an app with nothing to
    /// fetch with, and while drowsed stops.
    package func fetchNow(_ app: AppDefinition) throws(Refusal) -> HandlerRun {
        guard app.fetchCommand != nil || app.isResident else { throw .noFetchCommand(app.id) }
        guard !runs.stopping else { throw .stopping }
        return try fetchNow(app.id)
    }

    /// `drowse fetch ID`: starts it now, or says why not; the run gives the outcome.
    package func fetchNow(_ id: String) throws(Refusal) -> HandlerRun {
        let (run, refused) = schedule(.fetchRequested(app: id, now: now()))
        guard let run else { throw .busy(refused ?? "a fetch of '\(id)' is already running") }
        return run
    }

    /// Why a request was refused.
    package enum Refusal: Error, Sendable, Equatable {
        /// The scheduler's reason (a fetch of the app runs already).
        case busy(String)
        /// The app has no fetch command (and is not resident).
        case noFetchCommand(String)
        /// drowsed is stopping: no fetch starts.
        case stopping
        /// The store failed.
        case store(String)
    }

    /// `drowse used ID`.
    package func used(_ id: String) throws(Refusal) {
        let t = now()
        do { try store.recordUse(app: id, at: t) } catch { throw .store("\(error)") }
        schedule(.used(app: id, now: t))
    }

    // MARK: what status and `drowse apps` show

    package var plannedWindow: FetchPlanner.Window? { scheduler.planned }
    package var nextWindowAt: Double? { scheduler.planned?.at }
    package var running: Set<String> { scheduler.running }
    package func plans() -> [FetchPlanner.AppPlan] { scheduler.plans(now: now()) }
}

/// `drowsed --scheduler-trace FILE`: every event fed to the fetch scheduler and the actions it
/// returned, one JSON line each, after a first line with the scheduler's settings.
/// `drowse simulate --replay FILE` replays it.
package final class SchedulerTrace: @unchecked Sendable {
    let fd: Int32

    package init(path: String, header: JSON) throws(SystemError) {
        fd = try Sys.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, mode: 0o600, "scheduler trace \(path)")
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
