/// When a transfer that failed transiently is tried again. Pure: the agent feeds it the bytes
/// a transfer held when an attempt started and when it failed, and schedules what it returns.
///
/// An attempt that moved at least 1 MiB forward is retried at once, and one that moved fewer
/// bytes resets the backoff to its first step (0.5–1 s): over a link that resets every few
/// megabytes, each reconnect follows the drop instead of waiting longer and longer (a 64 MiB download over a link reset every 8 MB waited 0.9, 1.1, 3.8, 5, 14, 22, 35 and
/// 118 s when only completion reset it). Attempts that move nothing — a dead server, a long
/// stall — still back off exponentially up to the cap. A full disk has its own, slower backoff.
///
/// Progress counts only past the furthest byte any attempt reached: a server that sends part of
/// the body, then answers the resume with a wrong `Content-Range` (so the part is thrown away and
/// the next attempt starts from 0 again) moves "forward" on every other attempt, and was retried
/// every 0.7 s for the transfer's 7 days; bytes fetched a second time now back off like none.
package struct TransferRetry: Sendable, Equatable {
    /// Attempts started (the first one included).
    package private(set) var attempts = 0
    /// Retries scheduled after transient failures.
    package private(set) var retries = 0
    /// When the scheduled retry runs (Unix time), nil when none is scheduled.
    package private(set) var nextRetryAt: Double?
    var network: Backoff
    var disk: Backoff
    var bytesAtStart: Int64 = 0
    /// The most bytes any attempt held (at its start or when it failed): the mark that new
    /// progress must pass.
    var furthest: Int64 = 0
    /// An attempt that moved at least this many bytes is retried at once.
    package static let immediateAfter: Int64 = 1 << 20

    package init(attempts: Int = 0, retries: Int = 0, network: Backoff = Backoff(base: 1, cap: 300),
                disk: Backoff = Backoff(base: 10, cap: 60)) {
        self.attempts = attempts
        self.retries = retries
        self.network = network
        self.disk = disk
    }

    package static func == (a: TransferRetry, b: TransferRetry) -> Bool {
        a.attempts == b.attempts && a.retries == b.retries && a.nextRetryAt == b.nextRetryAt
            && a.network.attempt == b.network.attempt && a.disk.attempt == b.disk.attempt && a.bytesAtStart == b.bytesAtStart
            && a.furthest == b.furthest
    }

    /// An attempt starts with `bytes` already done (committed, or confirmed by the server).
    package mutating func attemptStarted(bytes: Int64) {
        attempts += 1
        bytesAtStart = bytes
        furthest = max(furthest, bytes)
        nextRetryAt = nil
    }

    /// An attempt failed transiently with `bytes` done by then (for an upload, what it had sent).
    /// Returns the delay before the next attempt; `unit` is a uniform random number in [0, 1).
    /// `retryAfter`: the server's `Retry-After` (429, 503): the next attempt is not before it
    /// (capped at `RetryAfter.maxDelay`); the backoff still advances, and applies if it is longer.
    package mutating func attemptFailed(bytes: Int64, noSpace: Bool, now: Double, unit: Double,
                                        retryAfter: RetryAfter? = nil) -> Double {
        var delay: Double
        // New bytes: past both this attempt's start and the furthest any attempt got.
        let gained = bytes - max(bytesAtStart, furthest)
        furthest = max(furthest, bytes)
        if noSpace {
            delay = disk.next(unit: unit)
        } else if gained >= Self.immediateAfter {
            // The link works and was cut mid-way: reconnect at once. Bounded: each such retry
            // follows at least this many new bytes.
            network.reset()
            delay = 0
        } else {
            if gained > 0 { network.reset() }
            delay = network.next(unit: unit)
        }
        if let retryAfter { delay = max(delay, retryAfter.delay(now: now)) }
        // Space came back (or the link moved bytes): the disk backoff starts afresh next time.
        if !noSpace { disk.reset() }
        retries += 1
        nextRetryAt = now + delay
        return delay
    }
}
