/// Capped exponential backoff with full jitter: attempt n waits a random time in
/// [base·2ⁿ/2, base·2ⁿ], never more than `cap`. The random source is injected for tests.
package struct Backoff: Sendable {
    package var base: Double
    package var cap: Double
    package private(set) var attempt = 0

    package init(base: Double, cap: Double) {
        self.base = base
        self.cap = cap
    }

    /// The delay before the next attempt; `unit` is a uniform random number in [0, 1).
    /// Always finite and within [0, `TimeLimits.maxTimerDelay`], whatever `base` and `cap`
    /// hold: callers turn it into timers and whole seconds, where NaN or infinity would trap.
    package mutating func next(unit: Double) -> Double {
        let limit = TimeLimits.maxTimerDelay
        let raw = min(cap, base * Double(1 << min(attempt, 30)))
        let ceiling = raw.clamped(to: 0...limit, nanValue: limit)
        if attempt < Int.max { attempt += 1 }
        let u = unit.clamped(to: 0...1, nanValue: 1)
        return ceiling / 2 + ceiling / 2 * u
    }

    package mutating func reset() { attempt = 0 }
}
