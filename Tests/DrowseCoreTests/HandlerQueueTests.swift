import DrowseCore
import Testing

@Suite("HandlerQueue")
struct HandlerQueueTests {
    /// Starts everything that may start now.
    private func startAll(_ q: inout HandlerQueue<Int>) -> [Int] {
        var out: [Int] = []
        while let i = q.next() { q.didStart(); out.append(i) }
        return out
    }

    @Test("at most `limit` run; the rest wait in order and start as runs end")
    func limit() {
        var q = HandlerQueue<Int>(limit: 3)
        for i in 1...10 { q.submit(i) }
        #expect(startAll(&q) == [1, 2, 3])
        #expect(q.waitingCount == 7)
        q.ended()
        #expect(startAll(&q) == [4])
        q.ended(); q.ended()
        #expect(startAll(&q) == [5, 6])
        #expect(q.running == 3)
    }

    @Test("an item submitted now starts at once only with a free slot, nothing waiting and no failed start")
    func startsAtOnce() {
        var q = HandlerQueue<Int>(limit: 2)
        #expect(q.startsAtOnce)
        q.submit(1)
        #expect(!q.startsAtOnce, "1 waits before it")
        #expect(startAll(&q) == [1] && q.startsAtOnce)
        q.submit(2)
        #expect(startAll(&q) == [2] && !q.startsAtOnce, "both slots taken")
        q.submit(3)
        q.ended()
        #expect(!q.startsAtOnce, "3 waits before it")
        let three = q.next()
        #expect(three == 3)
        _ = q.failedToStart(3)
        #expect(!q.startsAtOnce, "3 waits again, and the queue is held")
        q.ended()
        #expect(startAll(&q) == [3])
        #expect(q.startsAtOnce)
    }

    @Test("a flood of 1000: every item starts exactly once, never more than the limit at once")
    func flood() {
        var q = HandlerQueue<Int>(limit: 8)
        var started: [Int] = []
        var running = 0, peak = 0
        for i in 0..<1000 {
            q.submit(i)
            let s = startAll(&q)
            started += s
            running += s.count
            peak = max(peak, running)
            if i % 3 == 0, running > 0 { q.ended(); running -= 1 }
        }
        while running > 0 {
            q.ended(); running -= 1
            let s = startAll(&q)
            started += s
            running += s.count
            peak = max(peak, running)
        }
        #expect(started == Array(0..<1000))
        #expect(peak == 8)
        #expect(q.waitingCount == 0)
    }

    @Test("a failed start keeps the item first in line and holds the queue until a run ends")
    func failedStartWaitsForAnEnd() {
        var q = HandlerQueue<Int>(limit: 4)
        for i in 1...6 { q.submit(i) }
        #expect(q.next() == 1); q.didStart()
        let two = q.next()
        #expect(two == 2)
        // EMFILE: no timer needed, handler 1's end will free descriptors.
        #expect(q.failedToStart(2) == nil)
        #expect(q.next() == nil)
        q.ended()
        #expect(startAll(&q) == [2, 3, 4, 5])
    }

    @Test("with nothing running, a failed start asks for a retry with growing delays")
    func failedStartRetries() {
        var q = HandlerQueue<Int>(limit: 2)
        q.submit(7)
        var delays: [Double] = []
        for _ in 0..<8 {
            let i = q.next()
            #expect(i == 7)
            delays.append(q.failedToStart(7) ?? -1)
            #expect(q.next() == nil)
            q.retry()
        }
        #expect(delays == [0.5, 1, 2, 4, 8, 16, 30, 30])
        #expect(startAll(&q) == [7])
        q.ended()
        // Success resets the delay.
        q.submit(8)
        _ = q.next()
        #expect(q.failedToStart(8) == 0.5)
    }

    @Test("shutdown takes what waits, in order")
    func shutdown() {
        var q = HandlerQueue<Int>(limit: 1)
        for i in 1...4 { q.submit(i) }
        _ = q.next()
        #expect(q.removeAllWaiting() == [2, 3, 4])
        #expect(q.waitingCount == 0)
    }
}
