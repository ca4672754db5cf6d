/// A staged rollout's per-device delay: a notification with `"spread": S` makes each device act
/// (run its handler, or start the download of a signed push to transfer) at a delay in [0, S)
/// drawn from its device id and the notification's id, so a fleet's requests arrive flat over
/// the window instead of all in the first second, and a rerun puts each device at the same place.
///
/// Deterministic across processes and platforms: FNV-1a over "device_id\0notification_id", mixed
/// through SplitMix64 (Swift's `Hasher` is seeded per process, so it would not do).
package enum RolloutDelay {
    /// The largest `spread` a notification may carry: one day. A rollout wider than that is a
    /// schedule, not a spread, and a bigger number is more likely a unit mistake (milliseconds).
    package static let maxSpread: Double = 86400

    /// The delay in [0, `spread`) for this device and notification; 0 when `spread` is 0 (or not
    /// a usable number, which `Notification.parse` refuses before it gets here).
    package static func delay(deviceID: String, notificationID: String, spread: Double) -> Double {
        guard spread > 0, spread.isFinite else { return 0 }
        let s = min(spread, maxSpread)
        var g = SplitMix64(seed: seed(deviceID: deviceID, notificationID: notificationID))
        // unit() is in [0, 1) with 53 bits, so the product stays below `s`.
        return min(s * g.unit(), s.nextDown)
    }

    /// FNV-1a 64 of "device_id\0notification_id".
    package static func seed(deviceID: String, notificationID: String) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ b: UInt8) {
            h ^= UInt64(b)
            h &*= 0x0000_0100_0000_01B3
        }
        for b in deviceID.utf8 { mix(b) }
        mix(0)
        for b in notificationID.utf8 { mix(b) }
        return h
    }
}
