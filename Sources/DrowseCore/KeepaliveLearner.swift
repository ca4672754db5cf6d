/// How seldom the push connection may ping on one network path: the longest idle interval the
/// path (its NATs and firewalls) has been seen to hold, found step by step. Pure; the connection
/// machine feeds it what each ping after a quiet period showed (docs/design.md, "The adaptive
/// keepalive").
///
/// - It starts at `base` (`[mqtt] keepalive`) and pings at `interval`. Once a ping after a whole
///   `interval` of silence has been answered `confirmationsNeeded` times in a row, that interval
///   holds and the next one is tried: twice as long, up to `ceiling` (`[mqtt] max_keepalive`).
/// - A ping after `idle` seconds of silence that went unanswered, on a path that let the very next
///   connection up at once (so the network works: an idle connection was dropped), fails that
///   interval: the learner goes back to the longest one that held and from then on tries halfway
///   between the two, until they are within `resolution` of each other.
/// - An interval that had held and then fails (the path changed behind the same interface) is
///   halved, down to `floor`.
package struct KeepaliveLearner: Sendable, Equatable {
    /// Where learning starts when nothing is known of a path.
    package let base: Double
    /// The longest interval ever tried: the keepalive the session asks the broker for.
    package let ceiling: Double
    /// Never pinged less often than this, whatever failed.
    package let floor: Double
    /// The longest interval seen to hold.
    package private(set) var held: Double
    /// The shortest interval seen to fail, if any (above `held`).
    package private(set) var failed: Double?
    /// The interval pinged at now.
    package private(set) var interval: Double
    /// Answered pings after a whole `interval` of silence, in a row.
    package private(set) var confirmations = 0
    /// Intervals that failed since the learner was made (each cost a reconnect).
    package private(set) var failures = 0
    package static let confirmationsNeeded = 2

    package init(base: Double, ceiling: Double, held: Double? = nil, failed: Double? = nil) {
        self.base = base
        self.ceiling = max(base, ceiling)
        self.floor = min(base, 30)
        let h = min(self.ceiling, max(self.floor, held ?? base))
        self.held = h
        self.failed = failed.flatMap { $0 > h ? $0 : nil }
        self.interval = h
        // A path known from before: go on from what held there.
        if held != nil { interval = next(after: h) }
    }

    /// Nothing longer left to try.
    package var settled: Bool { next(after: held) <= held }

    /// The gap between held and failed below which the search stops.
    var resolution: Double { max(5, held * 0.1) }

    private func next(after h: Double) -> Double {
        if let f = failed {
            return f - h > resolution ? ((h + f) / 2).rounded() : h
        }
        return min(ceiling, h * 2)
    }

    /// A ping sent after `idle` seconds of silence was answered. True when the learner changed
    /// what it knows (to be kept).
    package mutating func answered(idle: Double) -> Bool {
        // Only a ping after the whole interval says anything about it (a window may carry one early).
        guard idle >= interval * 0.95 else { return false }
        confirmations += 1
        guard confirmations >= Self.confirmationsNeeded else { return false }
        confirmations = 0
        let before = (held, interval)
        held = max(held, interval)
        interval = next(after: held)
        return before != (held, interval)
    }

    /// A ping sent after `idle` seconds of silence got no answer, and the next connection came up
    /// at once: the path drops connections idle that long. True when what it knows changed.
    package mutating func unanswered(idle: Double) -> Bool {
        failures += 1
        confirmations = 0
        // A ping goes a little after its interval (the timer's margin, the wakeup): that failed
        // is the interval tried. Kept as measured, the margin would widen the gap the search
        // closes (20.05 - 15 is past a 5 s resolution) and cost one more try, and reconnect.
        let tried = idle >= interval && idle <= interval * 1.05 ? interval : idle
        if tried > held * 1.05 {
            failed = min(failed ?? .infinity, tried)
        } else {
            // What held before fails now: the path is not what it was.
            failed = tried
            held = max(floor, (tried / 2).rounded())
        }
        interval = held
        return true
    }
}
