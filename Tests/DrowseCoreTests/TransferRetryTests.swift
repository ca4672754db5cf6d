import Testing
@testable import DrowseCore

@Suite("TransferRetry")
struct TransferRetryTests {
    @Test("attempts that move a megabyte or more forward retry at once, every time")
    func progressResets() {
        var r = TransferRetry()
        var bytes: Int64 = 0
        var delays: [Double] = []
        for _ in 0..<8 {
            r.attemptStarted(bytes: bytes)
            bytes += 8_000_000  // each attempt gets 8 MB through before the link resets
            delays.append(r.attemptFailed(bytes: bytes, noSpace: false, now: 1000, unit: 1))
        }
        #expect(delays == Array(repeating: 0, count: 8))
        #expect(r.attempts == 8 && r.retries == 8 && r.nextRetryAt == 1000)
    }

    @Test("attempts that move less than a megabyte go back to the first step of the backoff (0.5–1 s)")
    func smallProgress() {
        var r = TransferRetry()
        var delays: [Double] = []
        for i in 0..<4 {
            r.attemptStarted(bytes: Int64(i) * 1000)
            delays.append(r.attemptFailed(bytes: Int64(i + 1) * 1000, noSpace: false, now: 0, unit: 1))
        }
        #expect(delays == [1, 1, 1, 1])
    }

    @Test("attempts that move nothing back off exponentially up to the cap")
    func noProgressBacksOff() {
        var r = TransferRetry(network: Backoff(base: 1, cap: 300))
        var delays: [Double] = []
        for _ in 0..<11 {
            r.attemptStarted(bytes: 500)
            delays.append(r.attemptFailed(bytes: 500, noSpace: false, now: 0, unit: 1))
        }
        #expect(delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300])
    }

    @Test("a stall after progress still backs off: progress resets once, then no progress grows again")
    func stallAfterProgress() {
        var r = TransferRetry()
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 0, unit: 1) == 1)
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 0, unit: 1) == 2)
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 10, noSpace: false, now: 0, unit: 1) == 1)  // progress
        r.attemptStarted(bytes: 10)
        #expect(r.attemptFailed(bytes: 10, noSpace: false, now: 0, unit: 1) == 2)  // stalled
    }

    @Test("a server that breaks every resume (part of the body, then a wrong Content-Range that discards it) backs off more each time")
    func brokenResumeBacksOff() {
        var r = TransferRetry(network: Backoff(base: 1, cap: 300))
        var delays: [Double] = []
        for _ in 0..<5 {
            // From 0: 300 kB arrive, then the connection is cut.
            r.attemptStarted(bytes: 0)
            delays.append(r.attemptFailed(bytes: 300_000, noSpace: false, now: 0, unit: 1))
            // The resume at 300 kB gets a 206 for another offset: the part is thrown away.
            r.attemptStarted(bytes: 300_000)
            delays.append(r.attemptFailed(bytes: 0, noSpace: false, now: 0, unit: 1))
        }
        #expect(delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300])
    }

    @Test("a big body that is cut and then thrown away is not retried at once forever")
    func bigDiscardedBodyBacksOff() {
        var r = TransferRetry(network: Backoff(base: 1, cap: 300))
        var delays: [Double] = []
        for _ in 0..<3 {
            r.attemptStarted(bytes: 0)
            delays.append(r.attemptFailed(bytes: 5_000_000, noSpace: false, now: 0, unit: 1))
            r.attemptStarted(bytes: 5_000_000)
            delays.append(r.attemptFailed(bytes: 0, noSpace: false, now: 0, unit: 1))
        }
        // The first pass is real progress (at once); every later one re-fetches the same bytes.
        #expect(delays == [0, 1, 2, 4, 8, 16])
    }

    @Test("a full disk waits on its own backoff, from 10 s to 60 s, and jitter stays within [half, whole]")
    func diskFull() {
        var r = TransferRetry()
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 5, noSpace: true, now: 0, unit: 1) == 10)
        r.attemptStarted(bytes: 5)
        #expect(r.attemptFailed(bytes: 5, noSpace: true, now: 0, unit: 0) == 10)  // 20 × (½ + ½·0)
        r.attemptStarted(bytes: 5)
        #expect(r.attemptFailed(bytes: 5, noSpace: true, now: 0, unit: 1) == 40)
        r.attemptStarted(bytes: 5)
        #expect(r.attemptFailed(bytes: 5, noSpace: true, now: 0, unit: 1) == 60)
    }
}
