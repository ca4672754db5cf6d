@testable import DrowseAgent
import DrowseCore
import DrowseSimulation
import DrowseSystem
import Testing

/// The agent on a manual clock: fetch windows open at their planned boot-clock time, and a step
/// of the wall clock (a time sync on a board without an RTC) changes only how times are shown.
@Suite("Agent on a manual clock")
struct AgentClockTests {
    typealias F = AgentFetchTests

    /// Waits (briefly, in real time) for the agent to act on a wake that fired.
    func settle(_ until: () async -> Bool) async throws {
        for _ in 0..<400 {
            if await until() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func nextWindow(_ agent: Agent) async throws -> Double {
        try #require(await agent.status(caller: .daemon)["next_window"]?.doubleValue)
    }

    @Test("windows open at their planned time on the boot clock, whatever the wall clock is set to meanwhile")
    func windowsAcrossClockSteps() async throws {
        let clock = ManualClock()
        let launcher = F.FakeLauncher(now: { clock.timeline.now() })
        let f = try F.Fixture(apps: ["a": "1h"], launcher: launcher, clock: clock)
        await f.agent.loadApps()
        await f.agent.startScheduler()
        let t0 = clock.timeline.now()
        // A new app is eligible at once and due by its tolerance (half its interval).
        let planned = try await nextWindow(f.agent)
        #expect(planned > t0 && planned <= t0 + 1800 + 0.1, "planned \(planned - t0) s on")

        // A time sync sets the wall clock three years forward.
        let forward = 3 * 365 * 86400.0
        clock.step(by: forward)
        await f.agent.clockStepped()
        #expect(abs(try await nextWindow(f.agent) - (planned + forward)) < 0.01, "shown in the new wall time")
        // No burst: just before its time nothing has run.
        clock.advance(by: planned - t0 - 1)
        try await Task.sleep(for: .milliseconds(50))
        #expect(launcher.started.withLock { $0 }.isEmpty)
        clock.advance(by: 2)
        try await settle { launcher.started.withLock { $0 } == ["a"] }
        #expect(launcher.started.withLock { $0 } == ["a"])
        try await settle { (try? await self.nextWindow(f.agent)) != nil }

        // Set back one year: the next window keeps its wait (an hour or more after the fetch).
        let next = try await nextWindow(f.agent) - forward
        let t1 = clock.timeline.now()
        #expect(next - t1 >= 3600 - 1)
        clock.step(by: -365 * 86400)
        await f.agent.clockStepped()
        #expect(abs(try await nextWindow(f.agent) - (next + forward - 365 * 86400)) < 0.01)
        // No stall: it opens at its time.
        clock.advance(by: next - t1 + 1)
        try await settle { launcher.started.withLock { $0 }.count == 2 }
        #expect(launcher.started.withLock { $0 } == ["a", "a"])

        // What was recorded is on the timeline, shown in wall time: the history's times are
        // the runs' timeline times plus the skew.
        let shown = try await f.agent.appDetail("a", caller: .daemon)
        let last = try #require(shown["last_fetch"]?.doubleValue)
        #expect(abs(last - (next + 2 * 365 * 86400)) < 2)
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 20))
        #expect(report.identical, "\(report.mismatches)")
    }
}
