import DrowseCore

/// A notification as recorded before its handler runs.
public struct NotificationRecord: Sendable, Equatable {
    public var seq: Int64
    public var app: String
    public var payload: String
    public var receivedAt: Double
}

extension Store {
    /// Records a received notification. Returns its sequence number, or nil when one with
    /// the same dedupe key was already recorded (a QoS 1 redelivery or a provider retry).
    public func recordNotification(app: String, dedupeKey: String, payload: String, at: Double) throws(StoreError) -> Int64? {
        try db.query(
            "INSERT OR IGNORE INTO notifications(app, dedupe_key, payload, received_at, state) VALUES (?,?,?,?, 'pending')",
            [.text(app), .text(dedupeKey), .text(payload), .double(at)])
        guard db.changes == 1 else { return nil }
        return try db.query("SELECT last_insert_rowid()")[0][0].int64
    }

    public func markNotification(_ seq: Int64, state: String, at: Double) throws(StoreError) {
        try db.query("UPDATE notifications SET state = ?, handled_at = ? WHERE seq = ?", [.text(state), .double(at), .int(seq)])
    }

    /// Notifications recorded but not yet handled (after a crash, they are handled on start).
    public func pendingNotifications() throws(StoreError) -> [NotificationRecord] {
        try db.query("SELECT seq, app, payload, received_at FROM notifications WHERE state = 'pending' ORDER BY seq").map {
            NotificationRecord(seq: $0[0].int64 ?? 0, app: $0[1].string ?? "", payload: $0[2].string ?? "", receivedAt: $0[3].double ?? 0)
        }
    }

    /// Forgets handled notifications older than `before` (their dedupe keys expire with them).
    public func pruneNotifications(before: Double) throws(StoreError) {
        try db.query("DELETE FROM notifications WHERE state != 'pending' AND received_at < ?", [.double(before)])
    }
}
