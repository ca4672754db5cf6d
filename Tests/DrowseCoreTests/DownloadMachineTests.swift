import Testing
@testable import DrowseCore

@Suite("DownloadMachine")
struct DownloadMachineTests {
    typealias R = DownloadMachine.Response

    static func machine(committed: Int64 = 0, total: Int64? = nil, etag: String? = nil, lastModified: String? = nil,
                        maxUnknownSize: Int64 = 1 << 30) -> DownloadMachine {
        DownloadMachine(committed: committed, total: total, etag: etag, lastModified: lastModified, maxUnknownSize: maxUnknownSize)
    }

    static func failure(_ actions: [DownloadMachine.Action]) -> DownloadMachine.Failure? {
        for a in actions { if case .fail(let f) = a { return f } }
        return nil
    }

    @Test("fresh download: whole file, appended, finished at the announced size")
    func fresh() throws {
        var m = Self.machine()
        #expect(m.start(partLength: 0) == [.request(range: nil, ifRange: nil)])
        let ok = R(status: 200, contentLength: 10, etag: "\"v1\"", lastModified: "Mon, 01 Jan 2024 00:00:00 GMT")
        #expect(m.body(6, of: ok) == [.append])
        m.appended(6)
        #expect(m.body(4, of: ok) == [.append])
        m.appended(4)
        #expect(m.total == 10 && m.etag == "\"v1\"" && m.lastModified == "Mon, 01 Jan 2024 00:00:00 GMT")
        #expect(m.ended(.ok, response: ok) == [.finish(bytes: 10)])
    }

    @Test("a torn tail past the committed offset is cut off; a part shorter than it starts over")
    func partLength() {
        var m = Self.machine(committed: 100, total: 1000, etag: "\"a\"")
        #expect(m.start(partLength: 150) == [.truncate(to: 100), .request(range: 100, ifRange: "\"a\"")])
        var short = Self.machine(committed: 100, total: 1000, etag: "\"a\"")
        #expect(short.start(partLength: 40) == [.restart, .request(range: nil, ifRange: nil)])
        #expect(short.offset == 0)
    }

    @Test("every byte committed before a restart: finish without a request")
    func alreadyComplete() {
        var m = Self.machine(committed: 500, total: 500)
        #expect(m.start(partLength: 500) == [.finish(bytes: 500)])
    }

    @Test("resume: Range from the part's length, a strong ETag as If-Range, else Last-Modified")
    func resumeRequest() {
        var a = Self.machine(committed: 100, etag: "\"x\"", lastModified: "LM")
        #expect(a.start(partLength: 100) == [.request(range: 100, ifRange: "\"x\"")])
        var weak = Self.machine(committed: 100, etag: "W/\"x\"", lastModified: "LM")
        #expect(weak.start(partLength: 100) == [.request(range: 100, ifRange: "LM")])
        var none = Self.machine(committed: 100)
        #expect(none.start(partLength: 100) == [.request(range: 100, ifRange: nil)])
    }

    @Test("resume with 206 and a matching Content-Range appends")
    func resume206() {
        var m = Self.machine(committed: 100, total: 300, etag: "\"x\"")
        _ = m.start(partLength: 100)
        let r = R(status: 206, contentRange: "bytes 100-299/300", contentLength: 200, etag: "\"x\"")
        #expect(m.body(200, of: r) == [.append])
        m.appended(200)
        #expect(m.ended(.ok, response: r) == [.finish(bytes: 300)])
    }

    @Test("206 starting at the wrong byte: abort, and the part is discarded")
    func wrongStart() throws {
        var m = Self.machine(committed: 100, total: 300)
        _ = m.start(partLength: 100)
        let r = R(status: 206, contentRange: "bytes 0-299/300")
        #expect(m.body(300, of: r) == [.abort])
        #expect(m.body(300, of: r) == [.abort])  // later bytes too
        let f = try #require(Self.failure(m.ended(.other("Failed writing received data"), response: r)))
        #expect(f.reason == "server resumed at byte 0, not 100")
        #expect(f.transient && f.part == .discard)
    }

    @Test("200 to a range request: restart from zero, never append to the old bytes")
    func restartOn200() {
        var m = Self.machine(committed: 100, total: 300, etag: "\"old\"")
        _ = m.start(partLength: 100)
        let r = R(status: 200, contentLength: 400, etag: "\"new\"")
        #expect(m.body(50, of: r) == [.restart, .append])
        #expect(m.offset == 0)
        m.appended(50)
        #expect(m.body(350, of: r) == [.append])
        m.appended(350)
        #expect(m.total == 400 && m.etag == "\"new\"")
        #expect(m.ended(.ok, response: r) == [.finish(bytes: 400)])
    }

    @Test("a body-less 200 to a range request still restarts, then fails short")
    func emptyRestart() throws {
        var m = Self.machine(committed: 100, total: 300)
        _ = m.start(partLength: 100)
        let actions = m.ended(.ok, response: R(status: 200, contentLength: 300))
        #expect(actions.first == .restart)
        let f = try #require(Self.failure(actions))
        #expect(f.reason == "body ended at 0 of 300 bytes" && f.part == .keep)
    }

    @Test("206 with a changed ETag or Last-Modified: not spliced")
    func changedValidators() throws {
        var e = Self.machine(committed: 100, etag: "\"a\"")
        _ = e.start(partLength: 100)
        #expect(e.body(10, of: R(status: 206, contentRange: "bytes 100-199/200", etag: "\"b\"")) == [.abort])
        let fe = try #require(Self.failure(e.ended(.other("write"), response: R())))
        #expect(fe.reason == "file changed on the server (ETag)" && fe.part == .discard && fe.transient)

        var l = Self.machine(committed: 100, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT")
        _ = l.start(partLength: 100)
        #expect(l.body(10, of: R(status: 206, contentRange: "bytes 100-199/200", lastModified: "Tue, 02 Jan 2024 00:00:00 GMT")) == [.abort])
        let fl = try #require(Self.failure(l.ended(.other("write"), response: R())))
        #expect(fl.reason == "file changed on the server (Last-Modified)" && fl.part == .discard)

        // The size changed under the same validators.
        var s = Self.machine(committed: 100, total: 200)
        _ = s.start(partLength: 100)
        #expect(s.body(10, of: R(status: 206, contentRange: "bytes 100-249/250")) == [.abort])
        #expect(Self.failure(s.ended(.ok, response: R()))?.reason == "file size changed on the server (200 → 250 bytes)")
    }

    @Test("206 without a Content-Range, or to a request without a Range")
    func missingContentRange() throws {
        var m = Self.machine(committed: 100)
        _ = m.start(partLength: 100)
        #expect(m.body(10, of: R(status: 206)) == [.abort])
        let f = try #require(Self.failure(m.ended(.ok, response: R(status: 206))))
        #expect(f.reason == "server sent 206 with a missing or bad Content-Range" && f.part == .discard)

        var fresh = Self.machine()
        _ = fresh.start(partLength: 0)
        #expect(fresh.body(10, of: R(status: 206, contentRange: "bytes 0-9/10")) == [.abort])
    }

    @Test("416 when the part already holds the whole file: finished")
    func rangeNotSatisfiableComplete() {
        var m = Self.machine(committed: 300)
        _ = m.start(partLength: 300)
        #expect(m.ended(.httpError(416), response: R(status: 416, contentRange: "bytes */300")) == [.finish(bytes: 300)])
        #expect(m.total == 300)
    }

    @Test("416 otherwise: the range is refused, start over")
    func rangeNotSatisfiableOther() throws {
        var m = Self.machine(committed: 300)
        _ = m.start(partLength: 300)
        let f = try #require(Self.failure(m.ended(.httpError(416), response: R(status: 416, contentRange: "bytes */500"))))
        #expect(f.reason == "server refused the range (HTTP 416)" && f.transient && f.part == .discard)
        var noRange = Self.machine(committed: 300)
        _ = noRange.start(partLength: 300)
        #expect(Self.failure(noRange.ended(.httpError(416), response: R(status: 416)))?.part == .discard)
        // A known size that disagrees with what is held.
        var known = Self.machine(committed: 300, total: 400)
        _ = known.start(partLength: 300)
        #expect(Self.failure(known.ended(.httpError(416), response: R(status: 416, contentRange: "bytes */300"))) != nil)
    }

    @Test("more bytes than announced abort; a short body keeps what came")
    func sizeMismatch() throws {
        var over = Self.machine()
        _ = over.start(partLength: 0)
        let r = R(status: 200, contentLength: 10)
        #expect(over.body(8, of: r) == [.append])
        over.appended(8)
        #expect(over.body(8, of: r) == [.abort])
        let f = try #require(Self.failure(over.ended(.other("write"), response: r)))
        #expect(f.reason == "server sent more than the announced 10 bytes" && f.part == .discard && f.transient)

        var short = Self.machine()
        _ = short.start(partLength: 0)
        _ = short.body(8, of: r)
        short.appended(8)
        let s = try #require(Self.failure(short.ended(.ok, response: r)))
        #expect(s.reason == "body ended at 8 of 10 bytes" && s.transient && s.part == .keep)
    }

    @Test("unknown size: accepted up to the cap, then a permanent failure")
    func unknownSize() throws {
        var m = Self.machine(maxUnknownSize: 100)
        _ = m.start(partLength: 0)
        let r = R(status: 200)
        #expect(m.body(60, of: r) == [.append])
        m.appended(60)
        #expect(m.body(40, of: r) == [.append])
        m.appended(40)
        #expect(m.total == nil)
        var done = m
        #expect(done.ended(.ok, response: r) == [.finish(bytes: 100)])
        #expect(m.body(1, of: r) == [.abort])
        let f = try #require(Self.failure(m.ended(.other("write"), response: r)))
        #expect(!f.transient && f.part == .discard && f.reason.contains("max_unknown_size"))
    }

    @Test("a failed write keeps what is on disk; a full disk gives back the uncommitted bytes")
    func writeFailures() throws {
        var m = Self.machine()
        _ = m.start(partLength: 0)
        _ = m.body(5, of: R(status: 200))
        #expect(m.writeFailed("writing p: I/O error", noSpace: false) == [.abort])
        #expect(Self.failure(m.ended(.other("write"), response: R())) == DownloadMachine.Failure("writing p: I/O error", transient: true, part: .keep))
        var full = Self.machine()
        _ = full.start(partLength: 0)
        _ = full.body(5, of: R(status: 200))
        _ = full.writeFailed("writing p: No space left on device", noSpace: true)
        let f = try #require(Self.failure(full.ended(.other("write"), response: R())))
        #expect(f.noSpace && f.transient && f.part == .rollBackToCommit)
    }

    @Test("endings: HTTP errors, redirects, TLS and stalls")
    func endings() {
        func fail(_ e: DownloadMachine.Ending) -> DownloadMachine.Failure? {
            var m = Self.machine(committed: 10)
            _ = m.start(partLength: 10)
            return Self.failure(m.ended(e, response: R()))
        }
        #expect(fail(.httpError(404)) == DownloadMachine.Failure("HTTP 404", transient: false, part: .discard))
        #expect(fail(.httpError(503)) == DownloadMachine.Failure("HTTP 503", transient: true, part: .keep))
        #expect(fail(.httpError(429))?.transient == true)
        #expect(fail(.httpError(408))?.transient == true)
        #expect(fail(.unsupportedProtocol)?.reason == "refused: redirect to a URL that is not http or https")
        #expect(fail(.unsupportedProtocol)?.transient == false)
        #expect(fail(.tooManyRedirects)?.transient == false)
        #expect(fail(.malformedURL)?.transient == false)
        #expect(fail(.tlsVerification("bad cert")) == DownloadMachine.Failure("TLS verification failed: bad cert", transient: false, part: .discard))
        #expect(fail(.stalled("too slow")) == DownloadMachine.Failure("stalled: too slow", transient: true, part: .keep))
        #expect(fail(.other("Connection reset")) == DownloadMachine.Failure("Connection reset", transient: true, part: .keep))
    }

    @Test("an unexpected status is permanent below 500")
    func unexpectedStatus() {
        var m = Self.machine()
        _ = m.start(partLength: 0)
        #expect(m.ended(.ok, response: R(status: 204)) == [.fail(DownloadMachine.Failure("unexpected HTTP status 204", transient: false, part: .discard))])
    }

    @Test("Content-Range parsing")
    func contentRange() {
        #expect(ContentRange.parse("bytes 100-199/200") == ContentRange(start: 100, end: 199, total: 200))
        #expect(ContentRange.parse("bytes 0-9/*") == ContentRange(start: 0, end: 9, total: nil))
        #expect(ContentRange.parse("bytes 10-9/20") == nil)
        #expect(ContentRange.parse("bytes 0-20/20") == nil)
        #expect(ContentRange.parse("bytes */20") == nil)
        #expect(DownloadMachine.unsatisfiedLength("bytes */20") == 20)
        #expect(DownloadMachine.unsatisfiedLength("bytes 0-1/20") == nil)
    }
}
