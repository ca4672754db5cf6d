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

    package mutating func feed(_ bytes: some Collection<UInt8>) throws(UnixHTTP.Failure) -> [UInt8] {
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

    private mutating func endOfLine(_ text: [UInt8]) throws(UnixHTTP.Failure) {
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
