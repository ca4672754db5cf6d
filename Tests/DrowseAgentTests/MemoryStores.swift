@testable import DrowseAgent
import DrowseCore
@testable import DrowseStore
import DrowseSystem

// The parts' stores in memory, one per store protocol, shared by the part tests.

final class MemoryFetchStore: FetchStore {
    var apps: [String: FetchScheduler.App] = [:]
    var uses: [(String, Double)] = []
    var failing = false
    func schedulerApp(_ id: String, interval: Double?, now: Double) throws(StoreError) -> FetchScheduler.App {
        if failing { throw StoreError(code: 13, message: "disk full", sql: "") }
        return apps[id] ?? FetchScheduler.App(id: id, interval: interval, registeredAt: now)
    }
    func recordUse(app: String, at: Double) throws(StoreError) { uses.append((app, at)) }
    var recorded: [(RunRecord, FetchScheduler.Record?)] = []
    func record(_ run: RunRecord, fetch: FetchScheduler.Record?, handlingNotification: Int64?, durable: Bool) throws(StoreError) {
        if failing { throw StoreError(code: 13, message: "disk full", sql: "") }
        recorded.append((run, fetch))
    }
}

final class MemoryNotificationStore: NotificationStore {
    var rows: [NotificationRecord] = []
    var keys: Set<String> = []
    var budget: [Int64: Double] = [:]
    var broken = false
    func holdRecorded(_ seq: Int64) throws(StoreError) {}
    func recordNotification(app: String, dedupeKey: String, payload: String, at: Double, signed: Bool, collapseID: String?, attempts: Int,
                            durable: Bool, admit: (Int64) -> NotificationAdmitted) throws(StoreError) -> Int64? {
        if broken { throw StoreError(code: 13, message: "database or disk is full", sql: nil) }
        guard !keys.contains(dedupeKey) else { return nil }
        let seq = Int64(rows.count + 1)
        if failsAtCommit {
            // Inserted and admitted, then the COMMIT fails: rolled back.
            _ = admit(seq)
            throw StoreError(code: 13, message: "database or disk is full", sql: "COMMIT")
        }
        keys.insert(dedupeKey)
        rows.append(NotificationRecord(seq: seq, app: app, payload: payload, receivedAt: at, signed: signed))
        let admitted = admit(seq)
        if let charged = admitted.chargedAt { budget[seq] = charged }
        if admitted.startsNow { startsCounted.append(seq) }
        return seq
    }
    /// Records whose handler's start was counted in their own commit.
    var startsCounted: [Int64] = []
    /// The record's transaction fails at its COMMIT, after `admit` ran.
    var failsAtCommit = false
    /// false: the journal's sync fails (a disk error).
    var syncFails = false
    func afterJournalSync(_ done: @escaping @Sendable (Bool) -> Void) { done(!syncFails) }
    func markNotification(_ seq: Int64, state: NotificationState, at: Double) throws(StoreError) {
        if let i = rows.firstIndex(where: { $0.seq == seq }) { rows[i].state = state }
    }
    func pendingNotifications() throws(StoreError) -> [NotificationRecord] { rows.filter { $0.state.waits } }
    func chargeBudget(_ seq: Int64, at: Double) throws(StoreError) { budget[seq] = at }
    /// `dataVersion()`: a test moves it as another connection's commit would.
    var version: Int64 = 1
    func dataVersion() throws(StoreError) -> Int64 { version }
    /// How many times `budgetUses` was read.
    var budgetReads = 0
    func budgetUses(app: String, since: Double) throws(StoreError) -> [Double] {
        budgetReads += 1
        return budget.filter { seq, at in at >= since && rows.contains { $0.seq == seq && $0.app == app } }.map(\.value).sorted()
    }
    func notificationPayload(_ seq: Int64) throws(StoreError) -> String? { rows.first { $0.seq == seq }?.payload }
    func pruneNotifications(before: Double) throws(StoreError) -> Double? { nil }
    /// Starts counted at the start, by notification.
    var attempts: [Int64: Int] = [:]
    func notificationStarting(_ seq: Int64, durable: Bool) throws(StoreError) -> Int? {
        guard rows.contains(where: { $0.seq == seq && $0.state == .pending }) else { return nil }
        attempts[seq, default: 0] += 1
        return attempts[seq]
    }
    func notificationNotStarted(_ seq: Int64) throws(StoreError) { attempts[seq] = max((attempts[seq] ?? 0) - 1, 0) }
}

final class MemoryTransferStore: TransferStore {
    var rows: [String: Transfer] = [:]
    var full = false
    func save(_ t: Transfer) throws(StoreError) {
        if full { throw StoreError(code: 13, message: "database or disk is full", sql: nil) }
        rows[t.id] = t
    }
    func transfer(id: String) throws(StoreError) -> Transfer? { rows[id] }
    func transfers(app: String?) throws(StoreError) -> [Transfer] { rows.values.filter { app == nil || $0.app == app }.sorted { $0.id < $1.id } }
    func commitProgress(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?) throws(StoreError) {
        rows[id]?.bytesDone = bytesDone
    }
    func recordUploadResource(id: String, url: String?, protocol proto: String) throws(StoreError) { rows[id]?.uploadURL = url }
}
