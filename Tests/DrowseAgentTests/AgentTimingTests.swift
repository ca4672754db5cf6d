@testable import DrowseAgent
import DrowseCore
import DrowseSimulation
import DrowseSystem
import Testing

/// The timing rules the end-to-end suite used to show by sleeping for seconds beside a real
/// drowsed (Tests/EndToEnd/test_windows.py, test_fetch.py), checked on the composed agent with a
/// manual clock: apps at seconds-scale intervals, the clock moved wake by wake, and the launcher
/// double's record of which app started when. What ran in which window, and what did not run, is
/// exact here; the e2e tests keep one real shared window (real processes, the real timer).
@Suite("Agent timing on a manual clock")
struct AgentTimingTests {
    typealias F = AgentFetchTests
    let clocked = AgentClockTests()

    /// The runs' start times, per window (runs started at the same instant share a window).
    static func windows(_ starts: [(app: String, at: Double)]) -> [(at: Double, apps: [String])] {
        var out: [(at: Double, apps: [String])] = []
        for s in starts {
            if let last = out.last, abs(last.at - s.at) < 1e-6 {
                out[out.count - 1].apps.append(s.app)
            } else {
                out.append((s.at, [s.app]))
            }
        }
        return out
    }

    static func gaps(_ times: [Double]) -> [Double] { zip(times, times.dropFirst()).map { $1 - $0 } }

    /// The agent with these apps (id: minimum interval), its scheduler started, on a manual clock.
    /// (`try await`: the fixture's init becomes async with the agent's services.)
    static func started(_ apps: [String: String]) async throws -> (clock: ManualClock, launcher: F.FakeLauncher, f: F.Fixture) {
        let clock = ManualClock()
        let launcher = F.FakeLauncher(now: { clock.timeline.now() })
        let f = try await F.Fixture(apps: apps, launcher: launcher, clock: clock)
        await f.agent.loadApps()
        await f.agent.startScheduler()
        return (clock, launcher, f)
    }

    @Test("apps at 2, 3, 4 and 5 s share windows: all in the first, none before its interval, none past its tolerance, no extra fetch")
    func secondsScaleWindows() async throws {
        let intervals: [String: Double] = ["a": 2, "b": 3, "c": 4, "d": 5]
        let (clock, launcher, f) = try await Self.started(intervals.mapValues { "\(Int($0))s" })
        let t0 = clock.timeline.now()
        let span = 60.0
        try await clocked.run(f.agent, clock, for: span)
        let starts = launcher.starts.withLock { $0 }
        let windows = Self.windows(starts)

        // New apps are all eligible at once: the first window takes every one of them, at once.
        let first = try #require(windows.first)
        #expect(Set(first.apps) == Set(intervals.keys) && first.apps.count == intervals.count, "first window: \(first.apps)")
        #expect(first.at - t0 <= 1 + 1e-6, "the first window opened \(first.at - t0) s after start")

        for (app, every) in intervals {
            let times = starts.filter { $0.app == app }.map(\.at)
            let gaps = Self.gaps(times)
            #expect(gaps.allSatisfy { $0 >= every - 1e-6 }, "\(app) ran before its \(every) s interval: \(gaps)")
            #expect(gaps.allSatisfy { $0 <= every * 1.5 + 1e-6 }, "\(app) waited past its tolerance: \(gaps)")
            // No extra fetch: never more runs than the interval allows, never fewer than the tolerance allows.
            #expect(times.count <= Int(span / every) + 1, "\(app) ran \(times.count) times in \(span) s")
            #expect(times.count >= Int(span / (every * 1.5)), "\(app) ran only \(times.count) times in \(span) s")
            // One run per window at most.
            #expect(windows.allSatisfy { w in w.apps.filter { $0 == app }.count <= 1 })
        }
        // Shared windows: far fewer wakeups than runs, and most windows hold more than one app.
        #expect(Double(windows.count) <= 0.6 * Double(starts.count), "\(starts.count) runs in \(windows.count) windows")
        let shared = windows.filter { $0.apps.count > 1 }
        #expect(2 * shared.count >= windows.count, "only \(shared.count) of \(windows.count) windows were shared")
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 24))
        #expect(report.identical, "\(report.mismatches)")
    }

    @Test("an app whose interval is never is not fetched on schedule; a manual fetch starts its app's interval again")
    func neverAndManualFetch() async throws {
        let (clock, launcher, f) = try await Self.started(["three": "3s", "four": "4s", "never": "never"])
        try await clocked.run(f.agent, clock, for: 14)
        #expect(!launcher.started.contains("never"), "scheduled runs: \(launcher.started)")
        #expect(launcher.started.filter { $0 == "three" }.count >= 3 && launcher.started.filter { $0 == "four" }.count >= 3)
        let firstWindow = try #require(Self.windows(launcher.starts.withLock { $0 }).first)
        #expect(Set(firstWindow.apps) == ["three", "four"])

        // A manual fetch (`drowse fetch`) between windows: the app's next scheduled run waits a
        // whole interval from it, and an app that is never fetched on schedule still runs by hand.
        clock.advance(by: 0.5)
        let manual = clock.timeline.now()
        #expect(try await f.agent.fetchNow("three", caller: .daemon).result == .newData)
        #expect(try await f.agent.fetchNow("never", caller: .daemon).result == .newData)
        let before = launcher.starts.withLock { $0.count }
        try await clocked.run(f.agent, clock, for: 14)
        let after = launcher.starts.withLock { Array($0[before...]) }
        let three = after.filter { $0.app == "three" }.map(\.at)
        let next = try #require(three.first, "three never ran again")
        #expect(next - manual >= 3 - 1e-6, "three ran \(next - manual) s after its manual fetch")
        #expect(!after.contains { $0.app == "never" }, "never ran on schedule after its manual fetch")
        let report = try TraceReplay.run(try FileSystem.readText(f.trace, limit: 1 << 24))
        #expect(report.identical, "\(report.mismatches)")
    }
}
