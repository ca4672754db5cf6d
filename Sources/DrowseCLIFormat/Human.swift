import DrowseCore
import DrowsePOSIX

/// Human-readable times relative to now, and byte counts.
package enum Human {
    package static func now() -> Double { WallClock.now() }

    /// "in 5m", "2h ago", "now"; "—" for no time.
    package static func when(_ t: Double?, now: Double = Human.now()) -> String {
        guard let t else { return "—" }
        let d = t - now
        // Saturating: a time of 1e300 in an answer prints as far away, not a crash.
        let text = DurationText.format(.seconds(Int64(saturating: abs(d), rounding: .toNearestOrAwayFromZero)))
        if abs(d) < 1 { return "now" }
        return d > 0 ? "in \(text)" : "\(text) ago"
    }

    /// "512 B", "1.5 MiB"; "?" for an unknown count.
    package static func bytes(_ n: Int64?) -> String {
        guard let n else { return "?" }
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(n)
        var u = 0
        while v >= 1024 && u < units.count - 1 { v /= 1024; u += 1 }
        return u == 0 ? "\(n) B" : String(Int(v * 10) / 10) + "." + String(Int(v * 10) % 10) + " " + units[u]
    }
}

extension String {
    /// The text and at least one space, padded to `n` characters (a table column).
    package func padded(_ n: Int) -> String { count >= n ? self + " " : self + String(repeating: " ", count: n - count) }
}
