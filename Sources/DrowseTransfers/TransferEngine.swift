#if canImport(Glibc)
import Glibc
#endif
import CCurl
import DrowseCore
import DrowseSystem
import Logging
import Synchronization

/// Runs downloads with libcurl's multi interface on one thread of its own. The thread
/// blocks in `curl_multi_poll` with exactly the timeout libcurl asks for (none when idle)
/// and is woken by `curl_multi_wakeup` when work is queued.
public final class TransferEngine: Sendable {
    public struct Options: Sendable {
        public var maxConnectionsPerHost: Int
        public var commitInterval: Double
        public var commitBytes: Int64
        public var maxRedirects: Int = 10
        public var lowSpeedLimit: Int = 1
        public var lowSpeedTime: Int = 60
        public var userAgent: String = "drowsed"
        /// The byte cap for a body whose length was not announced (chunked, or no Content-Length).
        public var maxUnknownSize: Int64 = 2 << 30

        public init(maxConnectionsPerHost: Int, commitInterval: Double, commitBytes: Int64) {
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.commitInterval = commitInterval
            self.commitBytes = commitBytes
        }
    }

    enum Command: Sendable {
        case start(DownloadJob)
        case startUpload(UploadJob)
        /// Stops an upload and ends its server-side resource (tus termination, IETF DELETE).
        case cancelUpload(UploadJob)
        case stop(String)
        case shutdown(@Sendable () -> Void)
    }

    private let commands = Mutex<[Command]>([])
    // The multi handle is only touched on the engine thread, except curl_multi_wakeup,
    // which libcurl documents as callable from any thread.
    nonisolated(unsafe) private let multi: UnsafeMutableRawPointer
    private let options: Options
    private let onEvent: @Sendable (TransferEvent) -> Void
    private let logger: Logger
    let syncer: Syncer

    public init(options: Options, logger: Logger, onEvent: @escaping @Sendable (TransferEvent) -> Void) {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        multi = curl_multi_init()!
        self.options = options
        self.onEvent = onEvent
        self.logger = logger
        syncer = Syncer(onEvent: onEvent)
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, options.maxConnectionsPerHost)
        let box = Unmanaged.passUnretained(self)
        OSThread.detach(name: "transfers") { box.takeUnretainedValue().loop() }
    }

    public func start(_ job: DownloadJob) { send(.start(job)) }
    public func start(_ job: UploadJob) { send(.startUpload(job)) }
    public func cancel(_ job: UploadJob) { send(.cancelUpload(job)) }
    public func stop(id: String) { send(.stop(id)) }

    /// Commits every running download's progress (reported as `.committed`) and stops the thread.
    public func shutdown() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in send(.shutdown({ c.resume() })) }
    }

    private func send(_ c: Command) {
        commands.withLock { $0.append(c) }
        curl_multi_wakeup(multi)
    }

    // MARK: engine thread

    private func loop() {
        var active: [String: Download] = [:]
        var uploads: [String: Upload] = [:]
        /// Which upload owns each easy handle (they change from request to request).
        var uploadOf: [UnsafeMutableRawPointer: Upload] = [:]
        var cancelling: [UnsafeMutableRawPointer: Upload] = [:]
        var stillRunning: Int32 = 0
        func add(_ u: Upload, _ easy: UnsafeMutableRawPointer?) {
            // Resources the upload gave up on: ended with a fire-and-forget DELETE of their own.
            for (url, proto) in u.toAbandon {
                var old = u.job
                old.resource = url
                old.protocolName = proto
                if let o = try? Upload(job: old, engine: self), let e = o.beginCancel() {
                    cancelling[e] = o
                    curl_multi_add_handle(multi, e)
                }
            }
            u.toAbandon.removeAll()
            guard let easy else { return }
            uploadOf[easy] = u
            curl_multi_add_handle(multi, easy)
        }
        func stopUpload(_ id: String) {
            guard let u = uploads.removeValue(forKey: id) else { return }
            if let e = u.easy { curl_multi_remove_handle(multi, e); uploadOf[e] = nil }
            u.close()
        }
        while true {
            let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
            for c in pending {
                switch c {
                case .start(let job):
                    if let old = active.removeValue(forKey: job.id) { finish(old, nil) }
                    do {
                        let d = try Download(job: job, engine: self)
                        if d.alreadyComplete {
                            // Every byte was committed before a restart: only the finish is left.
                            finishComplete(d)
                        } else {
                            curl_multi_add_handle(multi, d.easy)
                            active[job.id] = d
                        }
                    } catch {
                        onEvent(.failed(id: job.id, error: error))
                    }
                case .startUpload(let job):
                    stopUpload(job.id)
                    do {
                        let u = try Upload(job: job, engine: self)
                        uploads[job.id] = u
                        add(u, u.begin())
                        if u.finished { stopUpload(job.id) }
                    } catch {
                        onEvent(.failed(id: job.id, error: error))
                    }
                case .cancelUpload(let job):
                    stopUpload(job.id)
                    if let u = try? Upload(job: job, engine: self), let e = u.beginCancel() {
                        cancelling[e] = u
                        curl_multi_add_handle(multi, e)
                    }
                case .stop(let id):
                    if let d = active.removeValue(forKey: id) {
                        d.commit(force: true)
                        finish(d, nil)
                    }
                    stopUpload(id)
                case .shutdown(let done):
                    for d in active.values { d.commit(force: true); finish(d, nil) }
                    active.removeAll()
                    for id in Array(uploads.keys) { stopUpload(id) }
                    done()
                    return
                }
            }
            curl_multi_perform(multi, &stillRunning)
            var left: Int32 = 0
            while let msg = curl_multi_info_read(multi, &left) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                let result = ccurl_msg_result(msg)
                if let u = uploadOf.removeValue(forKey: easy) {
                    curl_multi_remove_handle(multi, easy)
                    add(u, u.done(result))
                    if u.finished { stopUpload(u.job.id) }
                    continue
                }
                if let u = cancelling.removeValue(forKey: easy) {
                    curl_multi_remove_handle(multi, easy)
                    u.close()
                    continue
                }
                guard let d = active.values.first(where: { $0.easy == easy }) else { continue }
                active.removeValue(forKey: d.job.id)
                complete(d, result)
            }
            // Time-based commits: a slow download still commits every commitInterval.
            let now = WallClock.monotonic()
            var nextCommit = Double.infinity
            for d in active.values {
                if d.uncommittedBytes > 0 {
                    if now - d.lastCommitAt >= options.commitInterval { d.commit(force: false) }
                    if d.uncommittedBytes > 0 { nextCommit = min(nextCommit, d.lastCommitAt + options.commitInterval) }
                }
            }
            var timeout: Int = -1
            curl_multi_timeout(multi, &timeout)
            if timeout < 0 { timeout = active.isEmpty && uploads.isEmpty && cancelling.isEmpty ? Int(Int32.max) : 1000 }
            if nextCommit.isFinite { timeout = min(timeout, max(0, Int((nextCommit - now) * 1000) + 1)) }
            var numfds: Int32 = 0
            curl_multi_poll(multi, nil, 0, Int32(min(timeout, Int(Int32.max))), &numfds)
        }
    }

    private func finish(_ d: Download, _ event: TransferEvent?) {
        curl_multi_remove_handle(multi, d.easy)
        d.close()
        if let event { onEvent(event) }
    }

    private func complete(_ d: Download, _ result: CURLcode) {
        if let err = d.abortError ?? d.classify(result) {
            // Whatever arrived intact so far is kept for the retry. On a full disk, the bytes
            // since the last commit are given back instead, so the database has room to record it.
            if !err.transient || d.restartNeeded { d.discardProgress() } else if err.noSpace { d.rollBackToCommit() } else { d.commit(force: true) }
            finish(d, .failed(id: d.job.id, error: err))
            return
        }
        finishComplete(d)
    }

    private func finishComplete(_ d: Download) {
        switch d.finalize() {
        case .success(let bytes):
            finish(d, .completed(id: d.job.id, bytes: bytes, path: d.job.finalPath))
        case .failure(let err):
            finish(d, .failed(id: d.job.id, error: err))
        }
    }

    func emit(_ e: TransferEvent) { onEvent(e) }
    var opts: Options { options }
}

/// One download's libcurl handle and file. Lives on the engine thread only.
final class Download {
    let job: DownloadJob
    let easy: UnsafeMutableRawPointer
    unowned let engine: TransferEngine
    var fd: Int32 = -1
    /// Bytes on disk in the part file (committed or not).
    var written: Int64
    var committed: Int64
    var lastCommitAt: Double
    var total: Int64?
    var etag: String?
    var lastModified: String?
    var validated = false
    var abortError: TransferError?
    var restartNeeded = false
    var headerStatus = 0
    var headerContentRange: String?
    var headerContentLength: Int64?
    var headerETag: String?
    var headerLastModified: String?
    var lastProgressAt: Double = 0
    var headers: UnsafeMutablePointer<curl_slist>?
    /// SHA-256 of bytes 0..<hashedUpTo, kept up as bytes arrive so finishing needs no re-read.
    var hasher: SHA256Hasher?
    var hashedUpTo: Int64 = 0
    /// The part file already holds every byte (a restart right after the last commit).
    var alreadyComplete = false

    var uncommittedBytes: Int64 { written - committed }

    init(job: DownloadJob, engine: TransferEngine) throws(TransferError) {
        self.job = job
        self.engine = engine
        guard let easy = curl_easy_init() else { throw TransferError("libcurl could not make a handle", transient: true) }
        self.easy = easy
        written = job.resumeFrom
        committed = job.resumeFrom
        total = job.expectedTotal
        etag = job.etag
        lastModified = job.lastModified
        lastCommitAt = WallClock.monotonic()
        try openPart()
        if job.sha256 != nil { startHash() }
        if let total, written == total, written > 0 {
            alreadyComplete = true
            return
        }
        configure()
    }

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

    private func openPart() throws(TransferError) {
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
            Glibc.close(fd)
            fd = -1
            throw TransferError("\(job.partPath) is not the part file drowsed made (a link or not a regular file)", transient: false)
        }
        if st.st_uid != (who?.uid ?? geteuid()) {
            // Not ours (left by an older drowsed that wrote it as root, or planted): start afresh.
            Glibc.close(fd)
            FileIdentity.remove(job.partPath, as: who)
            do { fd = try FileIdentity.open(job.partPath, flags | O_EXCL, mode: 0o600, as: who) } catch {
                fd = -1
                throw TransferError("cannot create \(job.partPath): \(error)", transient: error.isNoSpace, noSpace: error.isNoSpace)
            }
            written = 0
            committed = 0
            engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
        }
        // Anything past the committed offset may be torn: cut it off (DESIGN.md, Durability).
        let size = Int64(lseek(fd, 0, SEEK_END))
        if size != written {
            if size < written { written = 0; committed = 0 }
            _ = ftruncate(fd, off_t(written))
        }
        lseek(fd, off_t(written), SEEK_SET)
    }

    private func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let o = engine.opts
        o.applyCommon(to: easy, url: job.url)
        _ = ccurl_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1)
        _ = ccurl_setopt_long(easy, CURLOPT_MAXREDIRS, o.maxRedirects)
        _ = ccurl_setopt_long(easy, CURLOPT_FAILONERROR, 1)
        _ = ccurl_setopt_long(easy, CURLOPT_BUFFERSIZE, 256 * 1024)
        headers = curl_slist_append(headers, "Accept-Encoding: identity")
        if written > 0 {
            _ = ccurl_setopt_str(easy, CURLOPT_RANGE, "\(written)-")
            // If-Range: the server sends the rest only if the file is unchanged, else all of it (200).
            if let validator = etag.flatMap({ $0.hasPrefix("W/") ? nil : $0 }) ?? lastModified {
                headers = curl_slist_append(headers, "If-Range: \(validator)")
            }
        }
        _ = ccurl_setopt_slist(easy, CURLOPT_HTTPHEADER, headers)
        _ = ccurl_setopt_ptr(easy, CURLOPT_WRITEDATA, me)
        _ = ccurl_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION) { ptr, size, n, ud in
            let d = Unmanaged<Download>.fromOpaque(ud!).takeUnretainedValue()
            return d.onData(UnsafeRawBufferPointer(start: ptr, count: size * n))
        }
        _ = ccurl_setopt_ptr(easy, CURLOPT_HEADERDATA, me)
        _ = ccurl_setopt_data_cb(easy, CURLOPT_HEADERFUNCTION) { ptr, size, n, ud in
            let d = Unmanaged<Download>.fromOpaque(ud!).takeUnretainedValue()
            d.onHeader(UnsafeRawBufferPointer(start: ptr, count: size * n))
            return size * n
        }
    }

    func onHeader(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingCharacters()
        if line.hasPrefix("HTTP/") {
            // A new response (after a redirect or 100-continue): forget the previous one's headers.
            headerStatus = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            headerContentRange = nil
            headerContentLength = nil
            headerETag = nil
            headerLastModified = nil
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = String(line[line.index(after: colon)...]).trimmingCharacters()
        switch name {
        case "content-range": headerContentRange = value
        case "content-length": headerContentLength = Int64(value)
        case "etag": headerETag = value
        case "last-modified": headerLastModified = value
        default: break
        }
    }

    /// Checks the final response before its first body byte is written.
    private func validate() -> Bool {
        validated = true
        let start = written
        if headerStatus == 206 {
            guard start > 0, let cr = headerContentRange, let parsed = ContentRange.parse(cr) else {
                return abort(TransferError("server sent 206 with a missing or bad Content-Range", transient: true), restart: true)
            }
            guard parsed.start == start else {
                return abort(TransferError("server resumed at byte \(parsed.start), not \(start)", transient: true), restart: true)
            }
            if let t = parsed.total, let known = total, t != known {
                return abort(TransferError("file size changed on the server (\(known) → \(t) bytes)", transient: true), restart: true)
            }
            // The server should have answered 200 for a changed file (If-Range); some do not.
            // libcurl would splice their 206 onto the old bytes, so compare the validators here.
            if let etag, headerETag != etag {
                return abort(TransferError("file changed on the server (ETag)", transient: true), restart: true)
            }
            if etag == nil, let lm = lastModified, headerLastModified != lm {
                return abort(TransferError("file changed on the server (Last-Modified)", transient: true), restart: true)
            }
            total = parsed.total ?? total
        } else if headerStatus == 200 {
            if start > 0 {
                // Full body: the file changed or the server ignores ranges. Start over, never append.
                _ = ftruncate(fd, 0)
                lseek(fd, 0, SEEK_SET)
                written = 0
                committed = 0
                if job.sha256 != nil { hasher = SHA256Hasher(); hashedUpTo = 0 }
                engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
            }
            total = headerContentLength
        } else {
            return abort(TransferError("unexpected HTTP status \(headerStatus)", transient: headerStatus >= 500), restart: false)
        }
        etag = headerETag
        lastModified = headerLastModified
        return true
    }

    private func abort(_ e: TransferError, restart: Bool) -> Bool {
        abortError = e
        restartNeeded = restart
        return false
    }

    func onData(_ buf: UnsafeRawBufferPointer) -> Int {
        if !validated, !validate() { return 0 }
        // The byte cap: libcurl does not stop a chunked body that runs past the announced size.
        if let total, written + Int64(buf.count) > total {
            abortError = TransferError("server sent more than the announced \(total) bytes", transient: true)
            restartNeeded = true
            return 0
        }
        if total == nil, written + Int64(buf.count) > engine.opts.maxUnknownSize {
            // Trying again would only fill the disk again: a permanent failure.
            abortError = TransferError(
                "the server sent more than \(engine.opts.maxUnknownSize) bytes without announcing a length ([transfers] max_unknown_size)",
                transient: false)
            return 0
        }
        var off = 0
        while off < buf.count {
            let n = write(fd, buf.baseAddress! + off, buf.count - off)
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                abortError = TransferError("writing \(job.partPath): \(String(cString: strerror(e)))", transient: true, noSpace: e == ENOSPC || e == EDQUOT)
                return 0
            }
            off += n
        }
        if hasher != nil, hashedUpTo == written {
            hasher!.update(buf)
            hashedUpTo += Int64(buf.count)
        }
        written += Int64(buf.count)
        if written - committed >= engine.opts.commitBytes { commit(force: false) }
        let now = WallClock.monotonic()
        if now - lastProgressAt >= 0.5 {
            lastProgressAt = now
            engine.emit(.progress(id: job.id, bytesDone: written, bytesTotal: total))
        }
        return buf.count
    }

    /// fdatasync, then report the offset: the store may record it only after the data is durable.
    /// `force` syncs on this thread (at a stop, before the descriptor closes); otherwise the
    /// syncer thread does it while this one keeps receiving.
    func commit(force: Bool) {
        guard fd >= 0, written != committed || force else { return }
        let event = TransferEvent.committed(id: job.id, bytesDone: written, bytesTotal: total, etag: etag, lastModified: lastModified)
        committed = written
        lastCommitAt = WallClock.monotonic()
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
        if fd >= 0 { _ = ftruncate(fd, off_t(committed)) }
        written = committed
        hasher = nil  // it covered bytes that are gone; finishing re-reads the file
    }

    /// After a response that must not be spliced: start the next attempt from zero.
    func discardProgress() {
        if fd >= 0 { _ = ftruncate(fd, 0) }
        written = 0
        committed = 0
        engine.syncer.drain()  // no older offset may be reported after this zero
        engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
    }

    func classify(_ result: CURLcode) -> TransferError? {
        if result == CURLE_OK {
            if !validated, !validate() { return abortError }
            return nil
        }
        var code = 0
        _ = ccurl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        let message = String(cString: curl_easy_strerror(result))
        switch result {
        case CURLE_HTTP_RETURNED_ERROR:
            // 416 with "bytes */N" where N is what we hold: the file was complete already.
            if code == 416, written > 0, let cr = headerContentRange, cr.hasSuffix("/\(written)"), total == nil || total == written {
                validated = true
                total = written
                return nil
            }
            if code == 416, written > 0 {
                restartNeeded = true
                return TransferError("server refused the range (HTTP 416)", transient: true)
            }
            let transient = code >= 500 || code == 408 || code == 429
            return TransferError("HTTP \(code)", transient: transient)
        case CURLE_UNSUPPORTED_PROTOCOL:
            return TransferError("refused: redirect to a URL that is not http or https", transient: false)
        case CURLE_TOO_MANY_REDIRECTS:
            return TransferError("too many redirects", transient: false)
        case CURLE_URL_MALFORMAT:
            return TransferError("malformed URL", transient: false)
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE:
            return TransferError("TLS verification failed: \(message)", transient: false)
        case CURLE_OPERATION_TIMEDOUT:
            return TransferError("stalled: \(message)", transient: true)
        default:
            return TransferError(message, transient: true)
        }
    }

    /// Size check, sha256, fsync, rename, fsync folder.
    func finalize() -> Result<Int64, TransferError> {
        if let total, written != total {
            discardProgressIfShort()
            return .failure(TransferError("body ended at \(written) of \(total) bytes", transient: true))
        }
        engine.syncer.drain()
        guard fsync(fd) == 0 else {
            let e = errno
            return .failure(TransferError("fsync: \(String(cString: strerror(e)))", transient: true, noSpace: e == ENOSPC))
        }
        if let owner = job.owner, geteuid() == 0, fchown(fd, owner.uid, owner.gid) != 0 {
            let e = errno
            return .failure(TransferError("fchown: \(String(cString: strerror(e)))", transient: true))
        }
        Glibc.close(fd)
        fd = -1
        if let want = job.sha256?.lowercased() {
            let got: String
            if let h = hasher.take(), hashedUpTo == written {
                got = SHA256Hasher.hex(h.finalize())
            } else {
                do { got = try SHA256Hasher.hexDigest(ofFile: job.partPath, as: job.identity) } catch {
                    return .failure(TransferError("reading back: \(error)", transient: true))
                }
            }
            guard got == want else {
                FileIdentity.remove(job.partPath, as: job.identity)
                engine.emit(.committed(id: job.id, bytesDone: 0, bytesTotal: nil, etag: nil, lastModified: nil))
                return .failure(TransferError("sha256 mismatch: expected \(want), got \(got)", transient: false))
            }
        }
        do { try FileIdentity.rename(job.partPath, to: job.finalPath, as: job.identity) } catch {
            return .failure(TransferError("\(error)", transient: error.isNoSpace, noSpace: error.isNoSpace))
        }
        return .success(written)
    }

    private func discardProgressIfShort() {
        // A short body is resumable: keep what arrived.
        commit(force: true)
    }

    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
        curl_easy_cleanup(easy)
        curl_slist_free_all(headers)
        headers = nil
    }
}

/// `Content-Range: bytes START-END/TOTAL` (TOTAL may be `*`).
public struct ContentRange: Equatable, Sendable {
    public var start: Int64
    public var end: Int64
    public var total: Int64?

    public static func parse(_ s: String) -> ContentRange? {
        let t = s.trimmingCharacters()
        guard t.lowercased().hasPrefix("bytes ") else { return nil }
        let rest = t.dropFirst(6)
        let parts = rest.split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let range = parts[0].split(separator: "-", maxSplits: 1)
        guard range.count == 2, let a = Int64(range[0]), let b = Int64(range[1]), a <= b else { return nil }
        let total: Int64? = parts[1] == "*" ? nil : Int64(parts[1])
        if parts[1] != "*", total == nil { return nil }
        if let total, b >= total { return nil }
        return ContentRange(start: a, end: b, total: total)
    }
}

extension StringProtocol {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
