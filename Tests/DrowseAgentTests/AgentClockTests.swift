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
        try #require(await plannedWindow(agent))
    }

    func plannedWindow(_ agent: Agent) async -> Double? {
        await agent.status(caller: .daemon)["next_window"]?.doubleValue
    }

    func idle(_ agent: Agent) async -> Bool {
        let s = await agent.status(caller: .daemon)
        return s["running_handlers"]?.intValue == 0 && s["queued_handlers"]?.intValue == 0
    }

    @Test("windows open at their planned time on the boot clock, whatever the wall clock is set to meanwhile")
    func windowsAcrossClockSteps() async throws {
        let clock = ManualClock()
        let launcher = F.FakeLauncher(now: { clock.timeline.now() })
        let f = try await F.Fixture(apps: ["a": "1h"], launcher: launcher, clock: clock)
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
        #expect(launcher.started.isEmpty)
        clock.advance(by: 2)
        try await settle { launcher.started == ["a"] }
        #expect(launcher.started == ["a"])
        try await settle {
            let idle = await self.idle(f.agent)
            let planned = await self.plannedWindow(f.agent)
            return idle && planned != nil
        }

        // Set back one year: the next window keeps its wait (an hour or more after the fetch).
        let next = try await nextWindow(f.agent) - forward
        let t1 = clock.timeline.now()
        #expect(next - t1 >= 3600 - 1)
        clock.step(by: -365 * 86400)
        await f.agent.clockStepped()
        #expect(abs(try await nextWindow(f.agent) - (next + forward - 365 * 86400)) < 0.01)
        // No stall: it opens at its time.
        clock.advance(by: next - t1 + 1)
        try await settle { launcher.started.count == 2 }
        #expect(launcher.started == ["a", "a"])
        try await settle {
            let idle = await self.idle(f.agent)
            let planned = await self.plannedWindow(f.agent)
            return idle && planned != nil
        }

        // What was recorded is on the timeline, shown in wall time: the history's times are
        // the runs' timeline times plus the skew.
        let shown = try await f.agent.appDetail("a", caller: .daemon)
        let last = try #require(shown["last_fetch"]?.doubleValue)
        #expect(abs(last - (next + 2 * 365 * 86400)) < 2)
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 20))
        #expect(report.identical, "\(report.mismatches)")
    }

    /// Runs the agent for `seconds` of boot-clock time: fires each wake at its time and lets the
    /// agent finish what it started (its runs ended, its next wake set) before the next one.
    /// For an agent with fetching apps (which always has a next window planned).
    func run(_ agent: Agent, _ clock: ManualClock, for seconds: Double) async throws {
        let start = clock.timeline.now()
        let end = start + seconds
        while let first = clock.pendingWakes.first, first + clock.timeline.origin <= end {
            let now = clock.timeline.now()
            let at = first + clock.timeline.origin  // the wake's boot time, on the timeline
            clock.advance(by: max(0, at - now))
            try await settle {
                let s = await agent.status(caller: .daemon)
                let next = clock.pendingWakes.first.map { $0 + clock.timeline.origin }
                // The fired wake was acted on once the agent has set its next one (it always
                // plans the next window while it has apps) and no run is left.
                guard let next else { return false }
                return s["running_handlers"]?.intValue == 0 && s["queued_handlers"]?.intValue == 0 && next > at
            }
        }
        clock.advance(by: max(0, end - clock.timeline.now()))
    }

    @Test("a day of four apps: windows are shared, nothing runs before its interval, nothing waits past its tolerance")
    func sharedWindows() async throws {
        let clock = ManualClock()
        let launcher = F.FakeLauncher(now: { clock.timeline.now() })
        let intervals: [String: Double] = ["a": 900, "b": 1200, "c": 1800, "d": 3600]
        let f = try await F.Fixture(apps: intervals.mapValues { "\(Int($0))s" }, launcher: launcher, clock: clock)
        await f.agent.loadApps()
        await f.agent.startScheduler()
        try await run(f.agent, clock, for: 86400)
        let starts = launcher.starts.withLock { $0 }
        for (app, every) in intervals {
            let times = starts.filter { $0.app == app }.map(\.at)
            #expect(times.count >= Int(86400 / (every * 1.5)), "\(app) ran \(times.count) times in a day")
            let gaps = zip(times, times.dropFirst()).map { $1 - $0 }
            #expect(gaps.allSatisfy { $0 >= every - 0.01 }, "\(app) ran before its interval: \(gaps)")
            #expect(gaps.allSatisfy { $0 <= every * 1.5 + 0.01 }, "\(app) waited past its tolerance: \(gaps)")
        }
        // Windows: distinct start times. Four apps on their own timers would wake the radio once
        // per run; shared windows wake it far less often.
        let windows = Set(starts.map { ($0.at * 1000).rounded() })
        #expect(Double(windows.count) <= 0.6 * Double(starts.count), "\(starts.count) runs in \(windows.count) windows")
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 24))
        #expect(report.identical, "\(report.mismatches)")
    }
}
