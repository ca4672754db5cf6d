import DrowseCore
import Testing
@testable import DrowseKit

private let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"

private func chunk(_ s: String) -> String {
    String(s.utf8.count, radix: 16) + "\r\n" + s + "\r\n"
}

/// Feeds `wire` to a parser in pieces of `size` bytes and returns every line it understood.
private func parse(_ wire: String, pieces size: Int) throws -> (lines: [EventLine], parser: EventStreamParser) {
    var parser = EventStreamParser()
    var out: [EventLine] = []
    let bytes = Array(wire.utf8)
    var i = 0
    while i < bytes.count {
        out += try parser.feed(bytes[i..<min(bytes.count, i + size)])
        i += size
    }
    return (out, parser)
}

private func events(_ lines: [EventLine]) -> [DrowseEvent] {
    lines.compactMap { if case .event(let e) = $0 { return e }; return nil }
}

@Suite("Event stream parsing")
struct EventStreamParserTests {
    static let hello = #"{"event":"hello","app":"weather","state":"background"}"# + "\n"
    static let fetch = #"{"event":"fetch","id":"e7","deadline":1763900000.125,"reason":"window"}"# + "\n"
    static let note = #"{"event":"notification","id":"e8","deadline":1763900001,"payload":{"aps":{"content-available":1},"task":3}}"# + "\n"
    static let transfers = #"{"event":"transfers","id":"e9","deadline":5,"session":"updates","transfers":[{"id":"x1","app":"weather","session":"updates","kind":"download","state":"completed","url":"https://a/b","bytes_done":10,"bytes_total":10,"reason":null,"location":"/tmp/f"}]}"# + "\n"
    static let expiring = #"{"event":"task-expiring","id":"e10","task":"t3","expires_at":1763900100.5,"time_remaining":4.9}"# + "\n"

    @Test("every kind of event is read, whatever the sizes of the reads", arguments: [1, 2, 3, 7, 64, 100_000])
    func allKinds(pieces: Int) throws {
        let wire = head + chunk(Self.hello) + chunk(Self.fetch + Self.note) + chunk(Self.transfers) + chunk(Self.expiring)
        let (lines, parser) = try parse(wire, pieces: pieces)
        #expect(lines.first == .hello(app: "weather", state: "background"))
        let e = events(lines)
        #expect(e.map(\.kind) == [.fetch, .notification, .transfers, .taskExpiring])
        #expect(e.map(\.id) == ["e7", "e8", "e9", "e10"])
        #expect(e[0].deadline == 1763900000.125 && e[0].reason == "window")
        #expect(e[1].payload?["task"]?.intValue == 3)
        #expect(e[1].payload?["aps"]?["content-available"]?.intValue == 1)
        #expect(e[2].session == "updates" && e[2].transfers.map(\.id) == ["x1"])
        #expect(e[2].transfers.first?.state == .completed && e[2].transfers.first?.location == "/tmp/f")
        #expect(e[3].task == BackgroundTaskID("t3") && e[3].timeRemaining == 4.9 && e[3].expiresAt == 1763900100.5)
        #expect(!e[3].needsCompletion && e[0].needsCompletion)
        #expect(parser.status == 200 && !parser.http.isComplete)
    }

    @Test("a line split across chunks is joined; a chunk holding several lines yields them all")
    func linesAcrossChunks() throws {
        let all = Self.hello + Self.fetch + Self.note
        let cut1 = all.utf8.count / 3, cut2 = 2 * all.utf8.count / 3
        let b = Array(all.utf8)
        let parts = [b[..<cut1], b[cut1..<cut2], b[cut2...]].map { String(decoding: $0, as: UTF8.self) }
        let wire = head + parts.map(chunk).joined()
        let (lines, _) = try parse(wire, pieces: 5)
        #expect(events(lines).map(\.id) == ["e7", "e8"])
    }

    @Test("hello is consumed; garbage, unknown kinds and events without ids are skipped and the stream goes on")
    func garbageSkipped() throws {
        let wire = head + chunk(Self.hello) + chunk("not json at all\n") + chunk("[1,2]\n\n")
            + chunk(#"{"event":"reboot","id":"e1"}"# + "\n") + chunk(#"{"event":"fetch"}"# + "\n")
            + chunk(#"{"event":"task-expiring","id":"e2"}"# + "\n") + chunk("{\"event\":\"fe") + chunk(Self.fetch)
            + chunk(Self.note)
        let (lines, _) = try parse(wire, pieces: 4)
        // The cut-off `{"event":"fe` joined to the next line is one garbage line, not two events.
        #expect(events(lines).map(\.id) == ["e8"])
        #expect(lines.filter { if case .skipped = $0 { return true }; return false }.count == 7)
    }

    @Test("the chunked stream's end (a zero chunk and trailers) completes the response")
    func endOfStream() throws {
        let wire = head + chunk(Self.fetch) + "0\r\nX-Trailer: 1\r\n\r\n"
        let (lines, parser) = try parse(wire, pieces: 3)
        #expect(events(lines).map(\.id) == ["e7"])
        #expect(parser.http.isComplete)
    }

    @Test("chunk extensions and bare LFs are accepted")
    func lenientFraming() throws {
        let body = Self.fetch
        let wire = head + String(body.utf8.count, radix: 16) + ";name=value\n" + body + "\n0\n\n"
        let (lines, parser) = try parse(wire, pieces: 2)
        #expect(events(lines).map(\.id) == ["e7"])
        #expect(parser.http.isComplete)
    }

    @Test("broken framing is an error (the reader drops the connection and reconnects)")
    func brokenFraming() {
        #expect(throws: DrowseError.self) { _ = try parse(head + "zz\r\nabc\r\n", pieces: 100) }
        #expect(throws: DrowseError.self) { _ = try parse(head + "3\r\nabcdef\r\n", pieces: 100) }
        #expect(throws: DrowseError.self) { _ = try parse("SSH-2.0-OpenSSH\r\n\r\n", pieces: 100) }
    }

    @Test("an error answer keeps its status and body, and yields no events")
    func errorAnswer() throws {
        let body = #"{"error":{"code":"not_found","message":"no app 'x'"}}"#
        let wire = "HTTP/1.1 404 Not Found\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
        let (lines, parser) = try parse(wire, pieces: 6)
        #expect(lines.isEmpty)
        #expect(parser.status == 404 && parser.http.isComplete)
        let e = DrowseError.answer(status: 404, body: parser.errorBody)
        #expect(e.code == "not_found" && e.message == "no app 'x'")
    }

    @Test("a body that runs until the connection closes: lines are read, and the close completes it")
    func untilClose() throws {
        var (lines, parser) = try parse("HTTP/1.1 200 OK\r\n\r\n" + Self.fetch + Self.note, pieces: 9)
        #expect(events(lines).map(\.id) == ["e7", "e8"])
        try parser.closed()
        #expect(parser.http.isComplete)
        lines = []
        var cut = EventStreamParser()
        _ = try cut.feed(Array((head + "10\r\nabc").utf8))
        #expect(throws: DrowseError.self) { try cut.closed() }
    }

    @Test("an over-long line is dropped whole and the next one is read")
    func overlongLine() {
        var s = LineSplitter(maxLine: 16)
        var out = s.feed(Array("short\n".utf8))
        out += s.feed(Array(String(repeating: "x", count: 40).utf8))
        out += s.feed(Array("yyyy\nok\r\n".utf8))
        #expect(out.map { String(decoding: $0, as: UTF8.self) } == ["short", "ok"])
        #expect(s.dropped == 1)
    }
}
