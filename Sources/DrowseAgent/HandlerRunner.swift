#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// What a queued run is, as its owner queued it: the runner starts it, and its owner says what
/// its start and end mean (`RunOwner`).
package enum QueuedRun: Sendable {
    /// Recorded, and `pending` in the store until its handler ends: a crash while it waits
    /// loses nothing (it is queued again on start). `counted`: its start was already counted
    /// (in the commit that recorded it), as this attempt; nil: its owner counts it at the start.
    case notification(app: String, seq: Int64, payload: [UInt8], counted: Int? = nil)
    /// `done` gets the outcome (for `drowse fetch`, which waits).
    case fetch(app: String, trigger: FetchScheduler.Trigger, done: HandlerRun)
    /// A finished session for the app's events handler; undelivered in the store until it ends.
    case transfers(session: SessionKey, stdin: [UInt8], batch: [Transfer])

    package var app: String {
        switch self {
        case .notification(let app, _, _, _), .fetch(let app, _, _): app
        case .transfers(let session, _, _): session.app
        }
    }

    var event: HandlerEvent {
        switch self {
        case .notification: .notification
        case .fetch: .fetch
        case .transfers: .transfers
        }
    }

    var trigger: RunTrigger {
        switch self {
        case .notification: .notification
        case .fetch(_, .scheduled, _): .scheduled
        case .fetch(_, .manual, _): .manual
        case .transfers: .transfers
        }
    }

    /// Its handler uses the network (due fetches may ride along once it starts).
    var usesRadio: Bool {
        if case .transfers = self { false } else { true }
    }

    /// The same run with its start not counted yet.
    var uncounted: QueuedRun {
        guard case .notification(let app, let seq, let payload, .some) = self else { return self }
        return .notification(app: app, seq: seq, payload: payload)
    }
}

/// A run's owner says yes to its start: the attempt it is (DROWSE_ATTEMPT), and whether what the
/// owner wrote for it (the count of the start) reaches the disk only at the journal's next sync,
/// which the start then waits for.
package struct RunStart: Sendable, Equatable {
    package var attempt: Int
    package var afterSync: Bool

    package init(attempt: Int, afterSync: Bool = false) {
        self.attempt = attempt
        self.afterSync = afterSync
    }
}

/// What the end of a run writes in the run's own transaction, as its owner says.
package struct RunEffects: Sendable {
    /// The fetch scheduler's bookkeeping for a fetch's end.
    package var fetch: FetchScheduler.Record?
    /// The notification this run handled.
    package var handled: Int64?

    package init(fetch: FetchScheduler.Record? = nil, handled: Int64? = nil) {
        self.fetch = fetch
        self.handled = handled
    }
}

/// The part that queued a run and gives its start and end their meaning: the runner starts the
/// handler, records the run with what `ending` returns in one transaction, and tells `ended`.
@DaemonActor package protocol RunOwner: AnyObject, Sendable {
    /// A slot is free for `run`: the attempt to start it as (DROWSE_ATTEMPT) and whether the start
    /// waits for the journal's sync, or nil when there is nothing to run (its app is gone, it was
    /// collapsed, ...), which the owner has settled. `app`: the app as loaded now, nil when it is gone.
    func starting(_ run: QueuedRun, app: AppDefinition?) -> RunStart?
    /// No process could be made for it (no descriptors, no memory): nothing ran, and the run
    /// waits in the queue, its start uncounted, to be tried again.
    func notStarted(_ run: QueuedRun)
    /// The run ended: what its record carries. `cutShort`: a resident app's event ended by
    /// drowsed's stop, not by the app.
    func ending(_ run: QueuedRun, _ outcome: HandlerOutcome, cutShort: Bool) -> RunEffects
    /// The run and its effects are recorded.
    func ended(_ run: QueuedRun, _ outcome: HandlerOutcome)
    /// Shutdown began before it started: it will not run (what is recorded runs after the restart).
    func notRun(_ run: QueuedRun)
}

/// A queued run with the part it belongs to.
struct RunJob: Sendable {
    var run: QueuedRun
    let owner: any RunOwner
}

/// Where a part of the daemon queues a handler run.
@DaemonActor package protocol RunQueue: AnyObject {
    /// Queues a run; it starts now if one of the `max_concurrent_handlers` slots is free.
    func enqueue(_ run: QueuedRun, owner: any RunOwner)
    /// Shutdown has begun: nothing new is launched.
    var stopping: Bool { get }
    /// A run queued now starts in this turn (not stopping, a slot is free, nothing waits before it).
    var startsAtOnce: Bool { get }
}

/// Handlers as a part of the daemon: the queue of runs waiting for one of the
/// `max_concurrent_handlers` slots, the handlers running now, and the record of each run's end.
/// A leaf: it knows the part a run belongs to only through the run (`RunOwner`), and tells the
/// others that a run ended as a `DaemonEvent`. At shutdown it stops launching first, and drains
/// last of the parts that run processes: the API (listed before it in the ServiceGroup) still
/// answers the handlers that are finishing.
@DaemonActor package final class HandlerRunner: RunQueue, DaemonPart {
    let config: MainConfig
    let logger: Logger
    let launcher: HandlerLaunching
    let store: Store
    let clock: AgentClock
    let registry: AppRegistry
    let processes: AppProcesses
    let events: DaemonEvents
    let metrics: AgentMetrics

    /// Runs waiting for a slot. Why a cap: every running handler costs a process, pipes, a pidfd
    /// and a supervising thread; a flood of notifications once ran out of descriptors and dropped runs.
    var queue: HandlerQueue<RunJob>
    let retryWake: ServiceWake
    package private(set) var stopping = false
    /// Every handler running now (resident apps' events included), as drowse_running_handlers.
    package private(set) var running = 0
    /// Each started run's wait for its end, run by `serve` as a child task: the stop drains them.
    let waits = Reports<@Sendable @DaemonActor () async -> Void>()

    package nonisolated var partName: String { "handlers" }

    init(config: MainConfig, logger: Logger, launcher: HandlerLaunching, store: Store, clock: AgentClock, registry: AppRegistry,
         processes: AppProcesses, events: DaemonEvents, metrics: AgentMetrics) {
        self.config = config
        self.logger = logger
        self.launcher = launcher
        self.store = store
        self.clock = clock
        self.registry = registry
        self.processes = processes
        self.events = events
        self.metrics = metrics
        queue = HandlerQueue(limit: config.scheduler.maxConcurrentHandlers)
        retryWake = ServiceWake(clock: clock)
    }

    var waiting: Int { queue.waitingCount }

    package var startsAtOnce: Bool { !stopping && queue.startsAtOnce }

    func now() -> Double { clock.timeline.now() }

    // MARK: the queue

    package func enqueue(_ run: QueuedRun, owner: any RunOwner) {
        queue.submit(RunJob(run: run, owner: owner))
        pump()
    }

    /// Starts what the queue allows, as one turn: every run that may start has started before
    /// anyone hears that the radio is in use.
    func pump() {
        guard !stopping else { return }
        events.turn { pumpNow() }
    }

    private func pumpNow() {
        while let job = queue.next() {
            switch startQueued(job) {
            case .started:
                queue.didStart()
            case .nothingToRun:
                queue.ended()
            case .shortage(let err):
                notStarted(job, err)
                return
            }
        }
    }

    /// No process could be made for `job` (no descriptors, no memory): it goes back to the front
    /// of the queue, and nothing starts until a run ends or the retry delay has passed.
    private func notStarted(_ job: RunJob, _ err: Int32) {
        // Its counted start was taken back (`RunOwner.notStarted`): the retry counts anew.
        let delay = queue.failedToStart(RunJob(run: job.run.uncounted, owner: job.owner))
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
    }

    /// A started run ended: its slot is free.
    func slotFreed() {
        queue.ended()
        pump()
    }

    enum QueuedStart { case started, nothingToRun, shortage(Int32) }

    /// Starts a run `next()` gave, holding its slot: at once, or once the journal's sync has
    /// made its owner's count of the start durable (`RunStart.afterSync`).
    private func startQueued(_ job: RunJob) -> QueuedStart {
        let app = registry[job.run.app]
        guard let begin = job.owner.starting(job.run, app: app), let app else { return .nothingToRun }
        guard begin.afterSync else { return launch(job, app: app, attempt: begin.attempt) }
        // The count is in the WAL: the handler starts after the sync that makes it durable, so a
        // power cut cannot hide that it ran. The sync runs on the journal thread, shared by every
        // start and record waiting meanwhile, and the daemon goes on; in a burst a slot that
        // frees no longer waits for an fdatasync of its own on the daemon's thread.
        store.afterJournalSync { ok in
            Task { @DaemonActor [weak self] in self?.synced(job, app: app, attempt: begin.attempt, ok: ok) }
        }
        return .started
    }

    /// The sync a start waited for returned; its slot is still held.
    private func synced(_ job: RunJob, app: AppDefinition, attempt: Int, ok: Bool) {
        if !ok { logger.error("store: the start of a handler not synced; after a power cut it may run again as attempt \(attempt)") }
        guard !stopping else {
            // Shutdown began meanwhile: it runs after the restart, as a queued run does.
            job.owner.notStarted(job.run)
            job.owner.notRun(job.run)
            queue.ended()
            return
        }
        events.turn {
            if case .shortage(let err) = launch(job, app: app, attempt: attempt) {
                notStarted(job, err)
            }
        }
        // A run that ended meanwhile may have left more to start.
        pump()
    }

    /// Starts the handler of a run whose slot is held; `.shortage`: no process could be made, the
    /// owner has taken its start back.
    private func launch(_ job: RunJob, app: AppDefinition, attempt: Int) -> QueuedStart {
        let stdin: [UInt8]
        switch job.run {
        case .notification(_, _, let payload, _): stdin = payload
        case .fetch(_, let trigger, _):
            stdin = Array(APIWire.FetchInput(app: app.id, reason: trigger.rawValue).json.serialized.utf8)
        case .transfers(_, let body, _): stdin = body
        }
        let started = start(app, event: job.run.event, stdin: stdin, trigger: job.run.trigger, attempt: attempt)
        if let err = started.run.resourceShortage {
            // Nothing started: the start is not counted (it is tried again).
            job.owner.notStarted(job.run)
            unstarted(started)
            return .shortage(err)
        }
        // The handler started first; then the bookkeeping: a run that uses the radio woke it,
        // so due fetches may ride along.
        if job.run.usesRadio { events.post(.radioUsed) }
        waits.yield {
            _ = await self.finish(started, job: job)
            self.slotFreed()
        }
        return .started
    }

    // MARK: one handler

    /// A handler started by `start`, waiting for `finish`.
    struct Started {
        var app: AppDefinition
        var event: HandlerEvent
        var trigger: RunTrigger
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
    func start(_ app: AppDefinition, event: HandlerEvent, stdin: [UInt8], trigger: RunTrigger, attempt: Int = 1) -> Started {
        let start = now()
        if app.isResident {
            // A resident app gets its events on its stream; `run` ends with its completion.
            let run = HandlerRun()
            running += 1
            processes.deliver(app.id, Self.eventBody(event, stdin: stdin), attempt: attempt, run: run)
            logger.info("delivered \(event.rawValue) event to the resident app", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger.rawValue)"])
            return Started(app: app, event: event, trigger: trigger, run: run, counted: true, delivered: true)
        }
        guard let argv = app.command(for: event) else {
            let run = HandlerRun()
            run.finish(HandlerOutcome(ending: .launchFailed("no \(event.rawValue) command"), startedAt: start, endedAt: start))
            return Started(app: app, event: event, trigger: trigger, run: run)
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
        logger.info("launched \(event.rawValue) handler", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger.rawValue)"])
        return Started(app: app, event: event, trigger: trigger, run: run, counted: true, leaf: leaf)
    }

    /// Waits for a started handler's end and records the run with what its owner says it
    /// effected (one transaction), then tells the other parts and the owner.
    func finish(_ started: Started, job: RunJob) async -> HandlerOutcome {
        let outcome = await started.run.outcome()
        let app = started.app, event = started.event
        if !started.delivered, started.counted { processes.handlerEnded(app.id, started.run, leaf: started.leaf) }
        if started.counted { ended() }
        let run = RunRecord(
            app: app.id, event: event, trigger: started.trigger, result: outcome.result, ending: outcome.summary,
            startedAt: outcome.startedAt, endedAt: outcome.endedAt, timedOut: outcome.ending == .timedOut)
        // A resident app's event cut short by drowsed's stop: the app did not end it.
        var cutShort = false
        if started.delivered, stopping, case .launchFailed = outcome.ending { cutShort = true }
        let effects = job.owner.ending(job.run, outcome, cutShort: cutShort)
        // Written at once, on disk at the journal's next sync: it runs now on its own thread and
        // takes every end written meanwhile along (docs/design.md, "A finished run stays finished").
        do {
            try store.record(run, fetch: effects.fetch, handlingNotification: effects.handled, durable: false)
            let log = logger
            store.afterJournalSync { ok in if !ok { log.error("store: a run's end not synced; it may run again after a power cut") } }
        } catch { logger.error("store: \(error)") }
        metrics.handlerEnded(app: app.id, event: event, result: outcome.result, seconds: outcome.endedAt - outcome.startedAt)
        // The others hear it first (the fetch scheduler counts it against the app's daily budget
        // before the owner's reaction may start another run), then the owner.
        events.post(.runEnded(app: app.id, event: event, failed: outcome.result == .failed, startedAt: outcome.startedAt, endedAt: outcome.endedAt))
        job.owner.ended(job.run, outcome)
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

    private func ended() { running -= 1 }

    /// A resident app's event, read from what a handler would get on its standard input
    /// (docs/handlers.md, "Standard input"): its stream line carries the same.
    nonisolated static func eventBody(_ event: HandlerEvent, stdin: [UInt8]) -> APIWire.Event.Body {
        let parsed = try? JSON.parse(bytes: stdin)
        switch event {
        case .notification:
            return .notification(payload: parsed ?? .string(String(decoding: stdin, as: UTF8.self)))
        case .fetch:
            return .fetch(reason: parsed.flatMap { APIWire.FetchInput(json: $0).reason } ?? "")
        case .transfers, .resident:  // a process is not an event: never delivered
            let doc = parsed.map(APIWire.TransfersInput.init(json:))
            return .transfers(session: doc?.session ?? "", transfers: doc?.transfers ?? [])
        }
    }

    // MARK: shutdown

    /// Shutdown begins: queued runs do not start, and their owners are told (notifications stay
    /// `pending` in the store and run after the restart; a waiting `drowse fetch` is told).
    func stopLaunching() {
        stopping = true
        processes.stopLaunching()
        retryWake.close()
        for job in queue.removeAllWaiting() { job.owner.notRun(job.run) }
    }

    /// Every started run's wait for its end, as a child task, until `stop`; then it returns once
    /// those still running have ended and are recorded.
    package func serve() async -> Served {
        await withDiscardingTaskGroup { group in
            for await wait in waits.stream { group.addTask(operation: wait) }
        }
        return .ended
    }

    /// Handlers that are running finish (each within its deadline; `serve` waits for them), so
    /// their events count as handled and are not run a second time after the restart.
    package func stop() async {
        stopLaunching()
        if running > 0 { logger.info("waiting for \(running) running handler(s) to finish") }
        waits.finish()
    }
}

/// Unix time with millisecond precision, as handlers see it in DROWSE_DEADLINE.
func format3(_ t: Double) -> String {
    let ms = Int64((t * 1000).rounded())
    let frac = ms % 1000
    return "\(ms / 1000)." + String(repeating: "0", count: 3 - String(frac).count) + String(frac)
}
