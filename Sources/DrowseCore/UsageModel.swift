/// Learns when an app's data gets used (`drowse used`) and predicts the next use, so the
/// planner can fetch just before it. Pure and small: the recent use times are kept, and uses at
/// about the same time of day (or of week) on at least two different days count as a habit.
package struct UsageModel: Sendable, Equatable {
    /// Recent uses, oldest first (Unix time).
    package private(set) var uses: [Double] = []
    package var capacity = 60
    /// How close in time of day (or week) a use must come to another for both to belong to one
    /// habit; a habit grows wider than this as its uses spread.
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

    /// A habit: uses at about the same phase of a day (or week) on at least two of them.
    package struct Habit: Sendable, Equatable {
        /// Seconds into the period (local time of day, or of the week counted from the epoch's
        /// Thursday) of the earliest use seen in it.
        package var earliest: Double
        /// From the earliest use seen to the latest.
        package var spread: Double
        /// How many different days (or weeks) it was seen on.
        package var periods: Int
    }

    /// The habits in the recent uses: uses whose phases in the period lie within `window` of a
    /// neighbour's form one group (so a habit may spread wider than `window` as days add up);
    /// a group seen on at least two different days (or weeks) is a habit.
    package func habits(period: Double) -> [Habit] {
        guard uses.count >= 2 else { return [] }
        let points = uses.map { t -> (phase: Double, index: Int) in
            let local = t + utcOffset
            return (local - (local / period).rounded(.down) * period, Int(saturating: (local / period).rounded(.down)))
        }.sorted { $0.phase < $1.phase }
        // Cut the circle at its widest gap, then split wherever neighbours are farther apart than `window`.
        var widest = 0, widestGap = -1.0
        for i in points.indices {
            let next = i + 1 < points.count ? points[i + 1].phase : points[0].phase + period
            if next - points[i].phase > widestGap { widestGap = next - points[i].phase; widest = i }
        }
        let ordered = (1...points.count).map { k -> (phase: Double, index: Int) in
            let i = (widest + k) % points.count
            return (i <= widest ? points[i].phase + period : points[i].phase, points[i].index)
        }
        // `ordered` starts just after the widest gap; phases increase (some shifted by a period).
        var groups: [[(phase: Double, index: Int)]] = []
        for p in ordered {
            if let last = groups.last?.last, p.phase - last.phase <= window { groups[groups.count - 1].append(p) } else { groups.append([p]) }
        }
        return groups.compactMap { g in
            let periods = Set(g.map(\.index)).count
            guard periods >= 2, let first = g.first, let last = g.last else { return nil }
            return Habit(earliest: first.phase.truncatingRemainder(dividingBy: period), spread: last.phase - first.phase,
                         periods: periods)
        }
    }

    /// The next predicted use after `now`, within `horizon` seconds, or nil without a habit: the
    /// next time of day (or week) of a habit's earliest use seen, so that a fetch before it comes
    /// before the use on the early days too, not only on the typical one.
    package func nextUse(after now: Double, horizon: Double = 86400) -> Double? {
        var best: Double?
        for period in [Self.day, Self.week] {
            for h in habits(period: period) {
                let phase = h.earliest
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

