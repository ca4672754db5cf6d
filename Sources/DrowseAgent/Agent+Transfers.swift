#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import DrowseTransfers

/// A request to create a transfer, from the API.
package struct TransferRequest: Sendable {
    package var kind: Transfer.Kind
    package var url: String
    package var app: String
    package var session: String
    package var destination: String?
    package var sha256: String?
    /// Uploads: the file to send.
    package var source: String?
    package var uploadProtocol: UploadProtocol = .auto
    /// Uploads: the file's media type (tus `filetype`, a PUT's Content-Type).
    package var contentType: String?
    /// `--timeout-resource`: give up if not finished in this long (default 7 days, as on iOS).
    package var timeoutResource: Double = 7 * 86400
    package var requirements = TransferRequirements()
    /// A size announced in advance (push to transfer): the byte cap from the first byte.
    package var expectedSize: Int64?
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

    /// Start-up: hands every stored transfer to the lifecycle, with what the disk says of
    /// downloads whose verified file may already be at its final path (a crash between the
    /// rename and the store update).
    func resumeTransfers() {
        guard let all = try? store.transfers() else { return }
        var finalFiles: [String: TransferLifecycle.FinalFile] = [:]
        for t in all where !t.state.isFinished && t.kind == .download {
            let final = finalPath(t)
            let who = identity(t)
            guard !FileIdentity.exists(partPath(t), as: who), let size = FileIdentity.regularFileSize(final, as: who) else { continue }
            let digest = TransferLifecycle.wantsDigest(t, size: size) ? try? SHA256Hasher.hexDigest(ofFile: final, as: who) : nil
            finalFiles[t.id] = .init(path: final, size: size, sha256: digest)
        }
        let events = apps.mapValues { TransferLifecycle.AppEvents(hasCommand: $0.eventsCommand != nil, launches: $0.sendsLaunchEvents) }
        drive { $0.restored(all, finalFiles: finalFiles, apps: events, now: now()) }
    }

    /// Feeds one event to the transfer lifecycle (with the conditions as last read) and carries
    /// out what it decides, in order.
    func drive(_ event: (inout TransferLifecycle) -> [TransferLifecycle.Action]) {
        transferLifecycle.conditions = conditions
        for action in event(&transferLifecycle) { perform(action) }
    }

    func perform(_ action: TransferLifecycle.Action) {
        switch action {
        case .persist(let t):
            persist(t)
        case let .commitProgress(id, done, total, etag, lm):
            do { try store.commitProgress(id: id, bytesDone: done, bytesTotal: total, etag: etag, lastModified: lm) } catch {
                logger.error("store: \(error)")
            }
        case let .recordUploadResource(id, url, proto):
            do { try store.recordUploadResource(id: id, url: url, protocol: proto) } catch { logger.error("store: \(error)") }
        case .startEngine(let t):
            switch t.kind {
            case .download:
                if t.destination == nil { _ = inbox(for: t.app) }
                engine?.start(job(t))
            case .upload:
                engine?.start(uploadJob(t))
            }
        case .stopEngine(let id):
            engine?.stop(id: id)
        case .cancelUpload(let t):
            engine?.cancel(uploadJob(t))
        case let .setRetryTimer(id, at):
            retryTimers.removeValue(forKey: id)?.cancel()
            retryTimers[id] = WakeTimer.after(at - now()) { Task { await self.retryFired(id) } }
        case .cancelRetryTimer(let id):
            retryTimers.removeValue(forKey: id)?.cancel()
        case .setTimeoutTimer(let at):
            timeoutTimer?.cancel()
            timeoutTimer = WakeTimer.after(max(0, at - now()) + 0.01) { Task { await self.timeoutFired() } }
        case .cancelTimeoutTimer:
            timeoutTimer?.cancel()
            timeoutTimer = nil
        case .removePartFile(let t):
            FileIdentity.remove(partPath(t), as: identity(t))
        case .removeFile(let path):
            FileSystem.remove(path)
        case let .deliverSession(appID, session, batch):
            let doc = JSON.object([
                ("event", "transfers"), ("app", .string(appID)), ("session", .string(session)),
                ("transfers", .array(batch.map(\.json))),
            ])
            // Through the handler queue, like every handler: at most max_concurrent_handlers run at once.
            enqueueHandler(.transfers(app: appID, key: appID + "\u{0}" + session, stdin: Array(doc.serialized.utf8), batch: batch))
        case .radioBusy:
            radioBusy()
        case let .log(level, message, metadata):
            logger.log(level: level == .warning ? .warning : .info, "\(message)", metadata: metadata.mapValues { .string($0) })
        }
    }

    func retryFired(_ id: String) {
        retryTimers[id] = nil
        drive { $0.retryTimerFired(id: id, now: now()) }
    }

    func timeoutFired() {
        timeoutTimer = nil
        drive { $0.timeoutTimerFired(now: now()) }
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
            if let e = Permissions.giveTo(dir, uid: account.uid, gid: account.gid) {
                logger.warning("inbox: \(e)", metadata: ["app.id": "\(appID)"])
            }
        }
        return dir
    }

    package func createTransfer(_ req: TransferRequest, caller: Caller) throws(APIError) -> Transfer {
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
        if let live = transferLifecycle.refusal(app: app.id) {
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
        drive { $0.submitted(t, now: now()) }
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

    /// The newest state of a transfer: held by the lifecycle, unsaved in memory, or as stored.
    func current(_ id: String) -> Transfer? { transferLifecycle.transfer(id) ?? unsaved[id] ?? (try? store.transfer(id: id)) }

    func withLive(_ t: Transfer) -> Transfer { transferLifecycle.shown(unsaved[t.id] ?? t) }

    package func transfers(app: String?, caller: Caller) throws(APIError) -> [Transfer] {
        let all: [Transfer]
        do { all = try store.transfers(app: app) } catch { throw .internal("\(error)") }
        return all.filter { t in apps[t.app].map { visible($0, to: caller) } ?? caller.isAdmin }.map(withLive)
    }

    package func transfer(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        guard let t = current(id) else { throw .notFound("no transfer '\(id)'") }
        guard caller.isAdmin || (apps[t.app].map { visible($0, to: caller) } ?? false) else { throw .notFound("no transfer '\(id)'") }
        return withLive(t)
    }

    package func cancel(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        let t = try transfer(id, caller: caller)
        guard !t.state.isFinished else { return t }
        drive { $0.cancelRequested(id: id, now: now()) }
        return withLive(current(id) ?? t)
    }

    /// `drowse quit ID`: the force-quit cancels the app's unfinished transfers.
    package func quit(_ id: String, caller: Caller) throws(APIError) -> Int {
        let app = try app(id, for: caller)
        var n = 0
        drive { m in
            let (cancelled, actions) = m.appQuit(app.id, now: now())
            n = cancelled
            return actions
        }
        return n
    }

    func transferEvent(_ event: TransferEvent) {
        switch event {
        case let .committed(id, done, total, etag, lm):
            drive { $0.progressCommitted(id: id, bytesDone: done, bytesTotal: total, etag: etag, lastModified: lm) }
        case let .progress(id, done, total):
            transferLifecycle.progressed(id: id, bytesDone: done, bytesTotal: total)
        case let .sent(id, sent):
            transferLifecycle.sent(id: id, bytes: sent)
        case let .uploadResource(id, url, proto):
            drive { $0.uploadResourceKnown(id: id, url: url, protocolName: proto) }
        case let .completed(id, bytes, path):
            drive { $0.attemptEnded(id: id, .completed(bytes: bytes, path: path), now: now()) }
        case let .failed(id, error):
            drive { $0.attemptEnded(id: id, .failed(reason: error.reason, transient: error.transient, noSpace: error.noSpace), now: now()) }
        }
    }

    /// After a change of power or network: pause what may not go on (keeping its progress),
    /// start what was waiting and now may.
    func applyConditions() {
        drive { $0.conditionsChanged(conditions, now: now()) }
    }

    /// The app's events handler ran for a session (`QueuedRun.transfers`).
    func sessionDelivered(key: String, batch: [Transfer]) {
        guard let first = batch.first else { return }
        drive { $0.sessionDelivered(app: first.app, session: first.session) }
    }

    /// A session queued for the events handler could not be handed over (its app is gone).
    func sessionNotDelivered(key: String) {
        let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return }
        transferLifecycle.sessionNotDelivered(app: String(parts[0]), session: String(parts[1]))
    }
}
