/// A configuration problem: which file, which key, what is wrong.
public struct ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    public var key: String?
    public var line: Int?
    public var problem: String

    public init(file: String, key: String? = nil, line: Int? = nil, problem: String) {
        self.file = file
        self.key = key
        self.line = line
        self.problem = problem
    }

    /// One line, as `drowsed` prints it before exiting.
    public var description: String {
        var s = file
        if let line { s += ":\(line)" }
        if let key { s += ": key '\(key)'" }
        return s + ": " + problem
    }
}

/// Reads typed values out of a TOML table, reporting the first wrong key as a `ConfigError`
/// and refusing keys it was not asked about (typos must not pass silently).
struct TableReader {
    let table: TOMLTable
    let file: String
    let prefix: String
    private(set) var used: Set<String> = []

    init(_ table: TOMLTable, file: String, prefix: String = "") {
        self.table = table
        self.file = file
        self.prefix = prefix
    }

    func name(_ key: String) -> String { prefix.isEmpty ? key : prefix + "." + key }

    func error(_ key: String, _ problem: String) -> ConfigError {
        ConfigError(file: file, key: name(key), line: table.line(of: key), problem: problem)
    }

    mutating func string(_ key: String) throws(ConfigError) -> String? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .string(let s) = v else { throw error(key, "expected a string, found \(v.typeName)") }
        return s
    }

    mutating func integer(_ key: String, in range: ClosedRange<Int>? = nil) throws(ConfigError) -> Int? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .integer(let n) = v else { throw error(key, "expected an integer, found \(v.typeName)") }
        if let range, !range.contains(n) { throw error(key, "must be between \(range.lowerBound) and \(range.upperBound), found \(n)") }
        return n
    }

    mutating func bool(_ key: String) throws(ConfigError) -> Bool? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .bool(let b) = v else { throw error(key, "expected true or false, found \(v.typeName)") }
        return b
    }

    mutating func stringArray(_ key: String) throws(ConfigError) -> [String]? {
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

    mutating func command(_ key: String) throws(ConfigError) -> [String]? {
        guard let argv = try stringArray(key) else { return nil }
        guard let first = argv.first, !first.isEmpty else { throw error(key, "the command must name a program") }
        return argv
    }

    mutating func duration(_ key: String, minimum: Duration = .zero) throws(ConfigError) -> Duration? {
        if let v = table[key], case .integer = v { throw error(key, "durations are strings with a unit, e.g. \"30s\"") }
        guard let s = try string(key) else { return nil }
        guard let d = DurationText.parse(s) else { throw error(key, "'\(s)' is not a duration (use e.g. \"30s\", \"15m\", \"6h\")") }
        guard d >= minimum else { throw error(key, "must be at least \(DurationText.format(minimum))") }
        return d
    }

    mutating func table(_ key: String) throws(ConfigError) -> TableReader? {
        used.insert(key)
        guard let v = table[key] else { return nil }
        guard case .table(let t) = v else { throw error(key, "expected a table, found \(v.typeName)") }
        return TableReader(t, file: file, prefix: name(key))
    }

    /// Fails on the first key nobody asked for.
    func rejectUnknown() throws(ConfigError) {
        for key in table.keys where !used.contains(key) {
            throw error(key, "unknown key")
        }
    }
}

/// Limits on config files (drowse.toml and each apps.d file).
public enum ConfigFile {
    /// Far above any real config; a bigger file is refused, never read in part.
    public static let maxSize = 1 << 20
}

/// Path helpers: config paths are relative to the folder of the file that names them.
public enum ConfigPath {
    public static func directory(of file: String) -> String {
        guard let slash = file.lastIndex(of: "/") else { return "." }
        let dir = String(file[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    public static func resolve(_ path: String, relativeTo dir: String) -> String {
        if path.hasPrefix("/") { return path }
        var p = path
        while p.hasPrefix("./") { p.removeFirst(2) }
        return dir == "/" ? "/" + p : dir + "/" + p
    }
}
