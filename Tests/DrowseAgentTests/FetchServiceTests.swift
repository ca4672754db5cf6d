@testable import DrowseAgent
import DrowseCore
import DrowseSimulation
@testable import DrowseStore
import DrowseSystem
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The fetch service over in-memory doubles: a store of apps and uses, a handler queue that
/// only remembers what was queued, a manual clock and a wake timer the test fires. No process,
/// socket, database or timer thread is involved.
@Suite("Fetch service")
@DaemonActor struct FetchServiceTests {
    /// The service and everything it touched.
    @DaemonActor final class Rig {
        let clock = ManualClock(wall: 1_000_000, boot: 1_000_000)
        var now: Double {
            get { clock.now }
            set { clock.now = newValue }
        }
        let runs = RecordingRunQueue()
        var queued: [(app: String, trigger: FetchScheduler.Trigger, done: HandlerRun)] {
            get { runs.runs.compactMap { if case let .fetch(app, trigger, done) = $0 { (app, trigger, done) } else { nil } } }
            set { runs.runs = newValue.map { .fetch(app: $0.app, trigger: $0.trigger, done: $0.done) } }
        }
        var windows = 0
        var wakeAt: Double? { service.wake.at }
        let source = FixedConditions()
        var conditions: FetchScheduler.Conditions {
            get { source.scheduler }
            set { source.scheduler = newValue }
        }
        let store = MemoryFetchStore()
        let events = DaemonEvents()
        var service: FetchService!

        init(apps: [(String, Double?)], trace: SchedulerTrace? = nil) {
            events.listen { [unowned self] e in if case .windowOpened = e { self.windows += 1 } }
            service = FetchService(scheduler: FetchScheduler(), store: store, clock: clock, events: events, conditions: source,
                                   apps: FixedIntervals(apps.map { (id: $0.0, interval: $0.1) }), runs: runs,
                                   trace: trace, logger: Logger(label: "test"))
            service.start(apps: apps.map { (id: $0.0, interval: $0.1) }, conditions: conditions)
        }

        /// Advances the clock to the wake and fires it.
        func fire() throws {
            let at = try #require(wakeAt)
            service.wake.cancel()
            now = at
            service.windowTimerFired()
        }

        /// Ends a queued run as the handler would, returning the record written with it.
        func end(_ app: String, _ result: FetchResult, after seconds: Double = 2) -> FetchScheduler.Record? {
            let start = now
            now += seconds
            let (record, next) = service.handlerEnded(app: app, fetch: .init(result: result), startedAt: start, endedAt: now)
            service.finish(next)
            return record
        }
    }

    @Test("new apps share one window at the end of the first one's tolerance, and the window hook runs once")
    func firstWindow() throws {
        let rig = Rig(apps: [("a", 600), ("b", 900), ("off", nil)])
        // Both are eligible at start; a's tolerance (300 s) is the shorter, so the window opens then.
        #expect(rig.wakeAt == rig.now + 300)
        try rig.fire()
        #expect(rig.queued.map(\.app) == ["a", "b"] && rig.queued.allSatisfy { $0.trigger == .scheduled })
        #expect(rig.windows == 1)
        #expect(rig.service.running == ["a", "b"])
    }

    @Test("a window's fetches are all queued before anyone hears that it opened")
    func windowHeardAfterItsFetches() throws {
        let rig = Rig(apps: [("a", 600), ("b", 900)])
        var queuedWhenHeard: [String]?
        rig.events.listen { e in if case .windowOpened = e { queuedWhenHeard = rig.queued.map(\.app) } }
        try rig.fire()
        #expect(queuedWhenHeard == ["a", "b"])
    }

    @Test("a run's end gives back the record to write with it, and plans the next window from its start")
    func runEnds() throws {
        let rig = Rig(apps: [("a", 600)])
        try rig.fire()
        let start = rig.now
        let record = try #require(rig.end("a", .newData))
        #expect(record.lastFetch == start && record.lastResult == .newData && record.consecutiveFailures == 0)
        #expect(rig.wakeAt == start + 600 + 300)
        try rig.fire()
        let failed = try #require(rig.end("a", .failed))
        #expect(failed.consecutiveFailures == 1)
        // Backing off: twice the interval, plus the tolerance.
        #expect(rig.wakeAt == failed.lastFetch! + 1200 + 300)
    }

    @Test("as a run's owner: the end's record goes with the run, the fetch's waiter hears the outcome after it, and a gone app's fetch is abandoned")
    func ownerOfTheRun() throws {
        let rig = Rig(apps: [("a", 600)])
        let run = try rig.service.fetchNow("a")
        let queued = try #require(rig.runs.runs.last)
        #expect(rig.service.starting(queued, app: nil) == nil, "its app is gone: nothing to run")
        #expect(!rig.service.running.contains("a"), "abandoned")
        #expect(run.peek?.result == .failed)
        let second = try rig.service.fetchNow("a")
        let job = try #require(rig.runs.runs.last)
        let outcome = HandlerOutcome(ending: .exited(0), startedAt: rig.now, endedAt: rig.now + 2)
        let effects = rig.service.ending(job, outcome, cutShort: false)
        #expect(effects.fetch?.lastResult == .newData && effects.handled == nil)
        #expect(second.peek == nil, "told only once the run is recorded")
        rig.service.ended(job, outcome)
        #expect(second.peek?.result == .newData)
    }

    @Test("another run's end and a task's overrun reach the scheduler as events: the first counts as the app's run, the second as a failed fetch, recorded")
    func runEndedAndOverrunEvents() throws {
        let rig = Rig(apps: [("a", 600)])
        let t = rig.now
        rig.events.post(.runEnded(app: "a", event: .notification, failed: false, startedAt: t, endedAt: t + 5))
        #expect(rig.service.scheduler.apps["a"]?.recentRuns.map(\.seconds) == [5])
        #expect(rig.store.recorded.isEmpty, "a notification's run is recorded by the runner, not here")
        rig.events.post(.runEnded(app: "a", event: .fetch, failed: false, startedAt: t, endedAt: t + 7))
        #expect(rig.service.scheduler.apps["a"]?.recentRuns.count == 1, "a fetch's end the service heard as its owner")
        rig.events.post(.taskOverran(app: "a"))
        let (run, record) = try #require(rig.store.recorded.first)
        #expect(run.trigger == .taskOverrun && run.result == .failed && run.timedOut)
        #expect(record?.consecutiveFailures == 1)
    }

    @Test("drowse fetch: a running app is refused; an abandoned fetch frees it")
    func manual() throws {
        let rig = Rig(apps: [("a", 3600)])
        let run = try rig.service.fetchNow("a")
        #expect(rig.queued.last?.trigger == .manual)
        #expect(throws: FetchService.Refusal.busy("a fetch of 'a' is already running")) { try rig.service.fetchNow("a") }
        rig.service.abandoned("a")
        #expect(!rig.service.running.contains("a"))
        _ = try rig.service.fetchNow("a")
        _ = run
    }

    @Test("offline at the window: conditions are read afresh, nothing starts, the timer goes")
    func offlineAtWindow() throws {
        let rig = Rig(apps: [("a", 600)])
        rig.conditions.online = false
        try rig.fire()
        #expect(rig.queued.isEmpty && rig.wakeAt == nil)
        rig.conditions.online = true
        rig.service.conditionsChanged(rig.conditions)
        #expect(rig.wakeAt == rig.now, "overdue: at once")
    }

    @Test("a use is stored and learned; a store that fails at start leaves the app out, loudly")
    func usesAndStoreFailure() throws {
        let rig = Rig(apps: [("a", 3600)])
        try rig.service.used("a")
        #expect(rig.store.uses.count == 1 && rig.store.uses[0].0 == "a")
        #expect(rig.service.scheduler.apps["a"]?.uses == [rig.now])
        let broken = MemoryFetchStore()
        broken.failing = true
        let s = FetchService(scheduler: FetchScheduler(), store: broken, clock: ManualClock(), events: DaemonEvents(), conditions: FixedConditions(),
                             apps: FixedIntervals(), runs: RecordingRunQueue(), trace: nil, logger: Logger(label: "test"))
        s.start(apps: [("a", 60)], conditions: .init(online: true, radioTail: 0))
        #expect(s.scheduler.apps.isEmpty)
    }

    @Test("what the service fed its scheduler replays to the same actions")
    func traceReplays() throws {
        var template = Array("/tmp/drowse-fetch-service-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        let path = dir + "/trace"
        let trace = try SchedulerTrace(path: path, header: FetchScheduler().traceHeader)
        let rig = Rig(apps: [("a", 600), ("b", 900)], trace: trace)
        for _ in 0..<5 {
            try rig.fire()
            for q in rig.queued { _ = rig.end(q.app, q.app == "a" ? .noData : .newData, after: 1) }
            rig.queued = []
            rig.service.radioUsed()
        }
        let report = try TraceReplay.run(try FileSystem.readText(path, limit: 1 << 20))
        #expect(report.identical && report.windows >= 5, "\(report)")
    }
}
