import DrowseCore
import Testing

@Suite("RolloutDelay")
struct RolloutDelayTests {
    @Test("the same device and notification give the same delay; another of either gives another")
    func deterministic() {
        let a = RolloutDelay.delay(deviceID: "pi-kitchen", notificationID: "rollout-42", spread: 600)
        #expect(a == RolloutDelay.delay(deviceID: "pi-kitchen", notificationID: "rollout-42", spread: 600))
        #expect(a != RolloutDelay.delay(deviceID: "pi-hall", notificationID: "rollout-42", spread: 600))
        #expect(a != RolloutDelay.delay(deviceID: "pi-kitchen", notificationID: "rollout-43", spread: 600))
        // The separator matters: "ab" + "c" is not "a" + "bc".
        #expect(RolloutDelay.seed(deviceID: "ab", notificationID: "c") != RolloutDelay.seed(deviceID: "a", notificationID: "bc"))
    }

    @Test("pinned values: the same on every platform and in every process (no per-process Hasher seed)")
    func pinned() {
        // FNV-1a 64 of the single byte 0 (the separator), the published test vector.
        #expect(RolloutDelay.seed(deviceID: "", notificationID: "") == 0xAF63_BD4C_8601_B7DF)
        let d = RolloutDelay.delay(deviceID: "dev-0", notificationID: "n", spread: 1)
        #expect(d == RolloutDelay.delay(deviceID: "dev-0", notificationID: "n", spread: 1))
        // Scaling: the unit draw is shared, so the delay is proportional to the spread.
        let d20 = RolloutDelay.delay(deviceID: "dev-0", notificationID: "n", spread: 20)
        #expect(abs(d20 - 20 * d) < 1e-9)
    }

    @Test("spread 0 (or not a usable number) means no delay", arguments: [0.0, -1.0, .nan, -.infinity])
    func zero(spread: Double) {
        #expect(RolloutDelay.delay(deviceID: "d", notificationID: "n", spread: spread) == 0)
    }

    @Test("every delay is in [0, spread)", arguments: [0.001, 1.0, 20.0, 86400.0])
    func range(spread: Double) {
        for i in 0..<2000 {
            let d = RolloutDelay.delay(deviceID: "device-\(i)", notificationID: "n", spread: spread)
            #expect(d >= 0 && d < spread)
        }
    }

    @Test("a spread past the cap is held to a day")
    func capped() {
        for i in 0..<200 {
            #expect(RolloutDelay.delay(deviceID: "d\(i)", notificationID: "n", spread: 1e12) < RolloutDelay.maxSpread)
        }
    }

    @Test("over many devices the delays are roughly uniform (chi-squared over 20 buckets), also for sequential ids")
    func uniform() {
        let n = 20_000
        let buckets = 20
        for notification in ["rollout-1", "7c0e"] {
            var counts = [Int](repeating: 0, count: buckets)
            for i in 0..<n {
                let d = RolloutDelay.delay(deviceID: "pi-\(i)", notificationID: notification, spread: 20)
                counts[min(buckets - 1, Int(d))] += 1
            }
            let expected = Double(n) / Double(buckets)
            let chi2 = counts.reduce(0.0) { $0 + (Double($1) - expected) * (Double($1) - expected) / expected }
            // 19 degrees of freedom: p = 0.001 at 43.8.
            #expect(chi2 < 43.8, "buckets \(counts)")
            #expect(counts.min()! > Int(expected * 0.85) && counts.max()! < Int(expected * 1.15))
        }
    }
}
