import DrowseCore

/// A notification kept for an app whose file cannot be used now.
package struct HeldNotification: Sendable, Equatable {
    package var seq: Int64
    package var app: String
    package var payload: String
    package var receivedAt: Double
    /// Its signature was checked when it arrived (`signed` says whether it was signed); else
    /// `payload` is the message as it came, checked when it is admitted.
    package var checked: Bool
    package var signed: Bool
    package var attempts: Int
}

/// What admitting a notification decided inside its record's transaction, written in the same
/// commit (`Store.recordNotification(admit:)`).
package struct NotificationAdmitted: Sendable, Equatable {
    /// When it used its app's hourly budget; nil: it did not.
    package var chargedAt: Double?
    /// Its handler starts in the same turn: the start is counted in this commit (`attempts`,
    /// DROWSE_ATTEMPT), not in one of its own.
    package var startsNow: Bool

    package init(chargedAt: Double? = nil, startsNow: Bool = false) {
        self.chargedAt = chargedAt
        self.startsNow = startsNow
    }
}

/// A notification as recorded before its handler runs.
package struct NotificationRecord: Sendable, Equatable {
    package var seq: Int64
    package var app: String
    package var payload: String
    package var receivedAt: Double
    /// `pending` (recorded, not yet run) or `deferred` (waiting for a window or the rate budget).
    package var state: NotificationState = .pending
    package var signed: Bool = false
    /// When it used its app's hourly budget: it was admitted to run (and may still wait for a
    /// handler slot). nil while it has not.
    package var budgetAt: Double? = nil
    /// The key it was recorded under (an `id`, or a digest of topic and payload).
    package var dedupeKey: String? = nil
}

extension Store {
    /// Records a received notification. Returns its sequence number, or nil when one with
    /// the same dedupe key was already recorded (a QoS 1 redelivery or a provider retry).
    /// `durable: false` writes it to the WAL without waiting for the disk: it survives a killed
    /// daemon at once, and a power cut only after `syncJournal()` or `afterJournalSync` (or any
    /// later commit).
    /// `attempts`: starts of its handler that may already have happened (1 for a message the
    /// broker marked as sent before, DUP: an earlier copy may have run before a power cut lost
    /// its record).
    /// `admit`: called with the new record's sequence number before the commit; it returns when
    /// the notification used its app's hourly budget and whether its handler starts now, which
    /// the same commit writes (`chargeBudget`, `notificationStarting`): one commit, not three, for
    /// a notification that runs as it arrives.
    package func recordNotification(app: String, dedupeKey: String, payload: String, at: Double, signed: Bool = false,
                                   collapseID: String? = nil, attempts: Int = 0, durable: Bool = true,
                                   admit: (Int64) -> NotificationAdmitted = { _ in NotificationAdmitted() }) throws(StoreError) -> Int64? {
        func insert() throws(StoreError) -> Int64? {
            try db.transaction { () throws(StoreError) -> Int64? in
                try db.query(
                    "INSERT OR IGNORE INTO notifications(app, dedupe_key, payload, received_at, state, signed, collapse_id, attempts) VALUES (?,?,?,?,?,?,?,?)",
                    [.text(app), .text(dedupeKey), .text(payload), .double(at), .text(NotificationState.pending.stored), .int(signed ? 1 : 0),
                     SQLValue(collapseID), .int(Int64(attempts))])
                guard db.changes == 1 else { return nil }
                let seq = db.lastInsertRowID
                let admitted = admit(seq)
                if admitted.chargedAt != nil || admitted.startsNow {
                    // The row's own page, just written: no page more in the commit.
                    try db.query("UPDATE notifications SET budget_at = ?, attempts = attempts + ? WHERE seq = ?",
                                 [SQLValue(admitted.chargedAt), .int(admitted.startsNow ? 1 : 0), .int(seq)])
                }
                return seq
            }
        }
        return durable ? try insert() : try db.withoutSync(insert)
    }

    /// A notification for an app whose file exists but cannot be used now (invalid, or emptied by
    /// a power cut): kept as it came (`held`: its signature not checked yet), or as recorded
    /// before the restart (`held-checked`: checked, its `signed` flag known), until the file is
    /// valid again. nil when the same one is already held. Written without waiting for the disk.
    package func holdNotification(app: String, dedupeKey: String, payload: String, at: Double, checked: Bool, signed: Bool,
                                  attempts: Int) throws(StoreError) -> Int64? {
        try db.withoutSync { () throws(StoreError) -> Int64? in
            try db.query(
                "INSERT OR IGNORE INTO notifications(app, dedupe_key, payload, received_at, state, signed, attempts) VALUES (?,?,?,?,?,?,?)",
                [.text(app), .text(dedupeKey), .text(payload), .double(at), .text(NotificationState.held(checked: checked).stored),
                 .int(signed ? 1 : 0), .int(Int64(attempts))])
            return db.changes == 1 ? db.lastInsertRowID : nil
        }
    }

    /// A recorded notification whose app cannot be used now is held (see `holdNotification`).
    package func holdRecorded(_ seq: Int64) throws(StoreError) {
        try db.query("UPDATE notifications SET state = ? WHERE seq = ? AND \(Self.waiting)",
                     [.text(NotificationState.held(checked: true).stored), .int(seq)])
    }

    /// The held notifications, oldest first.
    package func heldNotifications() throws(StoreError) -> [HeldNotification] {
        try db.query("SELECT seq, app, payload, received_at, state, signed, attempts FROM notifications WHERE \(Self.held) ORDER BY seq")
            .compactMap { r in
                guard let seq = r[0].int64, let app = r[1].string, let payload = r[2].string else { return nil }
                return HeldNotification(seq: seq, app: app, payload: payload, receivedAt: r[3].double ?? 0, checked: r[4].string == NotificationState.held(checked: true).stored,
                                        signed: r[5].int64 == 1, attempts: Int(min(max(r[6].int64 ?? 0, 0), 1_000_000)))
            }
    }

    /// Removes a held notification once it was admitted again under its own key.
    package func releaseHeld(_ seq: Int64) throws(StoreError) {
        try db.transaction { () throws(StoreError) in
            try db.query("DELETE FROM notifications WHERE seq = ? AND \(Self.held)", [.int(seq)])
            try keepPendingScanBelowNext()
        }
    }

    /// Makes every record written so far durable (see `recordNotification(durable:)`).
    package func syncJournal() throws(StoreError) { try db.syncJournal() }

    /// Calls `done` (on the journal thread) once every record written so far is durable, or
    /// with false when the sync failed. The caller's thread does not wait (see `JournalSyncer`).
    package func afterJournalSync(_ done: @escaping @Sendable (Bool) -> Void) { journal.afterSync(done) }

    package func markNotification(_ seq: Int64, state: NotificationState, at: Double) throws(StoreError) {
        guard !state.waits else {
            try db.query("UPDATE notifications SET state = ?, handled_at = ? WHERE seq = ?", [.text(state.stored), .double(at), .int(seq)])
            return
        }
        try db.transaction { () throws(StoreError) in try handled(seq, state: state, at: at) }
    }

    /// `state IN (…)` of these states, as SQL.
    static func stateIn(_ states: [NotificationState]) -> String {
        "state IN (" + states.map { "'\($0.stored)'" }.joined(separator: ", ") + ")"
    }

    /// The condition of schema 14's index of the notifications waiting or held (schema 16
    /// dropped it: see `scanFrom`).
    static let waitingOrHeld = stateIn(NotificationState.waitingOrHeld)
    /// Waiting to run (and so needing the payload).
    static let waiting = stateIn([.pending, .deferred])
    /// Held: the partial index `notifications_held`'s condition (a query uses that index only
    /// when its WHERE has this very term).
    static let held = stateIn([.held(checked: false), .held(checked: true)])

    /// Marks a notification handled, keeping only what dedupes a redelivery for
    /// `NotificationAdmission.dedupeWindow`: its payload is never read again. A large one's row
    /// is deleted and written again without it, not updated in place: SQLite leaves a page whose
    /// row only shrank as full as before and never reuses it (3000 evicted 4 KiB notifications
    /// kept state.db at 12 MB after an in-place update, 0.5 MB this way; a flood of 20 000 grew
    /// it by 80 MB for a week). A small one's is updated in place: the rewrite would also
    /// rewrite a page of each index whose entry it moves, a few KiB on an SD card for every
    /// notification, to save less than `rewrittenPayload` bytes. Call inside a transaction.
    func handled(_ seq: Int64, state: NotificationState, at: Double) throws(StoreError) {
        try db.query(
            "UPDATE notifications SET payload = '', state = ?, download_id = ?, handled_at = ? WHERE seq = ? AND length(CAST(payload AS BLOB)) <= ?",
            [.text(state.stored), SQLValue(state.downloadID), .double(at), .int(seq), .int(Int64(Self.rewrittenPayload))])
        guard db.changes == 0 else { return }
        let kept = "seq, app, dedupe_key, received_at, signed, collapse_id, budget_at"
        guard let row = try db.query("SELECT \(kept) FROM notifications WHERE seq = ?", [.int(seq)]).first else { return }
        try db.query("DELETE FROM notifications WHERE seq = ?", [.int(seq)])
        try db.query("INSERT INTO notifications(\(kept), payload, state, download_id, handled_at) VALUES (?,?,?,?,?,?,?, '', ?, ?, ?)",
                     row + [.text(state.stored), SQLValue(state.downloadID), .double(at)])
    }

    /// Payloads up to this many bytes are dropped in place when handled (see `handled`).
    static let rewrittenPayload = 256

    /// Notifications recorded but not yet handled (after a crash, they are handled on start).
    package func pendingNotifications() throws(StoreError) -> [NotificationRecord] {
        try db.query(
            "SELECT seq, app, payload, received_at, state, signed, budget_at, dedupe_key FROM notifications WHERE seq >= (\(Self.scanFrom)) AND \(Self.waiting) ORDER BY seq"
        ).map {
            NotificationRecord(
                seq: $0[0].int64 ?? 0, app: $0[1].string ?? "", payload: $0[2].string ?? "", receivedAt: Self.unixTime($0[3]) ?? 0,
                state: $0[4].string.flatMap { NotificationState(stored: $0) } ?? .pending, signed: ($0[5].int64 ?? 0) != 0, budgetAt: Self.unixTime($0[6]), dedupeKey: $0[7].string)
        }
    }

    /// The notification's state now (nil when it is not recorded, e.g. pruned).
    package func notificationState(_ seq: Int64) throws(StoreError) -> NotificationState? {
        guard let row = try db.query("SELECT state, download_id FROM notifications WHERE seq = ?", [.int(seq)]).first,
              let text = row[0].string else { return nil }
        return NotificationState(stored: text, downloadID: row[1].string)
    }

    /// Records that the notification used its app's hourly budget at `at`, and is `pending` (to
    /// run). Written like the record itself (to the WAL, synced with it before the PUBACK), so
    /// that it costs no fsync on the way to the handler's start.
    /// A notification's handler starts: its start is counted first (`attempts`). Returns the
    /// attempt this start is (1 for the first), or nil when it no longer waits to run (handled,
    /// collapsed, dropped). `durable: false` as for `recordNotification`.
    package func notificationStarting(_ seq: Int64, durable: Bool) throws(StoreError) -> Int? {
        guard let row = try db.query("SELECT state, attempts FROM notifications WHERE seq = ?", [.int(seq)]).first,
              row[0].string == NotificationState.pending.stored else { return nil }
        let attempts = Int(min(max(row[1].int64 ?? 0, 0), 1_000_000))
        func mark() throws(StoreError) {
            try db.query("UPDATE notifications SET attempts = ? WHERE seq = ?", [.int(Int64(attempts + 1)), .int(seq)])
        }
        if durable { try mark() } else { try db.withoutSync(mark) }
        return attempts + 1
    }

    /// A start counted by `notificationStarting` did not happen (no process could be made).
    package func notificationNotStarted(_ seq: Int64) throws(StoreError) {
        try db.withoutSync { () throws(StoreError) in
            try db.query("UPDATE notifications SET attempts = MAX(attempts - 1, 0) WHERE seq = ?", [.int(seq)])
        }
    }

    package func chargeBudget(_ seq: Int64, at: Double) throws(StoreError) {
        try db.withoutSync { () throws(StoreError) in
            // A deferred one is released to run; any other state stays (a fresh record's handler may
            // already have started, and even ended, before its charge is written).
            _ = try db.query("UPDATE notifications SET budget_at = ?, state = CASE state WHEN ? THEN ? ELSE state END WHERE seq = ?",
                             [.double(at), .text(NotificationState.deferred.stored), .text(NotificationState.pending.stored), .int(seq)])
        }
    }

    /// When the app's notifications used its budget since `since` (what `max_per_hour` counts).
    package func budgetUses(app: String, since: Double) throws(StoreError) -> [Double] {
        try db.query("SELECT budget_at FROM notifications WHERE app = ? AND budget_at > ? ORDER BY budget_at", [.text(app), .double(since)])
            .compactMap { $0[0].double }
    }

    /// SQLite's `data_version`: it changes when another connection commits to the file, not
    /// when this one does (nor at a checkpoint).
    package func dataVersion() throws(StoreError) -> Int64 {
        try db.query("PRAGMA data_version").first?.first?.int64 ?? 0
    }

    /// The payload a notification was recorded with (nil when it is not recorded, e.g. pruned).
    package func notificationPayload(_ seq: Int64) throws(StoreError) -> String? {
        try db.query("SELECT payload FROM notifications WHERE seq = ?", [.int(seq)]).first?.first?.string
    }

    /// Forgets handled notifications received before `before` (their dedupe keys expire with
    /// them); those not yet handled (`pending`, `deferred`) stay. Returns when the oldest handled
    /// one left was received, nil when none is (`NotificationAdmission` prunes again once that
    /// one has aged).
    @discardableResult
    package func pruneNotifications(before: Double) throws(StoreError) -> Double? {
        try db.transaction { () throws(StoreError) in
            let handled = "NOT \(Self.waiting)"
            try db.query("DELETE FROM notifications WHERE \(handled) AND received_at < ?", [.double(before)])
            try advancePendingScan()
            return try db.query("SELECT MIN(received_at) FROM notifications WHERE \(handled)").first?.first?.double
        }
    }

    // MARK: where a start looks for notifications not yet handled

    /// `notifications_scan.from_seq`, as SQL. Every notification waiting to run has a seq at or
    /// above it, and it is never above the next seq (the largest + 1: without AUTOINCREMENT the
    /// number of a deleted newest row is given again), so a new row is never below it. A start
    /// reads the rows from there (a range of the table's own key) instead of a week of handled
    /// ones, and no index of the waiting ones costs each notification a page in two commits
    /// (docs/benchmarks.md, "Where the bytes go"). It moves up at each prune (at the start,
    /// then at most hourly, in the prune's commit); what arrived since is read again after a
    /// crash, a few rows.
    /// A missing row of `notifications_scan` reads as 1 (the whole table), and the next prune
    /// puts it back.
    static let scanFrom = "SELECT coalesce(min(from_seq), 1) FROM notifications_scan"
    static let nextSeq = "SELECT coalesce(max(seq), 0) + 1 FROM notifications"

    /// Moves `from_seq` to the oldest notification waiting to run, or the next seq when none
    /// does. Call inside a transaction.
    func advancePendingScan() throws(StoreError) {
        let oldest = try db.query("SELECT min(seq) FROM notifications WHERE seq >= (\(Self.scanFrom)) AND \(Self.waiting)").first?.first?.int64
        let next = try db.query(Self.nextSeq).first?.first?.int64 ?? 1
        let to = oldest ?? next
        try db.query("UPDATE notifications_scan SET from_seq = ? WHERE from_seq != ?", [.int(to), .int(to)])
        if db.changes == 0 {
            try db.query("INSERT INTO notifications_scan(from_seq) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM notifications_scan)", [.int(to)])
        }
    }

    /// After a delete: `from_seq` is not above the next seq, which may have gone down (the
    /// newest row deleted). Writes nothing when it is not. Call inside the delete's transaction.
    func keepPendingScanBelowNext() throws(StoreError) {
        try db.query("UPDATE notifications_scan SET from_seq = (\(Self.nextSeq)) WHERE from_seq > (\(Self.nextSeq))")
    }
}
