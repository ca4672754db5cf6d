@testable import DrowseSystem
import Testing

/// The timeline itself. Stepping the wall clock needs CAP_SYS_TIME and would move the test
/// machine's clock: that is tested on the board image (Tests/Board/test_clock.py).
@Suite("Timeline")
struct TimelineTests {
    @Test("it begins at the wall clock's time and runs with the boot clock; without a step its skew stays 0")
    func begins() {
        let t = Timeline()
        #expect(abs(t.now() - WallClock.now()) < 0.05)
        let b0 = WallClock.boot(), n0 = t.now()
        #expect(abs((n0 - b0) - t.origin) < 0.001)
        #expect(abs(t.resync()) < 0.05)
        #expect(abs(t.skew) < 0.05)
        #expect(t.fromWall(t.wall(1234.5)) == 1234.5)
    }

    @Test("this boot has an id")
    func bootID() throws {
        let id = try #require(Timeline.bootID())
        #expect(id.count == 36)
        #expect(Timeline.bootID() == id)
    }

    @Test("the step watch is armed and quiet while nobody sets the clock")
    func watchQuiet() {
        var why = ""
        let watch = ClockStepWatch(failure: &why)
        #expect(watch != nil, "\(why)")
        guard let watch else { return }
        if case .nothing = watch.consume() {} else { Issue.record("readable without a step") }
    }
}
