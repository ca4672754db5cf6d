import DrowseCore

/// Which timeline the stored times are on (docs/design.md, "Time on a board without a
/// real-time clock"). drowsed records and plans on its own timeline (boot clock time, named in
/// the wall time of its start; `Timeline` in DrowseSystem). The `clock` row says which one wrote
/// the file: the boot it ran in, its origin (wall minus boot clock at its start) and its last
/// known skew (how far the wall clock had been set from it since). At the next start,
/// `alignTimeline` moves every stored time onto the new timeline in one transaction:
/// - the same boot: exactly, by the difference of the origins (the boot clock did not restart);
///   a clock set while drowsed was stopped moves nothing that was planned.
/// - another boot: by the last known skew (the stored times as the corrected wall clock named
///   them); then, if the latest recorded time is still in the future, the clock is behind the
///   file (a board without an RTC, booted before its time sync): everything moves back so that
///   the latest record is now. Intervals and waits keep their length; a time sync that then
///   steps the clock forward is followed at run time, and nothing comes due at once.
extension Store {
    /// Every column holding a time drowsed recorded or planned.
    static let timeColumns: [(table: String, columns: [String])] = [
        ("apps", ["registered_at", "last_fetch", "last_used"]),
        ("runs", ["started_at", "ended_at"]),
        ("usage", ["at"]),
        ("notifications", ["received_at", "handled_at", "budget_at"]),
        ("transfers", ["created_at", "finished_at", "timeout_at", "next_retry_at"]),
        ("condition_changes", ["at"]),
        ("keepalive_paths", ["learned_at"]),
    ]
    /// Columns of things that happened (never in the future); the planned ones are left out.
    static let recordedColumns: [(table: String, columns: [String])] = [
        ("apps", ["registered_at", "last_fetch", "last_used"]),
        ("runs", ["started_at", "ended_at"]),
        ("usage", ["at"]),
        ("notifications", ["received_at", "handled_at", "budget_at"]),
        ("transfers", ["created_at", "finished_at"]),
        ("condition_changes", ["at"]),
        ("keepalive_paths", ["learned_at"]),
    ]
    /// A recorded time this far ahead of the clock means the clock is behind the file.
    package static let futureTolerance: Double = 60

    package struct TimelineShift: Sendable, Equatable {
        /// Seconds added to every stored time.
        package var seconds: Double
        package var reason: String
    }

    /// Moves the stored times onto the timeline that began at `origin` in boot `bootID`, whose
    /// now is `now`, and records that timeline. Returns the shift made, if any.
    @discardableResult
    package func alignTimeline(bootID: String?, origin: Double, now: Double) throws(StoreError) -> TimelineShift? {
        try db.transaction { () throws(StoreError) -> TimelineShift? in
            var shift = 0.0
            var reasons: [String] = []
            if let row = try db.query("SELECT boot_id, origin, skew FROM clock LIMIT 1").first,
               let oldOrigin = row[1].double, let oldSkew = row[2].double,
               oldOrigin.isFinite, oldSkew.isFinite {
                if let bootID, row[0] == .text(bootID) {
                    shift = origin - oldOrigin
                    if abs(shift) >= 1 { reasons.append(format1(shift) + " s: the wall clock was set while drowsed was stopped") }
                } else {
                    shift = oldSkew
                    if abs(shift) >= 1 { reasons.append(format1(shift) + " s: the wall clock had been set in the last boot") }
                }
            }
            if let latest = try latestRecorded(), latest + shift > now + Self.futureTolerance {
                let back = now - (latest + shift)
                shift += back
                reasons.append(format1(back) + " s: the clock is behind the last recorded time (a board without a real-time clock, before its time sync)")
            }
            if abs(shift) >= 0.001, shift.isFinite {
                for (table, columns) in Self.timeColumns {
                    let sets = columns.map { "\($0) = \($0) + ?1" }.joined(separator: ", ")
                    _ = try db.query("UPDATE \(table) SET \(sets)", [.double(shift)])
                }
            }
            _ = try db.query("DELETE FROM clock")
            _ = try db.query("INSERT INTO clock(boot_id, origin, skew) VALUES (?, ?, 0)",
                             [bootID.map { .text($0) } ?? .null, .double(origin)])
            return abs(shift) >= 0.001 && shift.isFinite ? TimelineShift(seconds: shift, reason: reasons.joined(separator: "; ")) : nil
        }
    }

    /// The wall clock was stepped: how far it now stands from the timeline in the `clock` row.
    package func saveClockSkew(_ skew: Double) throws(StoreError) {
        _ = try db.query("UPDATE clock SET skew = ?", [.double(skew)])
    }

    /// The latest time the store recorded (valid Unix times only: a bad row moves nothing).
    func latestRecorded() throws(StoreError) -> Double? {
        var latest: Double?
        let range = TimeLimits.unixTimes
        for (table, columns) in Self.recordedColumns {
            for c in columns {
                let v = try db.query("SELECT MAX(\(c)) FROM \(table) WHERE \(c) BETWEEN ? AND ?",
                                     [.double(range.lowerBound), .double(range.upperBound)]).first?.first?.double
                if let v { latest = max(latest ?? v, v) }
            }
        }
        return latest
    }
}

/// Seconds with one decimal, for messages.
private func format1(_ x: Double) -> String {
    let tenths = (abs(x) * 10).rounded()
    guard tenths.isFinite, tenths < 1e15 else { return "\(x)" }
    let n = Int64(tenths)
    return (x < 0 ? "-" : "") + "\(n / 10).\(n % 10)"
}
