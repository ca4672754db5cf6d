/// When a download makes its received bytes durable (fdatasync, then `.committed` to the store):
/// once `bytes` have arrived since the last commit, and, for a slow download, once `interval`
/// seconds have passed since it with anything uncommitted (`[transfers] commit_bytes`,
/// `commit_interval`). Pure: the download passes its uncommitted byte count and the monotonic
/// time; the engine asks it when the next time-based commit falls due to bound its wait.
package struct CommitCadence: Sendable, Equatable {
    package let interval: Double
    package let bytes: Int64
    /// When the download last committed (or started).
    package private(set) var lastCommitAt: Double

    package init(interval: Double, bytes: Int64, startedAt: Double) {
        self.interval = interval
        self.bytes = bytes
        lastCommitAt = startedAt
    }

    /// After bytes were appended: whether `uncommitted` bytes are enough to commit now.
    package func dueForBytes(uncommitted: Int64) -> Bool { uncommitted >= bytes }

    /// Whether a time-based commit is due at `now`: something is uncommitted and `interval` has
    /// passed since the last commit.
    package func dueForTime(uncommitted: Int64, now: Double) -> Bool {
        uncommitted > 0 && now - lastCommitAt >= interval
    }

    /// When the next time-based commit falls due; nil when nothing is uncommitted (no wait needed).
    package func nextDue(uncommitted: Int64) -> Double? {
        uncommitted > 0 ? lastCommitAt + interval : nil
    }

    /// A commit was made at `now`.
    package mutating func committed(at now: Double) { lastCommitAt = now }

    /// The poll timeout, in milliseconds, that wakes the engine just after `due` (never negative).
    package static func waitMilliseconds(until due: Double, now: Double) -> Int {
        max(0, Int((due - now) * 1000) + 1)
    }
}
