/// Learns when an app's data gets used (`drowse used`) and predicts the next use, so the
/// planner can fetch just before it. Pure and small: the recent use times are kept, and a
/// time of day (or of week) seen on at least two different days counts as a habit.
package struct UsageModel: Sendable, Equatable {
    /// Recent uses, oldest first (Unix time).
    package private(set) var uses: [Double] = []
    package var capacity = 60
    /// How close two uses on different days must be (in time of day) to form a habit.
    package var window: Double = 20 * 60
    /// Seconds east of UTC for "time of day".
    package var utcOffset: Double = 0

    package init(uses: [Double] = [], utcOffset: Double = 0) {
        self.uses = Array(uses.suffix(60))
        self.utcOffset = utcOffset
    }

    package mutating func record(_ t: Double) {
        uses.append(t)
        if uses.count > capacity { uses.removeFirst(uses.count - capacity) }
    }

    static let day = 86400.0
    static let week = 7 * 86400.0

    /// The next predicted use after `now`, within `horizon` seconds, or nil without a habit.
    package func nextUse(after now: Double, horizon: Double = 86400) -> Double? {
        guard uses.count >= 2 else { return nil }
        var best: Double?
        for period in [Self.day, Self.week] {
            // Group past uses by their phase in the period; a phase used on ≥ 2 different
            // periods (days or weeks) is a habit.
            let phases = uses.map { ($0 + utcOffset).truncatingRemainder(dividingBy: period) }
            for (i, p) in phases.enumerated() {
                let similar = phases.indices.filter { j in
                    let d = abs(phases[j] - p)
                    return min(d, period - d) <= window / 2
                }
                let periods = Set(similar.map { Int(saturating: (uses[$0] + utcOffset) / period, rounding: .down) })
                guard periods.count >= 2, similar.first == i else { continue }
                // The cluster's earliest member (on the circle of the period, relative to `p`):
                // the prefetch must come before the data is read on the early days too, not only
                // on the typical one.
                let earliest = similar.map { j -> Double in
                    var d = phases[j] - p
                    if d > period / 2 { d -= period } else if d <= -period / 2 { d += period }
                    return d
                }.min() ?? 0
                var phase = (p + earliest).truncatingRemainder(dividingBy: period)
                if phase < 0 { phase += period }
                let base = ((now + utcOffset) / period).rounded(.down) * period - utcOffset
                for k in 0...1 {
                    let t = base + Double(k) * period + phase
                    if t > now && t <= now + horizon { best = min(best ?? t, t) }
                }
            }
        }
        return best
    }
}
