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
