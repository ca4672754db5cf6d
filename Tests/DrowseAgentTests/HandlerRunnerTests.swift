@testable import DrowseAgent
import DrowseCore
import DrowseStore
import DrowseSystem
import Logging
import Synchronization
import Testing

/// The handler runner as a leaf: it knows the part a run belongs to only through the run
/// (`RunOwner`). Over a real store and the agent's parts, with a launcher double; a recording
/// owner checks what the runner asks, in which order, and what is on record when it is told.
@Suite("Handler runner")
@DaemonActor struct HandlerRunnerTests {
    typealias FakeLauncher = AgentFetchTests.FakeLauncher
    typealias Fixture = AgentFetchTests.Fixture

    /// Says yes at the start with a given attempt (or nil: nothing to run), and notes each call.
    @DaemonActor final class Owner: RunOwner {
        let attempt: Int?
        let store: Store
        /// The start waits for the journal's sync (`RunStart.afterSync`).
        var afterSync = false
        var calls: [String] = []
        /// The runs of the app on record when `ended` was called.
        var recordedAtEnd: [RunRecord] = []
        init(attempt: Int?, store: Store) {
            self.attempt = attempt
            self.store = store
        }
        func starting(_ run: QueuedRun, app: AppDefinition?) -> RunStart? {
            calls.append("starting(\(app?.id ?? "gone"))")
            return app == nil ? nil : attempt.map { RunStart(attempt: $0, afterSync: afterSync) }
        }
        func notStarted(_ run: QueuedRun) { calls.append("notStarted") }
        func ending(_ run: QueuedRun, _ outcome: HandlerOutcome, cutShort: Bool) -> RunEffects {
            calls.append("ending(\(outcome.result.rawValue))")
            return RunEffects()
        }
        func ended(_ run: QueuedRun, _ outcome: HandlerOutcome) {
            calls.append("ended")
            recordedAtEnd = (try? store.runs(app: run.app)) ?? []
        }
        func notRun(_ run: QueuedRun) { calls.append("notRun") }
    }

    /// Whether the owner heard the run's end within 2 s.
    func ended(_ owner: Owner) async -> Bool {
        for _ in 0..<400 {
            if owner.calls.contains("ended") { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    @Test("the owner is asked at the start, says what the end writes, and hears the end once the run is on record; then the others hear it")
    func ownerAroundTheRun() async throws {
        let launcher = FakeLauncher(statuses: ["a": 1])
        let f = try await Fixture(apps: ["a": "1h"], launcher: launcher)
        f.agent.loadApps()
        let owner = Owner(attempt: 3, store: f.store)
        let heard = Mutex<[String]>([])
        f.agent.parts.events.listen { e in
            if case .runEnded(let app, let event, let failed, _, _) = e {
                heard.withLock { $0.append("\(app) \(event.rawValue) failed=\(failed)") }
            }
        }
        f.agent.parts.handlers.enqueue(.fetch(app: "a", trigger: .manual, done: HandlerRun()), owner: owner)
        #expect(await ended(owner))
        #expect(owner.calls == ["starting(a)", "ending(failed)", "ended"])
        #expect(owner.recordedAtEnd.map(\.trigger) == [.manual], "the run was on record before its owner was told")
        #expect(launcher.started == ["a"])
        #expect(heard.withLock { $0 } == ["a fetch failed=true"])
    }

    @Test("a run whose app is gone is its owner's to settle: nothing starts, nothing is recorded")
    func goneApp() async throws {
        let launcher = FakeLauncher()
        let f = try await Fixture(apps: ["a": "1h"], launcher: launcher)
        f.agent.loadApps()
        let owner = Owner(attempt: 1, store: f.store)
        f.agent.parts.handlers.enqueue(.fetch(app: "ghost", trigger: .manual, done: HandlerRun()), owner: owner)
        #expect(owner.calls == ["starting(gone)"])
        #expect(launcher.started.isEmpty)
        #expect(try f.store.runs(app: "ghost").isEmpty)
        #expect(f.agent.parts.handlers.running == 0)
    }

    @Test("a start that waits for the journal's sync starts after one that began once its owner said yes; its slot is held meanwhile")
    func startAfterSync() async throws {
        let launcher = FakeLauncher(hold: true)
        let f = try await Fixture(apps: ["a": "1h", "b": "1h"], launcher: launcher, more: "[scheduler]\nmax_concurrent_handlers = 1")
        f.agent.loadApps()
        let owner = Owner(attempt: 2, store: f.store)
        owner.afterSync = true
        let runner = f.agent.parts.handlers
        let journal = runner.store.journal
        let syncsBefore = journal.stats.syncs
        runner.enqueue(.fetch(app: "a", trigger: .manual, done: HandlerRun()), owner: owner)
        #expect(launcher.started.isEmpty, "not before the sync")
        #expect(!runner.startsAtOnce, "its slot is held while it waits")
        let other = Owner(attempt: 1, store: f.store)
        runner.enqueue(.fetch(app: "b", trigger: .manual, done: HandlerRun()), owner: other)
        for _ in 0..<400 where launcher.started.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        #expect(launcher.started == ["a"] && launcher.attempts.withLock { $0 } == ["2"])
        #expect(journal.stats.syncs > syncsBefore, "a sync ran before the start")
        #expect(other.calls.isEmpty, "the second waits for the one slot")
        launcher.release()
        #expect(await ended(owner))
        for _ in 0..<400 where launcher.started.count < 2 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(launcher.started == ["a", "b"])
        launcher.release()
        #expect(await ended(other))
        #expect(other.calls == ["starting(b)", "ending(new-data)", "ended"])
    }

    @Test("shutdown while a start waits for the sync: it does not start, its owner takes the start back and hears it will not run")
    func stopWhileSyncing() async throws {
        let launcher = FakeLauncher()
        let f = try await Fixture(apps: ["a": "1h"], launcher: launcher)
        f.agent.loadApps()
        let owner = Owner(attempt: 1, store: f.store)
        owner.afterSync = true
        let runner = f.agent.parts.handlers
        runner.enqueue(.fetch(app: "a", trigger: .manual, done: HandlerRun()), owner: owner)
        runner.stopLaunching()
        for _ in 0..<400 where !owner.calls.contains("notRun") { try await Task.sleep(for: .milliseconds(5)) }
        #expect(owner.calls == ["starting(a)", "notStarted", "notRun"])
        #expect(launcher.started.isEmpty)
        #expect(runner.running == 0 && runner.queue.running == 0)
    }

    @Test("the start's attempt, as the owner gave it, is the handler's DROWSE_ATTEMPT; at shutdown, a waiting run's owner hears it will not run")
    func attemptAndShutdown() async throws {
        let launcher = FakeLauncher(hold: true)
        // One slot: the second run waits.
        let f = try await Fixture(apps: ["a": "1h", "b": "1h"], launcher: launcher, more: "[scheduler]\nmax_concurrent_handlers = 1")
        f.agent.loadApps()
        let first = Owner(attempt: 2, store: f.store), second = Owner(attempt: 1, store: f.store)
        let runner = f.agent.parts.handlers
        runner.enqueue(.fetch(app: "a", trigger: .manual, done: HandlerRun()), owner: first)
        runner.enqueue(.fetch(app: "b", trigger: .manual, done: HandlerRun()), owner: second)
        #expect(launcher.attempts.withLock { $0 } == ["2"])
        runner.stopLaunching()
        #expect(second.calls == ["notRun"], "the waiting run was not started, and its owner was told")
        launcher.release()
        #expect(await ended(first))
        #expect(first.calls == ["starting(a)", "ending(new-data)", "ended"])
    }
}

/// A resident app's event line carries what a handler gets on standard input, as drowsed sent
/// it before the wire types wrote it (docs/api.md, "Event stream").
@Suite("Handler runner: resident event lines")
struct ResidentEventLineTests {
    static func line(_ event: HandlerEvent, _ stdin: String) -> String {
        APIWire.Event.delivered(id: "e1", deadline: 1_764_110_430.5, HandlerRunner.eventBody(event, stdin: Array(stdin.utf8)), attempt: 2).json.serialized
    }

    @Test("fetch, notification (JSON or not) and transfers, key for key")
    func lines() {
        let fetch = APIWire.FetchInput(app: "weather", reason: "manual").json.serialized
        #expect(Self.line(.fetch, fetch) == #"{"event":"fetch","id":"e1","deadline":1764110430.5,"reason":"manual","attempt":2}"#)
        #expect(Self.line(.notification, #"{"aps":{"content-available":1},"z":[1,2.5,null]}"#)
            == #"{"event":"notification","id":"e1","deadline":1764110430.5,"payload":{"aps":{"content-available":1},"z":[1,2.5,null]},"attempt":2}"#)
        #expect(Self.line(.notification, "plain text") == #"{"event":"notification","id":"e1","deadline":1764110430.5,"payload":"plain text","attempt":2}"#)
        let t = Transfer(id: "t1", app: "updater", session: "updates", kind: .download, url: "https://example.org/f", destination: nil, sha256: nil, createdAt: 1_764_110_400.5)
        let doc = APIWire.TransfersInput(app: "updater", session: "updates", transfers: [t.wire(wall: 0)]).json.serialized
        #expect(Self.line(.transfers, doc)
            == #"{"event":"transfers","id":"e1","deadline":1764110430.5,"session":"updates","transfers":["# + t.json(wall: 0).serialized + #"],"attempt":2}"#)
    }
}
