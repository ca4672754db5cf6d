import DrowseCore

extension Store {
    private static let columns =
        "id, app, session, kind, state, url, destination, sha256, bytes_done, bytes_total, reason, location, etag, last_modified, created_at, finished_at, delivered, source, protocol, upload_url, timeout_at, owner_uid, owner_gid, discretionary, no_cellular, requires_power, attempts, retries, next_retry_at"

    private func values(_ t: Transfer) -> [SQLValue] {
        [.text(t.id), .text(t.app), .text(t.session), .text(t.kind.rawValue), .text(t.state.rawValue), .text(t.url),
         SQLValue(t.destination), SQLValue(t.sha256), .int(t.bytesDone), SQLValue(t.bytesTotal), SQLValue(t.reason),
         SQLValue(t.location), SQLValue(t.etag), SQLValue(t.lastModified), .double(t.createdAt), SQLValue(t.finishedAt),
         .int(t.delivered ? 1 : 0), SQLValue(t.source), SQLValue(t.uploadProtocol), SQLValue(t.uploadURL), SQLValue(t.timeoutAt),
         SQLValue(t.ownerUID.map(Int64.init)), SQLValue(t.ownerGID.map(Int64.init)),
         .int(t.requirements.discretionary ? 1 : 0), .int(t.requirements.noCellular ? 1 : 0), .int(t.requirements.requiresPower ? 1 : 0),
         .int(Int64(t.attempts)), .int(Int64(t.retries)), SQLValue(t.nextRetryAt)]
    }

    private func transfer(_ r: [SQLValue]) -> Transfer {
        var t = Transfer(
            id: r[0].string ?? "", app: r[1].string ?? "", session: r[2].string ?? "",
            kind: Transfer.Kind(rawValue: r[3].string ?? "") ?? .download, url: r[5].string ?? "",
            destination: r[6].string, sha256: r[7].string, createdAt: r[14].double ?? 0)
        t.state = Transfer.State(rawValue: r[4].string ?? "") ?? .failed
        t.bytesDone = r[8].int64 ?? 0
        t.bytesTotal = r[9].int64
        t.reason = r[10].string
        t.location = r[11].string
        t.etag = r[12].string
        t.lastModified = r[13].string
        t.finishedAt = r[15].double
        t.delivered = (r[16].int64 ?? 0) != 0
        t.source = r[17].string
        t.uploadProtocol = r[18].string
        t.uploadURL = r[19].string
        t.timeoutAt = r[20].double
        t.ownerUID = r[21].int64.map { UInt32(truncatingIfNeeded: $0) }
        t.ownerGID = r[22].int64.map { UInt32(truncatingIfNeeded: $0) }
        t.requirements = TransferRequirements(
            discretionary: (r[23].int64 ?? 0) != 0, noCellular: (r[24].int64 ?? 0) != 0, requiresPower: (r[25].int64 ?? 0) != 0)
        t.attempts = Int(clamping: r[26].int64 ?? 0)
        t.retries = Int(clamping: r[27].int64 ?? 0)
        t.nextRetryAt = r[28].double
        return t
    }

    /// Inserts or replaces the whole row.
    public func save(_ t: Transfer) throws(StoreError) {
        try db.query("INSERT OR REPLACE INTO transfers(\(Self.columns)) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values(t))
    }

    /// Commits download progress: only called after the bytes are on disk (fdatasync).
    public func commitProgress(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?) throws(StoreError) {
        try db.query(
            // A late commit from the sync thread never rewinds a finished transfer.
            "UPDATE transfers SET bytes_done = ?, bytes_total = ?, etag = ?, last_modified = ? WHERE id = ? AND state NOT IN ('completed', 'failed', 'cancelled')",
            [.int(bytesDone), SQLValue(bytesTotal), SQLValue(etag), SQLValue(lastModified), .text(id)])
    }

    public func transfer(id: String) throws(StoreError) -> Transfer? {
        try db.query("SELECT \(Self.columns) FROM transfers WHERE id = ?", [.text(id)]).first.map(transfer)
    }

    public func transfers(app: String? = nil) throws(StoreError) -> [Transfer] {
        if let app {
            return try db.query("SELECT \(Self.columns) FROM transfers WHERE app = ? ORDER BY created_at", [.text(app)]).map(transfer)
        }
        return try db.query("SELECT \(Self.columns) FROM transfers ORDER BY created_at").map(transfer)
    }

    /// Records an upload's server-side resource as soon as it exists, before data is sent.
    public func recordUploadResource(id: String, url: String?, protocol proto: String) throws(StoreError) {
        if let url {
            try db.query("UPDATE transfers SET upload_url = ?, protocol = ? WHERE id = ?", [.text(url), .text(proto), .text(id)])
        } else {
            try db.query("UPDATE transfers SET protocol = ? WHERE id = ?", [.text(proto), .text(id)])
        }
    }

    public func deleteTransfer(id: String) throws(StoreError) {
        try db.query("DELETE FROM transfers WHERE id = ?", [.text(id)])
    }
}
