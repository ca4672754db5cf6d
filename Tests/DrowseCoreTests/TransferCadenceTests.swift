import Testing
@testable import DrowseCore

@Suite("ProgressThrottle")
struct ProgressThrottleTests {
    /// The answers of one throttle to reports at `times`, in order.
    static func answers(_ times: [Double], _ t: inout ProgressThrottle) -> [Bool] { times.map { t.shouldReport(at: $0) } }

    @Test("the first report goes once half a second of the clock has passed, then at most one per 0.5 s")
    func halfSecond() {
        var t = ProgressThrottle()
        #expect(t.interval == 0.5)
        #expect(Self.answers([0.4, 100.0, 100.1, 100.49, 100.5], &t) == [false, true, false, false, true])
        #expect(t.lastReportAt == 100.5)
        // A refused report does not move the window.
        #expect(Self.answers([100.9, 101.0], &t) == [false, true])
    }

    @Test("many chunks within one window give one report")
    func burst() {
        var t = ProgressThrottle()
        let reports = stride(from: 10.0, to: 12.0, by: 0.01).filter { t.shouldReport(at: $0) }.count
        #expect(reports == 4)
    }
}

@Suite("CommitCadence")
struct CommitCadenceTests {
    /// The defaults of `[transfers]`: 2 s and 8 MiB.
    static func defaults(at t: Double = 1000) -> CommitCadence { CommitCadence(interval: 2, bytes: 8 << 20, startedAt: t) }

    @Test("by bytes: at commit_bytes uncommitted, not one byte earlier")
    func bytes() {
        let c = Self.defaults()
        #expect(!c.dueForBytes(uncommitted: (8 << 20) - 1))
        #expect(c.dueForBytes(uncommitted: 8 << 20))
        #expect(c.dueForBytes(uncommitted: 9 << 20))
    }

    @Test("by time: commit_interval after the last commit, only with something uncommitted")
    func time() {
        var c = Self.defaults(at: 1000)
        #expect(!c.dueForTime(uncommitted: 10, now: 1001.99))
        #expect(c.dueForTime(uncommitted: 10, now: 1002))
        #expect(!c.dueForTime(uncommitted: 0, now: 5000))
        c.committed(at: 1002)
        #expect(!c.dueForTime(uncommitted: 10, now: 1003))
        #expect(c.dueForTime(uncommitted: 10, now: 1004))
    }

    @Test("the next time-based commit bounds the engine's wait; nothing uncommitted, no wait")
    func nextDue() {
        var c = Self.defaults(at: 50)
        #expect(c.nextDue(uncommitted: 0) == nil)
        #expect(c.nextDue(uncommitted: 1) == 52)
        c.committed(at: 60.5)
        #expect(c.nextDue(uncommitted: 1) == 62.5)
        #expect(CommitCadence.waitMilliseconds(until: 62.5, now: 61) == 1501)
        #expect(CommitCadence.waitMilliseconds(until: 62.5, now: 62.5) == 1)
        #expect(CommitCadence.waitMilliseconds(until: 62.5, now: 70) == 0)
    }
}

@Suite("MQTTStopSettle")
struct MQTTStopSettleTests {
    @Test("waits up to 2 s after the stop while a received message is unsettled")
    func window() {
        let s = MQTTStopSettle(stoppingAt: 300)
        #expect(s.deadline == 302)
        #expect(s.keepWaiting(unsettled: 1, rejected: false, now: 300))
        #expect(s.keepWaiting(unsettled: 3, rejected: false, now: 301.99))
        #expect(!s.keepWaiting(unsettled: 1, rejected: false, now: 302))
    }

    @Test("does not wait with nothing unsettled, nor after a rejection")
    func noWait() {
        let s = MQTTStopSettle(stoppingAt: 300)
        #expect(!s.keepWaiting(unsettled: 0, rejected: false, now: 300.5))
        #expect(!s.keepWaiting(unsettled: 2, rejected: true, now: 300.5))
    }
}
