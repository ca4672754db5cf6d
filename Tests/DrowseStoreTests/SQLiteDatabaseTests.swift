@testable import DrowseStore
import Foundation
import Testing

/// `withoutSync` changes the connection's `synchronous` setting only when it must, and every
/// write outside it is made with FULL again.
@Suite("SQLite connection")
struct SQLiteDatabaseTests {
    static func database() throws -> (SQLiteDatabase, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-sqlite-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let db = try SQLiteDatabase(path: dir + "/t.db")
        try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t(x INTEGER)")
        return (db, dir)
    }

    /// The setting now (1 NORMAL, 2 FULL). A PRAGMA reads its value when it is compiled, so each
    /// question is a statement text of its own, compiled at that moment.
    static func setting(_ db: SQLiteDatabase, _ n: Int) throws(StoreError) -> Int64? {
        try db.query("PRAGMA synchronous -- \(n)").first?.first?.int64
    }

    @Test("commits without sync in a row change nothing between them; the next durable write is FULL again")
    func relaxedUntilDurable() throws {
        let (db, dir) = try Self.database()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try Self.setting(db, 0) == 2)
        try db.withoutSync { () throws(StoreError) in try db.query("INSERT INTO t VALUES (1)") }
        #expect(try Self.setting(db, 1) == 1, "left NORMAL for the next commit without sync")
        try db.withoutSync { () throws(StoreError) in
            try db.transaction { () throws(StoreError) in _ = try db.query("INSERT INTO t VALUES (2)") }
        }
        #expect(try Self.setting(db, 2) == 1)
        // Reads change nothing.
        #expect(try db.query("SELECT count(*) FROM t").first?.first?.int64 == 2)
        #expect(try Self.setting(db, 3) == 1)
        // A write that commits on its own is made with FULL.
        try db.query("INSERT INTO t VALUES (3)")
        #expect(try Self.setting(db, 4) == 2)
        try db.withoutSync { () throws(StoreError) in try db.query("INSERT INTO t VALUES (4)") }
        #expect(try Self.setting(db, 5) == 1)
        // So is a transaction.
        try db.transaction { () throws(StoreError) in _ = try db.query("INSERT INTO t VALUES (5)") }
        #expect(try Self.setting(db, 6) == 2)
        try db.withoutSync { () throws(StoreError) in try db.query("INSERT INTO t VALUES (6)") }
        try db.exec("INSERT INTO t VALUES (7)")
        #expect(try Self.setting(db, 7) == 2, "and exec")
    }

    @Test("inside a durable transaction, withoutSync relaxes nothing: the transaction commits with FULL")
    func insideDurableTransaction() throws {
        let (db, dir) = try Self.database()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let inside = try db.transaction { () throws(StoreError) -> Int64? in
            try db.withoutSync { () throws(StoreError) in try db.query("INSERT INTO t VALUES (1)") }
            return try Self.setting(db, 0)
        }
        #expect(inside == 2)
        #expect(try Self.setting(db, 1) == 2)
    }
}

/// Writes that ride the next commit: nothing is written of them until a transaction commits
/// (or `flushRiders`), a rolled-back one keeps them, and the latest per key wins.
@Suite("Writes that ride the next commit")
struct RiderTests {
    static func count(_ db: SQLiteDatabase, _ table: String) throws(StoreError) -> Int64? {
        try db.query("SELECT count(*) FROM \(table)").first?.first?.int64
    }

    @Test("a rider waits for the next transaction, survives its rollback, and the latest of a key is the one written")
    func ridesNextCommit() throws {
        let (db, dir) = try SQLiteDatabaseTests.database()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try db.exec("CREATE TABLE soft(k TEXT PRIMARY KEY, v INTEGER)")
        let wal = dir + "/t.db-wal"
        let before = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0
        db.rideNextCommit("a") { () throws(StoreError) in _ = try db.query("INSERT OR REPLACE INTO soft VALUES ('a', 1)") }
        db.rideNextCommit("a") { () throws(StoreError) in _ = try db.query("INSERT OR REPLACE INTO soft VALUES ('a', 2)") }
        db.rideNextCommit("b") { () throws(StoreError) in _ = try db.query("INSERT OR REPLACE INTO soft VALUES ('b', 1)") }
        #expect(db.ridersWaiting == 2)
        #expect(try Self.count(db, "soft") == 0)
        #expect(((try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0) == before, "nothing written while waiting")
        // A transaction that rolls back takes none of them.
        struct Refused: Error {}
        #expect(throws: StoreError.self) {
            try db.transaction { () throws(StoreError) in
                _ = try db.query("INSERT INTO t VALUES (1)")
                throw StoreError(code: 1, message: "refused", sql: nil)
            }
        }
        #expect(try Self.count(db, "soft") == 0 && db.ridersWaiting == 2)
        // The next one that commits writes them, the latest of "a".
        try db.withoutSync { () throws(StoreError) in
            try db.transaction { () throws(StoreError) in _ = try db.query("INSERT INTO t VALUES (2)") }
        }
        #expect(db.ridersWaiting == 0)
        #expect(try db.query("SELECT k, v FROM soft ORDER BY k") == [[.text("a"), .int(2)], [.text("b"), .int(1)]])
        // flushRiders writes what waits, in a transaction of its own.
        db.rideNextCommit("c") { () throws(StoreError) in _ = try db.query("INSERT OR REPLACE INTO soft VALUES ('c', 1)") }
        try db.flushRiders()
        #expect(try Self.count(db, "soft") == 3 && db.ridersWaiting == 0)
        // A rider that fails halfway leaves nothing of itself and waits for the next commit; the
        // transaction it rode commits.
        var fail = true
        db.rideNextCommit("d") { () throws(StoreError) in
            _ = try db.query("INSERT OR REPLACE INTO soft VALUES ('d', 1)")
            if fail { throw StoreError(code: 13, message: "full", sql: nil) }
        }
        try db.transaction { () throws(StoreError) in _ = try db.query("INSERT INTO t VALUES (3)") }
        #expect(try Self.count(db, "t") == 2 && db.ridersWaiting == 1)
        #expect(try Self.count(db, "soft") == 3, "the failed rider's first write was undone")
        // flushRiders says so when one fails.
        #expect(throws: StoreError.self) { try db.flushRiders() }
        #expect(try Self.count(db, "soft") == 3 && db.ridersWaiting == 1)
        fail = false
        try db.flushRiders()
        #expect(try Self.count(db, "soft") == 4 && db.ridersWaiting == 0)
    }
}

@Suite("state.db's data version")
struct DataVersionTests {
    @Test("it changes when another connection commits, not at this one's commits nor another's checkpoint")
    func changesForOthersOnly() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-dv-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try Store(path: dir + "/state.db")
        let v0 = try store.dataVersion()
        _ = try store.recordNotification(app: "a", dedupeKey: "k1", payload: "{}", at: 1)
        _ = try store.recordNotification(app: "a", dedupeKey: "k2", payload: "{}", at: 2, durable: false)
        #expect(try store.dataVersion() == v0)
        let other = try SQLiteDatabase(path: dir + "/state.db")
        _ = try other.query("PRAGMA wal_checkpoint(PASSIVE)")
        #expect(try store.dataVersion() == v0, "a checkpoint changes no content")
        try other.exec("UPDATE notifications SET budget_at = 5")
        #expect(try store.dataVersion() != v0)
    }
}
