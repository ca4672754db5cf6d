/// Radio energy, after Huang et al., "A Close Examination of Performance and Power
/// Characteristics of 4G LTE Networks", MobiSys 2012 (Table 3's promotion and tail figures
/// for LTE, 3G and Wi-Fi). A radio idles cheaply; waking it costs a promotion; after the
/// last byte it stays powered for the tail. Pure: used by the planner and by `drowse simulate`.
package struct RadioModel: Sendable, Equatable {
    package var name: String
    package var promotionSeconds: Double
    package var promotionWatts: Double
    package var tailSeconds: Double
    package var tailWatts: Double
    /// While data moves.
    package var activeWatts: Double

    package static let lte = RadioModel(name: "lte", promotionSeconds: 0.260, promotionWatts: 1.2107, tailSeconds: 11.576, tailWatts: 1.060, activeWatts: 1.680)
    /// 3G: the DCH tail (8.1 s) and FACH tail (0.8 s) folded into one tail of their weighted power.
    package static let threeG = RadioModel(name: "3g", promotionSeconds: 0.582, promotionWatts: 0.6594, tailSeconds: 8.912, tailWatts: 0.785, activeWatts: 1.000)
    package static let wifi = RadioModel(name: "wifi", promotionSeconds: 0.079, promotionWatts: 0.1244, tailSeconds: 0.238, tailWatts: 0.1193, activeWatts: 0.400)
    /// A wired link has no radio states worth modelling: no promotion, no tail.
    package static let ethernet = RadioModel(name: "ethernet", promotionSeconds: 0, promotionWatts: 0, tailSeconds: 0, tailWatts: 0, activeWatts: 0.100)

    package static func named(_ name: String) -> RadioModel? {
        switch name {
        case "lte": .lte
        case "3g": .threeG
        case "wifi": .wifi
        case "ethernet": .ethernet
        default: nil
        }
    }

    /// The model for `[radio] model`, or for the current network when it is `auto`.
    package static func forConfig(_ name: String, network: Conditions.Network) -> RadioModel {
        if let m = named(name) { return m }
        switch network {
        case .cellular: return .lte
        case .wifi: return .wifi
        case .ethernet, .none: return .ethernet
        }
    }

    package struct Usage: Sendable, Equatable {
        package var promotions = 0
        package var radioOnSeconds = 0.0
        package var joules = 0.0
    }

    /// One stretch of radio-on time as `usage(of:)` counts it: a promotion, then activity and
    /// tail (between activities that start within the tail, and after the last one) until the
    /// tail runs out. The promotion is placed just before the first activity starts.
    package struct Period: Sendable, Equatable {
        /// The promotion starts (`firstActivity - promotionSeconds`).
        package var start: Double
        /// The first activity starts (the promotion ends).
        package var firstActivity: Double
        /// The last activity ends (the final tail starts).
        package var lastActivityEnd: Double
        /// The tail ends: the radio idles.
        package var end: Double
        /// The seconds the radio moved data (the union of the activities).
        package var activeSeconds: Double
        package var joules: Double
        /// Promotion, activity and tail: `end - start`.
        package var radioOnSeconds: Double { end - start }
        package var promotionSeconds: Double { firstActivity - start }
        /// Tail time, between activities and after the last.
        package var tailSeconds: Double { radioOnSeconds - promotionSeconds - activeSeconds }
        /// The activity intervals inside, merged where they overlap.
        package var active: [(start: Double, end: Double)]
        package static func == (a: Period, b: Period) -> Bool {
            a.start == b.start && a.firstActivity == b.firstActivity && a.lastActivityEnd == b.lastActivityEnd && a.end == b.end
                && a.activeSeconds == b.activeSeconds && a.joules == b.joules && a.active.elementsEqual(b.active, by: { $0 == $1 })
        }
    }

    /// The radio-on periods of a set of activity intervals, grouped the way `usage(of:)` groups
    /// them (one per promotion): their count is its `promotions` and their lengths and joules
    /// add up to its `radioOnSeconds` and `joules` (to rounding). For drawing.
    package func periods(of activities: [(start: Double, end: Double)]) -> [Period] {
        var out: [Period] = []
        let sorted = activities.filter { $0.end >= $0.start }.sorted { $0.start < $1.start }
        var current: Period?
        func close() {
            guard var p = current else { return }
            p.end = p.lastActivityEnd + tailSeconds
            p.joules += tailSeconds * tailWatts
            out.append(p)
            current = nil
        }
        for a in sorted {
            if let p = current, a.start <= p.lastActivityEnd + tailSeconds {
                var q = p
                if a.start > q.lastActivityEnd {
                    q.joules += (a.start - q.lastActivityEnd) * tailWatts
                    q.lastActivityEnd = a.start
                    q.active.append((a.start, a.start))
                }
                if a.end > q.lastActivityEnd {
                    let d = a.end - q.lastActivityEnd
                    q.joules += d * activeWatts
                    q.activeSeconds += d
                    q.lastActivityEnd = a.end
                    q.active[q.active.count - 1].end = a.end
                }
                current = q
            } else {
                close()
                current = Period(start: a.start - promotionSeconds, firstActivity: a.start, lastActivityEnd: a.end, end: a.end,
                                 activeSeconds: a.end - a.start, joules: promotionSeconds * promotionWatts + (a.end - a.start) * activeWatts,
                                 active: [(a.start, a.end)])
            }
        }
        close()
        return out
    }

    /// What a set of activity intervals (seconds the radio moves data) cost. Intervals that
    /// start while the radio is still in its tail share one promotion.
    package func usage(of activities: [(start: Double, end: Double)]) -> Usage {
        var u = Usage()
        let sorted = activities.filter { $0.end >= $0.start }.sorted { $0.start < $1.start }
        var activeUntil = -Double.infinity
        var tailUntil = -Double.infinity
        for a in sorted {
            if a.start > tailUntil {
                // Idle: a promotion, and the previous tail ran out in full.
                u.promotions += 1
                u.radioOnSeconds += promotionSeconds
                u.joules += promotionSeconds * promotionWatts
                if activeUntil.isFinite { u.radioOnSeconds += tailSeconds; u.joules += tailSeconds * tailWatts }
                activeUntil = a.start
            } else if a.start > activeUntil {
                // Inside the tail: the tail so far is paid, no promotion.
                let gap = a.start - activeUntil
                u.radioOnSeconds += gap
                u.joules += gap * tailWatts
                activeUntil = a.start
            }
            if a.end > activeUntil {
                let d = a.end - activeUntil
                u.radioOnSeconds += d
                u.joules += d * activeWatts
                activeUntil = a.end
            }
            tailUntil = activeUntil + tailSeconds
        }
        if activeUntil.isFinite { u.radioOnSeconds += tailSeconds; u.joules += tailSeconds * tailWatts }
        return u
    }
}
