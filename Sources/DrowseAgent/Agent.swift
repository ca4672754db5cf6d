#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseMQTT
import DrowseStore
import DrowseSystem
import DrowseTransfers
import Logging

/// The daemon's brain: apps, the fetch plan, notifications and transfers. One actor owns
/// the store and every decision; the C libraries run on their own threads and report here
/// through ordered streams.
package actor Agent {
    package static let version = "0.1.0"

    let config: MainConfig
    let logger: Logger
    let launcher: HandlerLaunching
    let store: Store
    /// Drowse's time: every time planned or recorded is on its timeline; a step of the wall clock
    /// changes only how those times are shown (docs/design.md, "Time on a board without a
    /// real-time clock"). Every timer of the agent is one of its wakes.
    let clock: AgentClock
    let timeline: Timeline
    /// The fetch scheduler as configured, before the service takes it over.
    let initialScheduler: FetchScheduler
    /// `--scheduler-trace`: what the scheduler was fed and answered.
    let trace: SchedulerTrace?
    /// Fetch scheduling: the scheduler (every decision about fetch windows, the same state
    /// machine `drowse simulate` runs), its trace and what carries out its actions.
    lazy var fetch: FetchService = makeFetchService()
    /// The board's power and network: the last reading and the policy that judges it.
    let conditionsService: ConditionsService
    var conditions: Conditions { conditionsService.current }
    var policy: ConditionsPolicy { conditionsService.policy }
    var monitor: ConditionsMonitor?

    /// Valid apps by id.
    var apps: [String: AppDefinition] = [:]
    /// App files that could not be used, with why.
    var invalidApps: [(file: String, id: String, error: String)] = []

    var engine: LazyTransferEngine?
    var mqtt: MQTTSession?
    var mqttEvents: AsyncStream<MQTTSessionEvent>.Continuation?
    /// What the retained fleet status needs (Agent+FleetStatus.swift).
    var fleet = FleetStatusState()
    var transferEvents: AsyncStream<TransferEvent>.Continuation?

    var windowTimer: WakeTimer?
    /// Background transfers: the lifecycle (every decision about a transfer's life), the states
    /// the store could not write yet, and what carries out the lifecycle's actions.
    lazy var transfers: TransferService = makeTransferService()
    var retryTimers: [String: WakeTimer] = [:]
    var background: [Task<Void, Never>] = []
    /// Notification and fetch runs waiting for one of `max_concurrent_handlers` slots.
    lazy var handlerQueue = HandlerQueue<QueuedRun>(limit: config.scheduler.maxConcurrentHandlers)
    var handlerRetryTimer: WakeTimer?
    var deferredTimer: WakeTimer?
    /// Silent notifications: admission (what becomes of each one) and what carries it out.
    lazy var notifications: NotificationService = makeNotificationService()
    var timeoutTimer: WakeTimer?
    /// Set once shutdown begins: nothing new is launched.
    var stopping = false
    var runningHandlers = 0
    var handlersIdle: [CheckedContinuation<Void, Never>] = []
    var handlerSeq = 0
    var pressureMonitor: MemoryPressureMonitor?
    /// App lifecycles: states, suspension, resident processes' events, background tasks.
    lazy var lifecycle: LifecycleService = makeLifecycleService()
    /// How apps are frozen and killed: their cgroups, or signals where there are none.
    var suspension: AppSuspension
    var lifecycleTimer: WakeTimer?
    /// Resident processes drowsed started, by app.
    var residents: [String: HandlerRun] = [:]
    /// Their cgroup leaves.
    var residentLeaves: [String: String] = [:]
    /// Which of each app's `[limits]` its cgroup held at its last start (the rest were rlimits).
    var limitHolders: [String: (processes: Bool, memory: Bool)] = [:]
    var residentsStopped: [CheckedContinuation<Void, Never>] = []
    /// Running handler processes by app (their process groups, for signal suspension).
    var handlerRuns: [String: [ObjectIdentifier: HandlerRun]] = [:]
    /// "psi", or why memory pressure is not watched.
    var memoryPressureStatus = "unavailable: not started"
    /// The counters `GET /v1/metrics` shows; the services count into this one.
    let metrics = AgentMetrics()
    /// A write of the `[metrics] textfile` is queued for the end of this turn.
    var metricsTextfilePending = false
    /// The `[metrics] textfile`, its folder opened once at start-up (see `ReplacedFile`).
    var metricsTextfile: ReplacedFile?

    /// `launcher`: by default a `ProcessLauncher` on the clock's timeline.
    package init(config: MainConfig, logger: Logger, launcher: HandlerLaunching? = nil, schedulerTrace: String? = nil,
                 clock: AgentClock = SystemClock()) throws {
        self.config = config
        self.logger = logger
        self.launcher = launcher ?? ProcessLauncher(timeline: clock.timeline)
        self.clock = clock
        self.timeline = clock.timeline
        // state_dir and inbox/ are traversable (0711) so an app's user can reach its own
        // inbox/<app>/ folder, which it owns; transfers/ (partial files) stays private.
        try FileSystem.makeDirectories(config.stateDir, mode: 0o711)
        try FileSystem.makeDirectories(config.stateDir + "/transfers", mode: 0o700)
        try FileSystem.makeDirectories(config.stateDir + "/inbox", mode: 0o711)
        try Sys.chmod(config.stateDir, 0o711)
        try Sys.chmod(config.stateDir + "/inbox", 0o711)
        store = try Store(path: config.stateDir + "/state.db")
        // The stored times onto this run's timeline, before anything reads them.
        if let shift = try store.alignTimeline(bootID: Timeline.bootID(), origin: timeline.origin, now: timeline.now()) {
            logger.notice("stored times moved by \(shift.seconds) s: \(shift.reason)")
        }
        conditionsService = ConditionsService(
            reader: ConditionsProbe(sysfsRoot: config.conditions.sysfsRoot, meteredInterfaces: config.conditions.meteredInterfaces),
            policy: ConditionsPolicy(batteryLowPercent: config.conditions.batteryLowPercent), radioModel: config.radioModel,
            now: timeline.now(), logger: logger)
        var fetchPolicy = FetchPlanner()
        fetchPolicy.dailyBudget = config.scheduler.dailyBudget.seconds
        fetchPolicy.toleranceFraction = config.scheduler.tolerance
        let fetchScheduler = FetchScheduler(policy: fetchPolicy, utcOffset: Double(localUTCOffset()))
        initialScheduler = fetchScheduler
        trace = try schedulerTrace.map { path throws(SystemError) in try SchedulerTrace(path: path, header: fetchScheduler.traceHeader) }
        suspension = Self.makeSuspension(config.lifecycle.cgroup, logger: logger)
    }


    /// Loads apps, resumes unfinished work and connects. Returns once running.
    package func start() {
        // Every reading tells the MQTT session whether there is a default route.
        conditionsService.onReading = { c in self.mqtt?.setNetwork(online: c.network != .none) }
        let monitor = ConditionsMonitor(logger: logger) { change in
            Task { await self.conditionsChanged(change) }
        }
        monitor.start()
        self.monitor = monitor
        loadApps()
        startTransferEngine()
        startMQTT()
        resumeTransfers()
        startLifecycle()
        handlePendingNotifications()
        startScheduler()
        startMemoryPressureMonitor()
        startMetricsTextfile()
    }

    /// Stops cleanly: transfer progress committed, MQTT offline status published.
    package func shutdown() async {
        stopping = true
        windowTimer?.cancel()
        deferredTimer?.cancel()
        timeoutTimer?.cancel()
        for t in retryTimers.values { t.cancel() }
        // No new notifications; those that still arrive stay recorded for after the restart.
        if let mqtt { await mqtt.stop() }
        pressureMonitor?.stop()
        lifecycleTimer?.cancel()
        // Resident apps stop; events they did not complete end as failed.
        await stopResidents()
        // Handlers that are running finish (each within its deadline), so their events count
        // as handled and are not run a second time after the restart.
        if runningHandlers > 0 {
            logger.info("waiting for \(runningHandlers) running handler(s) to finish")
            await withCheckedContinuation { handlersIdle.append($0) }
        }
        if let running = engine?.engine { await running.shutdown() }
        transferEvents?.finish()
        mqttEvents?.finish()
        // Let the ordered streams drain so the last commits reach the store.
        for t in background { await t.value }
        logger.info("drowsed stopped")
    }

    func now() -> Double { timeline.now() }

    /// A time on the timeline as the wall clock names it now: what the API shows and handlers see.
    func wall(_ t: Double) -> Double { timeline.wall(t) }
    func wall(_ t: Double?) -> Double? { timeline.wall(t) }

    // MARK: apps

    func loadApps() {
        if !FileSystem.isDirectory(config.appsDir) {
            logger.warning("apps_dir \(config.appsDir) does not exist: no apps")
        }
        // Reading and checking live in AppCatalog, shared with `drowsed --check-config`.
        let catalog = AppCatalog.load(directory: config.appsDir)
        apps = catalog.apps
        invalidApps = catalog.invalid.map { ($0.file, $0.id, $0.error.description) }
        for bad in catalog.invalid { logger.error("app file skipped: \(bad.error.description)") }
        for id in apps.keys.sorted() { _ = try? store.app(id, now: now()) }
        // What each app last reported of itself: shown by `drowse apps show` and in the fleet status.
        fleet.reports = Dictionary(uniqueKeysWithValues: apps.keys.map { ($0, (try? store.report(app: $0)) ?? [:]) })
        logger.info("loaded \(apps.count) app(s), \(invalidApps.count) invalid", metadata: ["apps": "\(apps.keys.sorted())"])
    }

    /// The app `id` if `caller` may see it. Another user's app answers exactly as a missing one
    /// does (404, same message), so the API tells no local user which apps exist.
    func app(_ id: String, for caller: Caller) throws(APIError) -> AppDefinition {
        guard let app = apps[id], visible(app, to: caller) else {
            if caller.isAdmin, invalidApps.contains(where: { $0.id == id }) {
                throw APIError(409, "invalid_app", "app '\(id)' has an invalid definition")
            }
            throw Self.noApp(id)
        }
        return app
    }

    static func noApp(_ id: String) -> APIError { .notFound("no app '\(id)'") }

    func visible(_ app: AppDefinition, to caller: Caller) -> Bool {
        caller.isAdmin || (app.user != nil && app.user == caller.userName)
    }

    // MARK: handlers

    /// Runs one handler to its end and records the run.
    func runHandler(_ app: AppDefinition, event: HandlerEvent, stdin: [UInt8], trigger: String,
                    notification: Int64? = nil) async -> HandlerOutcome {
        await finishHandler(startHandler(app, event: event, stdin: stdin, trigger: trigger, notification: notification))
    }

    /// A handler started by `startHandler`, waiting for `finishHandler`.
    struct StartedHandler {
        var app: AppDefinition
        var event: HandlerEvent
        var trigger: String
        var notification: Int64?
        var run: HandlerRun
        /// Counted in `runningHandlers` (a handler process was started).
        var counted = false
        /// The run's own cgroup, removed at its end.
        var leaf: String? = nil
        /// Delivered to a resident app's stream rather than run as a handler.
        var delivered = false
    }

    /// Starts a handler now (the process exists when this returns); `finishHandler` waits for
    /// its end and records it. Synchronous, so a notification's handler starts without a hop.
    func startHandler(_ app: AppDefinition, event: HandlerEvent, stdin: [UInt8], trigger: String,
                      notification: Int64? = nil) -> StartedHandler {
        let start = now()
        if app.isResident {
            // A resident app gets its events on its stream; `run` ends with its completion.
            let run = HandlerRun()
            let kind: AppLifecycle.EventKind = event == .fetch ? .fetch : event == .notification ? .notification : .transfers
            runningHandlers += 1
            lifecycle.deliver(app.id, kind: kind, members: Self.eventMembers(event, stdin: stdin), run: run)
            logger.info("delivered \(event.rawValue) event to the resident app", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger)"])
            return StartedHandler(app: app, event: event, trigger: trigger, notification: notification, run: run, counted: true, delivered: true)
        }
        guard let argv = app.command(for: event) else {
            let run = HandlerRun()
            run.finish(HandlerOutcome(ending: .launchFailed("no \(event.rawValue) command"), startedAt: start, endedAt: start))
            return StartedHandler(app: app, event: event, trigger: trigger, notification: notification, run: run)
        }
        let deadline = start + config.scheduler.handlerDeadline.seconds
        var env: [String: String] = [
            "DROWSE_APP": app.id, "DROWSE_EVENT": event.rawValue,
            "DROWSE_DEADLINE": String(format3(wall(deadline))), "DROWSE_SOCKET": config.socket,
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
        ]
        if app.user == nil, let home = getenv("HOME") { env["HOME"] = String(cString: home) }
        var request = LaunchRequest(
            app: app.id, event: event, argv: argv, user: app.user,
            workingDirectory: app.workingDirectory ?? ConfigPath.directory(of: app.file),
            environment: env, stdin: stdin, deadline: deadline)
        // Thawed (should a task have left it frozen) before the handler joins the app's cgroup.
        lifecycle.handlerStarting(app.id)
        handlerSeq += 1
        let leaf = suspension.leaf(app: app.id, name: "run-\(getpid())-\(handlerSeq)")
        request.cgroup = leaf
        applyLimits(app, to: &request)
        let log = logger
        let appID = app.id
        runningHandlers += 1
        let run = launcher.start(request) { line, isErr in
            log.info("\(line)", metadata: ["app.id": "\(appID)", "handler.stream": isErr ? "stderr" : "stdout"])
        }
        handlerRuns[app.id, default: [:]][ObjectIdentifier(run)] = run
        logger.info("launched \(event.rawValue) handler", metadata: ["app.id": "\(app.id)", "trigger": "\(trigger)"])
        return StartedHandler(app: app, event: event, trigger: trigger, notification: notification, run: run, counted: true, leaf: leaf)
    }

    /// Waits for a started handler's end and records the run (and, for a notification, that it
    /// was handled: one transaction).
    func finishHandler(_ started: StartedHandler) async -> HandlerOutcome {
        let outcome = await started.run.outcome()
        let app = started.app, event = started.event
        if !started.delivered, started.counted {
            handlerRuns[app.id]?[ObjectIdentifier(started.run)] = nil
            if handlerRuns[app.id]?.isEmpty == true { handlerRuns[app.id] = nil }
            if let leaf = started.leaf { suspension.leafEnded(leaf) }
            lifecycle.handlerEnded(app.id)
        }
        if started.counted {
            runningHandlers -= 1
            if runningHandlers == 0 {
                for c in handlersIdle { c.resume() }
                handlersIdle.removeAll()
            }
        }
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
        do { try store.record(run, fetch: record, handlingNotification: handled) } catch { logger.error("store: \(error)") }
        fetch.finish(next)
        metrics.handlerEnded(app: app.id, event: event, result: outcome.result, seconds: outcome.endedAt - outcome.startedAt)
        runResulted(app: app.id, failed: outcome.result == .failed)
        let level: Logger.Level = outcome.result == .failed ? .warning : .info
        logger.log(level: level, "\(event.rawValue) handler finished: \(outcome.result.rawValue) (\(outcome.summary))",
                   metadata: ["app.id": "\(app.id)"])
        return outcome
    }
}

/// Unix time with millisecond precision, as handlers see it in DROWSE_DEADLINE.
func format3(_ t: Double) -> String {
    let ms = Int64((t * 1000).rounded())
    let frac = ms % 1000
    return "\(ms / 1000)." + String(repeating: "0", count: 3 - String(frac).count) + String(frac)
}
