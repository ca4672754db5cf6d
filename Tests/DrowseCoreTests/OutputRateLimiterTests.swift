import DrowseCore
import Testing

@Suite("OutputRateLimiter")
struct OutputRateLimiterTests {
    @Test("a burst passes whole; beyond it lines are dropped and counted")
    func burstThenDrop() {
        var l = OutputRateLimiter(burstBytes: 1000, bytesPerSecond: 100, perLineBytes: 0)
        for _ in 0..<10 { #expect(l.offer(bytes: 100, at: 0) == .log(after: nil)) }
        #expect(l.offer(bytes: 100, at: 0) == .drop)
        #expect(l.offer(bytes: 50, at: 0.1) == .drop)
        #expect(l.finish() == .init(lines: 2, bytes: 150))
        #expect(l.finish() == nil)
    }

    @Test("tokens come back with time, and the next logged line first reports the gap")
    func refill() {
        var l = OutputRateLimiter(burstBytes: 100, bytesPerSecond: 100, perLineBytes: 0)
        #expect(l.offer(bytes: 100, at: 0) == .log(after: nil))
        #expect(l.offer(bytes: 60, at: 0.5) == .drop)
        #expect(l.offer(bytes: 60, at: 1.0) == .log(after: .init(lines: 1, bytes: 60)))
        #expect(l.finish() == nil)
    }

    @Test("a flood logs about burst + rate × time, whatever its size")
    func flood() {
        var l = OutputRateLimiter()
        var logged = 0
        // 1 GB in 100-byte lines over 30 s.
        let lines = 10_000_000, seconds = 30.0
        for i in 0..<lines where l.offer(bytes: 100, at: Double(i) * seconds / Double(lines)) != .drop { logged += 100 }
        #expect(logged < 600 << 10)
        #expect(logged > 200 << 10)
    }

    @Test("many short lines cost more than their text")
    func perLineCost() {
        var l = OutputRateLimiter(burstBytes: 1000, bytesPerSecond: 0, perLineBytes: 99)
        var n = 0
        while l.offer(bytes: 1, at: 0) != .drop { n += 1 }
        #expect(n == 10)
    }
}
