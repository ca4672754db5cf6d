import DrowseCore

/// What the adaptive keepalive learned of each network path (docs/design.md, "The adaptive
/// keepalive"): one row per interface the board has been online on, written with the next commit
/// after the learner learns something (a few times a path), so a restart goes on from there.
extension Store {
    /// The most paths kept (the most recently learned).
    package static let maxKeepalivePaths = 32

    /// Keeps what was learned of a path with the next commit the daemon makes anyway, or at
    /// `flushPending()` (its stop): the learner steps while the board is idle, and a write of its
    /// own would be the only one of an idle hour. A power cut before then costs relearning that
    /// step.
    package func keepKeepalivePath(_ network: String, held: Double, failed: Double?, at: Double) {
        db.rideNextCommit("keepalive_paths " + network) { [weak self] () throws(StoreError) in
            try self?.saveKeepalivePath(network, held: held, failed: failed, at: at)
        }
    }

    /// Writes now what waits for the next commit (`keepKeepalivePath`).
    package func flushPending() throws(StoreError) { try db.flushRiders() }

    package func saveKeepalivePath(_ network: String, held: Double, failed: Double?, at: Double) throws(StoreError) {
        _ = try db.query(
            "INSERT OR REPLACE INTO keepalive_paths (network, held, failed, learned_at) VALUES (?, ?, ?, ?)",
            [.text(network), .double(held), failed.map { .double($0) } ?? .null, .double(at)])
        _ = try db.query(
            "DELETE FROM keepalive_paths WHERE network NOT IN (SELECT network FROM keepalive_paths ORDER BY learned_at DESC LIMIT ?)",
            [.int(Int64(Self.maxKeepalivePaths))])
    }

    /// Every path's longest interval that held and shortest that failed (seconds).
    package func keepalivePaths() throws(StoreError) -> [String: (held: Double, failed: Double?)] {
        var out: [String: (held: Double, failed: Double?)] = [:]
        for row in try db.query("SELECT network, held, failed FROM keepalive_paths") {
            guard case .text(let network) = row[0], let held = row[1].double, held.isFinite, held > 0 else { continue }
            out[network] = (held, row[2].double.flatMap { $0.isFinite && $0 > held ? $0 : nil })
        }
        return out
    }
}
