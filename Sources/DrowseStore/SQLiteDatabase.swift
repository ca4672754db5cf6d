import CSQLite
import DrowseCore

/// A failed SQLite call, with the statement and SQLite's message.
package struct StoreError: Error, CustomStringConvertible, Sendable {
    package var code: Int32
    package var message: String
    package var sql: String?
    package var description: String { "SQLite error \(code): \(message)" + (sql.map { " (in: \($0))" } ?? "") }
}

/// A value bound to or read from a statement.
package enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
}

/// A thin layer over the system libsqlite3. Not thread-safe: one owner uses it
/// (the agent actor), which is how docs/design.md wants every C library held.
package final class SQLiteDatabase {
    private var db: OpaquePointer?
    package let path: String

    /// `readOnly`: open an existing file for reading only (`drowse timeline` beside a running drowsed).
    package init(path: String, readOnly: Bool = false) throws(StoreError) {
        self.path = path
        var handle: OpaquePointer?
        let mode = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        let rc = sqlite3_open_v2(path, &handle, mode | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let msg = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            // A handle that failed to open has no statements: closing it cannot be refused.
            let closed = sqlite3_close(handle)
            assert(closed == SQLITE_OK, "sqlite3_close after a failed open: \(closed)")
            throw StoreError(code: rc, message: "\(path): \(msg)")
        }
        db = handle
        let busy = sqlite3_busy_timeout(handle, 5000)
        guard busy == SQLITE_OK else {
            let e = StoreError(code: busy, message: "\(path): busy timeout: \(String(cString: sqlite3_errmsg(handle)))")
            let closed = sqlite3_close_v2(handle)
            assert(closed == SQLITE_OK, "sqlite3_close_v2: \(closed)")
            throw e
        }
    }

    deinit {
        for stmt in statements.values { Self.finalize(stmt) }
        // close_v2 defers the close of a handle with live statements instead of refusing it.
        let closed = sqlite3_close_v2(db)
        assert(closed == SQLITE_OK, "sqlite3_close_v2: \(closed)")
    }

    /// sqlite3_finalize(3) and sqlite3_reset(3) return the error of the statement's last step,
    /// which that step's caller already had: here it is not news.
    private static func finalize(_ stmt: OpaquePointer?) {
        let lastStep = sqlite3_finalize(stmt)
        _ = lastStep
    }

    private static func reset(_ stmt: OpaquePointer) {
        let lastStep = sqlite3_reset(stmt)
        _ = lastStep
    }

    /// Cannot fail: sqlite3_clear_bindings(3) always returns SQLITE_OK.
    private static func clearBindings(_ stmt: OpaquePointer) {
        let cleared = sqlite3_clear_bindings(stmt)
        assert(cleared == SQLITE_OK)
    }

    /// Prepared statements by their SQL, reset after each use. The store's statements are a fixed
    /// set of literals (a few dozen), so this stays small; past `maxStatements` (SQL built at run
    /// time) it starts over rather than grow.
    private var statements: [String: OpaquePointer] = [:]
    static let maxStatements = 128

    private func prepared(_ sql: String) throws(StoreError) -> OpaquePointer {
        if let stmt = statements[sql] { return stmt }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            Self.finalize(stmt)
            throw fail(rc == SQLITE_OK ? SQLITE_MISUSE : rc, sql)
        }
        if statements.count >= Self.maxStatements {
            for old in statements.values { Self.finalize(old) }
            statements.removeAll(keepingCapacity: true)
        }
        statements[sql] = stmt
        return stmt
    }

    /// Runs one statement without parameters or results, prepared once (BEGIN, COMMIT). Not for
    /// PRAGMAs: SQLite carries out most of them (`synchronous` among them) while preparing, so a
    /// kept one would do nothing the second time.
    private func run(_ sql: String) throws(StoreError) {
        let stmt = try prepared(sql)
        defer { Self.reset(stmt) }
        var rc = sqlite3_step(stmt)
        while rc == SQLITE_ROW { rc = sqlite3_step(stmt) }
        guard rc == SQLITE_DONE else { throw fail(rc, sql) }
    }

    private func fail(_ rc: Int32, _ sql: String?) -> StoreError {
        StoreError(code: rc, message: String(cString: sqlite3_errmsg(db)), sql: sql)
    }

    /// Runs one or more statements without results.
    package func exec(_ sql: String) throws(StoreError) {
        try durableUnlessRelaxed()
        try execAsIs(sql)
    }

    private func execAsIs(_ sql: String) throws(StoreError) {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let msg = err.map { String(cString: $0) } ?? "error"
            sqlite3_free(err)
            throw StoreError(code: rc, message: msg, sql: sql)
        }
    }

    /// Runs one statement with bound parameters and returns every row. The statement is prepared
    /// once and kept (`prepared`): compiling SQL cost more than running it on the notification
    /// path (docs/architecture.md, "How a notification flows").
    @discardableResult
    package func query(_ sql: String, _ params: [SQLValue] = []) throws(StoreError) -> [[SQLValue]] {
        let stmt = try prepared(sql)
        // A write that commits on its own (outside a transaction) is durable unless relaxed.
        if synchronous != .full, relaxed == 0, sqlite3_get_autocommit(db) != 0, sqlite3_stmt_readonly(stmt) == 0 {
            try durableUnlessRelaxed()
        }
        defer {
            Self.reset(stmt)
            Self.clearBindings(stmt)
        }
        var rc: Int32
        for (i, p) in params.enumerated() {
            let idx = Int32(i + 1)
            switch p {
            case .null: rc = sqlite3_bind_null(stmt, idx)
            case .int(let v): rc = sqlite3_bind_int64(stmt, idx, v)
            case .double(let v): rc = sqlite3_bind_double(stmt, idx, v)
            case .text(let v): rc = sqlite3_bind_text(stmt, idx, v, -1, csqlite_transient())
            }
            guard rc == SQLITE_OK else { throw fail(rc, sql) }
        }
        var rows: [[SQLValue]] = []
        while true {
            rc = sqlite3_step(stmt)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw fail(rc, sql) }
            let n = sqlite3_column_count(stmt)
            var row: [SQLValue] = []
            row.reserveCapacity(Int(n))
            for c in 0..<n {
                switch sqlite3_column_type(stmt, c) {
                case SQLITE_INTEGER: row.append(.int(sqlite3_column_int64(stmt, c)))
                case SQLITE_FLOAT: row.append(.double(sqlite3_column_double(stmt, c)))
                case SQLITE_NULL: row.append(.null)
                default:
                    // TEXT, or a BLOB someone stored: read by length (a BLOB may hold NUL bytes and need
                    // not be UTF-8; invalid sequences become U+FFFD), never through a NULL pointer.
                    // column_text first: it converts a BLOB, and column_bytes then gives that text's length.
                    let text: UnsafePointer<UInt8>? = sqlite3_column_text(stmt, c)
                    let count = Int(sqlite3_column_bytes(stmt, c))
                    if let p = text, count > 0 {
                        row.append(.text(String(decoding: UnsafeBufferPointer(start: p, count: count), as: UTF8.self)))
                    } else {
                        row.append(.text(""))
                    }
                }
            }
            rows.append(row)
        }
        return rows
    }

    /// Runs `body` in one transaction (BEGIN IMMEDIATE … COMMIT, rolled back on error).
    package func transaction<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        if sqlite3_get_autocommit(db) != 0 { try durableUnlessRelaxed() }
        try run("BEGIN IMMEDIATE")
        var taken: [Rider] = []
        do throws(StoreError) {
            let v = try body()
            // What waits for a commit rides this one, each in a savepoint: one that fails leaves
            // nothing of itself and waits for the next. If SQLite ended the whole transaction
            // (a full disk, an I/O error), that error is this transaction's.
            taken = riders
            riders = []
            for r in taken {
                do { try write(r) } catch {
                    riderFailure = error
                    ride(r, unlessNewer: true)
                    if sqlite3_get_autocommit(db) != 0 { throw error }
                }
            }
            try run("COMMIT")
            return v
        } catch {
            try? run("ROLLBACK")
            for r in taken { ride(r, unlessNewer: true) }
            throw error
        }
    }

    // MARK: writes that ride the next commit

    private struct Rider {
        let key: String
        let write: () throws(StoreError) -> Void
    }

    /// Writes waiting for the next transaction, at most one per key.
    private var riders: [Rider] = []
    /// The last error of a rider (kept for `flushRiders` to report).
    private var riderFailure: StoreError?

    /// How many writes wait for the next transaction.
    package var ridersWaiting: Int { riders.count }

    /// Runs `write` inside the next transaction, whatever writes it (before its COMMIT), or at
    /// `flushRiders()`; a later write with the same key replaces it. For state that costs only
    /// relearning when a power cut loses it (docs/design.md, "The adaptive keepalive"): an idle
    /// daemon then writes nothing of its own, and what it learned goes with the next record.
    package func rideNextCommit(_ key: String, _ write: @escaping () throws(StoreError) -> Void) {
        ride(Rider(key: key, write: write), unlessNewer: false)
    }

    /// Writes every waiting rider now, in a transaction of its own (at shutdown). A rider that
    /// fails is kept for the next, and its error thrown. A rider must not begin a transaction
    /// itself (it runs inside one).
    package func flushRiders() throws(StoreError) {
        guard !riders.isEmpty else { return }
        riderFailure = nil
        try transaction { () throws(StoreError) in }
        if !riders.isEmpty, let riderFailure { throw riderFailure }
    }

    /// Writes `r` in a savepoint of the transaction under way: when it fails, nothing of it stays.
    private func write(_ r: Rider) throws(StoreError) {
        try run("SAVEPOINT rider")
        do { try r.write() } catch {
            // Unless SQLite ended the whole transaction (then there is no savepoint to undo).
            if sqlite3_get_autocommit(db) == 0 {
                try? run("ROLLBACK TO rider")
                try? run("RELEASE rider")
            }
            throw error
        }
        try run("RELEASE rider")
    }

    /// Queues `r`; `unlessNewer`: not when a newer write of its key arrived meanwhile.
    private func ride(_ r: Rider, unlessNewer: Bool) {
        if let i = riders.firstIndex(where: { $0.key == r.key }) {
            if !unlessNewer { riders[i] = r }
        } else {
            riders.append(r)
        }
    }

    package var changes: Int { Int(sqlite3_changes(db)) }

    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(db) }

    /// Runs `body` with `synchronous=NORMAL`: in WAL mode its commits are written to the WAL
    /// (they survive a killed process) but not fsynced (a power cut may lose them) until
    /// `syncJournal()` or the next `synchronous=FULL` commit.
    ///
    /// The setting is changed only when it must be: it stays NORMAL after `body`, and is put
    /// back to FULL before the next write outside `withoutSync` (a transaction, a write that
    /// commits on its own, `exec`). A PRAGMA is compiled at every use (`run` cannot keep it), and
    /// two of them around each of a notification's commits were a tenth of the daemon's work for
    /// it. If putting FULL back fails, that write throws instead of committing without the sync.
    @discardableResult
    package func withoutSync<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        // Inside a durable transaction: its writes commit with it, synced.
        if relaxed == 0, sqlite3_get_autocommit(db) == 0 { return try body() }
        if synchronous != .normal {
            try execAsIs("PRAGMA synchronous=NORMAL")
            synchronous = .normal
        }
        relaxed += 1
        defer { relaxed -= 1 }
        return try body()
    }

    /// The connection's `synchronous` setting as last set here (unknown after a failed change).
    private enum Synchronous { case full, normal, unknown }
    private var synchronous = Synchronous.unknown
    /// Depth of `withoutSync` calls under way.
    private var relaxed = 0

    /// Puts `synchronous=FULL` back before a write outside `withoutSync`.
    private func durableUnlessRelaxed() throws(StoreError) {
        guard relaxed == 0, synchronous != .full else { return }
        synchronous = .unknown
        try execAsIs("PRAGMA synchronous=FULL")
        synchronous = .full
    }

    /// Calls `full` after a commit that leaves the WAL holding `autocheckpointPages` pages or
    /// more, instead of SQLite's automatic checkpoint: that copies a full WAL into the database
    /// before the commit returns (two fsyncs, a few ms on the committing thread, and every
    /// ~50th notification's handler started that much later). The caller checkpoints elsewhere
    /// (`WALCheckpointer`, on the journal thread). `full` runs inside the commit: it must only
    /// hand the work on.
    package func checkpointElsewhere(_ full: @escaping @Sendable () -> Void) {
        let hook = WALHook(full)
        walHook = hook
        let previous = sqlite3_wal_hook(db, { context, _, _, pages in
            if pages >= SQLiteDatabase.autocheckpointPages, let context {
                Unmanaged<WALHook>.fromOpaque(context).takeUnretainedValue().full()
            }
            return SQLITE_OK
        }, Unmanaged.passUnretained(hook).toOpaque())
        _ = previous  // SQLite's own autocheckpoint's argument, or nil: nothing to release
    }

    /// Keeps `checkpointElsewhere`'s callback alive as long as the connection.
    private var walHook: WALHook?

    /// SQLite's default: checkpoint once the WAL holds this many pages.
    static let autocheckpointPages: Int32 = 1000

    /// Makes everything committed so far durable: fdatasync of the WAL through SQLite's own file.
    package func syncJournal() throws(StoreError) {
        var file: UnsafeMutablePointer<sqlite3_file>?
        let rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &file)
        guard rc == SQLITE_OK else { throw fail(rc, "SQLITE_FCNTL_JOURNAL_POINTER") }
        // No journal open yet: nothing was written, nothing to sync.
        guard let file, let sync = file.pointee.pMethods?.pointee.xSync else { return }
        let r = sync(file, SQLITE_SYNC_NORMAL)
        guard r == SQLITE_OK else { throw StoreError(code: r, message: "syncing the WAL failed", sql: nil) }
    }
}

/// `SQLiteDatabase.checkpointElsewhere`'s callback, as the WAL hook's context.
final class WALHook: Sendable {
    let full: @Sendable () -> Void
    init(_ full: @escaping @Sendable () -> Void) { self.full = full }
}

extension SQLValue {
    package var string: String? { if case .text(let s) = self { return s }; return nil }
    package var int64: Int64? {
        switch self {
        case .int(let v): return v
        // A REAL where an integer belongs (SQLite keeps 1e300 or 1.5 in an INTEGER column as
        // REAL): only an exact integer counts, and Int64(1e300) would trap.
        case .double(let d): return Int64(exactly: d)
        default: return nil
        }
    }
    package var double: Double? {
        switch self {
        case .double(let d): return d
        case .int(let v): return Double(v)
        default: return nil
        }
    }

    package init(_ s: String?) { self = s.map { .text($0) } ?? .null }
    package init(_ v: Int64?) { self = v.map { .int($0) } ?? .null }
    package init(_ v: Double?) { self = v.map { .double($0) } ?? .null }
}
