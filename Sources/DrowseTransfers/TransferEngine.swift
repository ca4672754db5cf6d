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
package final class TransferEngine: Sendable {
    package struct Options: Sendable {
        package var maxConnectionsPerHost: Int
        package var commitInterval: Double
        package var commitBytes: Int64
        package var maxRedirects: Int = 10
        package var lowSpeedLimit: Int = 1
        package var lowSpeedTime: Int = 60
        package var userAgent: String = "drowsed"
        /// The byte cap for a body whose length was not announced (chunked, or no Content-Length).
        package var maxUnknownSize: Int64 = 2 << 30
        /// Seconds without a transfer after which the engine thread gives back the resident pages
        /// of the shared libraries' code and constants, libcurl's and what it loaded among them
        /// (`LibraryCode.release`): once, not again until another transfer ran. nil: never.
        package var releaseCodeAfter: Double? = 30

        package init(maxConnectionsPerHost: Int, commitInterval: Double, commitBytes: Int64) {
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
    let logger: Logger
    let syncer: Syncer
    /// How every handle is held to http and https.
    let protocols: ProtocolRule
    /// Why this engine runs no transfers (its libcurl cannot be held to http and https).
    package let refusal: TransferError?

    package init(options: Options, logger: Logger, onEvent: @escaping @Sendable (TransferEvent) -> Void) {
        let checked = Self.checkLibcurl()
        // NULL only when libcurl cannot allocate it: without memory for one handle there is no
        // engine to make, nor a way to fail every transfer politely.
        guard let multi = ccurl_multi_init() else { preconditionFailure("curl_multi_init failed: out of memory") }
        self.multi = multi
        self.options = options
        self.onEvent = onEvent
        self.logger = logger
        syncer = Syncer(onEvent: onEvent)
        switch checked {
        case .success(let rule):
            protocols = rule
            refusal = nil
            logger.debug("libcurl \(String(cString: ccurl_version_str())): http and https only, with \(rule == .names ? "CURLOPT_PROTOCOLS_STR" : "CURLOPT_PROTOCOLS")")
        case .failure(let error):
            protocols = .bitmask
            refusal = error
            logger.error("transfers are off: \(error.reason)")
        }
        CurlCheck.multi(ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, options.maxConnectionsPerHost),
                        "CURLMOPT_MAX_HOST_CONNECTIONS", logger)
        let box = Unmanaged.passUnretained(self)
        OSThread.detach(name: "transfers") { box.takeUnretainedValue().loop() }
    }

    /// An engine, or why this libcurl must not run transfers (it cannot be held to http and
    /// https). `init` makes an engine all the same, one that fails every transfer with that reason.
    package static func start(options: Options, logger: Logger,
                             onEvent: @escaping @Sendable (TransferEvent) -> Void) throws(TransferError) -> TransferEngine {
        if case .failure(let error) = checkLibcurl() { throw error }
        return TransferEngine(options: options, logger: logger, onEvent: onEvent)
    }

    /// Initialises libcurl and finds how it takes the http/https-only rule.
    static func checkLibcurl() -> Result<ProtocolRule, TransferError> {
        let code = ccurl_global_init(Int(CURL_GLOBAL_DEFAULT))
        guard code == CURLE_OK else {
            return .failure(TransferError("libcurl did not initialise: \(String(cString: ccurl_easy_strerror(code)))", transient: false))
        }
        return ProtocolRule.probe()
    }

    package func start(_ job: DownloadJob) { send(.start(job)) }
    package func start(_ job: UploadJob) { send(.startUpload(job)) }
    package func cancel(_ job: UploadJob) { send(.cancelUpload(job)) }
    package func stop(id: String) { send(.stop(id)) }

    /// Commits every running download's progress (reported as `.committed`) and stops the thread.
    package func shutdown() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in send(.shutdown({ c.resume() })) }
    }

    private func send(_ c: Command) {
        commands.withLock { $0.append(c) }
        // Failing, the command waits for the loop's next timeout instead of running at once.
        CurlCheck.multi(ccurl_multi_wakeup(multi), "curl_multi_wakeup", logger)
    }

    // MARK: engine thread

    private func loop() {
        var active: [String: Download] = [:]
        var uploads: [String: Upload] = [:]
        /// Which upload owns each easy handle (they change from request to request).
        var uploadOf: [UnsafeMutableRawPointer: Upload] = [:]
        var cancelling: [UnsafeMutableRawPointer: Upload] = [:]
        var stillRunning: Int32 = 0
        /// A command ran since the last release of libcurl's code pages (libcurl's code with it).
        var usedSinceRelease = false
        /// When the code pages are given back, if the engine stays idle until then: one timeout
        /// of the poll below, armed when the last transfer ended, never a periodic one.
        var releaseAt: Double?
        func add(_ u: Upload, _ easy: UnsafeMutableRawPointer?) {
            // Resources the upload gave up on: ended with a fire-and-forget DELETE of their own.
            for (url, proto) in u.toAbandon {
                var old = u.job
                old.resource = url
                old.protocolName = proto
                if let o = try? Upload(job: old, engine: self), let e = o.beginCancel() {
                    if addHandle(e) { cancelling[e] = o } else { o.close() }
                }
            }
            u.toAbandon.removeAll()
            guard let easy else { return }
            if addHandle(easy) {
                uploadOf[easy] = u
            } else {
                u.finished = true
                onEvent(.failed(id: u.job.id, error: TransferError("libcurl could not start the request", transient: true)))
            }
        }
        func stopUpload(_ id: String) {
            guard let u = uploads.removeValue(forKey: id) else { return }
            if let e = u.easy, uploadOf.removeValue(forKey: e) != nil { removeHandle(e) }
            u.close()
        }
        while true {
            let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
            if !pending.isEmpty { usedSinceRelease = true }
            for c in pending {
                switch c {
                case .start(let job):
                    if let refusal { onEvent(.failed(id: job.id, error: refusal)); continue }
                    if let old = active.removeValue(forKey: job.id) { finish(old, nil) }
                    do {
                        let d = try Download(job: job, engine: self)
                        if d.alreadyComplete {
                            // Every byte was committed before a restart: only the finish is left.
                            let event = d.finalize()
                            d.close()
                            onEvent(event)
                        } else if addHandle(d.easy) {
                            active[job.id] = d
                        } else {
                            d.commit(force: true)
                            d.close()
                            onEvent(.failed(id: job.id, error: TransferError("libcurl could not start the request", transient: true)))
                        }
                    } catch {
                        onEvent(.failed(id: job.id, error: error))
                    }
                case .startUpload(let job):
                    stopUpload(job.id)
                    if let refusal { onEvent(.failed(id: job.id, error: refusal)); continue }
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
                    if refusal == nil, let u = try? Upload(job: job, engine: self), let e = u.beginCancel() {
                        if addHandle(e) { cancelling[e] = u } else { u.close() }
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
            CurlCheck.multi(ccurl_multi_perform(multi, &stillRunning), "curl_multi_perform", logger)
            var left: Int32 = 0
            while let msg = ccurl_multi_info_read(multi, &left) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                let result = ccurl_msg_result(msg)
                if let u = uploadOf.removeValue(forKey: easy) {
                    removeHandle(easy)
                    add(u, u.done(result))
                    if u.finished { stopUpload(u.job.id) }
                    continue
                }
                if let u = cancelling.removeValue(forKey: easy) {
                    removeHandle(easy)
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
                if d.cadence.dueForTime(uncommitted: d.uncommittedBytes, now: now) { d.commit(force: false) }
                if let due = d.cadence.nextDue(uncommitted: d.uncommittedBytes) { nextCommit = min(nextCommit, due) }
            }
            let idle = active.isEmpty && uploads.isEmpty && cancelling.isEmpty
            if !idle {
                releaseAt = nil
            } else if usedSinceRelease, let after = options.releaseCodeAfter {
                if releaseAt == nil { releaseAt = now + after }
                if let due = releaseAt, now >= due {
                    releaseCode(idleFor: after)
                    usedSinceRelease = false
                    releaseAt = nil
                }
            }
            var timeout: Int = -1
            if !CurlCheck.multi(ccurl_multi_timeout(multi, &timeout), "curl_multi_timeout", logger) { timeout = 1000 }
            if timeout < 0 { timeout = idle ? Int(Int32.max) : 1000 }
            if nextCommit.isFinite { timeout = min(timeout, CommitCadence.waitMilliseconds(until: nextCommit, now: now)) }
            if let due = releaseAt { timeout = min(timeout, CommitCadence.waitMilliseconds(until: due, now: now)) }
            var numfds: Int32 = 0
            let wait = Int32(min(timeout, Int(Int32.max)))
            if !CurlCheck.multi(ccurl_multi_poll(multi, nil, 0, wait, &numfds), "curl_multi_poll", logger) {
                // Still block on the transfers' sockets until the planned timeout; curl_multi_wait
                // does not hear curl_multi_wakeup, so at most 1 s, for queued commands.
                CurlCheck.multi(ccurl_multi_wait(multi, nil, 0, min(wait, 1000), &numfds), "curl_multi_wait", logger)
            }
        }
    }

    /// Gives back the resident code of the shared libraries (`LibraryCode`): after a transfer,
    /// libcurl's, what it loaded and the libcrypto OpenSSL's start-up touched stay resident,
    /// about 6 MB of an idle daemon's memory that only the next transfer needs. Runs on this
    /// thread, so no transfer runs meanwhile; the next one faults back what it runs.
    private func releaseCode(idleFor seconds: Double) {
        if let bytes = LibraryCode.release() {
            logger.debug("no transfer for \(seconds) s: released the resident code of the shared libraries (\(bytes / 1024) KiB mapped)")
        }
    }

    /// Adds a handle to the multi handle; false (logged) when libcurl refuses it.
    private func addHandle(_ easy: UnsafeMutableRawPointer) -> Bool {
        CurlCheck.multi(ccurl_multi_add_handle(multi, easy), "curl_multi_add_handle", logger)
    }

    private func removeHandle(_ easy: UnsafeMutableRawPointer) {
        CurlCheck.multi(ccurl_multi_remove_handle(multi, easy), "curl_multi_remove_handle", logger)
    }

    /// Ends a running download (in the multi handle) and reports `event`, if any.
    private func finish(_ d: Download, _ event: TransferEvent?) {
        removeHandle(d.easy)
        d.close()
        if let event { onEvent(event) }
    }

    private func complete(_ d: Download, _ result: CURLcode) {
        removeHandle(d.easy)
        let event = d.end(result)
        d.close()
        if let event { onEvent(event) }
    }

    func emit(_ e: TransferEvent) { onEvent(e) }
    var opts: Options { options }
}
