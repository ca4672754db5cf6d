import DrowseCore
import Testing

@Suite("Backoff")
struct BackoffTests {
    @Test("starts at attempt 0 with delays in [base/2, base)")
    func firstAttempt() {
        var b = Backoff(base: 2, cap: 100)
        #expect(b.attempt == 0)
        #expect(b.next(unit: 0) == 1)
        #expect(b.attempt == 1)
        var c = Backoff(base: 2, cap: 100)
        #expect(c.next(unit: 0.999) < 2)
        #expect(c.next(unit: 0.5) == 3)
    }

    @Test("doubles the ceiling each attempt")
    func doubles() {
        var b = Backoff(base: 1, cap: 1_000_000)
        let lows = (0..<10).map { _ in b.next(unit: 0) }
        #expect(lows == [0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256])
        var h = Backoff(base: 1, cap: 1_000_000)
        let highs = (0..<5).map { _ in h.next(unit: 1) }
        #expect(highs == [1, 2, 4, 8, 16])
    }

    @Test("never exceeds the cap, and keeps jitter at the cap")
    func capped() {
        var b = Backoff(base: 1, cap: 60)
        for _ in 0..<6 { _ = b.next(unit: 0.5) }
        for unit in [0.0, 0.25, 0.5, 0.99] {
            let d = b.next(unit: unit)
            #expect(d >= 30 && d < 60)
        }
        #expect(b.next(unit: 1) == 60)
    }

    @Test("stays finite and capped after very many attempts")
    func manyAttempts() {
        var b = Backoff(base: 0.5, cap: 300)
        var last = 0.0
        for _ in 0..<200 { last = b.next(unit: 0.999_999) }
        #expect(b.attempt == 200)
        #expect(last.isFinite)
        #expect(last <= 300 && last >= 150)
    }

    @Test("every delay lies within [ceiling/2, ceiling] for any unit")
    func jitterBounds() {
        var b = Backoff(base: 3, cap: 1000)
        for n in 0..<12 {
            let ceiling = min(1000, 3 * Double(1 << n))
            let unit = Double(n % 7) / 7
            let d = b.next(unit: unit)
            #expect(d >= ceiling / 2 && d <= ceiling)
        }
    }

    @Test("reset starts over from the base")
    func reset() {
        var b = Backoff(base: 1, cap: 60)
        for _ in 0..<5 { _ = b.next(unit: 0) }
        b.reset()
        #expect(b.attempt == 0)
        #expect(b.next(unit: 0) == 0.5)
    }

    @Test("a cap below the base wins")
    func capBelowBase() {
        var b = Backoff(base: 10, cap: 4)
        #expect(b.next(unit: 0) == 2)
        #expect(b.next(unit: 1) == 4)
    }

    @Test("delays stay finite and bounded whatever base, cap and unit hold")
    func nonFiniteInputs() {
        for (base, cap) in [(Double.infinity, Double.infinity), (.nan, 10), (1, .nan), (1e300, 1e300), (-5, 10)] {
            var b = Backoff(base: base, cap: cap)
            for unit in [0, 0.5, .nan, 7, -1] {
                let d = b.next(unit: unit)
                #expect(d.isFinite && d >= 0 && d <= TimeLimits.maxTimerDelay, "base \(base) cap \(cap) unit \(unit): \(d)")
            }
        }
    }
}
