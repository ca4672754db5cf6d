#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import DrowseTransfers

/// A request to create a transfer, from the API.
public struct TransferRequest: Sendable {
    public var kind: Transfer.Kind
    public var url: String
    public var app: String
    public var session: String
    public var destination: String?
    public var sha256: String?
    /// Uploads: the file to send.
    public var source: String?
    public var uploadProtocol: UploadProtocol = .auto
    /// Uploads: the file's media type (tus `filetype`, a PUT's Content-Type).
    public var contentType: String?
    /// `--timeout-resource`: give up if not finished in this long (default 7 days, as on iOS).
    public var timeoutResource: Double = 7 * 86400
    public var requirements = TransferRequirements()
    /// A size announced in advance (push to transfer): the byte cap from the first byte.
    public var expectedSize: Int64?
}

extension Agent {
    func startTransferEngine() {
        let (stream, continuation) = AsyncStream<TransferEvent>.makeStream()
        transferEvents = continuation
        var opts = TransferEngine.Options(
            maxConnectionsPerHost: config.transfers.maxConnectionsPerHost,
            commitInterval: config.transfers.commitInterval.seconds, commitBytes: Int64(config.transfers.commitBytes))
        opts.lowSpeedTime = max(1, Int(saturating: config.transfers.stallTimeout.seconds, rounding: .toNearestOrAwayFromZero))
        opts.maxUnknownSize = config.transfers.maxUnknownSize
        engine = TransferEngine(options: opts, logger: logger) { continuation.yield($0) }
        background.append(Task {
            for await event in stream { await self.transferEvent(event) }
        })
    }

    /// Where a download's bytes gather: beside its `--to` path (same file system, so the final
    /// rename is atomic; a hidden name, so nothing appears at the final path early), else in
    /// the state folder.
    func partPath(_ t: Transfer) -> String {
        guard let dest = t.destination else { return config.stateDir + "/transfers/\(t.id).part" }
        let name = dest.split(separator: "/").last.map(String.init) ?? "download"
        return ConfigPath.directory(of: dest) + "/.\(name).\(t.id).drowse-part"
    }

    func finalPath(_ t: Transfer) -> String {
        if let d = t.destination { return d }
        var name = URLParts.parse(t.url)?.lastPathComponent ?? ""
        if name.isEmpty || !Identifier.isValid(name) { name = "download" }
        return config.stateDir + "/inbox/\(t.app)/\(t.id)-\(name)"  // inbox(for:) makes the folder
    }

    /// Whose paths a transfer's files live at: the API caller who gave `--to` or the upload's
    /// source. drowsed touches them only as that user (FileIdentity); nil for root's own paths
    /// (a root caller, the state folder).
    func identity(_ t: Transfer) -> FileIdentity? {
        guard t.destination != nil || t.kind == .upload, let uid = t.ownerUID, let gid = t.ownerGID else { return nil }
        return FileIdentity.of(uid: uid, gid: gid)
    }

    func job(_ t: Transfer) -> DownloadJob {
        // An inbox file goes to the app's user, handed over before it gets its final name.
        var owner: (uid: UInt32, gid: UInt32)?
        if t.destination == nil, let user = apps[t.app]?.user, let account = UserAccount.lookup(name: user) {
            owner = (account.uid, account.gid)
        }
        return DownloadJob(
            id: t.id, url: t.url, partPath: partPath(t), finalPath: finalPath(t), resumeFrom: t.bytesDone,
            etag: t.etag, lastModified: t.lastModified, expectedTotal: t.bytesTotal, sha256: t.sha256,
            identity: identity(t), owner: owner)
    }

    /// Restarts every unfinished transfer from its committed offset; delivers finished sessions not yet delivered.
    func resumeTransfers() {
        guard let all = try? store.transfers() else { return }
        var sessions: Set<[String]> = []
        for var t in all {
            if t.state.isFinished {
                if !t.delivered { sessions.insert([t.app, t.session]) }
                continue
            }
            // A crash between the rename and the store update: the verified file is already in place.
            let final = finalPath(t)
            let who = identity(t)
            if t.kind == .download, !FileIdentity.exists(partPath(t), as: who),
                let size = FileIdentity.regularFileSize(final, as: who), t.bytesTotal == size,
                t.sha256 == nil || (try? SHA256Hasher.hexDigest(ofFile: final, as: who)) == t.sha256 {
                t.state = .completed
                t.location = final
                t.bytesDone = size
                t.finishedAt = now()
                persist(t)
                sessions.insert([t.app, t.session])
                continue
            }
            logger.info("resuming transfer from byte \(t.bytesDone)", metadata: ["transfer.id": "\(t.id)", "app.id": "\(t.app)"])
            begin(t)
        }
        for s in sessions { checkSession(app: s[0], session: s[1]) }
        scheduleTimeouts()
    }

    /// One timer for the earliest `--timeout-resource` among unfinished transfers: whatever
    /// has not finished by then fails, running or waiting.
    func scheduleTimeouts() {
        timeoutTimer?.cancel()
        timeoutTimer = nil
        guard let all = try? store.transfers() else { return }
        let deadlines = all.filter { !$0.state.isFinished }.compactMap(\.timeoutAt)
        guard let next = deadlines.min() else { return }
        timeoutTimer = WakeTimer.after(max(0, next - now()) + 0.01) { Task { await self.expireTransfers() } }
    }

    func expireTransfers() {
        timeoutTimer = nil
        let t0 = now()
        for var t in (try? store.transfers()) ?? [] where !t.state.isFinished && (t.timeoutAt ?? .infinity) <= t0 {
            engine?.stop(id: t.id)
            retryTimers.removeValue(forKey: t.id)?.cancel()
            liveProgress[t.id] = nil
            finishFailed(&t, reason: "timed out: not finished within its --timeout-resource")
        }
        scheduleTimeouts()
    }

    func uploadJob(_ t: Transfer) -> UploadJob {
        UploadJob(
            id: t.id, url: t.url, sourcePath: t.source ?? "", total: t.bytesTotal ?? 0,
            protocolName: UploadProtocol(rawValue: t.uploadProtocol ?? "auto") ?? .auto, resource: t.uploadURL,
            identity: identity(t), contentType: t.contentType)
    }

    /// The app's own inbox folder, owned by the app's user so its events handler can read there.
    func inbox(for appID: String) -> String {
        let dir = config.stateDir + "/inbox/\(appID)"
        try? FileSystem.makeDirectories(dir, mode: 0o700)
        if let user = apps[appID]?.user, let account = UserAccount.lookup(name: user) {
            Permissions.giveTo(dir, uid: account.uid, gid: account.gid)
        }
        return dir
    }

    func begin(_ t: Transfer) {
        var t = t
        if let deadline = t.timeoutAt, now() > deadline {
            finishFailed(&t, reason: "timed out: not finished within its --timeout-resource")
            return
        }
        if let blocker = policy.blocker(t.requirements, conditions) {
            // Not now: applyConditions() starts it when the board's conditions allow.
            t.state = .waiting
            t.reason = "waiting: " + blocker
            persist(t)
            return
        }
        t.state = .running
        t.reason = nil
        if t.kind == .download, t.destination == nil { _ = inbox(for: t.app) }
        var retry = retryState[t.id] ?? TransferRetry(attempts: t.attempts, retries: t.retries)
        retry.attemptStarted(bytes: t.bytesDone)
        retryState[t.id] = retry
        t.attempts = retry.attempts
        t.nextRetryAt = nil
        persist(t)
        switch t.kind {
        case .download: engine?.start(job(t))
        case .upload: engine?.start(uploadJob(t))
        }
    }

    func finishFailed(_ t: inout Transfer, reason: String) {
        retryState[t.id] = nil
        t.nextRetryAt = nil
        if t.kind == .upload, t.uploadURL != nil { engine?.cancel(uploadJob(t)) }
        t.state = .failed
        t.reason = reason
        t.finishedAt = now()
        persist(t)
        FileIdentity.remove(partPath(t), as: identity(t))
        logger.warning("transfer failed: \(reason)", metadata: ["transfer.id": "\(t.id)", "app.id": "\(t.app)"])
        checkSession(app: t.app, session: t.session)
    }

    public func createTransfer(_ req: TransferRequest, caller: Caller) throws(APIError) -> Transfer {
        let app = try app(req.app, for: caller)
        guard URLParts.isTransferURL(req.url) else {
            throw .badRequest("only http and https URLs can be transferred: '\(req.url)'")
        }
        var total: Int64?
        let callerFiles = FileIdentity(uid: caller.uid, gid: caller.gid, groups: [caller.gid] + caller.groups)
        if req.kind == .upload {
            guard let src = req.source, src.hasPrefix("/") else { throw .badRequest("an upload needs the absolute path of its file") }
            // drowsed runs as root: it reads only what the caller could read itself. The check by
            // mode bits says why; opening as the caller is what the kernel enforces (and what
            // every later attempt does again).
            guard Permissions.canRead(src, by: caller.subject),
                let size = FileIdentity.regularFileSize(src, as: callerFiles)
            else {
                throw APIError(403, "forbidden", "'\(src)' is not a regular file you can read")
            }
            total = size
        }
        if let d = req.destination {
            guard d.hasPrefix("/") else { throw .badRequest("--to must be an absolute path") }
            guard FileSystem.isDirectory(ConfigPath.directory(of: d)) else { throw .badRequest("folder of '\(d)' does not exist") }
            guard Permissions.canWrite(d, by: caller.subject) else {
                throw APIError(403, "forbidden", "you cannot write '\(d)'")
            }
        }
        guard req.timeoutResource > 0 else { throw .badRequest("--timeout-resource must be positive") }
        if let h = req.sha256, h.count != 64 || !h.allSatisfy(\.isHexDigit) {
            throw .badRequest("sha256 must be 64 hex digits")
        }
        guard Identifier.isValid(req.session) else { throw .badRequest("session names hold only letters, digits, '-', '_' and '.'") }
        // A cap per app, so one app (or a flood of push-to-transfer notifications) cannot fill
        // the store and the engine for everyone.
        let live = ((try? store.transfers(app: app.id)) ?? []).lazy.filter { !$0.state.isFinished }.count
        guard live < config.transfers.maxPerApp else {
            throw APIError(429, "too_many_transfers",
                           "app '\(app.id)' has \(live) unfinished transfers, the most allowed ([transfers] max_per_app)")
        }
        var bytes = [UInt8](repeating: 0, count: 8)
        for i in 0..<8 { bytes[i] = UInt8.random(in: 0...255) }
        let id = SHA256Hasher.hex(bytes)
        var t = Transfer(
            id: id, app: app.id, session: req.session, kind: req.kind, url: req.url, destination: req.destination,
            sha256: req.sha256?.lowercased(), createdAt: now())
        t.timeoutAt = t.createdAt + req.timeoutResource
        t.requirements = req.requirements
        if req.kind == .download, let size = req.expectedSize { t.bytesTotal = size }
        if caller.uid != 0 {
            t.ownerUID = caller.uid
            t.ownerGID = caller.gid
        }
        if req.kind == .upload {
            t.source = req.source
            t.bytesTotal = total
            t.uploadProtocol = req.uploadProtocol.rawValue
            t.contentType = req.contentType
        }
        do { try store.save(t) } catch { throw .internal("\(error)") }
        logger.info("transfer queued", metadata: ["transfer.id": "\(id)", "app.id": "\(app.id)", "url": "\(req.url)"])
        begin(t)
        scheduleTimeouts()
        return withLive(t)
    }

    /// Saves a transfer's state. When the store cannot write (a full disk holds the database
    /// too), the state is kept in memory so the API still tells the truth, and saved later.
    func persist(_ t: Transfer) {
        do {
            try store.save(t)
            unsaved[t.id] = nil
        } catch {
            logger.error("store: \(error)", metadata: ["transfer.id": "\(t.id)"])
            unsaved[t.id] = t
        }
    }

    /// The newest state of a transfer: unsaved in memory, or as stored.
    func current(_ id: String) -> Transfer? { unsaved[id] ?? (try? store.transfer(id: id)) }

    func withLive(_ t: Transfer) -> Transfer {
        var t = unsaved[t.id] ?? t
        if t.kind == .upload {
            // bytes_done moves while a request body is on its way (libcurl's upload progress);
            // bytes_confirmed is what the server has confirmed, the offset a resume starts from.
            t.bytesConfirmed = t.bytesDone
            if t.state == .running {
                t.bytesSent = max(liveSent[t.id] ?? 0, t.bytesDone)
                t.bytesDone = t.bytesSent!
            }
            // Where the bytes go: the server-side upload resource once it exists.
            if t.location == nil { t.location = t.uploadURL }
        }
        if t.state == .running, t.kind == .download, let (done, total) = liveProgress[t.id] {
            t.bytesDone = max(t.bytesDone, done)
            t.bytesTotal = total ?? t.bytesTotal
        }
        return t
    }

    public func transfers(app: String?, caller: Caller) throws(APIError) -> [Transfer] {
        let all: [Transfer]
        do { all = try store.transfers(app: app) } catch { throw .internal("\(error)") }
        return all.filter { t in apps[t.app].map { visible($0, to: caller) } ?? caller.isAdmin }.map(withLive)
    }

    public func transfer(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        guard let t = unsaved[id] ?? (try? store.transfer(id: id)) else { throw .notFound("no transfer '\(id)'") }
        guard caller.isAdmin || (apps[t.app].map { visible($0, to: caller) } ?? false) else { throw .notFound("no transfer '\(id)'") }
        return withLive(t)
    }

    public func cancel(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        var t = try transfer(id, caller: caller)
        guard !t.state.isFinished else { return t }
        cancelNow(&t, reason: "cancelled")
        checkSession(app: t.app, session: t.session)
        return t
    }

    func cancelNow(_ t: inout Transfer, reason: String) {
        if t.kind == .upload { engine?.cancel(uploadJob(t)) } else { engine?.stop(id: t.id) }
        retryTimers.removeValue(forKey: t.id)?.cancel()
        liveProgress[t.id] = nil
        retryState[t.id] = nil
        t.nextRetryAt = nil
        t.state = .cancelled
        t.reason = reason
        t.finishedAt = now()
        persist(t)
        FileIdentity.remove(partPath(t), as: identity(t))
        logger.info("transfer cancelled", metadata: ["transfer.id": "\(t.id)"])
    }

    /// `drowse quit ID`: the force-quit cancels the app's unfinished transfers.
    public func quit(_ id: String, caller: Caller) throws(APIError) -> Int {
        let app = try app(id, for: caller)
        var n = 0
        var sessions: Set<String> = []
        for var t in (try? store.transfers(app: app.id)) ?? [] where !t.state.isFinished {
            cancelNow(&t, reason: "cancelled: the app was force-quit")
            sessions.insert(t.session)
            n += 1
        }
        for s in sessions { checkSession(app: app.id, session: s) }
        return n
    }

    func transferEvent(_ event: TransferEvent) {
        switch event {
        case let .committed(id, done, total, etag, lm):
            do { try store.commitProgress(id: id, bytesDone: done, bytesTotal: total, etag: etag, lastModified: lm) } catch {
                logger.error("store: \(error)")
            }
            liveProgress[id] = (done, total)
            // An upload resumed below what the last attempt had sent: its live count starts over.
            if let sent = liveSent[id], done < sent { liveSent[id] = nil }
        case let .progress(id, done, total):
            liveProgress[id] = (done, total)
        case let .sent(id, sent):
            liveSent[id] = sent
        case let .uploadResource(id, url, proto):
            do { try store.recordUploadResource(id: id, url: url, protocol: proto) } catch { logger.error("store: \(error)") }
        case let .completed(id, bytes, path):
            liveProgress[id] = nil
            liveSent[id] = nil
            retryState[id] = nil
            guard var t = current(id), !t.state.isFinished else { return }
            t.state = .completed
            t.bytesDone = bytes
            t.bytesTotal = bytes
            // The file already belongs to whoever asked for it (made as them) or, in the inbox,
            // to the app's user (fchown before the rename): no chown by path here.
            if t.kind == .download { t.location = path }
            t.reason = nil
            t.finishedAt = now()
            persist(t)
            logger.info("transfer completed (\(bytes) bytes)", metadata: ["transfer.id": "\(id)", "app.id": "\(t.app)"])
            radioBusy()
            checkSession(app: t.app, session: t.session)
        case let .failed(id, error):
            // What this attempt moved: committed bytes (the engine commits before it reports a
            // failure), or for an upload what it had sent.
            let moved = max(liveSent[id] ?? 0, liveProgress[id]?.0 ?? 0)
            liveProgress[id] = nil
            liveSent[id] = nil
            guard var t = current(id), !t.state.isFinished else { return }
            if error.transient && now() < (t.timeoutAt ?? .infinity) {
                var retry = retryState[id] ?? TransferRetry(attempts: t.attempts, retries: t.retries)
                let delay = retry.attemptFailed(
                    bytes: max(moved, t.bytesDone), noSpace: error.noSpace, now: now(), unit: Double.random(in: 0..<1))
                retryState[id] = retry
                t.retries = retry.retries
                t.nextRetryAt = retry.nextRetryAt
                t.state = error.noSpace ? .paused : .waiting
                t.reason = (error.noSpace ? "paused: disk full (" : "retrying in \(Int(saturating: delay, rounding: .up))s after: ") + error.reason + (error.noSpace ? ")" : "")
                persist(t)
                logger.warning("transfer attempt failed: \(error.reason); retry in \(delay)s", metadata: ["transfer.id": "\(id)"])
                retryTimers[id] = WakeTimer.after(delay) { Task { await self.retry(id) } }
                return
            }
            finishFailed(&t, reason: error.transient ? "timed out after: \(error.reason)" : error.reason)
        }
    }

    /// After a change of power or network: pause what may not go on (keeping its progress),
    /// start what was waiting and now may.
    func applyConditions() {
        guard let all = try? store.transfers() else { return }
        for var t in all where !t.state.isFinished {
            let blocker = policy.blocker(t.requirements, conditions)
            switch (t.state, blocker) {
            case (.running, let b?):
                engine?.stop(id: t.id)
                liveProgress[t.id] = nil
                t.state = .paused
                t.reason = "paused: " + b
                persist(t)
                logger.info("transfer paused: \(b)", metadata: ["transfer.id": "\(t.id)"])
            case (.waiting, let b?), (.paused, let b?):
                guard retryTimers[t.id] == nil else { continue }
                let reason = (t.state == .paused ? "paused: " : "waiting: ") + b
                if t.reason != reason { t.reason = reason; persist(t) }
            case (.waiting, nil), (.paused, nil):
                // Those counting down to a retry keep their timer.
                guard retryTimers[t.id] == nil else { continue }
                logger.info("transfer resumes: conditions allow it", metadata: ["transfer.id": "\(t.id)"])
                begin(t)
            default:
                break
            }
        }
    }

    func retry(_ id: String) {
        retryTimers[id] = nil
        guard let t = current(id), !t.state.isFinished else { return }
        begin(t)
    }

    /// When every transfer of an app's session has finished, hands the finished ones to the
    /// app's events handler, then removes downloaded files that had no `--to`.
    func checkSession(app appID: String, session: String) {
        let key = appID + "\u{0}" + session
        guard !deliveringSessions.contains(key), let app = apps[appID],
            let all = try? store.transfers(app: appID)
        else { return }
        let inSession = all.filter { $0.session == session }
        guard inSession.allSatisfy({ $0.state.isFinished }) else { return }
        let batch = inSession.filter { !$0.delivered }
        guard !batch.isEmpty else { return }
        guard app.eventsCommand != nil else {
            for var t in batch { t.delivered = true; persist(t) }
            return
        }
        guard app.sendsLaunchEvents, !stopping else { return }  // undelivered: delivered after the restart
        deliveringSessions.insert(key)
        let doc = JSON.object([
            ("event", "transfers"), ("app", .string(appID)), ("session", .string(session)),
            ("transfers", .array(batch.map(\.json))),
        ])
        // Through the handler queue, like every handler: at most max_concurrent_handlers run at once.
        enqueueHandler(.transfers(app: appID, key: key, stdin: Array(doc.serialized.utf8), batch: batch))
    }

    func sessionDelivered(key: String, batch: [Transfer]) {
        deliveringSessions.remove(key)
        for var t in batch {
            if t.destination == nil, let loc = t.location {
                FileSystem.remove(loc)
                t.location = nil
            }
            t.delivered = true
            persist(t)
        }
        if let first = batch.first { checkSession(app: first.app, session: first.session) }
    }
}
