/// How much of one handler run's output reaches the daemon's log: a token bucket in bytes.
///
/// Why: a handler's stdout goes to the log line by line, and nothing else bounds it (1 GB of
/// output once became a 1.7 GB log). The bucket lets a normal run's output through whole (a burst
/// of 256 KiB, e.g. 5000 short lines printed at once) and then 8 KiB/s, so a 30 s run logs at
/// most about half a MiB whatever it prints.
/// What is held back is counted and reported in one line, so the log says that output is missing.
package struct OutputRateLimiter: Sendable {
    package struct Dropped: Sendable, Equatable {
        package var lines: Int
        package var bytes: Int

        package init(lines: Int, bytes: Int) {
            self.lines = lines
            self.bytes = bytes
        }
    }

    package enum Verdict: Sendable, Equatable {
        /// Log the line; first report what was dropped before it, if anything.
        case log(after: Dropped?)
        case drop
    }

    package let burstBytes: Double
    package let bytesPerSecond: Double
    /// What a line costs besides its text: timestamp, level, app id. Many short lines cost too.
    package let perLineBytes: Int
    private var tokens: Double
    private var last: Double?
    private var dropped = Dropped(lines: 0, bytes: 0)

    package init(burstBytes: Int = 256 << 10, bytesPerSecond: Double = 8192, perLineBytes: Int = 32) {
        self.burstBytes = Double(burstBytes)
        self.bytesPerSecond = bytesPerSecond
        self.perLineBytes = perLineBytes
        tokens = Double(burstBytes)
    }

    /// A line of `bytes` bytes is ready at `now` (seconds, any monotonic origin).
    package mutating func offer(bytes: Int, at now: Double) -> Verdict {
        if let last, now > last { tokens = min(burstBytes, tokens + (now - last) * bytesPerSecond) }
        last = now
        let cost = Double(bytes + perLineBytes)
        guard tokens >= cost else {
            dropped.lines += 1
            dropped.bytes += bytes
            return .drop
        }
        tokens -= cost
        defer { dropped = Dropped(lines: 0, bytes: 0) }
        return .log(after: dropped.lines > 0 ? dropped : nil)
    }

    /// The run ended: what was dropped since the last logged line, if anything.
    package mutating func finish() -> Dropped? {
        defer { dropped = Dropped(lines: 0, bytes: 0) }
        return dropped.lines > 0 ? dropped : nil
    }
}
