#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// A notification or fetch run waiting for a handler slot.
package enum QueuedRun: Sendable {
    /// Recorded, and `pending` in the store until its handler ends: a crash while it waits
    /// loses nothing (it is queued again on start). `counted`: its start was already counted
    /// (in the commit that recorded it), as this attempt; nil: the runner counts it.
    case notification(app: String, seq: Int64, payload: [UInt8], counted: Int? = nil)
    /// `done` gets the outcome (for `drowse fetch`, which waits).
    case fetch(app: String, trigger: String, done: HandlerRun)
    /// A finished session for the app's events handler; undelivered in the store until it ends.
    case transfers(app: String, key: String, stdin: [UInt8], batch: [Transfer])
}

extension QueuedRun {
    /// The same run with its start not counted yet.
    var uncounted: QueuedRun {
        guard case .notification(let app, let seq, let payload, .some) = self else { return self }
        return .notification(app: app, seq: seq, payload: payload)
    }
}

/// Where a part of the daemon queues a handler run.
@DaemonActor package protocol RunQueue: AnyObject {
    /// Queues a run; it starts now if one of the `max_concurrent_handlers` slots is free.
    func enqueue(_ run: QueuedRun)
    /// Shutdown has begun: nothing new is launched.
    var stopping: Bool { get }
    /// A run queued now starts in this turn (not stopping, a slot is free, nothing waits before it).
    var startsAtOnce: Bool { get }
}

/// Handlers as a part of the daemon: the queue of runs waiting for one of the
/// `max_concurrent_handlers` slots, the handlers running now, and the record of each run's end.
/// At shutdown it stops launching first, and drains last of the parts that run processes: the
/// API (listed before it in the ServiceGroup) still answers the handlers that are finishing.
@DaemonActor package final class HandlerRunner: RunQueue, DaemonPart {
    let config: MainConfig
    let logger: Logger
    let launcher: HandlerLaunching
    let store: Store
    let clock: AgentClock
    let registry: AppRegistry
    let processes: AppProcesses
    let fetch: FetchService
    let events: DaemonEvents
    let metrics: AgentMetrics
    /// Told when a notification's run ended (or was not started), and when a transfers session's did.
    weak var notifications: NotificationService?
    weak var transfers: TransferService?

    /// Runs waiting for a slot. Why a cap: every running handler costs a process, pipes, a pidfd
    /// and a supervising thread; a flood of notifications once ran out of descriptors and dropped runs.
    var queue: HandlerQueue<QueuedRun>
    let retryWake: ServiceWake
    package private(set) var stopping = false
    /// Every handler running now (resident apps' events included), as drowse_running_handlers.
    package private(set) var running = 0
    var idleWaiters: [CheckedContinuation<Void, Never>] = []

    package nonisolated var partName: String { "handlers" }

    init(config: MainConfig, logger: Logger, launcher: HandlerLaunching, store: Store, clock: AgentClock, registry: AppRegistry,
         processes: AppProcesses, fetch: FetchService, events: DaemonEvents, metrics: AgentMetrics) {
        self.config = config
        self.logger = logger
        self.launcher = launcher
        self.store = store
        self.clock = clock
        self.registry = registry
        self.processes = processes
        self.fetch = fetch
        self.events = events
        self.metrics = metrics
        queue = HandlerQueue(limit: config.scheduler.maxConcurrentHandlers)
        retryWake = ServiceWake(clock: clock)
    }

    var waiting: Int { queue.waitingCount }

    package var startsAtOnce: Bool { !stopping && queue.startsAtOnce }

    func now() -> Double { clock.timeline.now() }

    // MARK: the queue

    package func enqueue(_ run: QueuedRun) {
        queue.submit(run)
        pump()
    }

    /// Starts what the queue allows.
    func pump() {
        guard !stopping else { return }
        while let item = queue.next() {
            switch startQueued(item) {
            case .started:
                queue.didStart()
            case .nothingToRun:
                queue.ended()
            case .shortage(let err):
                // Its counted start was taken back (`notificationNotStarted`): the retry counts anew.
                let delay = queue.failedToStart(item.uncounted)
                logger.warning("""
                    a handler could not start (\(String(cString: strerror(err)))); \(queue.waitingCount) run(s) wait \
                    for \(delay.map { "a retry in \($0) s" } ?? "a running handler to end")
                    """)
                if let delay {
                    retryWake.set(now() + delay) { [weak self] in
                        self?.queue.retry()
                        self?.pump()
                    }
                }
                return
            }
        }
    }

    /// A started run ended: its slot is free.
    func slotFreed() {
        queue.ended()
        pump()
    }

    enum QueuedStart { case started, nothingToRun, shortage(Int32) }

    private func startQueued(_ item: QueuedRun) -> QueuedStart {
        switch item {
        case .notification(let appID, let seq, let payload, let counted):
            // Its app may have been removed while it waited (a collapse is found below).
            guard let app = registry[appID] else {
                notifications?.notificationRunEnded(seq)
                return .nothingToRun
            }
            // The start is counted before it happens (DROWSE_ATTEMPT), unless the commit that
            // recorded it in this turn counted it already; nil: no longer pending (a newer one
            // collapsed it while it waited).
            guard let attempt = counted ?? countStart(seq, app: appID) else {
                notifications?.notificationRunEnded(seq)
                return .nothingToRun
            }
            guard app.command(for: .notification) != nil || app.isResident else {
                logger.warning("notification dropped: the app has no notification or fetch command", metadata: ["app.id": "\(appID)"])
                try? store.markNotification(seq, state: "dropped", at: now())
                notifications?.notificationRunEnded(seq)
                return .nothingToRun
            }
            let started = start(app, event: .notification, stdin: payload, trigger: "notification", notification: seq, attempt: attempt)
            if let err = started.run.resourceShortage {
                // Nothing started: the start is not counted (it is tried again).
                try? store.notificationNotStarted(seq)
                unstarted(started)
                return .shortage(err)
            }
            // The handler started first; then the bookkeeping: a notification woke the radio, so
            // due fetches may ride along.
            events.post(.radioUsed)
            Task {
                // Its end counts against the app's daily budget and keeps the radio awake (the scheduler hears it).
                _ = await self.finish(started)
                self.notifications?.notificationRunEnded(seq)
                self.slotFreed()
            }
            return .started
        case .fetch(let appID, let trigger, let done):
            guard let app = registry[appID] else {
                fetch.abandoned(appID)
                done.finish(HandlerOutcome(ending: .launchFailed("app '\(appID)' is gone"), startedAt: now(), endedAt: now()))
                return .nothingToRun
            }
            let stdin = Array(JSON.object([("event", "fetch"), ("app", .string(app.id)), ("reason", .string(trigger))]).serialized.utf8)
            let started = start(app, event: .fetch, stdin: stdin, trigger: trigger)
            if let err = started.run.resourceShortage { unstarted(started); return .shortage(err) }
            events.post(.radioUsed)
            Task {
                let outcome = await self.finish(started)
                done.finish(outcome)
                self.slotFreed()
            }
            return .started
        case .transfers(let appID, let key, let stdin, let batch):
            guard let app = registry[appID] else {
                transfers?.sessionNotDelivered(key: key)
                return .nothingToRun
            }
            let started = start(app, event: .transfers, stdin: stdin, trigger: "transfers")
            if let err = started.run.resourceShortage { unstarted(started); return .shortage(err) }
            Task {
                _ = await self.finish(started)
                self.transfers?.sessionDelivered(batch: batch)
                self.slotFreed()
            }
            return .started
        }
    }

    /// Counts a notification's start in the store and returns the attempt it is; nil when the
    /// notification is no longer pending. On disk before the start, unless this is the
    /// notification being received now: the sync its PUBACK waits for covers the mark, and a
    /// message whose PUBACK never left comes back marked DUP.
    private func countStart(_ seq: Int64, app: String) -> Int? {
        do {
            return try store.notificationStarting(seq, durable: notifications?.arriving != seq)
        } catch {
            // Not counted: the handler may run again after a restart without knowing. Start it
            // anyway (the notification is recorded); the log says why.
            logger.error("store: the start of a notification's handler not recorded: \(error)", metadata: ["app.id": "\(app)"])
            return 1
        }
    }

    // MARK: one handler

    /// A handler started by `start`, waiting for `finish`.
    struct Started {
        var app: AppDefinition
        var event: HandlerEvent
        var trigger: String
        var notification: Int64?
        var run: HandlerRun
        /// Counted in `running` (a handler process was started).
        var counted = false
        /// The run's own cgroup, removed at its end.
        var leaf: String? = nil
        /// Delivered to a resident app's stream rather than run as a handler.
        var delivered = false
    }

    /// Starts a handler now (the process exists when this returns); `finish` waits for its end
    /// and records it. Synchronous, so a notification's handler starts without a hop.
    func start(_ app: AppDefinition, event: HandlerEvent, stdin: [UInt8], trigger: String, notification: Int64? = nil,
               attempt: Int = 1) -> Started {
        let start = now()
        if app.isResident {
            // A resident app gets its events on its stream; `run` ends with its completion.
            let run = HandlerRun()
            let kind: AppLifecycle.EventKind = event == .fetch ? .fetch : event == .notification ? .notification : .transfers
            running += 1
            processes.lifecycle.deliver(app.id, kind: kind, members: Self.eventMembers(event, stdin: stdin) + [("attempt", JSON(attempt))], run: run)
            logger.info("delivered \(event.rawValue) event to the resident app", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger)"])
            return Started(app: app, event: event, trigger: trigger, notification: notification, run: run, counted: true, delivered: true)
        }
        guard let argv = app.command(for: event) else {
            let run = HandlerRun()
            run.finish(HandlerOutcome(ending: .launchFailed("no \(event.rawValue) command"), startedAt: start, endedAt: start))
            return Started(app: app, event: event, trigger: trigger, notification: notification, run: run)
        }
        let deadline = start + config.scheduler.handlerDeadline.seconds
        var env = processes.environment(app, event: event)
        env["DROWSE_DEADLINE"] = format3(clock.timeline.wall(deadline))
        // 1, or 2, 3 … when an earlier start of the same event is known and its end is not (a
        // power cut between the two): the handler may have done its work already.
        env["DROWSE_ATTEMPT"] = String(attempt)
        var request = LaunchRequest(
            app: app.id, event: event, argv: argv, user: app.user,
            workingDirectory: app.workingDirectory ?? ConfigPath.directory(of: app.file),
            environment: env, stdin: stdin, deadline: deadline)
        // Thawed (should a task have left it frozen) before the handler joins the app's cgroup.
        processes.handlerStarting(app.id)
        let leaf = processes.prepare(app, &request, name: "run")
        let log = logger
        let appID = app.id
        running += 1
        let run = launcher.start(request) { line, isErr in
            log.info("\(line)", metadata: ["app.id": "\(appID)", "handler.stream": isErr ? "stderr" : "stdout"])
        }
        processes.handlerStarted(app.id, run, leaf: leaf)
        logger.info("launched \(event.rawValue) handler", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger)"])
        return Started(app: app, event: event, trigger: trigger, notification: notification, run: run, counted: true, leaf: leaf)
    }

    /// Waits for a started handler's end and records the run (and, for a notification, that it
    /// was handled: one transaction).
    func finish(_ started: Started) async -> HandlerOutcome {
        let outcome = await started.run.outcome()
        let app = started.app, event = started.event
        if !started.delivered, started.counted { processes.handlerEnded(app.id, started.run, leaf: started.leaf) }
        if started.counted { ended() }
        let run = RunRecord(
            app: app.id, event: event, trigger: started.trigger, result: outcome.result, ending: outcome.summary,
            startedAt: outcome.startedAt, endedAt: outcome.endedAt, timedOut: outcome.ending == .timedOut)
        // A fetch's end moves the scheduler's bookkeeping, which is written with the run.
        let (record, next) = fetch.handlerEnded(
            app: app.id, fetch: event == .fetch ? FetchScheduler.FetchEnding(result: outcome.result, timedOut: outcome.ending == .timedOut) : nil,
            startedAt: outcome.startedAt, endedAt: outcome.endedAt)
        // A resident app's notification cut short by drowsed's stop stays pending: it is
        // delivered again after the restart, as a handler's interrupted run is.
        var handled = started.notification
        if started.delivered, stopping, case .launchFailed = outcome.ending { handled = nil }
        // Written at once, on disk at the journal's next sync: it runs now on its own thread and
        // takes every end written meanwhile along (docs/design.md, "A finished run stays finished").
        do {
            try store.record(run, fetch: record, handlingNotification: handled, durable: false)
            let log = logger
            store.afterJournalSync { ok in if !ok { log.error("store: a run's end not synced; it may run again after a power cut") } }
        } catch { logger.error("store: \(error)") }
        fetch.finish(next)
        metrics.handlerEnded(app: app.id, event: event, result: outcome.result, seconds: outcome.endedAt - outcome.startedAt)
        events.post(.runEnded(app: app.id, failed: outcome.result == .failed))
        let level: Logger.Level = outcome.result == .failed ? .warning : .info
        logger.log(level: level, "\(event.rawValue) handler finished: \(outcome.result.rawValue) (\(outcome.summary))",
                   metadata: ["app.id": "\(app.id)"])
        // The burst is over: what its runs allocated goes back to the kernel.
        if running == 0, queue.waitingCount == 0 { MallocBounds.trim() }
        return outcome
    }

    /// `start` counted a run whose process never started (no descriptors, no memory): nothing
    /// ran, so nothing is recorded; the run stays queued and is tried again.
    private func unstarted(_ started: Started) {
        guard started.counted else { return }
        processes.handlerEnded(started.app.id, started.run, leaf: started.leaf)
        ended()
    }

    private func ended() {
        running -= 1
        if running == 0 {
            for c in idleWaiters { c.resume() }
            idleWaiters.removeAll()
        }
    }

    /// An app overran its background-task allowance: it counts like a fetch killed at its deadline.
    func recordOverrun(_ app: String) {
        let t = now()
        let (record, next) = fetch.handlerEnded(app: app, fetch: FetchScheduler.FetchEnding(result: .failed, timedOut: true), startedAt: t, endedAt: t)
        let run = RunRecord(app: app, event: .fetch, trigger: "task-overrun", result: .failed,
                            ending: "background task time ran out", startedAt: t, endedAt: t, timedOut: true)
        do { try store.record(run, fetch: record, handlingNotification: nil) } catch { logger.error("store: \(error)") }
        fetch.finish(next)
        events.post(.runEnded(app: app, failed: true))
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

    // MARK: shutdown

    /// Shutdown begins: queued runs do not start. Notifications stay `pending` in the store and
    /// run after the restart; a waiting `drowse fetch` is told.
    func stopLaunching() {
        stopping = true
        retryWake.close()
        for item in queue.removeAllWaiting() {
            guard case .fetch(let appID, _, let done) = item else { continue }
            fetch.abandoned(appID)
            done.finish(HandlerOutcome(ending: .launchFailed("drowsed is stopping"), startedAt: now(), endedAt: now()))
        }
    }

    /// Handlers that are running finish (each within its deadline), so their events count as
    /// handled and are not run a second time after the restart.
    package func stop() async {
        stopLaunching()
        guard running > 0 else { return }
        logger.info("waiting for \(running) running handler(s) to finish")
        await withCheckedContinuation { idleWaiters.append($0) }
    }
}

/// Unix time with millisecond precision, as handlers see it in DROWSE_DEADLINE.
func format3(_ t: Double) -> String {
    let ms = Int64((t * 1000).rounded())
    let frac = ms % 1000
    return "\(ms / 1000)." + String(repeating: "0", count: 3 - String(frac).count) + String(frac)
}
