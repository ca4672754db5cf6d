import DrowseCore

extension Store {
    /// The most condition changes kept: the newest go in, the oldest out (weeks of a board's
    /// changes; a flapping link cannot grow the file).
    package static let maxConditionChanges = 2000

    /// Notes the board's power and network as they are from `at` on (drowsed calls it when they
    /// change, and once at start). `drowse timeline` draws them.
    package func recordConditions(_ c: Conditions, at: Double) throws(StoreError) {
        _ = try db.query(
            "INSERT INTO condition_changes (at, power, network, battery, metered) VALUES (?, ?, ?, ?, ?)",
            [.double(at), .text(c.powerSource.rawValue), .text(c.network.rawValue), c.batteryPercent.map { .int(Int64($0)) } ?? .null,
             .int(c.metered ? 1 : 0)])
        _ = try db.query(
            "DELETE FROM condition_changes WHERE seq <= (SELECT MAX(seq) FROM condition_changes) - ?",
            [.int(Int64(Self.maxConditionChanges))])
    }
}
