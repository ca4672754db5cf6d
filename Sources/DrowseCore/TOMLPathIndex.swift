/// Key paths (`["fetch", "command"]`) with a value each, that can forget everything below a
/// path in time proportional to what it forgets. The TOML parser must forget the tables of
/// the previous element at every `[[header]]`; a filter over all paths made a 1 MiB file of
/// many headers cost minutes.
struct TOMLPathIndex<Value> {
    private var entries: [[String]: Value] = [:]
    /// For each path, the entries strictly below it.
    private var below: [[String]: Set<[String]>] = [:]

    var isEmpty: Bool { entries.isEmpty }

    func contains(_ path: [String]) -> Bool { entries[path] != nil }

    subscript(path: [String]) -> Value? { entries[path] }

    /// Adds `path` unless it is there; returns whether it was added.
    @discardableResult
    mutating func insert(_ path: [String], _ value: Value) -> Bool {
        guard entries[path] == nil else { return false }
        entries[path] = value
        for n in 1..<max(path.count, 1) { below[Array(path.prefix(n)), default: []].insert(path) }
        return true
    }

    /// Forgets every entry strictly below `path` (not `path` itself).
    mutating func removeAll(below path: [String]) {
        guard let gone = below.removeValue(forKey: path) else { return }
        for entry in gone {
            entries[entry] = nil
            // Its shorter prefixes still have other entries; its longer ones are all below `path`.
            for n in 1..<path.count { below[Array(entry.prefix(n))]?.remove(entry) }
            for n in (path.count + 1)..<max(entry.count, path.count + 1) { below[Array(entry.prefix(n))] = nil }
        }
    }
}
