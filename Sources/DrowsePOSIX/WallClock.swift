#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The clocks, read in one place: every monotonic reading in Drowse (drowsed, the CLI, DrowseKit,
/// the MQTT publisher) comes from `WallClock.monotonic()`.
package enum WallClock {
    /// Wall-clock time as Unix seconds (CLOCK_REALTIME).
    package static func now() -> Double { reading(CLOCK_REALTIME) }

    /// CLOCK_BOOTTIME: monotonic, and counts time suspended (the base of `Timeline`).
    package static func boot() -> Double { reading(CLOCK_BOOTTIME) }

    package static func monotonic() -> Double { reading(CLOCK_MONOTONIC) }

    /// clock_gettime(2) fails only for a clock id the kernel lacks (EINVAL) or a bad pointer
    /// (EFAULT): both are programming errors, and a time made up instead would mislead everything.
    private static func reading(_ clock: clockid_t) -> Double {
        var ts = timespec()
        let rc = clock_gettime(clock, &ts)
        let saved = errno
        precondition(rc == 0, "clock_gettime(\(clock)) failed: errno \(saved)")
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

/// Seconds east of UTC in the local time zone now (for "time of day" in usage learning); 0 (UTC)
/// when the time cannot be broken down (localtime_r fails only on a year out of range).
package func localUTCOffset() -> Int {
    var t = time(nil)
    var tmv = tm()
    guard localtime_r(&t, &tmv) != nil else { return 0 }
    return tmv.tm_gmtoff
}

/// Minutes after local midnight at Unix time `t` (the maintenance window's clock); nil when the
/// time cannot be broken down.
package func localMinuteOfDay(at t: Double) -> Int? {
    var s = time_t(t.rounded(.down))
    var tmv = tm()
    guard localtime_r(&s, &tmv) != nil else { return nil }
    return Int(tmv.tm_hour) * 60 + Int(tmv.tm_min)
}

/// Unix time `t` as systemd's calendar takes one moment: "2026-12-02 05:40:00 UTC".
package func utcCalendarText(_ t: Double) -> String? {
    var s = time_t(t.rounded(.up))
    var tmv = tm()
    guard gmtime_r(&s, &tmv) != nil else { return nil }
    func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
    return "\(tmv.tm_year + 1900)-\(two(tmv.tm_mon + 1))-\(two(tmv.tm_mday)) \(two(tmv.tm_hour)):\(two(tmv.tm_min)):\(two(tmv.tm_sec)) UTC"
}
