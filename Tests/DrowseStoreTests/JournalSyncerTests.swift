@testable import DrowseStore
import Foundation
import Synchronization
import Testing

/// The journal's group commit: each answer comes from a sync that began after its request.
@Suite("Journal syncer")
struct JournalSyncerTests {
    /// A sync the test holds open: it counts its calls and blocks until released.
    final class HeldSync: Sendable {
        let calls = Atomic<Int>(0)
        let released = Atomic<Int>(0)
        let result = Atomic<Bool>(true)
        func sync() -> Bool {
            let n = calls.add(1, ordering: .acquiringAndReleasing).newValue
            while released.load(ordering: .acquiring) < n { usleep(200) }
            return result.load(ordering: .acquiring)
        }
    }

    /// The answers received: (which request, ok, how many syncs had begun when it came).
    final class Answers: Sendable {
        let list = Mutex<[(String, Bool, Int)]>([])
        func count() -> Int { list.withLock { $0.count } }
    }

    static func waitUntil(_ condition: () -> Bool) {
        for _ in 0..<10_000 where !condition() { usleep(500) }
    }

    @Test("a request made during a sync is answered by the next one; those waiting meanwhile share it")
    func groupCommit() {
        let held = HeldSync()
        let answers = Answers()
        let syncer = JournalSyncer { held.sync() }
        func ask(_ name: String) {
            syncer.afterSync { ok in answers.list.withLock { $0.append((name, ok, held.calls.load(ordering: .acquiring))) } }
        }
        ask("a")
        Self.waitUntil { held.calls.load(ordering: .acquiring) == 1 }
        // The first sync has begun: these were written after it, so it must not answer them.
        ask("b")
        ask("c")
        ask("d")
        usleep(20_000)
        #expect(answers.count() == 0, "nothing is answered before its sync returns")
        held.released.store(1, ordering: .releasing)
        Self.waitUntil { answers.count() >= 1 && held.calls.load(ordering: .acquiring) == 2 }
        #expect(answers.list.withLock { $0.map(\.0) } == ["a"])
        held.released.store(2, ordering: .releasing)
        Self.waitUntil { answers.count() == 4 }
        let all = answers.list.withLock { $0 }
        #expect(all.map(\.0) == ["a", "b", "c", "d"] && all.allSatisfy(\.1))
        #expect(all.dropFirst().allSatisfy { $0.2 == 2 }, "b, c and d share the second sync")
        usleep(20_000)
        #expect(held.calls.load(ordering: .acquiring) == 2, "no sync without a request")
    }

    @Test("a failed sync answers false; the next request gets a sync of its own")
    func failure() {
        let held = HeldSync()
        held.released.store(100, ordering: .releasing)
        held.result.store(false, ordering: .releasing)
        let answers = Answers()
        let syncer = JournalSyncer { held.sync() }
        syncer.afterSync { ok in answers.list.withLock { $0.append(("a", ok, 0)) } }
        Self.waitUntil { answers.count() == 1 }
        held.result.store(true, ordering: .releasing)
        syncer.afterSync { ok in answers.list.withLock { $0.append(("b", ok, 0)) } }
        Self.waitUntil { answers.count() == 2 }
        #expect(answers.list.withLock { $0.map(\.1) } == [false, true])
    }

    @Test("the store's WAL: a record written without a sync is answered once synced; a missing WAL has nothing to sync")
    func storeWAL() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.recordNotification(app: "a", dedupeKey: "k", payload: "{}", at: 1, durable: false)
            let answers = Answers()
            store.afterJournalSync { ok in answers.list.withLock { $0.append(("a", ok, 0)) } }
            Self.waitUntil { answers.count() == 1 }
            #expect(answers.list.withLock { $0.map(\.1) } == [true])
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
            #expect(WALFile(path: path + "-nothing").sync(), "no WAL: nothing waits")
            #expect(!WALFile(path: path + "/under-a-file-wal").sync(), "a WAL that cannot be reached is not synced")
        }
    }

    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? -1
    }

    @Test("a commit that fills the WAL does not copy it into the database; the journal thread's checkpoint does")
    func checkpointElsewhere() throws {
        try withStorePath { path in
            let db = try SQLiteDatabase(path: path)
            try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t (v TEXT)")
            let asked = Atomic<Int>(0)
            db.checkpointElsewhere { asked.add(1, ordering: .relaxed) }
            let before = Self.size(path)
            // 1,200 commits of a 4 KiB row: more than the WAL's 1,000 pages.
            let row = String(repeating: "x", count: 4000)
            for _ in 0..<1200 { try db.withoutSync { () throws(StoreError) in try db.query("INSERT INTO t VALUES (?)", [.text(row)]) } }
            #expect(asked.load(ordering: .relaxed) > 0, "the full WAL was handed on")
            #expect(Self.size(path) == before, "no commit copied the WAL into the database")
            let checkpointer = WALCheckpointer(path: path)
            checkpointer.checkpoint()
            #expect(checkpointer.failures == 0)
            #expect(Self.size(path) > before + 1200 * 4000, "the checkpoint copied the rows into the database")
            // The copy and the daemon's connection agree: it goes on reading and writing.
            try db.query("INSERT INTO t VALUES ('after')")
            #expect(try db.query("SELECT count(*) FROM t").first?.first?.int64 == 1201)
        }
    }

    @Test("a store hands its full WAL to the journal thread, which checkpoints it")
    func storeCheckpoints() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let before = Self.size(path)
            let payload = String(repeating: "p", count: 4000)
            for i in 0..<1200 {
                _ = try store.recordNotification(app: "a", dedupeKey: "k\(i)", payload: payload, at: 1, durable: false)
            }
            Self.waitUntil { Self.size(path) > before + 1200 * 4000 }
            #expect(Self.size(path) > before + 1200 * 4000, "the journal thread copied the WAL into state.db")
        }
    }

    /// The commits in the WAL at `path`: its frames whose header gives the database's size
    /// after the commit (the last frame of each).
    static func walCommits(_ path: String, pageSize: Int) throws -> Int {
        let wal = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "-wal")))
        var commits = 0
        var at = 32
        while at + 24 + pageSize <= wal.count {
            if wal[at + 4..<at + 8].contains(where: { $0 != 0 }) { commits += 1 }
            at += 24 + pageSize
        }
        return commits
    }

    @Test("a notification admitted as it arrives is recorded and charged in one commit")
    func recordedAndChargedOnce() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
            let seq = try #require(try store.recordNotification(app: "a", dedupeKey: "k", payload: "{}", at: 1, durable: false) { _ in NotificationAdmitted(chargedAt: 2) })
            #expect(try Self.walCommits(path, pageSize: Int(Store.pageSize)) == 1)
            #expect(try store.budgetUses(app: "a", since: 0) == [2])
            #expect(try store.notificationState(seq) == .pending)
            // A duplicate is not admitted again.
            var asked = false
            #expect(try store.recordNotification(app: "a", dedupeKey: "k", payload: "{}", at: 3, durable: false) { _ in asked = true; return NotificationAdmitted(chargedAt: 4) } == nil)
            #expect(!asked)
        }
    }

    @Test("a notification whose handler starts as it arrives is recorded, charged and its start counted in one commit")
    func recordedChargedAndCountedOnce() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            func attempts(_ seq: Int64) throws -> Int64? {
                try store.db.query("SELECT attempts FROM notifications WHERE seq = ?", [.int(seq)]).first?[0].int64
            }
            _ = try store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
            let seq = try #require(try store.recordNotification(app: "a", dedupeKey: "k", payload: "{}", at: 1, durable: false) { _ in
                NotificationAdmitted(chargedAt: 2, startsNow: true)
            })
            #expect(try Self.walCommits(path, pageSize: Int(Store.pageSize)) == 1)
            #expect(try attempts(seq) == 1 && store.budgetUses(app: "a", since: 0) == [2])
            // A redelivery (DUP: one start may have happened) that starts now is its second.
            let dup = try #require(try store.recordNotification(app: "a", dedupeKey: "d", payload: "{}", at: 3, attempts: 1, durable: false) { _ in
                NotificationAdmitted(startsNow: true)
            })
            #expect(try attempts(dup) == 2)
            // One that waits for a slot is counted when it starts.
            let waits = try #require(try store.recordNotification(app: "a", dedupeKey: "w", payload: "{}", at: 4, durable: false) { _ in
                NotificationAdmitted(chargedAt: 4)
            })
            #expect(try attempts(waits) == 0)
            #expect(try store.notificationStarting(waits, durable: false) == 1)
        }
    }
}
