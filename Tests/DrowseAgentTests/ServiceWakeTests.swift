@testable import DrowseAgent
import Testing

/// A part's one wake on the manual clock: moved, it fires once at its new time; closed, it never
/// fires again, whatever is set after.
@Suite("Service wake")
@DaemonActor struct ServiceWakeTests {
    func settle() async { for _ in 0..<20 { await Task.yield() } }

    @Test("a moved wake fires once, at its new time, and the clock holds one wake at a time")
    func moved() async {
        let clock = ManualClock()
        let wake = ServiceWake(clock: clock)
        var fired: [String] = []
        let t0 = clock.now
        wake.set(t0 + 10) { fired.append("first") }
        wake.set(t0 + 20) { fired.append("moved") }
        #expect(clock.pendingWakes.count == 1 && wake.at == t0 + 20)
        clock.advance(by: 19.9)
        await settle()
        #expect(fired.isEmpty)
        clock.advance(by: 0.2)
        await settle()
        #expect(fired == ["moved"] && wake.at == nil)
    }

    @Test("a wake that already fired on the clock, then was moved, does not run its old body")
    func staleFire() async {
        let clock = ManualClock()
        let wake = ServiceWake(clock: clock)
        var fired: [String] = []
        wake.set(clock.now + 1) { fired.append("old") }
        // The clock fires it (its task is on its way) before the part moves it.
        clock.advance(by: 2)
        wake.set(clock.now + 5) { fired.append("new") }
        await settle()
        #expect(fired.isEmpty)
        clock.advance(by: 5)
        await settle()
        #expect(fired == ["new"])
    }

    @Test("closed at its part's stop, it ignores what is set after")
    func closed() async {
        let clock = ManualClock()
        let wake = ServiceWake(clock: clock)
        var fired = 0
        wake.set(clock.now + 1) { fired += 1 }
        wake.close()
        wake.set(clock.now + 1) { fired += 1 }
        #expect(clock.pendingWakes.count == 0 && wake.at == nil)
        clock.advance(by: 5)
        await settle()
        #expect(fired == 0)
    }
}
