import DrowseCore

/// What the store remembers of one app between runs of the daemon.
package struct AppRecord: Sendable, Equatable {
    package var id: String
    package var registeredAt: Double
    package var lastFetch: Double?
    package var lastResult: FetchResult?
    package var consecutiveFailures: Int
    package var lastUsed: Double?
    package var consecutiveNoData: Int = 0
    package var lastTimedOut: Bool = false
}

/// One handler run, as shown by `drowse apps show`.
package struct RunRecord: Sendable, Equatable {
    package var app: String
    package var event: HandlerEvent
    package var trigger: RunTrigger?
    package var result: FetchResult
    package var ending: String
    package var startedAt: Double
    package var endedAt: Double
    /// Killed at its deadline (penalised by the planner).
    package var timedOut = false

    package init(app: String, event: HandlerEvent, trigger: RunTrigger?, result: FetchResult, ending: String, startedAt: Double, endedAt: Double,
                timedOut: Bool = false) {
        self.timedOut = timedOut
        self.app = app
        self.event = event
        self.trigger = trigger
        self.result = result
        self.ending = ending
        self.startedAt = startedAt
        self.endedAt = endedAt
    }
}

extension Store {
    /// The app's record, created on first sight.
    package func app(_ id: String, now: Double) throws(StoreError) -> AppRecord {
        try db.query("INSERT OR IGNORE INTO apps(id, registered_at) VALUES (?, ?)", [.text(id), .double(now)])
        let row = try db.query(
            "SELECT registered_at, last_fetch, last_result, consecutive_failures, last_used, consecutive_no_data, last_timed_out FROM apps WHERE id = ?",
            [.text(id)])[0]
        // Values drowsed cannot have written (an edited or damaged state.db) are dropped here, at
        // the edge: the planner does arithmetic on them (1e300 as a last fetch, or a failure
        // count of Int64.max plus one, would trap).
        return AppRecord(
            id: id, registeredAt: Self.unixTime(row[0]) ?? now, lastFetch: Self.unixTime(row[1]),
            lastResult: row[2].string.flatMap(FetchResult.init(rawValue:)),
            consecutiveFailures: Self.count(row[3]), lastUsed: Self.unixTime(row[4]),
            consecutiveNoData: Self.count(row[5]), lastTimedOut: (row[6].int64 ?? 0) != 0)
    }

    /// The app's report (`POST /v1/apps/ID/report`); empty when it has none.
    package func report(app id: String) throws(StoreError) -> [String: String] {
        let rows = try db.query("SELECT report FROM apps WHERE id = ?", [.text(id)])
        guard let text = rows.first?.first?.string, let json = try? JSON.parse(bytes: Array(text.utf8), maxDepth: 2) else { return [:] }
        return AppReport.parse(json) ?? [:]
    }

    /// Replaces the app's report (an empty one clears it).
    package func setReport(app id: String, _ fields: [String: String], now: Double) throws(StoreError) {
        try db.query("INSERT OR IGNORE INTO apps(id, registered_at) VALUES (?, ?)", [.text(id), .double(now)])
        try db.query("UPDATE apps SET report = ? WHERE id = ?",
                     [fields.isEmpty ? .null : .text(AppReport.json(fields).serialized), .text(id)])
    }

    /// A stored time, or nil when it is not a Unix time drowsed could have written.
    static func unixTime(_ v: SQLValue) -> Double? {
        guard let t = v.double, TimeLimits.isValidUnixTime(t) else { return nil }
        return t
    }

    /// A stored counter of consecutive results, within 0...1_000_000 (a million fetches in a row
    /// is decades of them; the planner stops doubling long before).
    static func count(_ v: SQLValue) -> Int {
        Int(min(max(v.int64 ?? 0, 0), 1_000_000))
    }

    /// Records a finished run; with `fetch`, the app's fetch bookkeeping as the scheduler now has
    /// it, and with `seq`, that the notification's run handled it — one transaction, so one fsync.
    /// `durable: false` writes it to the WAL without waiting for the disk (as
    /// `recordNotification(durable:)`); the caller asks `afterJournalSync` for the sync, which
    /// runs at once on the journal thread and is shared by every write made meanwhile.
    package func record(_ run: RunRecord, fetch: FetchScheduler.Record? = nil, handlingNotification seq: Int64? = nil,
                        durable: Bool = true) throws(StoreError) {
        guard durable else {
            return try db.withoutSync { () throws(StoreError) in
                try record(run, fetch: fetch, handlingNotification: seq, durable: true)
            }
        }
        try db.transaction { () throws(StoreError) in
            if let seq {
                try handled(seq, state: .handled(run.result), at: run.endedAt)
            }
            try db.query(
                "INSERT INTO runs(app, event, trigger, result, ending, started_at, ended_at) VALUES (?,?,?,?,?,?,?)",
                [.text(run.app), .text(run.event.rawValue), SQLValue(run.trigger?.rawValue), .text(run.result.rawValue),
                 .text(run.ending), .double(run.startedAt), .double(run.endedAt)])
            if let fetch {
                // The scheduler keeps the streaks; the store only remembers them across restarts.
                try db.query(
                    """
                    UPDATE apps SET last_fetch = ?, last_result = ?, consecutive_failures = ?,
                        consecutive_no_data = ?, last_timed_out = ? WHERE id = ?
                    """,
                    [SQLValue(fetch.lastFetch), SQLValue(fetch.lastResult?.rawValue), .int(Int64(fetch.consecutiveFailures)),
                     .int(Int64(fetch.consecutiveNoData)), .int(fetch.lastTimedOut ? 1 : 0), .text(run.app)])
            }
            // Bounded history: the newest `keptRuns` per app, trimmed once `trimmedRuns` more have
            // piled up. Trimming one row per run rewrote the oldest page of `runs` and of its index
            // with every run (2 KiB written to the device for each handled notification).
            try db.query(
                """
                DELETE FROM runs WHERE app = ? AND seq <= (SELECT seq FROM runs WHERE app = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)
                    AND EXISTS (SELECT 1 FROM runs WHERE app = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)
                """,
                [.text(run.app), .text(run.app), .int(Int64(Self.keptRuns)), .text(run.app), .int(Int64(Self.keptRuns + Self.trimmedRuns))])
        }
    }

    /// The runs kept per app (at least; at most `keptRuns + trimmedRuns`).
    package static let keptRuns = 200
    /// How many runs past `keptRuns` are trimmed at once.
    package static let trimmedRuns = 32

    /// What the fetch scheduler needs of an app at start-up: its record, its handler runs of the
    /// last day (the daily budget) and its recent uses.
    package func schedulerApp(_ id: String, interval: Double?, now: Double) throws(StoreError) -> FetchScheduler.App {
        let rec = try app(id, now: now)
        let spans = try db.query(
            "SELECT started_at, ended_at FROM runs WHERE app = ? AND started_at >= ? ORDER BY seq",
            [.text(id), .double(now - 86400)]
        ).compactMap { r -> FetchScheduler.Span? in
            guard let s = Self.unixTime(r[0]), let e = Self.unixTime(r[1]) else { return nil }
            return FetchScheduler.Span(start: s, seconds: min(max(e - s, 0), 86400))
        }
        return FetchScheduler.App(
            id: id, interval: interval, registeredAt: rec.registeredAt,
            record: FetchScheduler.Record(lastFetch: rec.lastFetch, lastResult: rec.lastResult, consecutiveFailures: rec.consecutiveFailures,
                                          consecutiveNoData: rec.consecutiveNoData, lastTimedOut: rec.lastTimedOut),
            recentRuns: spans, uses: try uses(app: id))
    }

    package func runs(app: String, limit: Int = 20) throws(StoreError) -> [RunRecord] {
        try db.query(
            "SELECT event, trigger, result, ending, started_at, ended_at FROM runs WHERE app = ? ORDER BY seq DESC LIMIT ?",
            [.text(app), .int(Int64(limit))]
        ).map { r in
            RunRecord(
                app: app, event: HandlerEvent(rawValue: r[0].string ?? "") ?? .fetch, trigger: r[1].string.flatMap(RunTrigger.init(rawValue:)),
                result: FetchResult(rawValue: r[2].string ?? "") ?? .failed, ending: r[3].string ?? "",
                startedAt: Self.unixTime(r[4]) ?? 0, endedAt: Self.unixTime(r[5]) ?? 0)
        }
    }

    /// Handler seconds of an app's runs since `since` (its share of the daily budget).
    package func runtime(app: String, since: Double) throws(StoreError) -> Double {
        // Each run counts between 0 and a day: a stored run with an absurd end cannot use up the budget for ever.
        let sum = try db.query(
            "SELECT COALESCE(SUM(MIN(MAX(ended_at - started_at, 0), 86400)), 0) FROM runs WHERE app = ? AND started_at >= ?",
            [.text(app), .double(since)])[0][0].double ?? 0
        return sum.isFinite ? sum : 0
    }

    /// The newest uses of an app's data, oldest first.
    package func uses(app: String, limit: Int = 60) throws(StoreError) -> [Double] {
        // Usage learning divides these into periods and makes integers of them: skip what is not a Unix time.
        try db.query("SELECT at FROM usage WHERE app = ? ORDER BY seq DESC LIMIT ?", [.text(app), .int(Int64(limit))])
            .compactMap { Self.unixTime($0[0]) }.reversed()
    }

    package func recordUse(app: String, at: Double) throws(StoreError) {
        try db.transaction { () throws(StoreError) in
            try db.query("INSERT INTO usage(app, at) VALUES (?, ?)", [.text(app), .double(at)])
            try db.query("UPDATE apps SET last_used = ? WHERE id = ?", [.double(at), .text(app)])
        }
    }
}
