/// A configuration problem: which file, which key, what is wrong.
package struct ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    package var file: String
    package var key: String?
    package var line: Int?
    package var problem: String

    package init(file: String, key: String? = nil, line: Int? = nil, problem: String) {
        self.file = file
        self.key = key
        self.line = line
        self.problem = problem
    }

    /// One line, as `drowsed` prints it before exiting: escaped (a key or value may hold ESC or
    /// a newline) and bounded (the key and the problem, which may quote a value, are cut).
    package var description: String {
        var s = LogText.escape(file)
        if let line { s += ":\(line)" }
        if let key { s += ": key '\(LogText.clip(key))'" }
        return s + ": " + LogText.clip(problem, limit: 2 * LogText.quoteLimit)
    }
}

/// Reads typed values out of a TOML table, reporting the first wrong key as a `ConfigError`
/// and refusing keys it was not asked about (typos must not pass silently).
package struct TableReader {
    package let table: TOMLTable
    package let file: String
    package let prefix: String
    package private(set) var used: Set<String> = []

    package init(_ table: TOMLTable, file: String, prefix: String = "") {
        self.table = table
        self.file = file
        self.prefix = prefix
    }

    package func name(_ key: String) -> String { prefix.isEmpty ? key : prefix + "." + key }

    package func error(_ key: String, _ problem: String) -> ConfigError {
        ConfigError(file: file, key: name(key), line: table.line(of: key), problem: problem)
    }

    package mutating func string(_ key: String) throws(ConfigError) -> String? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .string(let s) = v else { throw error(key, "expected a string, found \(v.typeName)") }
        return s
    }

    package mutating func integer(_ key: String, in range: ClosedRange<Int>? = nil) throws(ConfigError) -> Int? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .integer(let n) = v else { throw error(key, "expected an integer, found \(v.typeName)") }
        if let range, !range.contains(n) { throw error(key, "must be between \(range.lowerBound) and \(range.upperBound), found \(n)") }
        return n
    }

    package mutating func bool(_ key: String) throws(ConfigError) -> Bool? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .bool(let b) = v else { throw error(key, "expected true or false, found \(v.typeName)") }
        return b
    }

    package mutating func stringArray(_ key: String) throws(ConfigError) -> [String]? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .array(let items) = v else { throw error(key, "expected an array of strings, found \(v.typeName)") }
        var out: [String] = []
        for item in items {
            guard case .string(let s) = item else { throw error(key, "expected an array of strings, found \(item.typeName) inside") }
            out.append(s)
        }
        return out
    }

    package mutating func command(_ key: String) throws(ConfigError) -> [String]? {
        guard let argv = try stringArray(key) else { return nil }
        guard let first = argv.first, !first.isEmpty else { throw error(key, "the command must name a program") }
        return argv
    }

    package mutating func duration(_ key: String, minimum: Duration = .zero) throws(ConfigError) -> Duration? {
        if let v = table[key], case .integer = v { throw error(key, "durations are strings with a unit, e.g. \"30s\"") }
        guard let s = try string(key) else { return nil }
        guard let d = DurationText.parse(s) else { throw error(key, "'\(s)' is not a duration (use e.g. \"30s\", \"15m\", \"6h\")") }
        guard d >= minimum else { throw error(key, "must be at least \(DurationText.format(minimum))") }
        return d
    }

    /// A share written as a percentage, "50%"; returned as a fraction (0.5).
    package mutating func percent(_ key: String, in range: ClosedRange<Double>) throws(ConfigError) -> Double? {
        guard let text = try string(key) else { return nil }
        guard text.hasSuffix("%"), let n = Double(String(text.dropLast())), n.isFinite, range.contains(n) else {
            throw error(key, "'\(text)' is not a percentage from \(Int(range.lowerBound))% to \(Int(range.upperBound))% (e.g. \"50%\")")
        }
        return n / 100
    }

    package mutating func table(_ key: String) throws(ConfigError) -> TableReader? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .table(let t) = v else { throw error(key, "expected a table, found \(v.typeName)") }
        return TableReader(t, file: file, prefix: name(key))
    }

    /// Fails on the first key nobody asked for.
    package func rejectUnknown() throws(ConfigError) {
        for key in table.keys where !used.contains(key) {
            throw error(key, "unknown key")
        }
    }
}

/// Limits on config files (drowse.toml and each apps.d file).
package enum ConfigFile {
    /// Far above any real config; a bigger file is refused, never read in part.
    package static let maxSize = 1 << 20

    /// A config file's bytes as text: refused with the line of the first bad byte unless they
    /// are valid UTF-8.
    package static func text(_ bytes: [UInt8], file: String) throws(ConfigError) -> String {
        do { return try TOMLParser.text(bytes) } catch { throw ConfigError(file: file, line: error.line, problem: error.reason) }
    }
}

/// Path helpers: config paths are relative to the folder of the file that names them.
package enum ConfigPath {
    package static func directory(of file: String) -> String {
        guard let slash = file.lastIndex(of: "/") else { return "." }
        let dir = String(file[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    package static func resolve(_ path: String, relativeTo dir: String) -> String {
        if path.hasPrefix("/") { return path }
        var p = path
        while p.hasPrefix("./") { p.removeFirst(2) }
        return dir == "/" ? "/" + p : dir + "/" + p
    }
}
