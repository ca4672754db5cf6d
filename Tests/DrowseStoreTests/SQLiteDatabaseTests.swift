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
