/// The `Retry-After` field of a 429 or 503 (RFC 9110 §10.2.3): `delay-seconds` or an
/// `HTTP-date`, parsed strictly; anything else is ignored (nil), so a garbled header falls back
/// to the transfer's own backoff instead of guessing.
package enum RetryAfter: Sendable, Equatable, CustomStringConvertible {
    /// `delay-seconds`: wait this long after the response.
    case seconds(Double)
    /// `HTTP-date`: not before this Unix time.
    case date(Double)

    /// A server cannot park a transfer for longer than this (past it, the backoff's own cap and
    /// the transfer's deadline decide).
    package static let maxDelay: Double = 3600

    package var description: String {
        switch self {
        case .seconds(let s): "\(Int(saturating: s, rounding: .down))s"
        case .date(let t): "until \(Int(saturating: t, rounding: .down)) Unix time"
        }
    }

    /// The wait from `now`, in [0, `maxDelay`]: a date in the past means no wait.
    package func delay(now: Double) -> Double {
        let d: Double
        switch self {
        case .seconds(let s): d = s
        case .date(let t): d = t - now
        }
        return d.clamped(to: 0...Self.maxDelay, nanValue: 0)
    }

    /// Parses a field value (surrounding whitespace allowed). `delay-seconds` is 1*DIGIT
    /// (no sign, no fraction); an HTTP-date is IMF-fixdate, or one of the two obsolete forms a
    /// recipient must also accept (RFC 850, asctime).
    package static func parse(_ value: String) -> RetryAfter? {
        let v = value.trimmingSpaces()
        guard !v.isEmpty, v.utf8.count <= 64 else { return nil }
        if v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            // A huge number is a long wait, capped later; only its size matters.
            guard v.utf8.count <= 12, let n = Int64(v) else { return .seconds(maxDelay) }
            return .seconds(Double(n))
        }
        return HTTPDate.parse(String(v)).map { .date($0) }
    }
}

/// HTTP-date (RFC 9110 §5.6.7) to Unix time.
package enum HTTPDate {
    static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    package static func parse(_ s: String) -> Double? {
        let parts = s.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        if parts.count == 6, parts[0].hasSuffix(","), days.contains(String(parts[0].dropLast())), parts[5] == "GMT",
           let day = digits(parts[1], 2), let month = months.firstIndex(of: parts[2]), let year = digits(parts[3], 4),
           let time = clock(parts[4]) {
            return unix(year: year, month: month + 1, day: day, time)
        }
        // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" (a two-digit year in the past 50 years' window: RFC 9110 says
        // a year more than 50 years ahead is the past century's; 1970-2069 covers every date a server sends now).
        if parts.count == 4, parts[0].hasSuffix(","), longDays.contains(String(parts[0].dropLast())), parts[3] == "GMT" {
            let dmy = parts[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            if dmy.count == 3, let day = digits(dmy[0], 2), let month = months.firstIndex(of: dmy[1]), let yy = digits(dmy[2], 2),
               let time = clock(parts[2]) {
                return unix(year: yy < 70 ? 2000 + yy : 1900 + yy, month: month + 1, day: day, time)
            }
        }
        // asctime: "Sun Nov  6 08:49:37 1994" (the day padded with a space, so "Nov" "" "6").
        var a = parts
        if a.count == 6, a[2].isEmpty, a[3].count == 1 { a.remove(at: 2) }
        if a.count == 5, days.contains(a[0]), let month = months.firstIndex(of: a[1]), a[2].count == 1 || a[2].count == 2,
           let day = digits(a[2], a[2].count), (a[2].count == 2) == (parts.count == 5), let time = clock(a[3]), let year = digits(a[4], 4) {
            return unix(year: year, month: month + 1, day: day, time)
        }
        return nil
    }

    static func digits(_ s: String, _ n: Int) -> Int? {
        guard s.utf8.count == n, s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(s)
    }

    /// "HH:MM:SS" → seconds of the day.
    static func clock(_ s: String) -> Int? {
        let p = s.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard p.count == 3, let h = digits(p[0], 2), let m = digits(p[1], 2), let sec = digits(p[2], 2), h < 24, m < 60, sec < 61 else {
            return nil
        }
        return h * 3600 + m * 60 + min(sec, 59)
    }

    /// Days from the civil date (Howard Hinnant's algorithm); nil for a day the month does not have.
    static func unix(year: Int, month: Int, day: Int, _ seconds: Int) -> Double? {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), day >= 1, day <= lengths[month - 1], year >= 1970 else { return nil }
        let y = month <= 2 ? year - 1 : year
        let era = y / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return Double(days * 86400 + seconds)
    }
}
