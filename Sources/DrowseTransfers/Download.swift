#if canImport(Glibc)
import Glibc
#endif
import CCurl
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

/// One download's libcurl handle and file. Lives on the engine thread only. Carries out what
/// its `DownloadMachine` decides: which bytes to ask for, whether the answer may be appended,
/// what a failure does to the part file.
final class Download {
    let job: DownloadJob
    let easy: UnsafeMutableRawPointer
    unowned let engine: TransferEngine
    var fd: Int32 = -1
    var machine: DownloadMachine
    /// Bytes reported durable (fdatasync'ed and sent as `.committed`).
    var committed: Int64
    /// When bytes are made durable: by count after each write, by time from the engine's loop.
    var cadence: CommitCadence
    /// The current response's headers (reset at each new status line: redirects, 100-continue).
    var response = DownloadMachine.Response()
    var progress = ProgressThrottle()
    var headers: UnsafeMutablePointer<curl_slist>?
    /// SHA-256 of bytes 0..<hashedUpTo, kept up as bytes arrive so finishing needs no re-read.
    var hasher: SHA256Hasher?
    var hashedUpTo: Int64 = 0
    /// The part file already holds every byte (a restart right after the last commit).
    var alreadyComplete = false

    /// Bytes received for the part file (committed or not; the last of them may still wait in
    /// `gathered`).
    var written: Int64 { machine.offset }
    /// Bytes written to the part file: `written` less what waits in `gathered`, or less what a
    /// failed write lost.
    var onDisk: Int64 = 0
    /// Body bytes gathered for one write(2): libcurl hands them over 16 KiB at a time
    /// (CURL_MAX_WRITE_SIZE), whatever CURLOPT_BUFFERSIZE says, and a write(2) per 16 KiB cost
    /// twice the system time of one per 256 KiB (109 against 58 ms of CPU per 256 MiB measured,
    /// page cache, fdatasync apart). Allocated at the first body byte (mmap'd: above malloc's
    /// threshold, given back when the download ends).
    private var gathered: UnsafeMutableRawPointer?
    private var gatheredCount = 0
    static let writeSize = 256 * 1024
    var uncommittedBytes: Int64 { written - committed }

    init(job: DownloadJob, engine: TransferEngine) throws(TransferError) {
        self.job = job
        self.engine = engine
        guard let easy = ccurl_easy_init() else { throw TransferError("libcurl could not make a handle", transient: true) }
        self.easy = easy
        machine = DownloadMachine(
            committed: job.resumeFrom, total: job.expectedTotal, etag: job.etag, lastModified: job.lastModified,
            maxUnknownSize: engine.opts.maxUnknownSize)
        committed = machine.offset
        cadence = CommitCadence(interval: engine.opts.commitInterval, bytes: engine.opts.commitBytes, startedAt: WallClock.monotonic())
        do throws(TransferError) {
            let partLength = try openPart()
            var request: (range: Int64?, ifRange: String?)?
            for action in machine.start(partLength: partLength) {
                switch action {
                case .truncate(let n): try cut(to: n)
                case .restart: try restart()
                case .request(let range, let ifRange): request = (range, ifRange)
                case .finish: alreadyComplete = true
                case .append, .abort, .fail: break  // not answers to a start
                }
            }
            try seek(to: written)
            onDisk = written
            if job.sha256 != nil { startHash() }
            if let request { try configure(range: request.range, ifRange: request.ifRange) }
        } catch {
            close()
            throw error
        }
    }

    deinit { gathered?.deallocate() }

    /// Hashes what is already on disk (after a restart), then keeps up incrementally.
    func startHash() {
        var h = SHA256Hasher()
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var pos: Int64 = 0
        while pos < written {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(min(Int64($0.count), written - pos)), off_t(pos)) }
            if n <= 0 { hasher = nil; return }
            buf.withUnsafeBytes { h.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            pos += Int64(n)
        }
        hasher = consume h
        hashedUpTo = written
    }

    /// Opens the part file; returns its length.
    private func openPart() throws(TransferError) -> Int64 {
        // Created and reopened as the caller (FileIdentity), never through a symlink, and only
        // ever a file of our own: a part file swapped for a link or for someone else's file is
        // not written to.
        let who = job.identity
        let flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK
        do { fd = try FileIdentity.open(job.partPath, flags, mode: 0o600, as: who) } catch {
            throw TransferError("cannot open \(job.partPath): \(error)", transient: error.isNoSpace, noSpace: error.isNoSpace)
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_nlink == 1 else {
            Sys.close(fd, ignoringErrors: .afterError)
            fd = -1
            throw TransferError("\(job.partPath) is not the part file drowsed made (a link or not a regular file)", transient: false)
        }
        if st.st_uid != (who?.uid ?? geteuid()) {
            // Not ours (left by an older drowsed that wrote it as root, or planted): start afresh
            // (an empty part file; the machine restarts from zero if bytes were committed).
            Sys.close(fd, ignoringErrors: .nothingToFlush)  // nothing was written through it yet
            do { try FileIdentity.remove(job.partPath, as: who) } catch {
                fd = -1
                throw TransferError("cannot remove \(job.partPath), not drowsed's: \(error)", transient: false)
            }
            do { fd = try FileIdentity.open(job.partPath, flags | O_EXCL, mode: 0o600, as: who) } catch {
                fd = -1
                throw TransferError("cannot create \(job.partPath): \(error)", transient: error.isNoSpace, noSpace: error.isNoSpace)
            }
            return 0
        }
        let size = lseek(fd, 0, SEEK_END)
        guard size >= 0 else { let saved = errno; throw TransferError("cannot size \(job.partPath): \(String(cString: strerror(saved)))", transient: true) }
        return Int64(size)
    }

    /// Cuts the part file to `n` bytes and writes on from there.
    private func cut(to n: Int64) throws(TransferError) {
        gatheredCount = 0
        onDisk = n
        guard ftruncate(fd, off_t(n)) == 0 else {
            let e = errno
            throw TransferError("cutting \(job.partPath) to \(n) bytes: \(String(cString: strerror(e)))", transient: true)
        }
        try seek(to: n)
    }

    /// Writes go on from byte `n`.
    private func seek(to n: Int64) throws(TransferError) {
        guard lseek(fd, off_t(n), SEEK_SET) == off_t(n) else {
            let e = errno
            throw TransferError("seeking in \(job.partPath) to byte \(n): \(String(cString: strerror(e)))", transient: true)
        }
    }

    /// Starts over at byte zero: nothing held so far may be continued.
    private func restart() throws(TransferError) {
        try cut(to: 0)
        committed = 0
        if job.sha256 != nil { hasher = SHA256Hasher(); hashedUpTo = 0 }
        engine.syncer.drain()  // no older offset may be reported after this zero
        engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
    }

    private func configure(range: Int64?, ifRange: String?) throws(TransferError) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let o = engine.opts
        let c = CurlCheck(easy: easy, logger: engine.logger)
        try o.applyCommon(to: c, url: job.url, protocols: engine.protocols)
        try c.setopt(CURLOPT_FOLLOWLOCATION, "CURLOPT_FOLLOWLOCATION", 1)
        try c.setopt(CURLOPT_MAXREDIRS, "CURLOPT_MAXREDIRS", o.maxRedirects)
        try c.setopt(CURLOPT_FAILONERROR, "CURLOPT_FAILONERROR", 1)
        try c.setopt(CURLOPT_BUFFERSIZE, "CURLOPT_BUFFERSIZE", 256 * 1024, .warn)
        try CurlCheck.append(&headers, "Accept-Encoding: identity")
        if let range { try c.setopt(CURLOPT_RANGE, "CURLOPT_RANGE", "\(range)-") }
        if let ifRange { try CurlCheck.append(&headers, "If-Range: \(ifRange)") }
        try c.setopt(CURLOPT_HTTPHEADER, "CURLOPT_HTTPHEADER", headers)
        try c.setopt(CURLOPT_WRITEDATA, "CURLOPT_WRITEDATA", me)
        try c.setopt(CURLOPT_WRITEFUNCTION, "CURLOPT_WRITEFUNCTION", callback: { ptr, size, n, ud in
            let d = Unmanaged<Download>.fromOpaque(ud!).takeUnretainedValue()
            return d.onData(UnsafeRawBufferPointer(start: ptr, count: size * n))
        })
        try c.setopt(CURLOPT_HEADERDATA, "CURLOPT_HEADERDATA", me)
        try c.setopt(CURLOPT_HEADERFUNCTION, "CURLOPT_HEADERFUNCTION", callback: { ptr, size, n, ud in
            let d = Unmanaged<Download>.fromOpaque(ud!).takeUnretainedValue()
            d.onHeader(UnsafeRawBufferPointer(start: ptr, count: size * n))
            return size * n
        })
    }

    func onHeader(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingCharacters()
        if line.hasPrefix("HTTP/") {
            // A new response (after a redirect or 100-continue): forget the previous one's headers.
            response = DownloadMachine.Response(status: Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0)
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = String(line[line.index(after: colon)...]).trimmingCharacters()
        switch name {
        case "content-range": response.contentRange = value
        case "content-length": response.contentLength = Int64(value)
        case "etag": response.etag = value
        case "last-modified": response.lastModified = value
        case "retry-after": response.retryAfter = value
        default: break
        }
    }

    /// libcurl's write callback: what it returns short of `buf.count` stops the transfer.
    func onData(_ buf: UnsafeRawBufferPointer) -> Int {
        for action in machine.body(buf.count, of: response) {
            switch action {
            case .restart:
                do { try restart() } catch { return stop(machine.writeFailed(error.reason, noSpace: false)) }
            case .append:
                return append(buf)
            case .abort:
                return 0
            case .truncate, .request, .finish, .fail:
                break  // not answers to body bytes
            }
        }
        return 0
    }

    /// Carries out the actions of a failed write: only `.abort` comes back, and returning
    /// short of the buffer is how libcurl is stopped.
    private func stop(_ actions: [DownloadMachine.Action]) -> Int {
        assert(actions == [.abort], "a failed write only aborts")
        return 0
    }

    private func append(_ buf: UnsafeRawBufferPointer) -> Int {
        let room = gathered ?? UnsafeMutableRawPointer.allocate(byteCount: Self.writeSize, alignment: 16)
        gathered = room
        var off = 0
        while off < buf.count {
            if gatheredCount == Self.writeSize, let failed = flush() { return stop(failed) }
            let n = min(buf.count - off, Self.writeSize - gatheredCount)
            (room + gatheredCount).copyMemory(from: buf.baseAddress! + off, byteCount: n)
            gatheredCount += n
            off += n
        }
        if gatheredCount == Self.writeSize, let failed = flush() { return stop(failed) }
        if hasher != nil, hashedUpTo == written {
            hasher!.update(buf)
            hashedUpTo += Int64(buf.count)
        }
        machine.appended(buf.count)
        if cadence.dueForBytes(uncommitted: uncommittedBytes) { commit(force: false) }
        if progress.shouldReport(at: WallClock.monotonic()) {
            engine.emit(.progress(id: job.id, bytesDone: written, bytesTotal: machine.total))
        }
        return buf.count
    }

    /// Writes what `gathered` holds to the part file. nil when it is all on disk; else the
    /// machine's actions for the failed write (the machine also keeps the failure: the next
    /// body bytes abort, and the attempt's end fails), and the bytes not written are dropped
    /// (they were never committed).
    @discardableResult
    private func flush() -> [DownloadMachine.Action]? {
        guard let room = gathered, gatheredCount > 0 else { return nil }
        defer { gatheredCount = 0 }
        var off = 0
        while off < gatheredCount {
            let n: Int
            do { n = try Sys.write(fd, room + off, count: gatheredCount - off) ?? 0 } catch {
                let e = error.errno
                return machine.writeFailed("writing \(job.partPath): \(String(cString: strerror(e)))", noSpace: e == ENOSPC || e == EDQUOT)
            }
            off += n
            onDisk += Int64(n)
        }
        return nil
    }

    /// fdatasync, then report the offset: the store may record it only after the data is durable.
    /// `force` syncs on this thread (at a stop, before the descriptor closes); otherwise the
    /// syncer thread does it while this one keeps receiving. What is gathered is written first;
    /// only bytes on disk are ever committed.
    func commit(force: Bool) {
        guard fd >= 0 else { return }
        flush()
        guard onDisk != committed || force else { return }
        let event = TransferEvent.committed(
            id: job.id, bytesDone: onDisk, bytesTotal: machine.total, etag: machine.etag, lastModified: machine.lastModified)
        committed = onDisk
        cadence.committed(at: WallClock.monotonic())
        if force {
            engine.syncer.drain()
            guard fdatasync(fd) == 0 else { return }
            engine.emit(event)
        } else {
            engine.syncer.submit(fd: fd, event: event)
        }
    }

    /// Cuts the part file back to the last committed offset (frees the uncommitted tail).
    func rollBackToCommit() {
        gatheredCount = 0
        onDisk = min(onDisk, committed)
        if fd >= 0, ftruncate(fd, off_t(committed)) != 0 {
            let saved = errno
            engine.logger.warning("cutting \(job.partPath) back to \(committed) bytes: \(String(cString: strerror(saved)))")
        }
        hasher = nil  // it covered bytes that are gone; finishing re-reads the file
    }

    /// After a response that must not be continued: the next attempt starts from zero.
    func discardProgress() {
        gatheredCount = 0
        onDisk = 0
        if fd >= 0, ftruncate(fd, 0) != 0 {
            // The zero reported below still holds: the next attempt cuts the file to it.
            let saved = errno
            engine.logger.warning("cutting \(job.partPath) to 0 bytes: \(String(cString: strerror(saved)))")
        }
        committed = 0
        engine.syncer.drain()  // no older offset may be reported after this zero
        engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
    }

    /// libcurl's result, in the machine's terms.
    func ending(_ result: CURLcode) -> DownloadMachine.Ending {
        let message = String(cString: ccurl_easy_strerror(result))
        switch result {
        case CURLE_OK: return .ok
        case CURLE_HTTP_RETURNED_ERROR:
            return .httpError(CurlCheck.infoLong(easy, CURLINFO_RESPONSE_CODE, "the response code", engine.logger) ?? response.status)
        case CURLE_UNSUPPORTED_PROTOCOL: return .unsupportedProtocol
        case CURLE_TOO_MANY_REDIRECTS: return .tooManyRedirects
        case CURLE_URL_MALFORMAT: return .malformedURL
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE: return .tlsVerification(message)
        case CURLE_OPERATION_TIMEDOUT: return .stalled(message)
        default: return .other(message)
        }
    }

    /// The attempt ended: carries out the machine's verdict; the event to report.
    func end(_ result: CURLcode) -> TransferEvent? {
        // The last gathered bytes go to disk before the verdict; a failed write is the verdict
        // (the machine holds it).
        flush()
        var event: TransferEvent?
        for action in machine.ended(ending(result), response: response) {
            switch action {
            case .restart:
                do { try restart() } catch { return .failed(id: job.id, error: error) }
            case .finish:
                event = finalize()
            case .fail(let f):
                // Whatever arrived intact so far is kept for the retry, unless the machine says
                // it must not be continued; on a full disk the bytes since the last commit are
                // given back instead, so the database has room to record it.
                switch f.part {
                case .discard: discardProgress()
                case .rollBackToCommit: rollBackToCommit()
                case .keep: commit(force: true)
                }
                event = .failed(id: job.id, error: TransferError(f.reason, transient: f.transient, noSpace: f.noSpace, retryAfter: f.retryAfter))
            case .truncate, .request, .append, .abort:
                break  // not answers to an ending
            }
        }
        return event
    }

    /// The machine found every byte here: sha256, fsync, owner, rename, and the event to report.
    func finalize() -> TransferEvent {
        engine.syncer.drain()
        guard fsync(fd) == 0 else {
            let e = errno
            return .failed(id: job.id, error: TransferError("fsync: \(String(cString: strerror(e)))", transient: true, noSpace: e == ENOSPC))
        }
        if let owner = job.owner, geteuid() == 0, fchown(fd, owner.uid, owner.gid) != 0 {
            let e = errno
            return .failed(id: job.id, error: TransferError("fchown: \(String(cString: strerror(e)))", transient: true))
        }
        // Written and fsynced: a close that fails (EIO on NFS, say) may still have lost data.
        let closing = fd
        fd = -1
        do { try Sys.close(closing, "close \(job.partPath)") } catch {
            return .failed(id: job.id, error: TransferError("\(error)", transient: true))
        }
        if let want = job.sha256?.lowercased() {
            let got: String
            if let h = hasher.take(), hashedUpTo == written {
                got = SHA256Hasher.hex(h.finalize())
            } else {
                do { got = try SHA256Hasher.hexDigest(ofFile: job.partPath, as: job.identity) } catch {
                    return .failed(id: job.id, error: TransferError("reading back: \(error)", transient: true))
                }
            }
            guard got == want else {
                do { try FileIdentity.remove(job.partPath, as: job.identity) } catch {
                    engine.logger.warning("part file left after a sha256 mismatch: \(error)", metadata: ["transfer.id": "\(job.id)"])
                }
                engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
                return .failed(id: job.id, error: TransferError("sha256 mismatch: expected \(want), got \(got)", transient: false))
            }
        }
        do { try FileIdentity.rename(job.partPath, to: job.finalPath, as: job.identity) } catch {
            return .failed(id: job.id, error: TransferError("\(error)", transient: error.isNoSpace, noSpace: error.isNoSpace))
        }
        return .completed(id: job.id, bytes: written, path: job.finalPath)
    }

    func close() {
        gatheredCount = 0  // never committed: dropped, as unsynced bytes are
        gathered?.deallocate()
        gathered = nil
        if fd >= 0 { Sys.close(fd, ignoringErrors: .beyondCommit); fd = -1 }
        ccurl_easy_cleanup(easy)
        ccurl_slist_free_all(headers)
        headers = nil
    }
}
