#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import DrowseTransfers
import Logging
import ServiceLifecycle

/// The daemon's parts, each owning its own state (docs/architecture.md, "Services").
package struct AgentParts {
    package let events: DaemonEvents
    package let registry: AppRegistry
    package let conditions: ConditionsService
    package let fetch: FetchService
    package let processes: AppProcesses
    package let handlers: HandlerRunner
    package let notifications: NotificationService
    package let transfers: TransferService
    package let mqtt: MQTTLink
    package let metricsFile: MetricsTextfile
    /// The counters the parts count into (`GET /v1/metrics`).
    package let metrics: AgentMetrics
    /// drowsed's code pages, given back after a quiet spell.
    package let code: CodeRelease

    /// The parts in their one order (docs/architecture.md, "Parts are services"): each starts
    /// once those before it are ready, and the ServiceGroup stops them in reverse. The app files
    /// are read first; the conditions are watched before anything waits on them; stored
    /// transfers resume before handlers and resident apps start; fetch windows are planned and
    /// recorded notifications run before MQTT brings new ones; the metrics file is written
    /// last. In reverse: MQTT stops taking notifications first, resident apps stop, running
    /// handlers drain while transfers and the conditions still serve them.
    package var lineup: [any DaemonPart] {
        [registry, conditions, transfers, handlers, processes, fetch, notifications, mqtt, metricsFile]
    }
}

/// The daemon put together: it builds the parts over one store and one clock as a tree (typed
/// calls down it for requests, `DaemonEvents` for the fan-out), starts them in dependency order, and
/// answers the local API from them. It decides nothing itself: every decision is one of the
/// state machines' in DrowseCore, carried out by the part that owns it.
@DaemonActor package final class Agent {
    package nonisolated static let version = "0.1.0"

    let config: MainConfig
    let logger: Logger
    let store: Store
    /// Drowse's time: every time planned or recorded is on its timeline; a step of the wall clock
    /// changes only how those times are shown (docs/design.md, "Time on a board without a
    /// real-time clock"). Every timer of the daemon is one of its wakes.
    let clock: AgentClock
    /// The clock's timeline, for the API's callers to name times in wall time.
    nonisolated let timeline: Timeline
    package let parts: AgentParts

    /// After the stop: empty cgroup folders drowsed made are removed (`AppSuspension.removeLeftovers`).
    package func removeLeftovers() { parts.processes.suspension.removeLeftovers() }

    /// `launcher`: by default a `ProcessLauncher` on the clock's timeline.
    package init(config: MainConfig, logger: Logger, launcher: HandlerLaunching? = nil, schedulerTrace: String? = nil,
                 clock: AgentClock = SystemClock()) throws {
        self.config = config
        self.logger = logger
        self.clock = clock
        let timeline = clock.timeline
        self.timeline = timeline
        // state_dir and inbox/ are traversable (0711) so an app's user can reach its own
        // inbox/<app>/ folder, which it owns; transfers/ (partial files) stays private.
        try FileSystem.makeDirectories(config.stateDir, mode: 0o711)
        try FileSystem.makeDirectories(config.stateDir + "/transfers", mode: 0o700)
        try FileSystem.makeDirectories(config.stateDir + "/inbox", mode: 0o711)
        try Sys.chmod(config.stateDir, 0o711)
        try Sys.chmod(config.stateDir + "/inbox", 0o711)
        let store = try Store(path: config.stateDir + "/state.db")
        self.store = store
        // The stored times onto this run's timeline, before anything reads them.
        if let shift = try store.alignTimeline(bootID: Timeline.bootID(), origin: timeline.origin, now: timeline.now()) {
            logger.notice("stored times moved by \(shift.seconds) s: \(shift.reason)")
        }
        let trace = try schedulerTrace.map { path throws(SystemError) in try SchedulerTrace(path: path, header: Self.scheduler(config).traceHeader) }
        parts = Self.assemble(config: config, logger: logger, launcher: launcher ?? ProcessLauncher(timeline: timeline), store: store,
                              clock: clock, trace: trace)
    }

    static func scheduler(_ config: MainConfig) -> FetchScheduler {
        var fetchPolicy = FetchPlanner()
        fetchPolicy.dailyBudget = config.scheduler.dailyBudget.seconds
        fetchPolicy.toleranceFraction = config.scheduler.tolerance
        return FetchScheduler(policy: fetchPolicy, utcOffset: Double(localUTCOffset()))
    }

    /// Builds the parts as a tree, each over the parts it asks (docs/architecture.md, "Services"):
    /// registry and conditions; the apps' processes over them; the handler runner over those;
    /// fetch and transfers over the runner; notifications over fetch and transfers; MQTT over
    /// notifications. Requests are typed calls down the tree; what goes up or across is a
    /// `DaemonEvent`, to which each part subscribes in its own init. No part is wired to another afterwards.
    static func assemble(config: MainConfig, logger: Logger, launcher: HandlerLaunching, store: Store, clock: AgentClock,
                         trace: SchedulerTrace?) -> AgentParts {
        let timeline = clock.timeline
        let events = DaemonEvents()
        let metrics = AgentMetrics()
        let code = CodeRelease(after: config.lifecycle.releaseCodeAfter.seconds, clock: clock, logger: logger)
        events.listen { event in
            // A ping's radio use is the one event an idle daemon has: not work.
            if case .radioUsed = event { return }
            code.worked()
        }
        let registry = AppRegistry(directory: config.appsDir, minimumInterval: config.scheduler.minimumInterval.seconds, logger: logger)
        let conditions = ConditionsService(
            reader: ConditionsProbe(sysfsRoot: config.conditions.sysfsRoot, meteredInterfaces: config.conditions.meteredInterfaces),
            policy: ConditionsPolicy(batteryLowPercent: config.conditions.batteryLowPercent), radioModel: config.radioModel,
            radioTail: config.radioTail?.seconds, now: timeline.now(), timeline: timeline, store: store, logger: logger, events: events)
        let processes = AppProcesses(config: config, logger: logger, launcher: launcher, clock: clock, registry: registry,
                                     suspension: makeSuspension(config.lifecycle.cgroup, logger: logger), events: events)
        let handlers = HandlerRunner(config: config, logger: logger, launcher: launcher, store: store, clock: clock, registry: registry,
                                     processes: processes, events: events, metrics: metrics)
        let fetch = FetchService(scheduler: scheduler(config), store: store, clock: clock, events: events, conditions: conditions,
                                 apps: registry, runs: handlers, trace: trace, metrics: metrics, logger: logger)
        let lifecycle = TransferLifecycle(
            policy: conditions.policy, conditions: conditions.current, maxPerApp: config.transfers.maxPerApp,
            seed: UInt64.random(in: 0...UInt64.max))
        // libcurl's thread, started by the first transfer; what it reports reaches the part in order.
        let transferReports = Reports<TransferEvent>()
        let engine = LazyTransferEngine(options: transferOptions(config), logger: logger) { transferReports.yield($0) }
        let transfers = TransferService(lifecycle: lifecycle, store: store, files: SystemTransferFiles(), engine: engine,
                                        reports: transferReports, clock: clock, conditions: conditions,
                                        registry: registry, events: events, runs: handlers, stateDir: config.stateDir, metrics: metrics,
                                        logger: logger)
        let notifications = NotificationService(
            admission: NotificationAdmission(budget: NotificationBudget(maxPerHour: config.notifications.maxPerHour), deviceID: config.deviceID,
                                             maxDeferred: config.notifications.maxDeferred),
            store: store, clock: clock, registry: registry, runs: handlers, downloads: transfers, windows: fetch, events: events,
            topicPrefix: config.mqtt?.topicPrefix ?? "drowse", deviceID: config.deviceID, groups: config.mqtt?.groups ?? [],
            maxPayload: config.notifications.maxPayload, heldStore: store, metrics: metrics, logger: logger)
        let mqtt = MQTTLink(config: config, logger: logger, store: store, timeline: timeline, registry: registry, conditions: conditions,
                            notifications: notifications, metrics: metrics, events: events, code: code)
        let metricsFile = MetricsTextfile(path: config.metrics.textfile, metrics: metrics, registry: registry, handlers: handlers, logger: logger)
        return AgentParts(events: events, registry: registry, conditions: conditions, fetch: fetch, processes: processes,
                          handlers: handlers, notifications: notifications, transfers: transfers, mqtt: mqtt, metricsFile: metricsFile, metrics: metrics,
                          code: code)
    }

    /// The daemon's start order: the local API (step 0, ready once it listens), then the parts
    /// of `AgentParts.lineup`, then `AgentService` hears they are all ready.
    package func startOrder() -> StartOrder { StartOrder(count: 1 + parts.lineup.count) }

    /// The ServiceGroup's services in the one order: the API first (it closes last, after running
    /// handlers drained while it still served them), then the parts; `agent` (the
    /// `AgentService`) last, first to hear a graceful shutdown.
    package func services(api: any Service, order: StartOrder, agent: any Service) -> [any Service] {
        [api] + parts.lineup.enumerated().map { PartService($1, order: order, step: 1 + $0) } + [agent]
    }

    static func transferOptions(_ config: MainConfig) -> TransferEngine.Options {
        var opts = TransferEngine.Options(
            maxConnectionsPerHost: config.transfers.maxConnectionsPerHost,
            commitInterval: config.transfers.commitInterval.seconds, commitBytes: Int64(config.transfers.commitBytes))
        (opts.lowSpeedLimit, opts.lowSpeedTime) = config.transfers.lowSpeed
        opts.maxUnknownSize = config.transfers.maxUnknownSize
        opts.releaseCodeAfter = config.transfers.releaseCodeAfter.seconds
        return opts
    }

    /// An API request: work, after which drowsed's code is given back (`CodeRelease`).
    package func worked() { parts.code.worked() }

    /// Graceful shutdown begins: no handler is launched any more.
    package func stopLaunching() { parts.handlers.stopLaunching() }

    func now() -> Double { clock.timeline.now() }

    /// A time on the timeline as the wall clock names it now: what the API shows and handlers see.
    func wall(_ t: Double) -> Double { clock.timeline.wall(t) }
    func wall(_ t: Double?) -> Double? { clock.timeline.wall(t) }

    var stopping: Bool { parts.handlers.stopping }

    // MARK: apps

    func loadApps() {
        parts.registry.load()
        parts.mqtt.loadReports()
    }

    func app(_ id: String, for caller: Caller) throws(APIError) -> AppDefinition {
        try refused { () throws(AppRegistry.Refusal) in try parts.registry.app(id, for: caller) }
    }

    /// Starts the scheduler with the apps as the store remembers them.
    func startScheduler() { parts.fetch.start() }

    /// The wall clock was set (what the conditions part does when the kernel reports it).
    func clockStepped() { parts.conditions.clockStepped() }

    // MARK: fetch

    /// `drowse fetch ID`: run now and wait for the result.
    package func fetchNow(_ id: String, caller: Caller) async throws(APIError) -> HandlerOutcome {
        let app = try app(id, for: caller)
        let run = try refused { () throws(FetchService.Refusal) in try parts.fetch.fetchNow(app) }
        return await run.outcome()
    }

    package func used(_ id: String, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        try refused { () throws(FetchService.Refusal) in try parts.fetch.used(id) }
    }

    // MARK: resident apps and tasks

    /// The apps' lifecycles as the registry has them, without the rest of `AppProcesses.start`
    /// (adopting cgroups, watching memory): for tests.
    func configureLifecycles() {
        lifecycle { $0.configure(parts.registry.apps.values.sorted { $0.id < $1.id }, adopted: []) }
    }

    /// Asks the app lifecycles (their process orders carried out by `AppProcesses`).
    func lifecycle<T, E: Error>(_ body: (LifecycleService) throws(E) -> T) throws(E) -> T { try parts.processes.lifecycle(body) }

    /// Asks the app lifecycles for the API: a refusal is the API's answer.
    func lifecycleRefusing<T>(_ body: (LifecycleService) throws(LifecycleService.Refusal) -> T) throws(APIError) -> T {
        try refused { () throws(LifecycleService.Refusal) in try lifecycle(body) }
    }

    package func openEventStream(_ id: String, caller: Caller, sink: EventSink) throws(APIError) {
        _ = try app(id, for: caller)
        lifecycle { $0.openStream(id, sink: sink) }
    }

    package func eventStreamClosed(_ id: String, sink: EventSink) {
        lifecycle { $0.streamClosed(id, sink: sink) }
    }

    package func completeEvent(_ id: String, event: String, result: FetchResult, caller: Caller) throws(APIError) {
        _ = try app(id, for: caller)
        try lifecycleRefusing { l throws(LifecycleService.Refusal) in try l.complete(id, event: event, result: result) }
    }

    package func beginTask(_ id: String, name: String?, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycleRefusing { l throws(LifecycleService.Refusal) in try l.beginTask(id, name: name) }.json(now: now(), wall: clock.timeline.skew)
    }

    package func endTask(_ id: String, task: String, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycleRefusing { l throws(LifecycleService.Refusal) in try l.endTask(id, id: task) }.json(now: now(), wall: clock.timeline.skew)
    }

    package func task(_ id: String, task: String, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        return try lifecycleRefusing { l throws(LifecycleService.Refusal) in try l.task(id, id: task) }.json(now: now(), wall: clock.timeline.skew)
    }

    package func activate(_ id: String, _ on: Bool, caller: Caller) throws(APIError) -> JSON {
        _ = try app(id, for: caller)
        _ = lifecycle { $0.activate(id, on) }
        return APIWire.StateAnswer(id: id, state: stateWire(id)).json
    }

    func stateWire(_ id: String) -> APIWire.AppState {
        let s = lifecycle { $0.state(of: id) }
        return APIWire.AppState(state: s?.state.rawValue, reason: s?.reason, since: wall(s?.since))
    }

    // MARK: reports

    /// `POST /v1/apps/ID/report`: the app's report replaces its last one, is kept across restarts
    /// and goes out in the fleet status.
    package func report(_ id: String, fields: [String: String], caller: Caller) throws(APIError) -> JSON {
        let app = try app(id, for: caller)
        try refused { () throws(MQTTLink.Refusal) in try parts.mqtt.reported(app: app.id, fields: fields) }
        return APIWire.ReportAnswer(id: app.id, report: APIWire.Report(fields)).json
    }
}
