/// HTTP/1.1 response framing, fed with bytes as they come off the socket: the head, then a body
/// that is chunked, of a Content-Length, or read until the connection closes.
package struct HTTPResponseDecoder {
    package private(set) var status: Int?
    /// Header names in lower case.
    package private(set) var headers: [(String, String)] = []
    package private(set) var isComplete = false

    private enum Body {
        case chunked(ChunkedDecoder)
        case length(remaining: Int)
        case untilClose
    }
    private var head: [UInt8] = []
    private var body: Body?
    static let maxHead = 64 * 1024

    package init() {}

    package var isHeadComplete: Bool { body != nil }

    package func header(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.last(where: { $0.0 == n })?.1
    }

    /// The body bytes among `bytes`.
    package mutating func feed(_ bytes: some Collection<UInt8>) throws(UnixHTTP.Failure) -> [UInt8] {
        guard !isComplete else { return [] }
        var rest = ArraySlice(bytes)
        if body == nil {
            let before = head.count
            head.append(contentsOf: rest)
            // Search from a little before what was already there: the separator may straddle feeds.
            guard let end = Self.find(head, from: max(0, before - 3)) else {
                guard head.count <= Self.maxHead else { throw .malformed("response head over \(Self.maxHead) bytes") }
                return []
            }
            rest = head[(end + 4)...]
            try parseHead(Array(head[..<end]))
            head = []
        }
        switch body! {
        case .chunked(var c):
            let out = try c.feed(rest)
            body = .chunked(c)
            isComplete = c.isFinished
            return out
        case .length(let remaining):
            let take = min(remaining, rest.count)
            body = .length(remaining: remaining - take)
            isComplete = remaining - take == 0
            return Array(rest.prefix(take))
        case .untilClose:
            return Array(rest)
        }
    }

    /// The connection closed: fine for a body that runs until then, an error for a cut one.
    package mutating func closed() throws(UnixHTTP.Failure) {
        guard !isComplete else { return }
        guard body != nil else { throw .malformed("the connection closed before the response head ended") }
        if case .untilClose = body! { isComplete = true; return }
        throw .malformed("the connection closed in the middle of the response body")
    }

    private mutating func parseHead(_ bytes: [UInt8]) throws(UnixHTTP.Failure) {
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = Int(parts[1]), (100...599).contains(code) else {
            throw .malformed("not an HTTP/1.1 status line: '\(statusLine.prefix(80))'")
        }
        status = code
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("header line without a colon") }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].drop(while: { $0 == " " || $0 == "\t" })
            headers.append((name, String(value.reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())))
        }
        if header("transfer-encoding")?.lowercased().contains("chunked") == true {
            body = .chunked(ChunkedDecoder())
        } else if let l = header("content-length") {
            guard let n = Int(l), n >= 0 else { throw .malformed("bad Content-Length '\(l)'") }
            body = .length(remaining: n)
            isComplete = n == 0
        } else if code == 204 || code == 304 || code < 200 {
            body = .length(remaining: 0)
            isComplete = true
        } else {
            body = .untilClose
        }
    }

    package static func find(_ hay: [UInt8], from: Int) -> Int? {
        guard hay.count >= 4, from <= hay.count - 4 else { return nil }
        for i in from...(hay.count - 4) where hay[i] == 13 && hay[i + 1] == 10 && hay[i + 2] == 13 && hay[i + 3] == 10 {
            return i
        }
        return nil
    }
}
