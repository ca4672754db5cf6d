/// Capped exponential backoff with full jitter: attempt n waits a random time in
/// [base·2ⁿ/2, base·2ⁿ], never more than `cap`. The random source is injected for tests.
public struct Backoff: Sendable {
    public var base: Double
    public var cap: Double
    public private(set) var attempt = 0

    public init(base: Double, cap: Double) {
        self.base = base
        self.cap = cap
    }

    /// The delay before the next attempt; `unit` is a uniform random number in [0, 1).
    public mutating func next(unit: Double) -> Double {
        let ceiling = min(cap, base * Double(1 << min(attempt, 30)))
        attempt += 1
        return ceiling / 2 + ceiling / 2 * unit
    }

    public mutating func reset() { attempt = 0 }
}
