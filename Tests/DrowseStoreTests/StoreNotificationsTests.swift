import DrowseCore
@testable import DrowseStore
import Foundation
import Testing

private func withStore<T>(_ body: (Store) throws -> T) throws -> T {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    return try body(try Store(path: dir.appendingPathComponent("state.db").path))
}

/// The store's side of `NotificationAdmission`'s pruning: records deleted as they age, while the
/// daemon runs.
@Suite("Store notifications")
struct StoreNotificationsTests {
    private func keys(_ store: Store) throws -> [String] {
        try store.db.query("SELECT dedupe_key FROM notifications ORDER BY seq").compactMap { $0[0].string }
    }

    @Test("pruning deletes handled records received before the cut, keeps pending and deferred ones, and says which is oldest left")
    func pruneReturnsTheOldestLeft() throws {
        try withStore { store in
            let old = try #require(try store.recordNotification(app: "w", dedupeKey: "old", payload: "", at: 10))
            let pending = try #require(try store.recordNotification(app: "w", dedupeKey: "pending", payload: "", at: 11))
            let deferred = try #require(try store.recordNotification(app: "w", dedupeKey: "deferred", payload: "", at: 12))
            let collapsed = try #require(try store.recordNotification(app: "w", dedupeKey: "collapsed", payload: "", at: 60))
            let recent = try #require(try store.recordNotification(app: "w", dedupeKey: "recent", payload: "", at: 100))
            try store.markNotification(old, state: .handled(.newData), at: 11)
            try store.markNotification(deferred, state: .deferred, at: 12)
            try store.markNotification(collapsed, state: .collapsed, at: 61)
            try store.markNotification(recent, state: .downloading(transfer: "t-1"), at: 101)
            #expect(try store.pruneNotifications(before: 50) == 60)
            #expect(try keys(store) == ["pending", "deferred", "collapsed", "recent"])
            _ = pending
            #expect(try store.pruneNotifications(before: 1000) == nil)
            #expect(try keys(store) == ["pending", "deferred"])
        }
    }

    @Test("driven by NotificationAdmission over eight days: duplicates inside the seven days are refused, older keys are pruned without a restart")
    func pruneAsTheDaemonRuns() throws {
        try withStore { store in
            var m = NotificationAdmission(budget: NotificationBudget(maxPerHour: 100))
            var ran: [Int64] = []
            /// Carries out the actions as the agent does; returns whether the notification was a duplicate.
            func carryOut(_ actions: [NotificationAdmission.Action], payload: String, at t: Double) throws -> Bool {
                var duplicate = false
                for a in actions {
                    switch a {
                    case .record(let app, let key):
                        let seq = try store.recordNotification(app: app, dedupeKey: key, payload: payload, at: t, durable: false)
                        duplicate = try carryOut(m.recorded(seq: seq, now: t, uses: [:], nextWindow: nil), payload: payload, at: t) || duplicate
                    case .duplicate: duplicate = true
                    case .prune(let before): m.pruned(oldestLeft: try store.pruneNotifications(before: before))
                    case .chargeBudget(let seq, let at): try store.chargeBudget(seq, at: at)
                    case .runHandler(let seq, _):
                        ran.append(seq)
                        // The handler ends at once: the run's record marks the notification handled.
                        try store.record(RunRecord(app: "w", event: .notification, trigger: .notification, result: .newData,
                                                   ending: "exit status 0", startedAt: t, endedAt: t), handlingNotification: seq)
                        _ = try carryOut(m.handlerFinished(seq: seq, now: t), payload: payload, at: t)
                    default: Issue.record("unexpected action \(a)")
                    }
                }
                return duplicate
            }
            func push(_ id: String, at t: Double) throws -> Bool {
                try carryOut(m.received(.init(app: "w", id: id), now: t, idDigest: { $0 }, digest: { "" }), payload: "{\"id\":\"\(id)\"}", at: t)
            }
            let day = 86400.0, t0 = 1_700_000_000.0
            _ = try carryOut(m.restored([], now: t0, uses: [:], nextWindow: nil), payload: "", at: t0)
            for d in 0..<8 { #expect(try !push("day\(d)", at: t0 + Double(d) * day)) }
            #expect(ran.count == 8)
            // Every key of the last seven days is still refused on day 8...
            for d in 2..<8 { #expect(try push("day\(d)", at: t0 + 8 * day)) }
            // ...and the ones older than seven days are gone from the store, pruned as they aged.
            #expect(try !keys(store).contains("id:day0"))
            #expect(try !push("day0", at: t0 + 8 * day + 1))
            // day1, exactly seven days old at the prune, is kept: "for 7 days" is a lower bound.
            #expect(try keys(store) == (1..<8).map { "id:day\($0)" } + ["id:day0"])
            #expect(ran.count == 9)
        }
    }
}
