@testable import DrowseAgent
import DrowseCore
import DrowseSimulation
import DrowseStore
import DrowseSystem
import Logging
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The agent's fetch side without processes or sockets: a launcher double ends each handler as
/// the test says, and the agent is driven through the calls the API makes. What is checked is
/// what lands in the store and what the scheduler was fed (its trace replays to the same actions).
@Suite("Agent fetch service")
struct AgentFetchTests {
    /// Ends each run at once with the exit status given for its app, or holds it until released.
    final class FakeLauncher: HandlerLaunching, Sendable {
        let statuses: [String: Int32]
        let held = Mutex<[HandlerRun]>([])
        let hold: Bool
        /// Each start: the app and the time.
        let starts = Mutex<[(app: String, at: Double)]>([])
        /// The apps started, in order.
        var started: [String] { starts.withLock { $0.map(\.app) } }
        /// Each start's DROWSE_ATTEMPT.
        let attempts = Mutex<[String?]>([])
        /// The time runs start and end at (the agent's timeline on a manual clock).
        let now: @Sendable () -> Double

        init(statuses: [String: Int32] = [:], hold: Bool = false, now: @escaping @Sendable () -> Double = { WallClock.now() }) {
            self.statuses = statuses
            self.hold = hold
            self.now = now
        }

        func start(_ request: LaunchRequest, output: @escaping @Sendable (String, Bool) -> Void) -> HandlerRun {
            let t0 = now()
            starts.withLock { $0.append((request.app, t0)) }
            attempts.withLock { $0.append(request.environment["DROWSE_ATTEMPT"]) }
            let run = HandlerRun()
            if hold {
                held.withLock { $0.append(run) }
            } else {
                let t = now()
                run.finish(HandlerOutcome(ending: .exited(statuses[request.app] ?? 0), startedAt: t, endedAt: t + 0.01))
            }
            return run
        }

        func release(status: Int32 = 0) {
            let t = now()
            for run in held.withLock({ runs in defer { runs = [] }; return runs }) {
                run.finish(HandlerOutcome(ending: .exited(status), startedAt: t - 0.01, endedAt: t))
            }
        }
    }

    struct Fixture {
        let dir: String
        let agent: Agent
        let store: Store
        var trace: String { dir + "/scheduler.trace" }

        /// `more`: lines added to drowse.toml.
        init(apps: [String: String], launcher: FakeLauncher, clock: AgentClock = SystemClock(), more: String = "") async throws {
            var template = Array("/tmp/drowse-agent-test-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw SystemError("mkdtemp", errno: errno) }
            dir = String(cString: made)
            try FileSystem.makeDirectories(dir + "/apps.d")
            for (id, interval) in apps {
                try FileSystem.writeAtomically(dir + "/apps.d/\(id).toml", Array("""
                    id = "\(id)"
                    [fetch]
                    command = ["/bin/true"]
                    minimum_interval = "\(interval)"
                    """.utf8))
            }
            let config = try MainConfig.parse("""
                device_id = "test"
                state_dir = "\(dir)/state"
                apps_dir = "\(dir)/apps.d"
                socket = "\(dir)/drowse.sock"
                \(more)
                """, file: dir + "/drowse.toml", machineID: nil)
            agent = try await Agent(config: config, logger: Logger(label: "test"), launcher: launcher, schedulerTrace: dir + "/scheduler.trace",
                              clock: clock)
            // What the parts' services would run: each started run's and resident process's wait for its end.
            let agent = self.agent
            Task { @DaemonActor in _ = await agent.parts.handlers.serve() }
            Task { @DaemonActor in _ = await agent.parts.processes.serve() }
            store = try Store(path: dir + "/state/state.db")
        }
    }

    @Test("a fetch's result and streaks reach the store in the run's transaction, and the trace replays")
    func fetchRecords() async throws {
        let launcher = FakeLauncher(statuses: ["good": 0, "bad": 1])
        let f = try await Fixture(apps: ["good": "1h", "bad": "1h"], launcher: launcher)
        await f.agent.loadApps()
        await f.agent.startScheduler()
        let good = try await f.agent.fetchNow("good", caller: .daemon)
        #expect(good.result == .newData)
        for _ in 0..<2 { #expect(try await f.agent.fetchNow("bad", caller: .daemon).result == .failed) }
        let g = try f.store.app("good", now: WallClock.now()), b = try f.store.app("bad", now: WallClock.now())
        #expect(g.lastResult == .newData && g.consecutiveFailures == 0 && g.lastFetch == good.startedAt)
        #expect(b.lastResult == .failed && b.consecutiveFailures == 2)
        // The scheduler, not the store, computed those: it now plans the failing app 4 intervals on.
        let shown = try await f.agent.appDetail("bad", caller: .daemon)
        let wait = try #require(shown["eligible_at"]?.doubleValue) - b.lastFetch!
        #expect(abs(wait - 4 * 3600) < 0.001, "eligible \(wait) s after the last fetch")
        #expect(await f.agent.status(caller: .daemon)["running_handlers"]?.intValue == 0)
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 20))
        #expect(report.identical && report.events >= 4, "\(report.mismatches)")
    }

    @Test("a second fetch of an app whose fetch runs is refused; an app that is gone is not found")
    func busy() async throws {
        let launcher = FakeLauncher(hold: true)
        let f = try await Fixture(apps: ["slow": "1h"], launcher: launcher)
        await f.agent.loadApps()
        await f.agent.startScheduler()
        let agent = f.agent
        let first = Task { try await agent.fetchNow("slow", caller: .daemon) }
        while launcher.started.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        await #expect(throws: APIError.self) { try await f.agent.fetchNow("slow", caller: .daemon) }
        launcher.release(status: 100)
        #expect(try await first.value.result == .noData)
        #expect(try f.store.app("slow", now: WallClock.now()).consecutiveNoData == 1)
        await #expect(throws: APIError.self) { try await f.agent.fetchNow("nosuch", caller: .daemon) }
        #expect(launcher.started == ["slow"])
    }
}
