import DrowseCore
import Testing

@Suite("RetryAfter")
struct RetryAfterTests {
    // 1994-11-06T08:49:37Z, the RFC's example date.
    static let rfcDate = 784_111_777.0

    @Test("delay-seconds: digits only")
    func seconds() {
        #expect(RetryAfter.parse("120") == .seconds(120))
        #expect(RetryAfter.parse("0") == .seconds(0))
        #expect(RetryAfter.parse(" 3 ") == .seconds(3))
        #expect(RetryAfter.parse("007") == .seconds(7))
    }

    @Test("a huge delay-seconds is a long wait, capped at an hour")
    func huge() {
        let r = RetryAfter.parse("99999999999999999999999")
        #expect(r != nil)
        #expect(r?.delay(now: 0) == RetryAfter.maxDelay)
        #expect(RetryAfter.parse("86400")?.delay(now: 0) == RetryAfter.maxDelay)
    }

    @Test("the three HTTP-date forms of RFC 9110 give the same time")
    func dates() {
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:49:37 GMT") == .date(Self.rfcDate))
        #expect(RetryAfter.parse("Sunday, 06-Nov-94 08:49:37 GMT") == .date(Self.rfcDate))
        #expect(RetryAfter.parse("Sun Nov  6 08:49:37 1994") == .date(Self.rfcDate))
        #expect(RetryAfter.parse("Thu, 01 Jan 1970 00:00:00 GMT") == .date(0))
        #expect(RetryAfter.parse("Tue, 29 Feb 2028 12:00:00 GMT") == .date(1_835_438_400))
    }

    @Test("a date's delay is measured from now: past means no wait, far future is capped")
    func dateDelay() {
        let r = RetryAfter.date(Self.rfcDate)
        #expect(r.delay(now: Self.rfcDate - 30) == 30)
        #expect(r.delay(now: Self.rfcDate + 30) == 0)
        #expect(r.delay(now: Self.rfcDate - 1e6) == RetryAfter.maxDelay)
    }

    @Test("garbage is ignored", arguments: [
        "", " ", "-1", "+5", "1.5", "1e3", "0x10", "soon", "5 s", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994", "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 29 Feb 1995 08:49:37 GMT",
    ])
    func garbage(value: String) {
        #expect(RetryAfter.parse(value) == nil)
    }

    @Test("a 503 or 429 with Retry-After carries it in the failure; other statuses and garbage do not")
    func downloadMachine() {
        func failure(_ code: Int, _ header: String?) -> DownloadMachine.Failure? {
            var m = DownloadMachine(committed: 0, total: nil, etag: nil, lastModified: nil, maxUnknownSize: 1 << 20)
            _ = m.start(partLength: 0)
            for case .fail(let f) in m.ended(.httpError(code), response: .init(status: code, retryAfter: header)) { return f }
            return nil
        }
        #expect(failure(503, "3")?.retryAfter == .seconds(3))
        #expect(failure(503, "3")?.transient == true)
        #expect(failure(503, "3")?.reason == "HTTP 503 (Retry-After: 3s)")
        #expect(failure(429, "Sun, 06 Nov 1994 08:49:37 GMT")?.retryAfter == .date(Self.rfcDate))
        #expect(failure(503, "later")?.retryAfter == nil)
        #expect(failure(503, nil) == DownloadMachine.Failure("HTTP 503", transient: true, part: .keep))
        #expect(failure(500, "3")?.retryAfter == nil)
        #expect(failure(404, "3")?.retryAfter == nil)
    }

    @Test("the retry is not before Retry-After, even when the backoff says sooner; a longer backoff still wins")
    func transferRetry() {
        var r = TransferRetry()
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 1000, unit: 1, retryAfter: .seconds(3)) == 3)
        #expect(r.nextRetryAt == 1003)
        r.attemptStarted(bytes: 0)
        // The backoff advanced under it: 2 s now, the header says 1.
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 2000, unit: 1, retryAfter: .seconds(1)) == 2)
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 3000, unit: 1, retryAfter: .date(3010)) == 10)
        // After a megabyte of progress the retry would be at once: Retry-After still holds it back.
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 2 << 20, noSpace: false, now: 4000, unit: 1, retryAfter: .seconds(5)) == 5)
        // Capped at an hour.
        r.attemptStarted(bytes: 0)
        #expect(r.attemptFailed(bytes: 0, noSpace: false, now: 5000, unit: 0, retryAfter: .seconds(1e9)) == RetryAfter.maxDelay)
    }
}
