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
    package mutating func feed(_ bytes: some Collection<UInt8>) throws(DrowseError) -> [UInt8] {
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
    package mutating func closed() throws(DrowseError) {
        guard !isComplete else { return }
        guard body != nil else { throw .malformed("the connection closed before the response head ended") }
        if case .untilClose = body! { isComplete = true; return }
        throw .malformed("the connection closed in the middle of the response body")
    }

    private mutating func parseHead(_ bytes: [UInt8]) throws(DrowseError) {
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

    static func find(_ hay: [UInt8], from: Int) -> Int? {
        guard hay.count >= 4, from <= hay.count - 4 else { return nil }
        for i in from...(hay.count - 4) where hay[i] == 13 && hay[i + 1] == 10 && hay[i + 2] == 13 && hay[i + 3] == 10 {
            return i
        }
        return nil
    }
}

/// Decodes `Transfer-Encoding: chunked` (RFC 9112 §7.1) incrementally. Chunk extensions and
/// trailers are read and dropped; a bare LF is accepted where CRLF belongs.
package struct ChunkedDecoder {
    private enum State: Equatable {
        case size
        case data(remaining: Int)
        case dataEnd
        case trailer
        case done
    }
    private var state = State.size
    private var line: [UInt8] = []
    static let maxLine = 4096
    /// A chunk is at most this big: more is not a stream of events.
    static let maxChunk = 64 * 1024 * 1024

    package init() {}

    package var isFinished: Bool { state == .done }

    package mutating func feed(_ bytes: some Collection<UInt8>) throws(DrowseError) -> [UInt8] {
        var out: [UInt8] = []
        var i = bytes.startIndex
        while i != bytes.endIndex, state != .done {
            switch state {
            case .data(let remaining):
                let end = bytes.index(i, offsetBy: remaining, limitedBy: bytes.endIndex) ?? bytes.endIndex
                out.append(contentsOf: bytes[i..<end])
                let took = bytes.distance(from: i, to: end)
                i = end
                state = remaining - took == 0 ? .dataEnd : .data(remaining: remaining - took)
            case .size, .dataEnd, .trailer:
                let b = bytes[i]
                i = bytes.index(after: i)
                guard b == 10 else {
                    line.append(b)
                    guard line.count <= Self.maxLine else { throw .malformed("chunk framing line over \(Self.maxLine) bytes") }
                    continue
                }
                if line.last == 13 { line.removeLast() }
                let text = line
                line = []
                try endOfLine(text)
            case .done:
                break
            }
        }
        return out
    }

    private mutating func endOfLine(_ text: [UInt8]) throws(DrowseError) {
        switch state {
        case .dataEnd:
            guard text.isEmpty else { throw .malformed("chunk data longer than its size") }
            state = .size
        case .trailer:
            if text.isEmpty { state = .done }
        case .size:
            let digits = text.prefix(while: { $0 != UInt8(ascii: ";") && $0 != UInt8(ascii: " ") && $0 != 9 })
            guard !digits.isEmpty else { throw .malformed("empty chunk size") }
            var n = 0
            for d in digits {
                let v: Int
                switch d {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): v = Int(d - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): v = Int(d - UInt8(ascii: "a")) + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): v = Int(d - UInt8(ascii: "A")) + 10
                default: throw .malformed("chunk size is not hexadecimal")
                }
                n = n * 16 + v
                guard n <= Self.maxChunk else { throw .malformed("chunk over \(Self.maxChunk) bytes") }
            }
            state = n == 0 ? .trailer : .data(remaining: n)
        case .data, .done:
            break
        }
    }
}

/// Cuts a byte stream into lines (LF, with an optional CR before it). A line longer than
/// `maxLine` is dropped whole, and the stream goes on after its end.
package struct LineSplitter {
    private var partial: [UInt8] = []
    private var discarding = false
    package let maxLine: Int
    /// How many over-long lines were dropped.
    package private(set) var dropped = 0

    package init(maxLine: Int = 1 << 20) { self.maxLine = maxLine }

    package mutating func feed(_ bytes: some Collection<UInt8>) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        var rest = bytes[...]
        while let nl = rest.firstIndex(of: 10) {
            if discarding {
                discarding = false
            } else {
                partial.append(contentsOf: rest[..<nl])
                if partial.count <= maxLine + 1 {
                    if partial.last == 13 { partial.removeLast() }
                    if partial.count <= maxLine { lines.append(partial) } else { dropped += 1 }
                } else {
                    dropped += 1
                }
            }
            partial = []
            rest = rest[rest.index(after: nl)...]
        }
        if !discarding {
            partial.append(contentsOf: rest)
            if partial.count > maxLine + 1 {
                partial = []
                discarding = true
                dropped += 1
            }
        }
        return lines
    }
}
