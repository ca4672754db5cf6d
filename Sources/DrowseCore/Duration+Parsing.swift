/// Durations in config files and on the command line: `"500ms"`, `"30s"`, `"15m"`, `"6h"`,
/// `"7d"`, or combinations such as `"1h30m"`.
package enum DurationText {
    package static func parse(_ text: String) -> Duration? {
        var total: Double = 0
        var number = ""
        var sawUnit = false
        let chars = Array(text.trimmingSpaces())
        var idx = 0
        guard !chars.isEmpty else { return nil }
        while idx < chars.count {
            let c = chars[idx]
            if c.isNumber || c == "." { number.append(c); idx += 1; continue }
            guard let value = Double(number) else { return nil }
            var unit = String(c)
            if c == "m", idx + 1 < chars.count, chars[idx + 1] == "s" { unit = "ms"; idx += 1 }
            idx += 1
            switch unit {
            case "ms": total += value / 1000
            case "s": total += value
            case "m": total += value * 60
            case "h": total += value * 3600
            case "d": total += value * 86400
            default: return nil
            }
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit, total.isFinite, total * 1000 < 9.0e15 else { return nil }
        return .milliseconds(Int64((total * 1000).rounded()))
    }

    /// Short human form, e.g. `90s` → `1m30s`.
    package static func format(_ d: Duration) -> String {
        let signed = d.milliseconds
        if signed == 0 { return "0s" }
        var out = signed < 0 ? "-" : ""
        // The magnitude, not abs(): abs(Int64.min) traps.
        let ms = signed.magnitude
        if ms < 1000 { return out + "\(ms)ms" }
        var s = ms / 1000
        for (unit, size) in [("d", UInt64(86400)), ("h", 3600), ("m", 60)] where s >= size {
            out += "\(s / size)\(unit)"
            s %= size
        }
        if s > 0 || out.isEmpty || out == "-" { out += "\(s)s" }
        return out
    }
}

extension Duration {
    /// Whole milliseconds, saturating at `Int64.min`/`.max`: a Duration holds about ±1.7e20 s,
    /// far more milliseconds than an Int64 (and `seconds * 1000` would trap).
    package var milliseconds: Int64 {
        let c = components
        let (ms, overflow) = c.seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return c.seconds < 0 ? .min : .max }
        let (sum, overflow2) = ms.addingReportingOverflow(c.attoseconds / 1_000_000_000_000_000)
        if overflow2 { return ms < 0 ? .min : .max }
        return sum
    }

    package var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}

extension String {
    package func trimmingSpaces() -> Substring {
        var s = self[...]
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return s
    }
}
