@testable import DrowseStore
import Testing

/// state.db's 1 KiB pages: a new file gets them, an old one is rebuilt once, keeping its rows.
@Suite("state.db page size")
struct PageSizeTests {
    static func pageSize(_ db: SQLiteDatabase) throws -> Int64? { try db.query("PRAGMA page_size").first?.first?.int64 }
    static func journalMode(_ db: SQLiteDatabase) throws -> String? { try db.query("PRAGMA journal_mode").first?.first?.string }

    @Test("a new state.db has 1 KiB pages, in WAL mode")
    func newFile() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            #expect(try Self.pageSize(store.db) == Store.pageSize)
            #expect(try Self.journalMode(store.db) == "wal")
        }
    }

    /// A state.db as drowsed made it before (4 KiB pages, WAL mode), with a notification
    /// recorded while another process had the file open: it keeps its pages then, and works.
    static func oldStore(_ path: String) throws {
        let other = try SQLiteDatabase(path: path)
        try other.exec("PRAGMA page_size=4096; PRAGMA journal_mode=WAL; CREATE TABLE other (v)")
        try withExtendedLifetime(other) {
            let store = try Store(path: path)
            #expect(try Self.pageSize(store.db) == 4096, "not rebuilt while another connection has it open")
            #expect(try Self.journalMode(store.db) == "wal")
            #expect(try store.recordNotification(app: "a", dedupeKey: "k", payload: "{\"x\":1}", at: 5) != nil)
        }
    }

    @Test("a state.db with 4 KiB pages is rebuilt with 1 KiB ones at the next start it has the file to itself, its rows kept")
    func rebuilt() throws {
        try withStorePath { path in
            try Self.oldStore(path)
            let store = try Store(path: path)
            #expect(try Self.pageSize(store.db) == Store.pageSize)
            #expect(try Self.journalMode(store.db) == "wal")
            #expect(try store.pendingNotifications().map(\.payload) == ["{\"x\":1}"])
            #expect(try store.db.query("PRAGMA integrity_check").first?.first?.string == "ok")
        }
    }
}
