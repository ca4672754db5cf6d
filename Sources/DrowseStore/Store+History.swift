import DrowseCore

extension Store {
    /// What the store kept of `[from, to]`: runs, notifications and transfers that overlap it,
    /// and uses inside it (`drowse timeline`). Only reads.
    package func history(from: Double, to: Double) throws(StoreError) -> AgentHistory {
        var h = AgentHistory()
        let span: [SQLValue] = [.double(from), .double(to)]
        h.runs = try db.query(
            "SELECT app, event, trigger, result, ending, started_at, ended_at FROM runs WHERE ended_at >= ? AND started_at <= ? ORDER BY started_at, seq",
            span
        ).map { r in
            AgentHistory.Run(app: r[0].string ?? "", event: r[1].string ?? "", trigger: r[2].string, result: r[3].string ?? "",
                             ending: r[4].string ?? "", start: r[5].double ?? 0, end: r[6].double ?? 0)
        }
        h.notifications = try db.query(
            // A notification that became a download is shown with its transfer.
            """
            SELECT app, received_at, handled_at, CASE WHEN download_id IS NULL THEN state ELSE state || ' ' || download_id END
                FROM notifications WHERE COALESCE(handled_at, received_at) >= ? AND received_at <= ? ORDER BY received_at, seq
            """,
            span
        ).map { r in AgentHistory.Notification(app: r[0].string ?? "", receivedAt: r[1].double ?? 0, handledAt: r[2].double, state: r[3].string ?? "") }
        h.transfers = try db.query(
            "SELECT id, app, kind, state, created_at, finished_at, bytes_done, retries FROM transfers WHERE COALESCE(finished_at, ?2) >= ?1 AND created_at <= ?2 ORDER BY created_at, id",
            span
        ).map { r in
            AgentHistory.Transfer(id: r[0].string ?? "", app: r[1].string ?? "", kind: r[2].string ?? "", state: r[3].string ?? "",
                                  createdAt: r[4].double ?? 0, finishedAt: r[5].double, bytes: r[6].int64 ?? 0, retries: Int(r[7].int64 ?? 0))
        }
        h.uses = try db.query("SELECT app, at FROM usage WHERE at BETWEEN ? AND ? ORDER BY at, seq", span).map { ($0[0].string ?? "", $0[1].double ?? 0) }
        // The conditions in force at `from` (the last change before it), then each change.
        h.conditions = try db.query(
            """
            SELECT at, power, network, battery, metered FROM condition_changes
            WHERE at BETWEEN ?1 AND ?2 OR seq = (SELECT MAX(seq) FROM condition_changes WHERE at < ?1) ORDER BY at, seq
            """, span
        ).map { r in
            let network = r[2].string ?? "none"
            return AgentHistory.ConditionsChange(at: max(r[0].double ?? 0, from), online: network != "none", lowBattery: false,
                                                 power: r[1].string, network: network, battery: r[3].int64.map(Int.init))
        }
        return h
    }
}
