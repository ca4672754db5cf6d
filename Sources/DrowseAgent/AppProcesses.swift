#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem
import Logging

/// The apps' processes as a part of the daemon: resident processes (started, restarted,
/// stopped), how every app process is frozen, thawed and killed (its cgroup, or signals), the
/// apps' `[limits]`, memory pressure, and the app lifecycles (`LifecycleService`) that decide
/// all of it. Handler runs register here so that suspension reaches them too.
@DaemonActor package final class AppProcesses: DaemonPart {
    let config: MainConfig
    let logger: Logger
    let launcher: HandlerLaunching
    let registry: AppRegistry
    /// How apps are frozen and killed: their cgroups, or signals where there are none.
    package let suspension: AppSuspension
    /// App lifecycles: states, suspension, resident processes' events, background tasks. Reached
    /// through `lifecycle(_:)`, which carries out the orders it gives.
    private let lifecycles: LifecycleService
    /// The lifecycles' wake (`LifecycleService.Order.wake`).
    private let lifecycleWake: ServiceWake
    let events: DaemonEvents
    /// Shutdown has begun (`stopLaunching`): no resident process starts any more.
    private(set) var stopping = false

    /// Resident processes drowsed started, by app, with their cgroup leaves.
    var residents: [String: (run: HandlerRun, leaf: String?)] = [:]
    /// Running handler processes by app (their process groups, for signal suspension).
    var handlerRuns: [String: [ObjectIdentifier: HandlerRun]] = [:]
    /// Which of each app's `[limits]` its cgroup held at its last start (the rest were rlimits).
    var limitHolders: [String: (processes: Bool, memory: Bool)] = [:]
    /// The limits last written for each app (see `prepare`).
    var limitsWritten: [String: AppLimits] = [:]
    /// Empty cgroup leaves for each app's next handler runs: the leaves of runs that ended clean
    /// (`AppSuspension.isReusable`), else one made ahead. Making a cgroup costs ~80 µs of the
    /// time between a notification and its handler's start, and with removing it was a quarter
    /// of the daemon's work per handler in a burst.
    var spareLeaves: [String: [String]] = [:]
    /// At most this many spare leaves per app: in a burst to one app a run's end frees a leaf
    /// just before the next run takes one.
    static let sparesPerApp = 2
    var seq = 0
    /// The spawn helper's refusals and in-process fallbacks already logged.
    var seenSpawner = (refused: 0, fallbacks: 0)
    var pressureMonitor: MemoryPressureMonitor?
    /// What its threads report (memory pressure, an adopted resident's exit), in their order (`serve`).
    let reports = Reports<Report>()
    /// `waitForEnd`: a resident process's wait for its end, run by `serve` as a child task.
    enum Report: Sendable { case memoryPressure, adoptedExited(String), waitForEnd(@Sendable @DaemonActor () async -> Void) }
    /// "psi", or why memory pressure is not watched.
    var memoryPressureStatus = "unavailable: not started"

    package nonisolated var partName: String { "app processes" }

    init(config: MainConfig, logger: Logger, launcher: HandlerLaunching, clock: AgentClock, registry: AppRegistry,
         suspension: AppSuspension, events: DaemonEvents) {
        self.config = config
        self.events = events
        self.logger = logger
        self.launcher = launcher
        self.registry = registry
        self.suspension = suspension
        var settings = AppLifecycle.Settings()
        settings.suspendAfter = config.lifecycle.suspendAfter.seconds
        settings.taskAllowance = config.lifecycle.backgroundTaskTime.seconds
        settings.taskExpiryWarning = config.lifecycle.taskExpiryWarning.seconds
        settings.eventDeadline = config.scheduler.handlerDeadline.seconds
        lifecycles = LifecycleService(settings: settings, clock: clock, logger: logger)
        lifecycleWake = ServiceWake(clock: clock)
    }

    /// Asks the app lifecycles, then carries out the orders they gave (in their order).
    package func lifecycle<T, E: Error>(_ body: (LifecycleService) throws(E) -> T) throws(E) -> T {
        defer { carryOut(lifecycles.takeOrders()) }
        return try body(lifecycles)
    }

    private func carryOut(_ orders: [LifecycleService.Order]) {
        events.turn { for order in orders { carryOut(order) } }
    }

    private func carryOut(_ order: LifecycleService.Order) {
        switch order {
        case .freeze(let app): freeze(app)
        case .thaw(let app): thaw(app)
        case .startProcess(let app): startResident(app)
        case .killProcess(let app): killResident(app)
        case .killApp(let app): killApp(app)
        case .overran(let app): events.post(.taskOverran(app: app))
        case .wake(let at): lifecycleWake.set(at) { [weak self] in self?.lifecycle { $0.timerFired() } }
        case .own(let action): lifecycles.perform(action)
        }
    }

    /// Shutdown begins: no resident process is started any more.
    func stopLaunching() { stopping = true }

    /// Start-up: adopt what a killed drowsed left, start the resident apps that are not running,
    /// and watch memory pressure.
    package func start() {
        let apps = registry.apps
        let adopted = suspension.adopt(apps: registry.ids)
        for id in adopted.sorted() where apps[id]?.isResident == true {
            logger.info("adopted the resident process a previous drowsed left running", metadata: ["app.id": "\(id)"])
            suspension.watchAdopted(app: id) { [reports] in reports.yield(.adoptedExited(id)) }
        }
        lifecycle { $0.configure(apps.values.sorted { $0.id < $1.id }, adopted: adopted.filter { apps[$0]?.isResident == true }) }
        startMemoryPressureMonitor()
        // Handlers start into their cgroups from the small spawn helper (no copy of drowsed's page
        // tables at each start); without cgroups drowsed's own start shares its memory anyway.
        // `[lifecycle] spawn_helper = false` turns it off. This part owns it: `stop` ends it.
        if suspension.cgroupBase != nil, launcher is ProcessLauncher, config.lifecycle.spawnHelper {
            let chosen = SpawnHelper.choose()
            for r in chosen.refused { logger.warning("spawn helper refused: \(r)") }
            if !chosen.refused.isEmpty { logger.warning("spawn helper: running \(chosen.program) in its place") }
            if let error = SpawnHelper.start(executable: chosen.program) {
                logger.warning("handlers start in-process: \(error)\(SpawnHelper.refusals.count > 0 ? " (\(SpawnHelper.refusals.last))" : "")")
            }
            seenSpawner = (SpawnHelper.refusals.count, SpawnHelper.fallbacks)
        }
    }

    /// A reload: resident processes of removed apps, or of apps no longer resident, stop; the
    /// lifecycles take the apps as they are now.
    func appsReloaded() {
        removeSpareLeaves { self.registry[$0] != nil }
        for id in residents.keys.sorted() where registry[id]?.isResident != true {
            suspension.thaw(app: id, processGroups: processGroups(of: id))
            residents[id]?.run.terminate()
        }
        lifecycle { $0.configure(registry.apps.values.sorted { $0.id < $1.id }, adopted: []) }
    }

    /// What memory pressure and adopted residents report, in their order, and each resident
    /// process's wait for its end as a child task, until `stop`; then it returns once the
    /// resident processes have ended.
    package func serve() async -> Served {
        await withDiscardingTaskGroup { group in
            for await report in reports.stream {
                switch report {
                case .memoryPressure: memoryPressure()
                case .adoptedExited(let app): adoptedResidentExited(app)
                case .waitForEnd(let wait): group.addTask(operation: wait)
                }
            }
        }
        return .ended
    }

    /// Shutdown: the lifecycle stops deciding; resident processes are thawed and asked to stop
    /// (SIGTERM, SIGKILL after the grace; `serve` waits for their ends); memory pressure is no
    /// longer watched; the spawn helper ends (handlers still running are drowsed's children:
    /// they finish without it).
    package func stop() async {
        stopping = true
        pressureMonitor?.stop()
        pressureMonitor = nil
        lifecycleWake.close()
        lifecycle { $0.stop() }
        removeSpareLeaves()
        for (id, r) in residents {
            suspension.thaw(app: id, processGroups: processGroups(of: id))
            r.run.terminate()
        }
        if SpawnHelper.pid != nil { SpawnHelper.stop() }
        reports.finish()
    }

    // MARK: what the lifecycle asks for

    /// Starts an app's resident process: the app's user, its cgroup, no deadline.
    func startResident(_ id: String) {
        guard !stopping, let app = registry[id], let argv = app.processCommand else { return }
        if residents[id] != nil { return }
        var request = LaunchRequest(
            app: app.id, event: .resident, argv: argv, user: app.user,
            workingDirectory: app.workingDirectory ?? ConfigPath.directory(of: app.file),
            environment: environment(app, event: .resident), stdin: [], deadline: .infinity)
        // A fresh leaf per process (see CgroupSuspension.killAll), named for this drowsed.
        let leaf = prepare(app, &request, name: "resident")
        let log = logger
        let run = launcher.start(request) { line, isErr in
            log.info("\(line)", metadata: ["app.id": "\(id)", "handler.stream": isErr ? "stderr" : "stdout"])
        }
        if run.pid != nil {
            residents[id] = (run, leaf)
            logger.info("started the resident process", metadata: ["app.id": "\(id)"])
            lifecycle { $0.processStarted(id) }
        } else if let leaf {
            // It could not start: the outcome is already there.
            suspension.leafEnded(leaf)
        }
        reports.yield(.waitForEnd {
            let outcome = await run.outcome()
            self.residentEnded(id, run: run, outcome: outcome)
        })
    }

    func residentEnded(_ id: String, run: HandlerRun, outcome: HandlerOutcome) {
        if residents[id]?.run === run, let leaf = residents.removeValue(forKey: id)?.leaf { suspension.leafEnded(leaf) }
        let level: Logger.Level = stopping ? .info : .warning
        logger.log(level: level, "resident process ended: \(outcome.summary)", metadata: ["app.id": "\(id)"])
        if stopping { return }
        lifecycle { $0.processExited(id, description: outcome.summary) }
    }

    func adoptedResidentExited(_ app: String) {
        suspension.adoptedEnded(app: app)
        guard residents[app] == nil else { return }
        lifecycle { $0.processExited(app, description: "exited (adopted from a previous drowsed: status unknown)") }
    }

    func killResident(_ app: String) {
        let groups = residents[app]?.run.pid.map { [$0] } ?? []
        suspension.killLeaf(residents[app]?.leaf ?? suspension.adoptedLeaf(app: app), processGroups: groups)
    }

    func killApp(_ app: String) {
        // A killed leaf may kill what is later cloned into it: the spare goes first, unkilled.
        removeSpareLeaves { $0 != app }
        suspension.killAll(app: app, processGroups: processGroups(of: app))
    }
    func freeze(_ app: String) { suspension.freeze(app: app, processGroups: processGroups(of: app)) }
    func thaw(_ app: String) { suspension.thaw(app: app, processGroups: processGroups(of: app)) }

    /// Process groups drowsed started for the app and that still run (for signal suspension).
    func processGroups(of app: String) -> [pid_t] {
        ([residents[app]?.run.pid] + (handlerRuns[app] ?? [:]).values.map(\.pid)).compactMap { $0 }
    }

    // MARK: what the handler runner asks for

    /// The environment every process of the app starts with.
    func environment(_ app: AppDefinition, event: HandlerEvent) -> [String: String] {
        var env: [String: String] = [
            "DROWSE_APP": app.id, "DROWSE_EVENT": event.rawValue, "DROWSE_SOCKET": config.socket,
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
        ]
        if app.user == nil, let home = getenv("HOME") { env["HOME"] = String(cString: home) }
        return env
    }

    /// A process of the app is about to start: its own cgroup leaf (returned) and the app's
    /// limits, on the cgroup where the tree can hold them, else as rlimits in the request.
    func prepare(_ app: AppDefinition, _ request: inout LaunchRequest, name: String) -> String? {
        request.allowPrivilegeGain = app.allowPrivilegeGain
        // A spare, unless it has gone or was killed meanwhile (`killAll`): a stat costs far
        // less than making a leaf.
        var spare: String?
        if name == "run", let leaf = spareLeaves[app.id]?.popLast() {
            if suspension.isReusable(leaf) { spare = leaf } else { suspension.leafEnded(leaf) }
            if spareLeaves[app.id]?.isEmpty == true { spareLeaves[app.id] = nil }
        }
        let leaf = spare ?? newLeaf(app.id, name)
        request.cgroup = leaf
        let l = limits(of: app)
        // Written to the app's cgroup when they change, not at every start (three cgroupfs
        // writes on the way to a handler's start); the app's cgroup lives as long as drowsed.
        let held: (processes: Bool, memory: Bool)
        if let h = limitHolders[app.id], limitsWritten[app.id] == l {
            held = h
        } else {
            held = suspension.limit(app: app.id, l)
            limitHolders[app.id] = held
            limitsWritten[app.id] = l
        }
        request.processLimit = held.processes ? nil : l.processes
        request.dataLimit = held.memory ? nil : l.memory
        return leaf
    }

    /// A handler process started: thawed first (should a task have left the app frozen), and
    /// known for suspension while it runs.
    func handlerStarting(_ app: String) { lifecycle { $0.handlerStarting(app) } }

    /// A resident app's event: on its stream; `run` ends with the app's completion.
    func deliver(_ app: String, _ body: APIWire.Event.Body, attempt: Int, run: HandlerRun) {
        lifecycle { $0.deliver(app, body, attempt: attempt, run: run) }
    }

    func handlerStarted(_ app: String, _ run: HandlerRun, leaf: String?) {
        handlerRuns[app, default: [:]][ObjectIdentifier(run)] = run
        noteSpawnHelper()
        // The next run's leaf, made now that this one has started in its own (off the path to a
        // start); not where runs get no leaf (no cgroups).
        if leaf != nil, spareLeaves[app] == nil, let made = newLeaf(app, "run") { spareLeaves[app] = [made] }
    }

    /// A fresh leaf, named `NAME-PID-SEQ` (a handler's may take later runs of its app while it is
    /// never killed: `AppSuspension.isReusable`).
    func newLeaf(_ app: String, _ name: String) -> String? {
        seq += 1
        return suspension.leaf(app: app, name: "\(name)-\(getpid())-\(seq)")
    }

    /// Spare leaves of apps that are gone, or all of them (at shutdown), are removed.
    func removeSpareLeaves(keeping keep: (String) -> Bool = { _ in false }) {
        for (app, leaves) in spareLeaves where !keep(app) {
            for leaf in leaves { suspension.leafEnded(leaf) }
            spareLeaves[app] = nil
        }
    }

    /// A handler process ended (or never started): its leaf goes, the lifecycle hears it.
    func handlerEnded(_ app: String, _ run: HandlerRun, leaf: String?) {
        handlerRuns[app]?[ObjectIdentifier(run)] = nil
        if handlerRuns[app]?.isEmpty == true { handlerRuns[app] = nil }
        if let leaf {
            if !stopping, registry[app] != nil, spareLeaves[app, default: []].count < Self.sparesPerApp, suspension.isReusable(leaf) {
                spareLeaves[app, default: []].append(leaf)
            } else {
                suspension.leafEnded(leaf)
            }
        }
        lifecycle { $0.handlerEnded(app) }
    }

    // MARK: limits

    func limits(of app: AppDefinition) -> AppLimits { app.limits.resolved(defaults: config.limits) }

    /// `limits` of `drowse apps show --json`: the values, and what holds each ("cgroup", or
    /// "rlimit" — RLIMIT_NPROC counts every process of the app's user, RLIMIT_DATA each process
    /// on its own): as at the app's last start, before it by the controllers the tree has.
    func limitsWire(_ app: AppDefinition) -> APIWire.Limits {
        let l = limits(of: app)
        let held = limitHolders[app.id]
        let controllers = suspension.limitControllers
        func by(_ h: Bool) -> String { h ? "cgroup" : "rlimit" }
        return APIWire.Limits(
            processes: l.processes, memory: l.memory, memoryText: AppLimits.formatMemory(l.memory),
            processesEnforcedBy: by(held?.processes ?? controllers.contains("pids")),
            memoryEnforcedBy: by(held?.memory ?? controllers.contains("memory")))
    }

    // MARK: memory pressure

    /// Memory pressure from a PSI trigger on /proc/pressure/memory (no timer: a thread sleeps in poll).
    func startMemoryPressureMonitor() {
        guard case .trigger = config.lifecycle.memoryPressure else {
            memoryPressureStatus = "unavailable: memory_pressure = \"off\""
            return
        }
        switch MemoryPressureMonitor.start(trigger: config.lifecycle.memoryPressure.description, onPressure: { [reports] in reports.yield(.memoryPressure) }) {
        case .success(let m):
            pressureMonitor = m
            memoryPressureStatus = "psi"
        case .failure(let e):
            memoryPressureStatus = "unavailable: \(e)"
            logger.warning("memory pressure is not watched: \(e)")
        }
    }

    func memoryPressure() {
        logger.warning("memory pressure (PSI \(config.lifecycle.memoryPressure))")
        lifecycle { $0.memoryPressure() }
    }

    /// Logs what the spawn helper did since the last start: a restart refused (its path no
    /// longer checks out), handlers started in-process without it. Two counter reads a start.
    func noteSpawnHelper() {
        let refusals = SpawnHelper.refusals, fallbacks = SpawnHelper.fallbacks
        if refusals.count > seenSpawner.refused {
            logger.warning("spawn helper refused: \(refusals.last); handlers start in-process")
        }
        if fallbacks > seenSpawner.fallbacks {
            logger.warning("spawn helper unavailable: \(fallbacks - seenSpawner.fallbacks) handler(s) started in-process (\(fallbacks) in all)")
        }
        seenSpawner = (refusals.count, fallbacks)
    }

    /// `lifecycle` of `drowse status --json`.
    func statusWire() -> APIWire.Status.Lifecycle {
        APIWire.Status.Lifecycle(
            suspension: suspension.mechanism.rawValue, cgroup: suspension.cgroupBase, memoryPressure: memoryPressureStatus,
            // The spawn helper's pid while it runs (nil: handlers start in-process).
            spawnerPID: SpawnHelper.pid.map(Int.init), spawnerRefused: SpawnHelper.refusals.count,
            spawnerFallbacks: SpawnHelper.fallbacks)
    }
}
