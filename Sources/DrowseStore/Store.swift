import DrowseCore

/// Drowse's durable state in `state_dir/state.db`: fetch history, app bookkeeping,
/// notifications received, transfers. WAL with `synchronous=FULL`, so a commit that
/// returned survives a power cut. Versioned schema with forward migrations.
package final class Store {
    package let db: SQLiteDatabase
    /// Syncs the WAL off the caller's thread (`afterJournalSync`).
    package let journal: JournalSyncer
    package static let schemaVersion: Int64 = 16

    package init(path: String) throws(StoreError) {
        db = try SQLiteDatabase(path: path)
        let journal = JournalSyncer(databasePath: path)
        self.journal = journal
        try usePageSize()
        try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        db.checkpointElsewhere { journal.checkpointSoon() }
        try migrate()
    }

    /// Opens an existing state.db for reading only: no migration, nothing written, so a reader
    /// (`drowse timeline`) neither disturbs nor wakes drowsed. Refuses a schema it does not know.
    package init(readingOnly path: String) throws(StoreError) {
        db = try SQLiteDatabase(path: path, readOnly: true)
        journal = JournalSyncer { true }  // nothing is written
        let version = try db.query("SELECT version FROM schema_version").first?.first?.int64 ?? 0
        guard version == Self.schemaVersion else {
            throw StoreError(code: 0, message: "\(path) has schema \(version); this drowse reads \(Self.schemaVersion)")
        }
    }

    /// SQLite's page, in bytes: 1 KiB, not its default 4 KiB. In WAL mode a commit appends each
    /// page it changed, whole, and a notification's commits change a few dozen bytes on each of a
    /// handful of pages, so every page is an SD card's write (docs/benchmarks.md, "Where the
    /// bytes go").
    package static let pageSize: Int64 = 1024

    /// A new file gets `pageSize`; one made with another page size is rebuilt once (VACUUM,
    /// which SQLite does only outside WAL mode: atomically, through a rollback journal). When
    /// that cannot be done now (another process has the file open, or the disk has no room for
    /// the copy), it stays as it is, and is tried again at the next start.
    private func usePageSize() throws(StoreError) {
        let pages = try db.query("PRAGMA page_count").first?.first?.int64 ?? 0
        guard pages > 0 else {
            try db.exec("PRAGMA page_size=\(Self.pageSize)")
            return
        }
        guard try db.query("PRAGMA page_size").first?.first?.int64 != Self.pageSize else { return }
        let mode = try? db.query("PRAGMA journal_mode=DELETE").first?.first?.string
        guard mode == "delete" else { return }
        // VACUUM needs room for a copy of the file: on a full disk it fails, and the file keeps
        // its pages (WAL mode is set again by the caller either way).
        do { try db.exec("PRAGMA page_size=\(Self.pageSize); VACUUM") } catch {}
    }

    /// Makes `table` again without AUTOINCREMENT, with the same columns, rows, numbers and
    /// indexes (SQLite cannot drop it in place). Call inside the migration's transaction.
    private func rebuildWithoutAutoincrement(_ table: String) throws(StoreError) {
        guard let sql = try db.query("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(table)]).first?.first?.string,
              sql.contains("AUTOINCREMENT"), let columns = sql.firstIndex(of: "(") else { return }
        let indexes = try db.query("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", [.text(table)])
            .compactMap { $0.first?.string }
        let rebuilt = "CREATE TABLE \(table)_rebuilt " + String(sql[columns...]).replacingOccurrences("AUTOINCREMENT", with: "")
        try db.exec(
            """
            \(rebuilt);
            INSERT INTO \(table)_rebuilt SELECT * FROM \(table);
            DROP TABLE \(table);
            ALTER TABLE \(table)_rebuilt RENAME TO \(table);
            """)
        for index in indexes { try db.exec(index) }
    }

    private func migrate() throws(StoreError) {
        // Read and migrate in one write transaction, so two processes opening a new file
        // cannot both try to create the tables.
        try db.transaction { () throws(StoreError) in
            try db.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            let current = try db.query("SELECT version FROM schema_version").first?.first?.int64 ?? 0
            if current > Self.schemaVersion {
                throw StoreError(code: 0, message: "state.db has schema \(current), newer than this drowsed understands (\(Self.schemaVersion))")
            }
            if current < 1 {
                try db.exec(
                    """
                    CREATE TABLE apps (
                        id TEXT PRIMARY KEY,
                        registered_at REAL NOT NULL,
                        last_fetch REAL,
                        last_result TEXT,
                        consecutive_failures INTEGER NOT NULL DEFAULT 0,
                        last_used REAL
                    );
                    CREATE TABLE runs (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        app TEXT NOT NULL,
                        event TEXT NOT NULL,
                        trigger TEXT,
                        result TEXT NOT NULL,
                        ending TEXT NOT NULL,
                        started_at REAL NOT NULL,
                        ended_at REAL NOT NULL
                    );
                    CREATE INDEX runs_app ON runs(app, seq);
                    CREATE TABLE usage (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        app TEXT NOT NULL,
                        at REAL NOT NULL
                    );
                    CREATE TABLE notifications (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        app TEXT NOT NULL,
                        dedupe_key TEXT NOT NULL,
                        payload TEXT NOT NULL,
                        received_at REAL NOT NULL,
                        state TEXT NOT NULL,
                        handled_at REAL,
                        UNIQUE(app, dedupe_key)
                    );
                    CREATE TABLE transfers (
                        id TEXT PRIMARY KEY,
                        app TEXT NOT NULL,
                        session TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        state TEXT NOT NULL,
                        url TEXT NOT NULL,
                        destination TEXT,
                        sha256 TEXT,
                        bytes_done INTEGER NOT NULL DEFAULT 0,
                        bytes_total INTEGER,
                        reason TEXT,
                        location TEXT,
                        etag TEXT,
                        last_modified TEXT,
                        created_at REAL NOT NULL,
                        finished_at REAL,
                        delivered INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX transfers_app ON transfers(app, session);
                    INSERT INTO schema_version(version) VALUES (1);
                    """)
            }
            if current < 2 {
                // Uploads and --timeout-resource.
                try db.exec(
                    """
                    ALTER TABLE transfers ADD COLUMN source TEXT;
                    ALTER TABLE transfers ADD COLUMN protocol TEXT;
                    ALTER TABLE transfers ADD COLUMN upload_url TEXT;
                    ALTER TABLE transfers ADD COLUMN timeout_at REAL;
                    ALTER TABLE transfers ADD COLUMN owner_uid INTEGER;
                    ALTER TABLE transfers ADD COLUMN owner_gid INTEGER;
                    UPDATE schema_version SET version = 2;
                    """)
            }
            if current < 3 {
                // Conditions a transfer waits for.
                try db.exec(
                    """
                    ALTER TABLE transfers ADD COLUMN discretionary INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE transfers ADD COLUMN no_cellular INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE transfers ADD COLUMN requires_power INTEGER NOT NULL DEFAULT 0;
                    UPDATE schema_version SET version = 3;
                    """)
            }
            if current < 4 {
                // What the planner adapts to besides failures.
                try db.exec(
                    """
                    ALTER TABLE apps ADD COLUMN consecutive_no_data INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE apps ADD COLUMN last_timed_out INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX usage_app ON usage(app, seq);
                    UPDATE schema_version SET version = 4;
                    """)
            }
            if current < 5 {
                // Deferred and collapsible notifications; whether one was signed (push to transfer).
                try db.exec(
                    """
                    ALTER TABLE notifications ADD COLUMN signed INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notifications ADD COLUMN collapse_id TEXT;
                    CREATE INDEX notifications_state ON notifications(state, app);
                    UPDATE schema_version SET version = 5;
                    """)
            }
            if current < 6 {
                // When a notification used its app's hourly budget (max_per_hour counted from
                // here, so a restart hands out no fresh hour).
                try db.exec(
                    """
                    ALTER TABLE notifications ADD COLUMN budget_at REAL;
                    CREATE INDEX notifications_budget ON notifications(app, budget_at);
                    UPDATE schema_version SET version = 6;
                    """)
            }
            if current < 7 {
                // Retries shown per transfer (transfer show: attempts, retries, next_retry_at).
                try db.exec(
                    """
                    ALTER TABLE transfers ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE transfers ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE transfers ADD COLUMN next_retry_at REAL;
                    UPDATE schema_version SET version = 7;
                    """)
            }
            if current < 8 {
                // An upload's media type (--content-type).
                try db.exec(
                    """
                    ALTER TABLE transfers ADD COLUMN content_type TEXT;
                    UPDATE schema_version SET version = 8;
                    """)
            }
            if current < 9 {
                // What an app reports of itself for the fleet status (its version).
                try db.exec(
                    """
                    ALTER TABLE apps ADD COLUMN report TEXT;
                    UPDATE schema_version SET version = 9;
                    """)
            }
            if current < 10 {
                // Which timeline the stored times are on (Store+Clock.swift): one row.
                try db.exec(
                    """
                    CREATE TABLE clock (boot_id TEXT, origin REAL NOT NULL, skew REAL NOT NULL);
                    UPDATE schema_version SET version = 10;
                    """)
            }
            if current < 11 {
                // The board's power and network as they changed (drowse timeline): one row per
                // change, a few a day; the oldest go (Store+Conditions.swift).
                try db.exec(
                    """
                    CREATE TABLE condition_changes (
                        seq INTEGER PRIMARY KEY, at REAL NOT NULL, power TEXT NOT NULL, network TEXT NOT NULL,
                        battery INTEGER, metered INTEGER NOT NULL);
                    CREATE INDEX condition_changes_at ON condition_changes(at);
                    UPDATE schema_version SET version = 11;
                    """)
            }
            if current < 12 {
                // How many times a notification's handler was started (DROWSE_ATTEMPT): a start
                // known without its end is a possible repeat, and the next start says so.
                try db.exec(
                    """
                    ALTER TABLE notifications ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
                    UPDATE schema_version SET version = 12;
                    """)
            }
            if current < 13 {
                // What the adaptive keepalive learned of each network path (Store+Keepalive.swift).
                try db.exec(
                    """
                    CREATE TABLE keepalive_paths (
                        network TEXT PRIMARY KEY, held REAL NOT NULL, failed REAL, learned_at REAL NOT NULL);
                    UPDATE schema_version SET version = 13;
                    """)
            }
            if current < 14 {
                // Without AUTOINCREMENT: it wrote the sqlite_sequence page with every record and
                // every run. A rowid is then the largest + 1, so the number of a row deleted while
                // it was the newest (pruned, released when held) may be given again; nothing
                // refers to a deleted row's number (the admission machine forgets it first).
                try rebuildWithoutAutoincrement("notifications")
                try rebuildWithoutAutoincrement("runs")
                // Partial indexes: a handled notification leaves the index of waiting ones instead
                // of moving to another page of it, and one never charged has no budget entry (a
                // record charged in its own commit moved its entry from the app's first page to
                // its last). A page less written per notification for each.
                try db.exec(
                    """
                    DROP INDEX notifications_state;
                    CREATE INDEX notifications_waiting ON notifications(state, app) WHERE \(Self.waitingOrHeld);
                    DROP INDEX notifications_budget;
                    CREATE INDEX notifications_budget ON notifications(app, budget_at) WHERE budget_at IS NOT NULL;
                    UPDATE schema_version SET version = 14;
                    """)
            }
            if current < 15 {
                // A notification that became a download names its transfer in a column of its
                // own (it was `download:<id>` in `state`); every row is kept.
                let columns = try db.query("PRAGMA table_info(notifications)").compactMap { $0[1].string }
                if !columns.contains("download_id") { try db.exec("ALTER TABLE notifications ADD COLUMN download_id TEXT") }
                try db.exec(
                    """
                    UPDATE notifications SET download_id = substr(state, 10), state = 'downloading' WHERE state LIKE 'download:%';
                    UPDATE schema_version SET version = 15;
                    """)
            }
            if current < 16 {
                // No index of the notifications waiting to run: each one entered it in its
                // record's commit and left it in its end's, a page written twice per
                // notification, for a query made once per start. A start reads from
                // `notifications_scan.from_seq` instead (`pendingNotifications`); held ones, which
                // normal notifications never are, keep an index of their own.
                try db.exec(
                    """
                    DROP INDEX IF EXISTS notifications_waiting;
                    CREATE INDEX IF NOT EXISTS notifications_held ON notifications(seq) WHERE \(Self.held);
                    CREATE TABLE IF NOT EXISTS notifications_scan (from_seq INTEGER NOT NULL);
                    DELETE FROM notifications_scan;
                    INSERT INTO notifications_scan(from_seq) VALUES (1);
                    UPDATE schema_version SET version = 16;
                    """)
                try advancePendingScan()
            }
        }
    }
}
