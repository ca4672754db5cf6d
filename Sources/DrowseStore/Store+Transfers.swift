import DrowseCore

extension Store {
    private static let columns =
        "id, app, session, kind, state, url, destination, sha256, bytes_done, bytes_total, reason, location, etag, last_modified, created_at, finished_at, delivered, source, protocol, upload_url, timeout_at, owner_uid, owner_gid, discretionary, no_cellular, requires_power, attempts, retries, next_retry_at, content_type"

    private func values(_ t: Transfer) -> [SQLValue] {
        [.text(t.id), .text(t.app), .text(t.session), .text(t.kind.rawValue), .text(t.state.rawValue), .text(t.url),
         SQLValue(t.destination), SQLValue(t.sha256), .int(t.bytesDone), SQLValue(t.bytesTotal), SQLValue(t.reason),
         SQLValue(t.location), SQLValue(t.etag), SQLValue(t.lastModified), .double(t.createdAt), SQLValue(t.finishedAt),
         .int(t.delivered ? 1 : 0), SQLValue(t.source), SQLValue(t.uploadProtocol), SQLValue(t.uploadURL), SQLValue(t.timeoutAt),
         SQLValue(t.ownerUID.map(Int64.init)), SQLValue(t.ownerGID.map(Int64.init)),
         .int(t.requirements.discretionary ? 1 : 0), .int(t.requirements.noCellular ? 1 : 0), .int(t.requirements.requiresPower ? 1 : 0),
         .int(Int64(t.attempts)), .int(Int64(t.retries)), SQLValue(t.nextRetryAt), SQLValue(t.contentType)]
    }

    /// Decodes a row. A row drowsed cannot have written (wrong types, an unknown kind or state,
    /// a time or size out of range) is not trusted: it comes back failed, with what was wrong
    /// as its reason and the bad values dropped (`Transfer.refused`), so the daemon starts and
    /// the app hears of it, instead of crashing on the value at every start.
    func transfer(_ r: [SQLValue]) -> Transfer {
        var problems: [String] = []
        func text(_ i: Int, _ name: String) -> String {
            if let s = r[i].string { return s }
            problems.append("\(name) is not text")
            return ""
        }
        func optionalText(_ i: Int, _ name: String) -> String? {
            if case .null = r[i] { return nil }
            return text(i, name)
        }
        func integer(_ i: Int, _ name: String) -> Int64? {
            switch r[i] {
            case .null: return nil
            case .int(let v): return v
            default: problems.append("\(name) is not an integer"); return nil
            }
        }
        func number(_ i: Int, _ name: String) -> Double? {
            switch r[i] {
            case .null: return nil
            case .int(let v): return Double(v)
            case .double(let d): return d
            case .text: problems.append("\(name) is not a number"); return nil
            }
        }
        func uid(_ i: Int, _ name: String) -> UInt32? {
            guard let v = integer(i, name) else { return nil }
            guard let id = UInt32(exactly: v) else { problems.append("\(name) \(v) is not a user or group id"); return nil }
            return id
        }
        let kindText = text(3, "kind")
        let kind = Transfer.Kind(rawValue: kindText)
        if kind == nil { problems.append("unknown kind '\(kindText)'") }
        var t = Transfer(
            id: text(0, "id"), app: text(1, "app"), session: text(2, "session"), kind: kind ?? .download, url: text(5, "url"),
            destination: optionalText(6, "destination"), sha256: optionalText(7, "sha256"), createdAt: number(14, "created_at") ?? 0)
        let stateText = text(4, "state")
        if let state = Transfer.State(rawValue: stateText) { t.state = state } else { problems.append("unknown state '\(stateText)'") }
        t.bytesDone = integer(8, "bytes_done") ?? 0
        t.bytesTotal = integer(9, "bytes_total")
        t.reason = optionalText(10, "reason")
        t.location = optionalText(11, "location")
        t.etag = optionalText(12, "etag")
        t.lastModified = optionalText(13, "last_modified")
        t.finishedAt = number(15, "finished_at")
        t.delivered = (integer(16, "delivered") ?? 0) != 0
        t.source = optionalText(17, "source")
        t.uploadProtocol = optionalText(18, "protocol")
        t.uploadURL = optionalText(19, "upload_url")
        t.timeoutAt = number(20, "timeout_at")
        t.ownerUID = uid(21, "owner_uid")
        t.ownerGID = uid(22, "owner_gid")
        t.requirements = TransferRequirements(
            discretionary: (integer(23, "discretionary") ?? 0) != 0, noCellular: (integer(24, "no_cellular") ?? 0) != 0,
            requiresPower: (integer(25, "requires_power") ?? 0) != 0)
        t.attempts = Int(clamping: max(0, integer(26, "attempts") ?? 0))
        t.retries = Int(clamping: max(0, integer(27, "retries") ?? 0))
        t.nextRetryAt = number(28, "next_retry_at")
        t.contentType = optionalText(29, "content_type")
        if let p = t.problem { problems.append(p) }
        return problems.isEmpty ? t : t.refused(problems.joined(separator: "; "))
    }

    /// Inserts or replaces the whole row.
    package func save(_ t: Transfer) throws(StoreError) {
        try db.query("INSERT OR REPLACE INTO transfers(\(Self.columns)) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values(t))
    }

    /// Commits download progress: only called after the bytes are on disk (fdatasync).
    package func commitProgress(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?) throws(StoreError) {
        try db.query(
            // A late commit from the sync thread never rewinds a finished transfer.
            "UPDATE transfers SET bytes_done = ?, bytes_total = ?, etag = ?, last_modified = ? WHERE id = ? AND state NOT IN ('completed', 'failed', 'cancelled')",
            [.int(bytesDone), SQLValue(bytesTotal), SQLValue(etag), SQLValue(lastModified), .text(id)])
    }

    package func transfer(id: String) throws(StoreError) -> Transfer? {
        try db.query("SELECT \(Self.columns) FROM transfers WHERE id = ?", [.text(id)]).first.map(transfer)
    }

    package func transfers(app: String? = nil) throws(StoreError) -> [Transfer] {
        if let app {
            return try db.query("SELECT \(Self.columns) FROM transfers WHERE app = ? ORDER BY created_at", [.text(app)]).map(transfer)
        }
        return try db.query("SELECT \(Self.columns) FROM transfers ORDER BY created_at").map(transfer)
    }

    /// One page of transfers in (created_at, id) order: at most `limit`, those after the transfer
    /// `after` (nil: from the start), of the apps in `apps` only (nil: every app). The order is
    /// total, so following pages lists every transfer once even while new ones are added.
    /// Returns nil when `after` is not a transfer of those apps.
    package func transfers(apps: [String]?, after: String?, limit: Int) throws(StoreError) -> [Transfer]? {
        var clauses: [String] = []
        var params: [SQLValue] = []
        if let apps {
            if apps.isEmpty { return after == nil ? [] : nil }
            clauses.append("app IN (" + apps.map { _ in "?" }.joined(separator: ",") + ")")
            params += apps.map { .text($0) }
        }
        if let after {
            let rows = try db.query("SELECT created_at FROM transfers WHERE id = ?" + (apps == nil ? "" : " AND " + clauses[0]),
                                    [.text(after)] + params)
            guard let createdAt = rows.first?.first else { return nil }
            clauses.append("(created_at > ? OR (created_at = ? AND id > ?))")
            params += [createdAt, createdAt, .text(after)]
        }
        let filter = clauses.isEmpty ? "" : " WHERE " + clauses.joined(separator: " AND ")
        return try db.query("SELECT \(Self.columns) FROM transfers\(filter) ORDER BY created_at, id LIMIT ?", params + [.int(Int64(limit))])
            .map(transfer)
    }

    /// Records an upload's server-side resource as soon as it exists, before data is sent.
    package func recordUploadResource(id: String, url: String?, protocol proto: String) throws(StoreError) {
        if let url {
            try db.query("UPDATE transfers SET upload_url = ?, protocol = ? WHERE id = ?", [.text(url), .text(proto), .text(id)])
        } else {
            try db.query("UPDATE transfers SET protocol = ? WHERE id = ?", [.text(proto), .text(id)])
        }
    }

    package func deleteTransfer(id: String) throws(StoreError) {
        try db.query("DELETE FROM transfers WHERE id = ?", [.text(id)])
    }
}
