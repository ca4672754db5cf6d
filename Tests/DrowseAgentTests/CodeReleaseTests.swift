@testable import DrowseAgent
import Logging
import Testing

/// drowsed's code given back after a quiet spell: once per spell, `after` past the last work, and
/// no wake left set while idle.
@Suite("Code release")
@DaemonActor struct CodeReleaseTests {
    func settle() async { for _ in 0..<20 { await Task.yield() } }

    @Test("released once, after seconds past the last work; nothing set while idle; work starts it again")
    func quietSpell() async {
        let clock = ManualClock()
        var released = 0
        let code = CodeRelease(after: 30, clock: clock, logger: Logger(label: "test")) { released += 1; return 4096 }
        #expect(clock.pendingWakes.count == 0)
        code.worked()
        clock.advance(by: 20)
        code.worked()           // more work before the wake: it moves on when it fires
        #expect(clock.pendingWakes.count == 1)
        clock.advance(by: 10)
        await settle()
        #expect(released == 0 && clock.pendingWakes.count == 1)
        clock.advance(by: 19.9)
        await settle()
        #expect(released == 0)
        clock.advance(by: 0.2)
        await settle()
        #expect(released == 1 && code.releases == 1)
        // Idle: no wake at all, however long.
        #expect(clock.pendingWakes.count == 0)
        clock.advance(by: 3600)
        await settle()
        #expect(released == 1)
        // New work, a new spell.
        code.worked()
        clock.advance(by: 30)
        await settle()
        #expect(released == 2 && clock.pendingWakes.count == 0)
    }
}
