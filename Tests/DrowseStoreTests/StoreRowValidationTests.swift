import DrowseCore
@testable import DrowseStore
import Foundation
import Testing

/// Rows that drowsed cannot have written (an edited or damaged state.db) are refused or
/// sanitised when read, never trusted: a trap on such a row used to recur at every start.
@Suite("Store row validation")
struct StoreRowValidationTests {
    private func withStore<T>(_ body: (Store) throws -> T) throws -> T {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-rows-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        return try body(try Store(path: dir.appendingPathComponent("state.db").path))
    }

    private func insert(_ store: Store, id: String, set: String) throws {
        try store.db.exec(
            """
            INSERT INTO transfers(id, app, session, kind, state, url, created_at, timeout_at)
                VALUES ('\(id)', 'a', 's', 'download', 'waiting', 'http://h/f', 1700000000, 1700003600);
            UPDATE transfers SET \(set) WHERE id = '\(id)';
            """)
    }

    @Test("SQLValue.int64 reads only exact integers from a REAL", arguments: [
        (SQLValue.double(1e300), nil), (.double(.infinity), nil), (.double(1.5), nil), (.double(42), 42 as Int64?),
        (.int(7), 7), (.text("7"), nil), (.null, nil),
    ])
    func int64(value: SQLValue, expected: Int64?) {
        #expect(value.int64 == expected)
    }

    @Test("a bad transfer row comes back failed with the reason", arguments: [
        ("timeout_at = 1e300", "timeout_at"), ("timeout_at = 9e999", "timeout_at"), ("timeout_at = -9e999", "timeout_at"),
        ("bytes_done = 1e300", "bytes_done"), ("bytes_done = -5", "bytes_done"), ("bytes_total = 9223372036854775807", "bytes_total"),
        ("state = 'exploded'", "exploded"), ("kind = 'teleport'", "teleport"), ("created_at = 9e999", "created_at"),
        ("finished_at = -1", "finished_at"), ("owner_uid = -1", "owner_uid"), ("owner_gid = 4294967296", "owner_gid"),
        ("url = 'file:///etc/shadow'", "url"), ("created_at = 'yesterday'", "created_at"), ("timeout_at = X'00'", "timeout_at"),
    ])
    func badTransfer(set: String, mentions: String) throws {
        try withStore { store in
            try insert(store, id: "bad", set: set)
            let t = try #require(try store.transfer(id: "bad"))
            #expect(t.state == .failed)
            #expect(t.reason?.hasPrefix("refused: the stored transfer is invalid") == true)
            #expect(t.reason?.contains(mentions) == true, "\(t.reason ?? "")")
            #expect(t.timeoutAt == nil)
            // Nothing left in it arms a timer or feeds arithmetic (its url stays, to be read).
            #expect(t.bytesDone >= 0 && t.createdAt.isFinite && t.finishedAt?.isFinite != false)
            #expect(try store.transfers().map(\.id) == ["bad"])
        }
    }

    @Test("a good row is untouched beside a bad one")
    func goodRow() throws {
        try withStore { store in
            try insert(store, id: "good", set: "bytes_done = 10")
            try insert(store, id: "bad", set: "timeout_at = 1e300")
            let good = try #require(try store.transfer(id: "good"))
            #expect(good.state == .waiting && good.reason == nil && good.timeoutAt == 1_700_003_600 && good.bytesDone == 10)
        }
    }

    @Test("text columns holding a BLOB with NUL and invalid UTF-8 are read, not crashed on")
    func blobText() throws {
        try withStore { store in
            try insert(store, id: "b", set: "reason = X'00FF41', etag = X''")
            let t = try #require(try store.transfer(id: "b"))
            #expect(t.reason == "\u{0}\u{FFFD}A")
            #expect(t.etag == "")
        }
    }

    @Test("an app's bookkeeping drops times and counters no drowsed writes")
    func appRecord() throws {
        try withStore { store in
            _ = try store.app("a", now: 1_700_000_000)
            try store.db.exec(
                """
                UPDATE apps SET registered_at = -1e300, last_fetch = 1e300, consecutive_failures = 9223372036854775807,
                    last_used = 9e999, consecutive_no_data = -4 WHERE id = 'a'
                """)
            let r = try store.app("a", now: 1_700_000_500)
            #expect(r.registeredAt == 1_700_000_500)
            #expect(r.lastFetch == nil && r.lastUsed == nil)
            #expect(r.consecutiveFailures == 1_000_000)
            #expect(r.consecutiveNoData == 0)
        }
    }

    @Test("usage times that are not Unix times are skipped; runs count at most a day each")
    func usageAndRuntime() throws {
        try withStore { store in
            try store.db.exec(
                """
                INSERT INTO usage(app, at) VALUES ('a', 1e300), ('a', 9e999), ('a', -9e999), ('a', 1700000000);
                INSERT INTO runs(app, event, result, ending, started_at, ended_at) VALUES
                    ('a', 'fetch', 'new-data', 'x', 1700000000, 9e999), ('a', 'fetch', 'new-data', 'x', 1700000000, 1700000010);
                """)
            #expect(try store.uses(app: "a") == [1_700_000_000])
            #expect(try store.runtime(app: "a", since: 0) == 86_400 + 10)
            #expect(try store.runs(app: "a").map(\.endedAt) == [1_700_000_010, 0])
        }
    }
}
