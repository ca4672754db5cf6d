/// Counters and gauges in the Prometheus text exposition format (version 0.0.4): what
/// `GET /v1/metrics`, `drowse metrics` and the `[metrics] textfile` show. A value type with no
/// I/O: the agent owns one and changes it where things happen; rendering is a pure function of it.
///
/// Every family is declared once (name, type, help) so its `# HELP` and `# TYPE` lines appear
/// even before anything happened; series appear as they are first touched (or are declared
/// up front with `seed`, so a scrape before and after an event sees the counter move from 0).
package struct MetricsRegistry: Sendable, Equatable {
    package enum Kind: String, Sendable, Equatable { case counter, gauge }

    package struct Family: Sendable, Equatable {
        package var name: String
        package var kind: Kind
        package var help: String
        /// Series by their rendered label set (`{a="x",b="y"}` or ""), in a stable order.
        package var series: [String: Double] = [:]
    }

    /// Families in the order they were declared (the exposition keeps it).
    package private(set) var families: [Family] = []
    private var index: [String: Int] = [:]

    package init() {}

    /// Declares a family. Counter names end in `_total`; names match `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    /// Declaring one twice keeps the first.
    package mutating func declare(_ name: String, _ kind: Kind, help: String) {
        precondition(Self.isValidName(name), "metric name \(name)")
        precondition(kind != .counter || name.hasSuffix("_total"), "counter \(name) must end in _total")
        guard index[name] == nil else { return }
        index[name] = families.count
        families.append(Family(name: name, kind: kind, help: help))
    }

    /// Makes a series exist (at 0) without changing it if it does.
    package mutating func seed(_ name: String, _ labels: [(String, String)] = []) {
        mutate(name, labels) { _ in }
    }

    /// Adds to a counter (negative amounts are ignored: counters only go up).
    package mutating func add(_ name: String, _ labels: [(String, String)] = [], _ amount: Double = 1) {
        guard amount >= 0, amount.isFinite else { return }
        mutate(name, labels) { $0 += amount }
    }

    /// Sets a gauge (or a counter read from elsewhere, such as the process's CPU seconds).
    package mutating func set(_ name: String, _ labels: [(String, String)], _ value: Double) {
        mutate(name, labels) { $0 = value }
    }

    package mutating func set(_ name: String, _ value: Double) { set(name, [], value) }

    /// A series' value; nil when it does not exist.
    package func value(_ name: String, _ labels: [(String, String)] = []) -> Double? {
        guard let i = index[name] else { return nil }
        return families[i].series[Self.labelText(labels)]
    }

    private mutating func mutate(_ name: String, _ labels: [(String, String)], _ change: (inout Double) -> Void) {
        guard let i = index[name] else { preconditionFailure("metric \(name) was not declared") }
        change(&families[i].series[Self.labelText(labels), default: 0])
    }

    // MARK: exposition

    /// The text exposition: `# HELP`, `# TYPE`, then each series sorted by its labels.
    package func exposition() -> String {
        var out = ""
        for f in families {
            out += "# HELP \(f.name) \(Self.escapeHelp(f.help))\n"
            out += "# TYPE \(f.name) \(f.kind.rawValue)\n"
            for key in f.series.keys.sorted() {
                out += f.name + key + " " + Self.format(f.series[key]!) + "\n"
            }
        }
        return out
    }

    /// `{name="value",...}` with names sorted, or "" without labels.
    package static func labelText(_ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        let parts = labels.sorted { $0.0 < $1.0 }.map { name, value -> String in
            precondition(isValidLabelName(name), "label name \(name)")
            return name + "=\"" + escapeLabelValue(value) + "\""
        }
        return "{" + parts.joined(separator: ",") + "}"
    }

    /// Label values: backslash, double quote and line feed are escaped.
    package static func escapeLabelValue(_ s: String) -> String { escape(s, quotes: true) }

    /// HELP text: backslash and line feed are escaped (quotes are not, per the format).
    package static func escapeHelp(_ s: String) -> String { escape(s, quotes: false) }

    private static func escape(_ s: String, quotes: Bool) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\"" where quotes: out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// Whole numbers without a fraction (exact up to 2^53), others as Swift prints a Double
    /// (shortest round-trip form), and the format's `+Inf`, `-Inf`, `NaN`.
    package static func format(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 9_007_199_254_740_992 { return String(Int64(v)) }
        return "\(v)"
    }

    package static func isValidName(_ s: String) -> Bool {
        guard let first = s.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return s.utf8.allSatisfy { isNameByte($0) || $0 == UInt8(ascii: ":") }
    }

    package static func isValidLabelName(_ s: String) -> Bool {
        guard let first = s.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first), !s.hasPrefix("__") else { return false }
        return s.utf8.allSatisfy(isNameByte)
    }

    private static func isNameByte(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "_")
    }
}

/// Why a transfer failed, as one of a few fixed label values (never the free-text reason, which
/// would make a series per URL or error message).
package enum TransferFailureReason: String, Sendable, CaseIterable {
    case http4xx = "http_4xx"
    case http5xx = "http_5xx"
    case checksum
    case tooLarge = "too_large"
    case network
    case diskFull = "disk_full"
    case timeout
    case other

    /// Classifies a failed transfer's reason text as `TransferLifecycle` and the engine word it.
    package static func classify(_ reason: String) -> TransferFailureReason {
        let r = reason.lowercased()
        if r.contains("sha256") || r.contains("checksum") { return .checksum }
        if r.contains("disk full") || r.contains("no space") || r.contains("quota") { return .diskFull }
        // TransferLifecycle's words for a transfer past its --timeout-resource.
        if r.hasPrefix("timed out") { return .timeout }
        if r.contains("larger than") || r.contains("too large") || r.contains("sent more than") || r.contains("max_unknown_size") {
            return .tooLarge
        }
        if let code = httpStatus(in: r) {
            if (400..<500).contains(code) { return .http4xx }
            if (500..<600).contains(code) { return .http5xx }
        }
        if r.contains("stalled") || r.contains("tls") || r.contains("resolve") || r.contains("connect")
            || r.contains("network") || r.contains("body ended") || r.contains("curl") || r.contains("timeout") { return .network }
        return .other
    }

    /// The number after "http " (as in "HTTP 404" or "creating the upload: HTTP 503").
    static func httpStatus(in r: String) -> Int? {
        let b = Array(r.utf8), key = Array("http ".utf8)
        guard b.count > key.count else { return nil }
        for i in 0...(b.count - key.count) where Array(b[i..<(i + key.count)]) == key {
            var j = i + key.count
            let status = Array("status ".utf8)
            if b.count >= j + status.count, Array(b[j..<(j + status.count)]) == status { j += status.count }
            let digits = b[j...].prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            if digits.count == 3 { return Int(String(decoding: digits, as: UTF8.self)) }
        }
        return nil
    }
}

/// The process's own memory and CPU time, parsed from `/proc/self/stat` and `/proc/self/statm`
/// (and PSS from `/proc/self/smaps_rollup` when it can be read).
package struct ProcessStats: Sendable, Equatable {
    package var residentBytes: Double
    package var virtualBytes: Double
    package var cpuSeconds: Double
    /// Seconds since boot at which the process started.
    package var startTicksSeconds: Double
    package var pssBytes: Double?

    /// `stat` is one line; fields after the command (which may hold spaces and parentheses) are
    /// counted from the last ')'. utime and stime are fields 14 and 15, starttime 22.
    package static func parse(stat: String, statm: String, smapsRollup: String?, pageSize: Double, ticksPerSecond: Double) -> ProcessStats? {
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let rest = stat[stat.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        // rest[0] is field 3 (state): field n is rest[n - 3].
        guard rest.count >= 20, let utime = Double(rest[11]), let stime = Double(rest[12]), let start = Double(rest[19]) else { return nil }
        let m = statm.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard m.count >= 2, let size = Double(m[0]), let resident = Double(m[1]) else { return nil }
        var pss: Double?
        if let s = smapsRollup {
            for line in s.split(separator: "\n") where line.hasPrefix("Pss:") {
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                if f.count >= 2, let kb = Double(f[1]) { pss = kb * 1024 }
                break
            }
        }
        return ProcessStats(residentBytes: resident * pageSize, virtualBytes: size * pageSize,
                            cpuSeconds: (utime + stime) / ticksPerSecond, startTicksSeconds: start / ticksPerSecond, pssBytes: pss)
    }
}
