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

/// The notification indexes hold only what their queries look for (waiting or held ones; charged
/// ones), and those queries use them.
@Suite("state.db notification indexes")
struct NotificationIndexTests {
    static func plan(_ store: Store, _ sql: String, _ args: [SQLValue]) throws -> String {
        try store.db.query("EXPLAIN QUERY PLAN " + sql, args).compactMap { $0.last?.string }.joined(separator: "; ")
    }

    static func indexSQL(_ store: Store, _ name: String) throws -> String? {
        try store.db.query("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", [.text(name)]).first?.first?.string
    }

    @Test("a start reads the notifications waiting to run by the table's key from from_seq; held and budget queries use their partial indexes")
    func partial() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let pending = "SELECT seq FROM notifications WHERE seq >= (\(Store.scanFrom)) AND \(Store.waiting) ORDER BY seq"
            #expect(try Self.plan(store, pending, []).contains("USING INTEGER PRIMARY KEY (rowid>?)"))
            let held = "SELECT seq FROM notifications WHERE \(Store.held) ORDER BY seq"
            #expect(try Self.plan(store, held, []).contains("notifications_held"))
            let budget = "SELECT budget_at FROM notifications WHERE app = ? AND budget_at > ? ORDER BY budget_at"
            #expect(try Self.plan(store, budget, [.text("a"), .double(0)]).contains("notifications_budget"))
            #expect(try Self.indexSQL(store, "notifications_waiting") == nil, "no index of the waiting ones")
            let seq = try #require(try store.recordNotification(app: "a", dedupeKey: "k", payload: "{}", at: 1) { _ in NotificationAdmitted(chargedAt: 1) })
            _ = try store.recordNotification(app: "a", dedupeKey: "k2", payload: "{}", at: 1)
            try store.markNotification(seq, state: .handled(.newData), at: 2)
            #expect(try store.db.query("SELECT count(*) FROM notifications INDEXED BY notifications_held WHERE \(Store.held)").first?.first?.int64 == 0)
            #expect(try store.pendingNotifications().map(\.dedupeKey) == ["k2"])
            #expect(try store.budgetUses(app: "a", since: 0) == [1])
        }
    }

    @Test("from_seq moves up at a prune and down when the newest rows go, so a notification numbered again is never skipped; without its row the whole table is read")
    func scanFrom() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            func from() throws -> Int64? { try store.db.query("SELECT from_seq FROM notifications_scan").first?.first?.int64 }
            func record(_ key: String, at: Double = 10) throws -> Int64 {
                try #require(try store.recordNotification(app: "a", dedupeKey: key, payload: "{}", at: at))
            }
            func handle(_ seq: Int64) throws { try store.markNotification(seq, state: .handled(.newData), at: 20) }
            func pending() throws -> [String] { try store.pendingNotifications().compactMap(\.dedupeKey) }
            #expect(try from() == 1)
            for key in ["a", "b", "c"] { _ = try record(key) }
            #expect(try pending() == ["a", "b", "c"])
            for seq: Int64 in 1...3 { try handle(seq) }
            try store.pruneNotifications(before: 0)
            #expect(try from() == 4, "none waits: the next seq")
            #expect(try record("d") == 4 && pending() == ["d"])
            try handle(4)
            // Everything pruned: numbers start again at 1, and from_seq came down with them.
            try store.pruneNotifications(before: 1000)
            #expect(try from() == 1)
            #expect(try record("e") == 1 && pending() == ["e"])
            // Its row gone (state.db edited by hand): the whole table is read.
            #expect(try record("f") == 2)
            try store.db.exec("DELETE FROM notifications_scan")
            #expect(try pending() == ["e", "f"])
            try store.pruneNotifications(before: 0)
            #expect(try from() == 1, "put back at the next prune")
            // A held one released while it was the newest: the next record takes its number.
            for seq: Int64 in 1...2 { try handle(seq) }
            let g = try record("g")
            try store.holdRecorded(g)
            try store.pruneNotifications(before: 0)
            #expect(try from() == g + 1)
            try store.releaseHeld(g)
            #expect(try from() == g, "the next seq came down")
            #expect(try record("h") == g && pending() == ["h"])
        }
    }

    @Test("a state.db of schema 13 loses AUTOINCREMENT, keeping its rows, numbers and indexes; records then write no sqlite_sequence")
    func rebuiltWithoutAutoincrement() throws {
        try withStorePath { path in
            var kept: [Int64] = []
            do {
                let store = try Store(path: path)
                // As schema 13 made them.
                try store.db.exec("""
                    DROP TABLE notifications;
                    CREATE TABLE notifications (seq INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT NOT NULL, dedupe_key TEXT NOT NULL,
                        payload TEXT NOT NULL, received_at REAL NOT NULL, state TEXT NOT NULL, handled_at REAL, signed INTEGER NOT NULL DEFAULT 0,
                        collapse_id TEXT, budget_at REAL, attempts INTEGER NOT NULL DEFAULT 0, UNIQUE (app, dedupe_key));
                    CREATE INDEX notifications_state ON notifications(state, app);
                    CREATE INDEX notifications_budget ON notifications(app, budget_at);
                    DROP TABLE runs;
                    CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT NOT NULL, event TEXT NOT NULL, trigger TEXT,
                        result TEXT NOT NULL, ending TEXT NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL);
                    CREATE INDEX runs_app ON runs(app, seq);
                    UPDATE schema_version SET version = 13;
                    """)
                for i in 0..<3 {
                    kept.append(try #require(try store.recordNotification(app: "a", dedupeKey: "k\(i)", payload: "{\"n\":\(i)}", at: Double(i)) { _ in NotificationAdmitted(chargedAt: 7) }))
                    try store.record(RunRecord(app: "a", event: .notification, trigger: nil, result: .newData, ending: "exit status 0",
                                               startedAt: Double(i), endedAt: Double(i)))
                }
                #expect(kept == [1, 2, 3])
            }
            let store = try Store(path: path)
            for table in ["notifications", "runs"] {
                let sql = try #require(try store.db.query("SELECT sql FROM sqlite_master WHERE name = ?", [.text(table)]).first?.first?.string)
                #expect(!sql.contains("AUTOINCREMENT"), "\(table): \(sql)")
            }
            #expect(try store.pendingNotifications().map(\.payload) == ["{\"n\":0}", "{\"n\":1}", "{\"n\":2}"])
            #expect(try store.budgetUses(app: "a", since: 0) == [7, 7, 7])
            #expect(try store.runs(app: "a", limit: 10).count == 3)
            #expect(try Self.indexSQL(store, "runs_app") != nil)
            #expect(try Self.indexSQL(store, "sqlite_autoindex_notifications_1") == nil, "the UNIQUE constraint's index has no SQL")
            #expect(try store.recordNotification(app: "a", dedupeKey: "k0", payload: "{}", at: 9) == nil, "still unique on (app, key)")
            #expect(try store.recordNotification(app: "a", dedupeKey: "k3", payload: "{}", at: 9) == 4)
            try store.record(RunRecord(app: "a", event: .notification, trigger: nil, result: .newData, ending: "exit status 0", startedAt: 9, endedAt: 9))
            #expect(try store.db.query("SELECT count(*) FROM sqlite_sequence WHERE name IN ('notifications', 'runs')").first?.first?.int64 == 0)
            #expect(try store.db.query("PRAGMA integrity_check").first?.first?.string == "ok")
        }
    }

    @Test("a state.db of schema 13 gets the partial indexes")
    func migrated() throws {
        try withStorePath { path in
            do {
                let store = try Store(path: path)
                try store.db.exec("""
                    DROP INDEX notifications_held; DROP TABLE notifications_scan;
                    CREATE INDEX notifications_state ON notifications(state, app);
                    DROP INDEX notifications_budget; CREATE INDEX notifications_budget ON notifications(app, budget_at);
                    UPDATE schema_version SET version = 13;
                    """)
                for key in ["a", "b", "c"] { _ = try store.recordNotification(app: "a", dedupeKey: key, payload: "{}", at: 1) }
                try store.markNotification(1, state: .handled(.newData), at: 2)
            }
            let store = try Store(path: path)
            #expect(try store.db.query("SELECT from_seq FROM notifications_scan").map { $0[0].int64 } == [2], "the oldest waiting one")
            #expect(try store.pendingNotifications().compactMap(\.dedupeKey) == ["b", "c"])
            #expect(try Self.indexSQL(store, "notifications_state") == nil)
            #expect(try Self.indexSQL(store, "notifications_waiting") == nil, "made by 14, dropped by 16")
            #expect(try Self.indexSQL(store, "notifications_held")?.contains("WHERE") == true)
            #expect(try Self.indexSQL(store, "notifications_budget")?.contains("WHERE budget_at IS NOT NULL") == true)
        }
    }

    @Test("a state.db of schema 14 gets download_id: a notification that became a download names its transfer there, every row kept")
    func downloadColumn() throws {
        try withStorePath { path in
            do {
                let store = try Store(path: path)
                for (key, state) in [("a", "new-data"), ("b", "download:t-9"), ("c", "pending")] {
                    try store.db.query("INSERT INTO notifications(app, dedupe_key, payload, received_at, state) VALUES ('x', ?, '', 1, ?)",
                                       [.text(key), .text(state)])
                }
                try store.db.exec("ALTER TABLE notifications DROP COLUMN download_id; UPDATE schema_version SET version = 14;")
            }
            let store = try Store(path: path)
            let states = try store.db.query("SELECT seq FROM notifications ORDER BY seq").compactMap { $0[0].int64 }
                .map { try store.notificationState($0) }
            #expect(states == [.handled(.newData), .downloading(transfer: "t-9"), .pending])
            #expect(try store.db.query("SELECT state FROM notifications WHERE download_id = 't-9'").first?.first?.string == "downloading")
        }
    }
}
