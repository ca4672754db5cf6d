import DrowseCore
@testable import DrowseStore
import Foundation
import Testing

/// Runs `body` with the path of a `state.db` in a fresh temporary folder, removed afterwards.
func withStorePath<T>(_ body: (String) throws -> T) throws -> T {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    return try body(dir.appendingPathComponent("state.db").path)
}

private func fetchRun(_ app: String, _ result: FetchResult, at t: Double, trigger: RunTrigger? = .scheduled) -> RunRecord {
    RunRecord(app: app, event: .fetch, trigger: trigger, result: result, ending: "exit status 0", startedAt: t, endedAt: t + 1)
}

/// The fetch record as the scheduler keeps it: `previous` after a run of `result` at `t`.
private func fetchRecord(_ previous: FetchScheduler.Record, _ result: FetchResult, at t: Double, timedOut: Bool = false) -> FetchScheduler.Record {
    previous.after(result, timedOut: timedOut, start: t)
}

extension AppRecord {
    /// The fetch bookkeeping of this record, as the scheduler's `Record`.
    var fetch: FetchScheduler.Record {
        FetchScheduler.Record(lastFetch: lastFetch, lastResult: lastResult, consecutiveFailures: consecutiveFailures,
                              consecutiveNoData: consecutiveNoData, lastTimedOut: lastTimedOut)
    }
}

@Suite("Store")
struct StoreTests {
    // MARK: Opening

    @Test("a new store is in WAL mode with synchronous=FULL and the current schema version")
    func pragmas() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            #expect(try store.db.query("PRAGMA journal_mode").first?.first?.string == "wal")
            #expect(try store.db.query("PRAGMA synchronous").first?.first?.int64 == 2)  // FULL
            #expect(try store.db.query("SELECT version FROM schema_version").map { $0[0].int64 } == [Store.schemaVersion])
        }
    }

    @Test("an app's report is kept across reopening, replaced whole, and cleared by an empty one")
    func reports() throws {
        try withStorePath { path in
            do {
                let store = try Store(path: path)
                #expect(try store.report(app: "u") == [:])
                try store.setReport(app: "u", ["version": "1.0", "package": "p"], now: 100)
                try store.setReport(app: "u", ["version": "2.0"], now: 101)
            }
            let store = try Store(path: path)
            #expect(try store.report(app: "u") == ["version": "2.0"])
            try store.setReport(app: "u", [:], now: 102)
            #expect(try store.report(app: "u") == [:])
        }
    }

    @Test("a store whose folder does not exist fails to open with an error")
    func missingFolder() {
        #expect(throws: StoreError.self) {
            _ = try Store(path: "/nonexistent-drowse-dir-\(UUID().uuidString)/state.db")
        }
    }

    @Test("opening an existing store twice does not migrate it again")
    func reopenDoesNotRemigrate() throws {
        try withStorePath { path in
            do { _ = try Store(path: path) }
            let store = try Store(path: path)
            #expect(try store.db.query("SELECT COUNT(*) FROM schema_version")[0][0].int64 == 1)
        }
    }

    @Test("a database with a newer schema_version is refused")
    func newerSchemaRefused() throws {
        try withStorePath { path in
            do {
                let store = try Store(path: path)
                try store.db.exec("UPDATE schema_version SET version = \(Store.schemaVersion + 1)")
            }
            let error = #expect(throws: StoreError.self) { _ = try Store(path: path) }
            #expect(error?.description.contains("newer") == true)
        }
    }

    // MARK: Apps and runs

    @Test("an app record is created on first sight and keeps its registration time")
    func appCreatedOnFirstSight() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let first = try store.app("weather", now: 1000)
            #expect(first == AppRecord(
                id: "weather", registeredAt: 1000, lastFetch: nil, lastResult: nil, consecutiveFailures: 0, lastUsed: nil))
            let again = try store.app("weather", now: 5000)
            #expect(again.registeredAt == 1000)
            #expect(try store.db.query("SELECT COUNT(*) FROM apps")[0][0].int64 == 1)
        }
    }

    @Test("fetch runs keep the scheduler's record: last_fetch, last_result and its streaks, run after run")
    func fetchBookkeeping() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            // What the scheduler computes after each run, and the store must keep exactly.
            var record = FetchScheduler.Record()
            func run(_ result: FetchResult, at t: Double, timedOut: Bool = false) throws -> AppRecord {
                record = fetchRecord(record, result, at: t, timedOut: timedOut)
                try store.record(fetchRun("weather", result, at: t), fetch: record)
                let app = try store.app("weather", now: 0)
                #expect(app.fetch == record, "after \(result) at \(t)")
                return app
            }

            var app = try run(.newData, at: 100)
            #expect(app.lastFetch == 100 && app.lastResult == .newData)
            #expect(app.consecutiveFailures == 0 && app.consecutiveNoData == 0 && !app.lastTimedOut)

            app = try run(.noData, at: 150)
            app = try run(.noData, at: 175)
            #expect(app.consecutiveNoData == 2 && app.consecutiveFailures == 0)

            _ = try run(.failed, at: 200)
            _ = try run(.failed, at: 300, timedOut: true)
            app = try run(.failed, at: 400)
            #expect(app.lastFetch == 400)
            #expect(app.lastResult == .failed)
            #expect(app.consecutiveFailures == 3)
            // A failure leaves the no-data streak as it was; only the last run's deadline kill counts.
            #expect(app.consecutiveNoData == 2 && !app.lastTimedOut)

            app = try run(.failed, at: 450, timedOut: true)
            #expect(app.consecutiveFailures == 4 && app.lastTimedOut)

            app = try run(.noData, at: 500)
            #expect(app.lastFetch == 500)
            #expect(app.lastResult == .noData)
            #expect(app.consecutiveFailures == 0 && app.consecutiveNoData == 3 && !app.lastTimedOut)

            app = try run(.newData, at: 600)
            #expect(app.consecutiveFailures == 0 && app.consecutiveNoData == 0)
        }
    }

    @Test("the store keeps the scheduler's counters as given, without computing its own")
    func fetchRecordKeptVerbatim() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            // A record the run's result alone would not give: the store must not recount.
            let given = FetchScheduler.Record(lastFetch: 90, lastResult: .noData, consecutiveFailures: 7, consecutiveNoData: 11,
                                              lastTimedOut: true)
            try store.record(fetchRun("weather", .newData, at: 100), fetch: given)
            #expect(try store.app("weather", now: 0).fetch == given)
            // A fetch run recorded without a record (drowsed stopping) leaves the bookkeeping alone.
            try store.record(fetchRun("weather", .failed, at: 200))
            #expect(try store.app("weather", now: 0).fetch == given)
            #expect(try store.runs(app: "weather").map(\.startedAt) == [200, 100])
            // A record with nothing in it clears it.
            try store.record(fetchRun("weather", .newData, at: 300), fetch: FetchScheduler.Record())
            #expect(try store.app("weather", now: 0).fetch == FetchScheduler.Record())
        }
    }

    @Test("a non-fetch run leaves the fetch bookkeeping alone")
    func nonFetchRun() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            let record = fetchRecord(FetchScheduler.Record(), .failed, at: 100)
            try store.record(fetchRun("weather", .failed, at: 100), fetch: record)
            try store.record(RunRecord(
                app: "weather", event: .notification, trigger: .notification, result: .failed, ending: "killed at its deadline",
                startedAt: 200, endedAt: 230, timedOut: true))
            let app = try store.app("weather", now: 0)
            #expect(app.lastFetch == 100)
            #expect(app.consecutiveFailures == 1)
            #expect(app.fetch == record)
        }
    }

    @Test("one app's runs do not touch another app's record")
    func appsAreIndependent() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("a", now: 0)
            _ = try store.app("b", now: 0)
            try store.record(fetchRun("a", .failed, at: 10), fetch: fetchRecord(FetchScheduler.Record(), .failed, at: 10))
            let b = try store.app("b", now: 0)
            #expect(b.lastFetch == nil && b.lastResult == nil && b.consecutiveFailures == 0)
            #expect(try store.runs(app: "b").isEmpty)
            #expect(try store.app("a", now: 0).consecutiveFailures == 1)
        }
    }

    @Test("schedulerApp loads the record, the runs of the last day and the uses")
    func schedulerApp() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let day = 86400.0
            let t0 = 1_700_000_000.0
            _ = try store.app("weather", now: t0)
            _ = try store.app("other", now: t0)
            // A brand-new app: its registration time and nothing else.
            let fresh = try store.schedulerApp("other", interval: 600, now: t0 + 10)
            #expect(fresh == FetchScheduler.App(id: "other", interval: 600, registeredAt: t0))

            var record = FetchScheduler.Record()
            record = fetchRecord(record, .noData, at: t0 + 100)
            try store.record(fetchRun("weather", .noData, at: t0 + 100), fetch: record)   // more than a day before `now`
            record = fetchRecord(record, .failed, at: t0 + day + 200, timedOut: true)
            try store.record(
                RunRecord(app: "weather", event: .fetch, trigger: .scheduled, result: .failed, ending: "killed at its deadline",
                          startedAt: t0 + day + 200, endedAt: t0 + day + 230, timedOut: true),
                fetch: record)
            try store.record(RunRecord(app: "weather", event: .notification, trigger: .notification, result: .newData, ending: "exit status 0",
                                       startedAt: t0 + day + 300, endedAt: t0 + day + 302.5))
            // Runs that end before they start count nothing; no run counts more than a day.
            try store.record(RunRecord(app: "weather", event: .transfers, trigger: .transfers, result: .newData, ending: "exit status 0",
                                       startedAt: t0 + day + 400, endedAt: t0 + day + 390))
            try store.record(fetchRun("other", .newData, at: t0 + day + 250), fetch: fetchRecord(FetchScheduler.Record(), .newData, at: t0 + day + 250))
            try store.recordUse(app: "weather", at: t0 + 13 * 3600)
            try store.recordUse(app: "weather", at: t0 + day + 13 * 3600)
            try store.recordUse(app: "other", at: t0 + 5)

            let now = t0 + day + 500
            let app = try store.schedulerApp("weather", interval: 900, now: now)
            #expect(app.id == "weather" && app.interval == 900 && app.registeredAt == t0)
            #expect(app.record == record)
            #expect(app.record == FetchScheduler.Record(lastFetch: t0 + day + 200, lastResult: .failed, consecutiveFailures: 1,
                                                        consecutiveNoData: 1, lastTimedOut: true))
            // The run at t0 + 100 is more than a day before now: it no longer counts.
            #expect(app.recentRuns == [
                FetchScheduler.Span(start: t0 + day + 200, seconds: 30),
                FetchScheduler.Span(start: t0 + day + 300, seconds: 2.5),
                FetchScheduler.Span(start: t0 + day + 400, seconds: 0),
            ])
            #expect(app.uses == [t0 + 13 * 3600, t0 + day + 13 * 3600])
            // A day later still, none of them count; a never app loads with no interval.
            let later = try store.schedulerApp("weather", interval: nil, now: t0 + 3 * day)
            #expect(later.recentRuns.isEmpty && later.interval == nil && later.record == record)
            // What it loads is what the scheduler plans with: eligible after the doubled (deadline) interval.
            var s = FetchScheduler()
            _ = s.handle(.started(apps: [app], conditions: .init(online: true, radioTail: 0), now: now))
            let promise = try #require(s.promise("weather", now: now))
            #expect(promise.eligibleAt == t0 + day + 200 + 900 * 4)
        }
    }

    @Test("history is newest first, every field kept, limited by the caller")
    func historyNewestFirst() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            let runs = [
                fetchRun("weather", .newData, at: 10, trigger: nil),
                RunRecord(app: "weather", event: .transfers, trigger: .transfers, result: .noData, ending: "exit status 100",
                          startedAt: 20.5, endedAt: 21.25),
                fetchRun("weather", .failed, at: 30, trigger: .manual),
            ]
            for r in runs { try store.record(r) }
            #expect(try store.runs(app: "weather") == runs.reversed())
            #expect(try store.runs(app: "weather", limit: 2) == Array(runs.reversed().prefix(2)))
        }
    }

    @Test("history is bounded to the newest 200 runs per app, trimmed 32 at a time")
    func historyBounded() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            _ = try store.app("other", now: 0)
            try store.record(fetchRun("other", .newData, at: 1))
            for i in 0..<232 { try store.record(fetchRun("weather", .newData, at: Double(i))) }
            #expect(try store.runs(app: "weather", limit: 1000).count == 232, "not trimmed before 32 more than 200")
            try store.record(fetchRun("weather", .newData, at: 232))
            let kept = try store.runs(app: "weather", limit: 1000)
            #expect(kept.count == 200)
            #expect(kept.first?.startedAt == 232)
            #expect(kept.last?.startedAt == 33)
            for i in 233..<1000 { try store.record(fetchRun("weather", .newData, at: Double(i))) }
            #expect(try (200...232).contains(store.runs(app: "weather", limit: 2000).count))
            #expect(try store.runs(app: "other").count == 1)
        }
    }

    @Test("recordUse sets last_used")
    func recordUse() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            _ = try store.app("weather", now: 0)
            try store.recordUse(app: "weather", at: 42)
            try store.recordUse(app: "weather", at: 43.5)
            #expect(try store.app("weather", now: 0).lastUsed == 43.5)
            #expect(try store.db.query("SELECT COUNT(*) FROM usage WHERE app = 'weather'")[0][0].int64 == 2)
        }
    }

    // MARK: Notifications

    @Test("a notification with the same app and dedupe key is recorded once")
    func notificationDedupe() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let first = try store.recordNotification(app: "weather", dedupeKey: "k1", payload: "{\"id\":\"k1\"}", at: 10)
            #expect(first != nil)
            #expect(try store.recordNotification(app: "weather", dedupeKey: "k1", payload: "{\"id\":\"k1\"}", at: 11) == nil)
            // The same key for another app is a different notification.
            let other = try store.recordNotification(app: "news", dedupeKey: "k1", payload: "{}", at: 12)
            #expect(other != nil && other != first)
            #expect(try store.pendingNotifications().count == 2)
        }
    }

    @Test("a record written without waiting for the disk is in the WAL at once, and the next durable write has synchronous=FULL")
    func recordWithoutSync() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let seq = try #require(try store.recordNotification(app: "weather", dedupeKey: "fast", payload: "{}", at: 1, durable: false))
            #expect(try store.db.query("PRAGMA synchronous").first?.first?.int64 == 1)
            // Another connection (a daemon restarted after kill -9) sees it before any sync.
            let other = try Store(path: path)
            #expect(try other.pendingNotifications().map(\.seq) == [seq])
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
            _ = try store.recordNotification(app: "weather", dedupeKey: "durable", payload: "{}", at: 1)
            // A PRAGMA's value is read when it is compiled: a statement text of its own.
            #expect(try store.db.query("PRAGMA synchronous -- after").first?.first?.int64 == 2)
            try store.syncJournal()
            #expect(try store.recordNotification(app: "weather", dedupeKey: "fast", payload: "{}", at: 2, durable: false) == nil)
        }
    }

    @Test("syncing before anything was written is a no-op")
    func syncJournalOnFreshStore() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            try store.syncJournal()
            try store.syncJournal()
        }
    }

    @Test("pending notifications are listed in arrival order until marked handled")
    func pendingAndHandled() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let a = try #require(try store.recordNotification(app: "weather", dedupeKey: "a", payload: "A", at: 1))
            let b = try #require(try store.recordNotification(app: "news", dedupeKey: "b", payload: "B", at: 2))
            let c = try #require(try store.recordNotification(app: "weather", dedupeKey: "c", payload: "C", at: 3))
            #expect(try store.pendingNotifications() == [
                NotificationRecord(seq: a, app: "weather", payload: "A", receivedAt: 1, dedupeKey: "a"),
                NotificationRecord(seq: b, app: "news", payload: "B", receivedAt: 2, dedupeKey: "b"),
                NotificationRecord(seq: c, app: "weather", payload: "C", receivedAt: 3, dedupeKey: "c"),
            ])
            try store.markNotification(b, state: .handled(.newData), at: 5)
            #expect(try store.pendingNotifications().map(\.seq) == [a, c])
            // A handled notification still dedupes a redelivery.
            #expect(try store.recordNotification(app: "news", dedupeKey: "b", payload: "B", at: 6) == nil)
        }
    }

    @Test("a flood of distinct notifications, each evicted or run, leaves state.db small: handled ones keep only their dedupe key")
    func handledNotificationsDropTheirPayload() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let pad = String(repeating: "x", count: Notification.maxBytes - 100)
            // As in a flood: each waits deferred, and leaves the backlog (evicted, or run) 64 later.
            var seqs: [Int64] = []
            for i in 0..<3000 {
                let seq = try #require(try store.recordNotification(app: "flood", dedupeKey: "id:n\(i)", payload: "{\"id\":\"n\(i)\",\"pad\":\"\(pad)\"}", at: Double(i)))
                try store.markNotification(seq, state: .deferred, at: Double(i))
                seqs.append(seq)
                guard i >= 64 else { continue }
                let old = seqs[i - 64]
                if i % 2 == 0 {
                    try store.markNotification(old, state: .evicted, at: Double(i))
                } else {
                    try store.record(RunRecord(app: "flood", event: .notification, trigger: nil, result: .newData, ending: "exit status 0",
                                               startedAt: Double(i), endedAt: Double(i)), handlingNotification: old)
                }
            }
            let deferred = seqs[2999]
            _ = try store.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
            let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
            // 3000 payloads of ~4 KB kept would be over 12 MB.
            #expect(size < 2 << 20, "state.db is \(size) bytes after 3000 handled 4 KB notifications")
            #expect(try store.notificationPayload(deferred)?.hasPrefix("{\"id\":\"n2999\"") == true)
            #expect(try store.pendingNotifications().count == 64)
            #expect(try store.notificationState(seqs[100]) == .evicted && store.notificationState(seqs[101]) == .handled(.newData))
            // Handled ones still dedupe a redelivery.
            #expect(try store.recordNotification(app: "flood", dedupeKey: "id:n2", payload: "{}", at: 5000) == nil)
            #expect(try store.recordNotification(app: "flood", dedupeKey: "id:n3", payload: "{}", at: 5000) == nil)
        }
    }

    @Test("pruning forgets old handled notifications, never pending ones")
    func prune() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let old = try #require(try store.recordNotification(app: "w", dedupeKey: "old", payload: "", at: 10))
            _ = try #require(try store.recordNotification(app: "w", dedupeKey: "pending", payload: "", at: 10))
            let recent = try #require(try store.recordNotification(app: "w", dedupeKey: "recent", payload: "", at: 100))
            try store.markNotification(old, state: .handled(.newData), at: 11)
            try store.markNotification(recent, state: .handled(.newData), at: 101)
            try store.pruneNotifications(before: 50)
            #expect(try store.db.query("SELECT dedupe_key FROM notifications ORDER BY seq").map { $0[0].string } == ["pending", "recent"])
            // The pruned key may be used again.
            #expect(try store.recordNotification(app: "w", dedupeKey: "old", payload: "", at: 200) != nil)
        }
    }

    // MARK: Transfers

    private static func fullTransfer() -> Transfer {
        var t = Transfer(
            id: "t-1", app: "weather", session: "maps", kind: .upload, url: "https://example.invalid/up?x=1",
            destination: "/data/maps/tile.bin", sha256: String(repeating: "ab", count: 32), createdAt: 1234.5)
        t.state = .paused
        t.bytesDone = 1 << 40
        t.bytesTotal = (1 << 41) + 7
        t.reason = "waiting for power"
        t.location = "/var/lib/drowse/transfers/t-1"
        t.etag = "\"abc123\""
        t.lastModified = "Wed, 21 Oct 2015 07:28:00 GMT"
        t.finishedAt = 2345.25
        t.delivered = true
        return t
    }

    @Test("a transfer round-trips every field, and a bare one its nils")
    func transferRoundTrip() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let full = Self.fullTransfer()
            let bare = Transfer(
                id: "t-2", app: "weather", session: "", kind: .download, url: "http://h/f", destination: nil, sha256: nil,
                createdAt: 2000)
            try store.save(full)
            try store.save(bare)
            #expect(try store.transfer(id: "t-1") == full)
            #expect(try store.transfer(id: "t-2") == bare)
            #expect(try store.transfer(id: "missing") == nil)
        }
    }

    @Test("saving a transfer again replaces it")
    func transferReplace() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            var t = Self.fullTransfer()
            try store.save(t)
            t.state = .completed
            t.reason = nil
            t.delivered = false
            try store.save(t)
            #expect(try store.transfer(id: t.id) == t)
            #expect(try store.transfers().count == 1)
        }
    }

    @Test("commitProgress updates offset, total and validators only")
    func commitProgress() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            var t = Self.fullTransfer()
            try store.save(t)
            try store.commitProgress(id: t.id, bytesDone: 4096, bytesTotal: nil, etag: "\"v2\"", lastModified: nil)
            t.bytesDone = 4096
            t.bytesTotal = nil
            t.etag = "\"v2\""
            t.lastModified = nil
            #expect(try store.transfer(id: t.id) == t)
            // Progress for an unknown transfer is a no-op, not an error.
            try store.commitProgress(id: "missing", bytesDone: 1, bytesTotal: 1, etag: nil, lastModified: nil)
            #expect(try store.transfer(id: "missing") == nil)
        }
    }

    @Test("transfers are listed by app in creation order, and deleted")
    func transfersByApp() throws {
        try withStorePath { path in
            let store = try Store(path: path)
            let t3 = Transfer(id: "c", app: "weather", session: "s", kind: .download, url: "http://h/3", destination: nil, sha256: nil, createdAt: 30)
            let t1 = Transfer(id: "a", app: "weather", session: "s", kind: .download, url: "http://h/1", destination: nil, sha256: nil, createdAt: 10)
            let t2 = Transfer(id: "b", app: "news", session: "s", kind: .upload, url: "http://h/2", destination: nil, sha256: nil, createdAt: 20)
            for t in [t3, t1, t2] { try store.save(t) }
            #expect(try store.transfers(app: "weather").map(\.id) == ["a", "c"])
            #expect(try store.transfers(app: "news").map(\.id) == ["b"])
            #expect(try store.transfers(app: "nobody").isEmpty)
            #expect(try store.transfers().map(\.id) == ["a", "b", "c"])
            try store.deleteTransfer(id: "a")
            #expect(try store.transfers(app: "weather").map(\.id) == ["c"])
        }
    }

    // MARK: Durability

    @Test("a reopened store keeps apps, runs, notifications and transfers")
    func durableAcrossInstances() throws {
        try withStorePath { path in
            let seq: Int64
            do {
                let store = try Store(path: path)
                _ = try store.app("weather", now: 100)
                try store.record(fetchRun("weather", .failed, at: 200), fetch: fetchRecord(FetchScheduler.Record(), .failed, at: 200))
                try store.recordUse(app: "weather", at: 250)
                seq = try #require(try store.recordNotification(app: "weather", dedupeKey: "n1", payload: "P", at: 300))
                try store.save(Self.fullTransfer())
                try store.commitProgress(id: "t-1", bytesDone: 77, bytesTotal: 100, etag: "\"e\"", lastModified: "lm")
            }
            let store = try Store(path: path)
            #expect(try store.app("weather", now: 999) == AppRecord(
                id: "weather", registeredAt: 100, lastFetch: 200, lastResult: .failed, consecutiveFailures: 1, lastUsed: 250))
            #expect(try store.runs(app: "weather") == [fetchRun("weather", .failed, at: 200)])
            #expect(try store.pendingNotifications() == [NotificationRecord(seq: seq, app: "weather", payload: "P", receivedAt: 300, dedupeKey: "n1")])
            #expect(try store.recordNotification(app: "weather", dedupeKey: "n1", payload: "P", at: 301) == nil)
            var t = Self.fullTransfer()
            t.bytesDone = 77
            t.bytesTotal = 100
            t.etag = "\"e\""
            t.lastModified = "lm"
            #expect(try store.transfer(id: "t-1") == t)
        }
    }

    @Test("two open instances on one file see each other's commits")
    func twoInstances() throws {
        try withStorePath { path in
            let a = try Store(path: path)
            let b = try Store(path: path)
            try a.save(Self.fullTransfer())
            #expect(try b.transfer(id: "t-1") == Self.fullTransfer())
            _ = try b.recordNotification(app: "w", dedupeKey: "k", payload: "", at: 1)
            #expect(try a.recordNotification(app: "w", dedupeKey: "k", payload: "", at: 2) == nil)
        }
    }
}
