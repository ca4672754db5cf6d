#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CSQLite
import DrowsePOSIX
import Synchronization

/// Makes the WAL's commits durable off the daemon's thread, and answers each caller once a sync
/// that began after its request has returned (group commit).
///
/// A notification is written to the WAL (`recordNotification(durable: false)`) before its handler
/// starts; its PUBACK waits for the fdatasync. That sync took 0.5 ms on this machine's disk and
/// takes 5-50 ms on an SD card: on the daemon's thread it held back every other notification,
/// API call and handler end meanwhile (the next notification's start waited behind the last
/// one's sync). Here it runs on the "journal" thread, and requests that arrive during one sync
/// share the next.
///
/// The sync is fdatasync(2) of the WAL file through a descriptor of its own (opened read-only:
/// Linux syncs a file's data through any descriptor of it), reopened when the file is replaced.
/// SQLite writes its WAL with pwrite(2) before a commit returns, so a sync begun after the
/// commit covers it. The first sync of a newly opened WAL also syncs its folder (the file's
/// entry), as SQLite does for a journal it created.
///
/// The WAL is copied into the database here too, once it holds 1000 pages
/// (`SQLiteDatabase.checkpointElsewhere`): SQLite's own checkpoint would run inside whichever
/// commit filled it, on the daemon's thread.
package final class JournalSyncer: Sendable {
    private let waiting = Mutex<[(at: Double, done: @Sendable (Bool) -> Void)]>([])
    /// From a request to its answer (the write on disk), in seconds: the longest and the last,
    /// and how many syncs ran (`drowse status`: `journal`).
    private let waits = Mutex<(syncs: Int, maxWait: Double, lastWait: Double)>((0, 0, 0))

    package var stats: (syncs: Int, maxWait: Double, lastWait: Double) { waits.withLock { $0 } }
    /// The journal thread sleeps in a blocking read until a request arrives: no timer.
    private let wake = EventFD(blocking: true)
    private let started = Atomic<Bool>(false)
    private let syncNow: @Sendable () -> Bool
    private let checkpointNow: @Sendable () -> Void
    private let checkpointWanted = Atomic<Bool>(false)

    /// `sync`: runs on the journal thread only; true when everything written before it began is
    /// durable. `checkpoint`: runs there too, after `checkpointSoon()`.
    package init(sync: @escaping @Sendable () -> Bool, checkpoint: @escaping @Sendable () -> Void = {}) {
        syncNow = sync
        checkpointNow = checkpoint
    }

    /// For the WAL of the database at `databasePath`.
    package convenience init(databasePath: String) {
        let wal = WALFile(path: databasePath + "-wal")
        let checkpointer = WALCheckpointer(path: databasePath)
        self.init(sync: { wal.sync() }, checkpoint: { checkpointer.checkpoint() })
    }

    /// Asks the journal thread to checkpoint the WAL (after the syncs waiting, if any). Cheap and
    /// non-blocking: it runs inside a commit (`SQLiteDatabase.checkpointElsewhere`).
    package func checkpointSoon() {
        checkpointWanted.store(true, ordering: .releasing)
        startOnce()
        wake.signal()
    }

    /// Calls `done` on the journal thread once a sync that began after this call returned: true
    /// when it succeeded (false: nothing may be acknowledged as durable).
    package func afterSync(_ done: @escaping @Sendable (Bool) -> Void) {
        let at = WallClock.monotonic()
        waiting.withLock { $0.append((at, done)) }
        startOnce()
        wake.signal()
    }

    /// Started at the first request: a daemon that writes nothing has no such thread.
    private func startOnce() {
        if !started.exchange(true, ordering: .acquiringAndReleasing) {
            let me = Unmanaged.passRetained(self)
            OSThread.detach(name: "journal") { me.takeUnretainedValue().run() }
        }
    }

    private func run() {
        while true {
            wake.wait()
            while true {
                // Taken before the sync begins: each of these was requested before it.
                let batch = waiting.withLock { w -> [(at: Double, done: @Sendable (Bool) -> Void)] in
                    defer { w.removeAll(keepingCapacity: true) }
                    return w
                }
                let checkpoint = checkpointWanted.exchange(false, ordering: .acquiringAndReleasing)
                if batch.isEmpty && !checkpoint { break }
                if !batch.isEmpty {
                    let ok = syncNow()
                    let end = WallClock.monotonic()
                    let longest = batch.map { end - $0.at }.max() ?? 0
                    waits.withLock { w in w = (w.syncs + 1, max(w.maxWait, longest), longest) }
                    for entry in batch { entry.done(ok) }
                }
                // After the answers: the syncs they waited for do not wait behind the copy.
                if checkpoint { checkpointNow() }
            }
        }
    }
}

/// The WAL file as the journal thread syncs it (used by that thread only).
final class WALFile: @unchecked Sendable {
    let path: String
    private var fd: Int32 = -1
    private var identity: (dev: UInt, ino: UInt) = (0, 0)

    init(path: String) { self.path = path }

    func sync() -> Bool {
        var st = stat()
        guard stat(path, &st) == 0 else {
            // No WAL: nothing was written through one, so nothing waits to be made durable.
            return errno == ENOENT
        }
        let current = (dev: UInt(st.st_dev), ino: UInt(st.st_ino))
        if fd < 0 || current != identity {
            if fd >= 0 { Sys.close(fd, ignoringErrors: .nothingToFlush) }
            guard let opened = try? Sys.open(path, O_RDONLY | O_CLOEXEC) else {
                fd = -1
                return false
            }
            fd = opened
            identity = current
            guard Self.syncFolder(of: path) else {
                Sys.close(fd, ignoringErrors: .afterError)
                fd = -1
                return false
            }
        }
        while true {
            if fdatasync(fd) == 0 { return true }
            if errno != EINTR { return false }
        }
    }

    static func syncFolder(of path: String) -> Bool {
        let folder = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        guard let dir = try? Sys.open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC) else { return false }
        defer { Sys.close(dir, ignoringErrors: .nothingToFlush) }
        return fsync(dir) == 0
    }
}

/// Copies the WAL into the database (a PASSIVE checkpoint: it never waits for, nor blocks, the
/// daemon's connection, which goes on writing meanwhile) through a connection of its own,
/// opened at the first checkpoint and kept. Used by the journal thread only.
final class WALCheckpointer: @unchecked Sendable {
    let path: String
    private var db: OpaquePointer?
    /// Checkpoints that could not open or run (tried again at the next).
    private(set) var failures = 0

    init(path: String) { self.path = path }

    deinit {
        let closed = sqlite3_close_v2(db)
        assert(closed == SQLITE_OK, "sqlite3_close_v2: \(closed)")
    }

    func checkpoint() {
        guard let db = db ?? open() else {
            failures += 1
            return
        }
        let rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        // BUSY: another checkpoint ran at the same moment (drowse's own never do). Tried again
        // at the next full commit, as SQLite's automatic checkpoint would be.
        if rc != SQLITE_OK && rc != SQLITE_BUSY { failures += 1 }
    }

    /// The connection, in WAL mode (a fresh connection opens the WAL at its first read).
    private func open() -> OpaquePointer? {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let closed = sqlite3_close(handle)
            assert(closed == SQLITE_OK, "sqlite3_close after a failed open: \(closed)")
            return nil
        }
        let mode = sqlite3_exec(handle, "PRAGMA journal_mode=WAL", nil, nil, nil)
        guard mode == SQLITE_OK else {
            let closed = sqlite3_close_v2(handle)
            assert(closed == SQLITE_OK, "sqlite3_close_v2: \(closed)")
            return nil
        }
        db = handle
        return handle
    }
}
