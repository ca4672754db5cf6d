/// Durations in config files and on the command line: `"500ms"`, `"30s"`, `"15m"`, `"6h"`,
/// `"7d"`, or combinations such as `"1h30m"`.
public enum DurationText {
    public static func parse(_ text: String) -> Duration? {
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
    public static func format(_ d: Duration) -> String {
        var ms = d.milliseconds
        if ms == 0 { return "0s" }
        var out = ms < 0 ? "-" : ""
        ms = abs(ms)
        if ms < 1000 { return out + "\(ms)ms" }
        var s = ms / 1000
        for (unit, size) in [("d", Int64(86400)), ("h", 3600), ("m", 60)] where s >= size {
            out += "\(s / size)\(unit)"
            s %= size
        }
        if s > 0 || out.isEmpty || out == "-" { out += "\(s)s" }
        return out
    }
}

extension Duration {
    public var milliseconds: Int64 {
        let c = components
        return c.seconds * 1000 + c.attoseconds / 1_000_000_000_000_000
    }

    public var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}

extension String {
    public func trimmingSpaces() -> Substring {
        var s = self[...]
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return s
    }
}
