/// How often a running transfer reports its progress: at most once per `interval` (half a
/// second), however small the chunks libcurl hands over. Progress is for display only: nothing is
/// recorded from it, so dropping the reports in between loses nothing. Pure: the transfer passes
/// the monotonic time.
package struct ProgressThrottle: Sendable, Equatable {
    package static let defaultInterval = 0.5

    package let interval: Double
    /// When progress was last reported (0: never, so the first report at a time ≥ `interval` goes).
    package private(set) var lastReportAt: Double

    package init(interval: Double = ProgressThrottle.defaultInterval, lastReportAt: Double = 0) {
        self.interval = interval
        self.lastReportAt = lastReportAt
    }

    /// Whether progress at `now` is to be reported; when it is, it counts as reported.
    package mutating func shouldReport(at now: Double) -> Bool {
        guard now - lastReportAt >= interval else { return false }
        lastReportAt = now
        return true
    }
}
