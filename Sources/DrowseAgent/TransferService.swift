import DrowseCore
import DrowseStore
import DrowseSystem
import DrowseTransfers
import Logging

/// What the transfer service needs of the store.
package protocol TransferStore: AnyObject {
    func save(_ t: Transfer) throws(StoreError)
    func transfer(id: String) throws(StoreError) -> Transfer?
    func transfers(app: String?) throws(StoreError) -> [Transfer]
    func commitProgress(id: String, bytesDone: Int64, bytesTotal: Int64?, etag: String?, lastModified: String?) throws(StoreError)
    func recordUploadResource(id: String, url: String?, protocol proto: String) throws(StoreError)
}

extension Store: TransferStore {}

/// What the transfer service asks of the engine (libcurl's thread).
package protocol TransferEngineControl: AnyObject {
    func start(_ job: DownloadJob)
    func start(_ job: UploadJob)
    func stop(id: String)
    func cancel(_ job: UploadJob)
    /// The engine's thread once it runs (nil: none, as for a test's double): at shutdown its
    /// transfers stop with their progress committed.
    var running: TransferEngine? { get }
}

extension TransferEngineControl {
    package var running: TransferEngine? { nil }
}

extension TransferEngine: TransferEngineControl {
    package var running: TransferEngine? { self }
}

/// The file system as the transfer service touches it: always as the transfer's owner when it
/// has one (`FileIdentity`), never by following a path a user could swap.
package protocol TransferFiles: AnyObject {
    func exists(_ path: String, as who: FileIdentity?) -> Bool
    func regularFileSize(_ path: String, as who: FileIdentity?) -> Int64?
    func sha256(ofFile path: String, as who: FileIdentity?) -> String?
    /// Removes a file (a missing one is fine); the error if it could not.
    func remove(_ path: String, as who: FileIdentity?) -> SystemError?
    /// Makes an app's inbox folder, owned by its user when it has one; the error if it could not hand it over.
    func makeInbox(_ dir: String, owner: (uid: UInt32, gid: UInt32)?) -> SystemError?
    /// The uid and gid of a user name.
    func account(_ user: String) -> (uid: UInt32, gid: UInt32)?
}

/// The real file system.
package final class SystemTransferFiles: TransferFiles {
    package init() {}
    package func exists(_ path: String, as who: FileIdentity?) -> Bool { FileIdentity.exists(path, as: who) }
    package func regularFileSize(_ path: String, as who: FileIdentity?) -> Int64? { FileIdentity.regularFileSize(path, as: who) }
    package func sha256(ofFile path: String, as who: FileIdentity?) -> String? { try? SHA256Hasher.hexDigest(ofFile: path, as: who) }
    package func remove(_ path: String, as who: FileIdentity?) -> SystemError? {
        do { try FileIdentity.remove(path, as: who) } catch { return error }
        return nil
    }
    package func makeInbox(_ dir: String, owner: (uid: UInt32, gid: UInt32)?) -> SystemError? {
        do { try FileSystem.makeDirectories(dir, mode: 0o700) } catch { return error }
        guard let owner else { return nil }
        return Permissions.giveTo(dir, uid: owner.uid, gid: owner.gid)
    }
    package func account(_ user: String) -> (uid: UInt32, gid: UInt32)? {
        UserAccount.lookup(name: user).map { ($0.uid, $0.gid) }
    }
}

/// The board's conditions as last read (the conditions part, or a test's double).
@DaemonActor package protocol ConditionsReading: AnyObject {
    var current: Conditions { get }
}

/// Background transfers as a service: it owns the `TransferLifecycle` (every decision about a
/// transfer's life) and the states the store could not write yet, feeds the lifecycle what the
/// engine and the API report, and carries out its actions through `TransferStore`,
/// `TransferEngineControl`, `TransferFiles`, the handler queue (`RunQueue`) and its own wakes on
/// the clock. It starts the engine's event stream and, at shutdown, commits what the engine
/// moved before the store closes.
@DaemonActor package final class TransferService: DaemonPart, DownloadPusher, RunOwner {
    package private(set) var lifecycle: TransferLifecycle
    /// Transfer states the store could not write yet (disk full); shown and retried.
    package private(set) var unsaved: [String: Transfer] = [:]
    let store: TransferStore
    let files: TransferFiles
    let clock: AgentClock
    let conditions: ConditionsReading
    let registry: AppRegistry
    let events: DaemonEvents
    /// Where finished sessions' events handlers are queued.
    let runs: RunQueue
    /// One wake per transfer waiting for its retry, and one for the nearest resource timeout.
    var retryWakes: [String: ServiceWake] = [:]
    let timeoutWake: ServiceWake
    /// What the engine reports, in its order (`serve`).
    let reports: Reports<TransferEvent>
    /// Stopped: no retry wake is set any more.
    var stopped = false
    let stateDir: String
    let logger: Logger
    /// libcurl's thread (`LazyTransferEngine`: started by the first transfer), or a test's double.
    let engine: TransferEngineControl
    /// Bytes, resumes, retries and failures are counted here.
    let metrics: AgentMetrics
    /// Per running attempt: the byte offset up to which its bytes are counted.
    var countedUpTo: [String: Int64] = [:]
    /// Per transfer: the state and retries last saved, so a failure or retry is counted once.
    var lastSaved: [String: (state: Transfer.State, retries: Int)] = [:]
    /// Requests waiting for a transfer to finish (`GET /v1/transfers/ID?wait=`), by transfer,
    /// each with the wake that ends its wait.
    var finishWaiters: [String: [FinishWaiter]] = [:]
    private var nextWaiter = 0

    /// The most requests waiting for transfers' ends at once.
    static let maxFinishWaiters = 64

    struct FinishWaiter {
        let token: Int
        let wake: ServiceWake
        let resume: CheckedContinuation<Void, Never>
    }

    package nonisolated var partName: String { "transfers" }

    /// `reports`: where `engine` reports (`serve` consumes them).
    package init(lifecycle: TransferLifecycle, store: TransferStore, files: TransferFiles, engine: TransferEngineControl,
                 reports: Reports<TransferEvent> = Reports(), clock: AgentClock, conditions: ConditionsReading,
                 registry: AppRegistry, events: DaemonEvents, runs: RunQueue, stateDir: String, metrics: AgentMetrics = AgentMetrics(),
                 logger: Logger) {
        self.lifecycle = lifecycle
        self.engine = engine
        self.reports = reports
        self.runs = runs
        self.metrics = metrics
        self.store = store
        self.files = files
        self.clock = clock
        self.conditions = conditions
        self.registry = registry
        self.events = events
        // A deadline's wake fires just after it, so the transfer is past it when the lifecycle looks.
        timeoutWake = ServiceWake(clock: clock, slack: 0.01)
        self.stateDir = stateDir
        self.logger = logger
        events.listen { [unowned self] event in
            // Waiting transfers start, those that may not go on pause.
            if case .conditionsChanged = event { conditionsChanged() }
        }
    }

    func now() -> Double { clock.timeline.now() }

    /// Start-up: every stored transfer goes back to the lifecycle. The engine (and libcurl)
    /// starts with the first transfer that needs it.
    package func start() { restore(apps: registry.apps) }

    /// What the engine reports, in its order, until it has shut down.
    package func serve() async -> Served {
        for await event in reports.stream { engineEvent(event) }
        return .ended
    }

    /// Shutdown: running transfers stop with their progress committed, and the engine's last
    /// reports reach the store (`serve` consumes them before it returns).
    package func stop() async {
        stopped = true
        for id in Array(finishWaiters.keys) { endWaits(id) }
        for wake in retryWakes.values { wake.close() }
        retryWakes = [:]
        timeoutWake.close()
        if let running = engine.running { await running.shutdown() }
        reports.finish()
    }

    // MARK: paths and jobs

    /// Where a download's bytes gather: beside its `--to` path (same file system, so the final
    /// rename is atomic; a hidden name, so nothing appears at the final path early), else in
    /// the state folder.
    package func partPath(_ t: Transfer) -> String {
        guard let dest = t.destination else { return stateDir + "/transfers/\(t.id).part" }
        let name = dest.split(separator: "/").last.map(String.init) ?? "download"
        return ConfigPath.directory(of: dest) + "/.\(name).\(t.id).drowse-part"
    }

    package func finalPath(_ t: Transfer) -> String {
        if let d = t.destination { return d }
        var name = URLParts.parse(t.url)?.lastPathComponent ?? ""
        if name.isEmpty || !Identifier.isValid(name) { name = "download" }
        return stateDir + "/inbox/\(t.app)/\(t.id)-\(name)"  // inbox(for:) makes the folder
    }

    /// Whose rights a transfer's own paths (`--to`, an upload's source) are touched with: the
    /// identity stored when it was queued (the app's user; the caller for an app that runs as
    /// root). A row stored before that rule (queued by root, no owner) takes its app's user.
    /// nil only for an app that runs as root, queued by root: that choice is made in the app
    /// file (`user`), never by who queues.
    package func identity(_ t: Transfer) -> FileIdentity? {
        guard t.destination != nil || t.kind == .upload else { return nil }  // the part file is in root's state folder
        if let uid = t.ownerUID, let gid = t.ownerGID { return FileIdentity.of(uid: uid, gid: gid) }
        return appIdentity(t.app)
    }

    /// The app's user, when it is not root: the identity for its inbox, which that user owns.
    func appIdentity(_ app: String) -> FileIdentity? {
        guard let o = owner(ofApp: app), o.uid != 0 else { return nil }
        return FileIdentity.of(uid: o.uid, gid: o.gid)
    }

    func owner(ofApp id: String) -> (uid: UInt32, gid: UInt32)? {
        registry[id]?.user.flatMap(files.account)
    }

    package func job(_ t: Transfer) -> DownloadJob {
        // An inbox file goes to the app's user, handed over before it gets its final name.
        DownloadJob(
            id: t.id, url: t.url, partPath: partPath(t), finalPath: finalPath(t), resumeFrom: t.bytesDone,
            etag: t.etag, lastModified: t.lastModified, expectedTotal: t.bytesTotal, sha256: t.sha256,
            identity: identity(t), owner: t.destination == nil ? owner(ofApp: t.app) : nil)
    }

    package func uploadJob(_ t: Transfer) -> UploadJob {
        UploadJob(
            id: t.id, url: t.url, sourcePath: t.source ?? "", total: t.bytesTotal ?? 0,
            protocolName: UploadProtocol(rawValue: t.uploadProtocol ?? "auto") ?? .auto, resource: t.uploadURL,
            identity: identity(t), contentType: t.contentType)
    }

    /// The app's own inbox folder, owned by the app's user so its events handler can read there.
    @discardableResult
    package func inbox(for appID: String) -> String {
        let dir = stateDir + "/inbox/\(appID)"
        if let e = files.makeInbox(dir, owner: owner(ofApp: appID)) {
            logger.warning("inbox: \(e)", metadata: ["app.id": "\(appID)"])
        }
        return dir
    }

    // MARK: events in

    /// Start-up: hands every stored transfer to the lifecycle, with what the disk says of
    /// downloads whose verified file may already be at its final path (a crash between the
    /// rename and the store update).
    package func restore(apps: [String: AppDefinition]) {
        let all: [Transfer]
        do { all = try store.transfers(app: nil) } catch {
            logger.error("store: transfers not resumed: \(error)")
            return
        }
        var finalFiles: [String: TransferLifecycle.FinalFile] = [:]
        for t in all where !t.state.isFinished && t.kind == .download {
            let final = finalPath(t)
            let who = identity(t)
            // An inbox file is in a folder its app's user owns (and may have put a link there):
            // read as that user, never through a link, like every path a user can write.
            let finalWho = t.destination == nil ? appIdentity(t.app) : who
            guard !files.exists(partPath(t), as: who), let size = files.regularFileSize(final, as: finalWho) else { continue }
            let digest = TransferLifecycle.wantsDigest(t, size: size) ? files.sha256(ofFile: final, as: finalWho) : nil
            finalFiles[t.id] = .init(path: final, size: size, sha256: digest)
        }
        for t in all { lastSaved[t.id] = (t.state, t.retries) }
        drive { $0.restored(all, finalFiles: finalFiles, apps: Self.events(apps), now: now()) }
    }

    /// `systemctl reload drowsed`: the apps' events handlers as the app files now say.
    package func appsChanged(_ apps: [String: AppDefinition]) {
        drive { $0.appsChanged(Self.events(apps)) }
    }

    static func events(_ apps: [String: AppDefinition]) -> [String: TransferLifecycle.AppEvents] {
        apps.mapValues { TransferLifecycle.AppEvents(hasCommand: $0.eventsCommand != nil || $0.isResident, launches: $0.sendsLaunchEvents) }
    }

    /// A new transfer, checked and stored by the API's side: it starts or waits.
    package func submitted(_ t: Transfer) {
        drive { $0.submitted(t, now: now()) }
    }

    /// What the engine reports.
    package func engineEvent(_ event: TransferEvent) {
        switch event {
        case let .committed(id, done, total, etag, lm):
            drive { $0.progressCommitted(id: id, bytesDone: done, bytesTotal: total, etag: etag, lastModified: lm) }
        case let .progress(id, done, total):
            countBytes(id, upTo: done, mayRestart: true)
            lifecycle.progressed(id: id, bytesDone: done, bytesTotal: total)
        case let .sent(id, sent):
            countBytes(id, upTo: sent, mayRestart: true)
            lifecycle.sent(id: id, bytes: sent)
        case let .uploadResource(id, url, proto):
            drive { $0.uploadResourceKnown(id: id, url: url, protocolName: proto) }
        case let .completed(id, bytes, path):
            countBytes(id, upTo: bytes, mayRestart: false)
            countedUpTo[id] = nil
            drive { $0.attemptEnded(id: id, .completed(bytes: bytes, path: path), now: now()) }
            // The transfer's buffers (1 MiB ones among them) go back to the kernel.
            MallocBounds.trim()
        case let .failed(id, error):
            countedUpTo[id] = nil
            // An HTTP date is the server's wall time: on the timeline it is `skew` earlier.
            var retryAfter = error.retryAfter
            if case .date(let d)? = retryAfter { retryAfter = .date(d - clock.timeline.skew) }
            drive { $0.attemptEnded(id: id, .failed(reason: error.reason, transient: error.transient, noSpace: error.noSpace, retryAfter: retryAfter), now: now()) }
        }
    }

    /// After a change of power or network: pause what may not go on (keeping its progress),
    /// start what was waiting and now may.
    package func conditionsChanged() {
        drive { $0.conditionsChanged(conditions.current, now: now()) }
    }

    package func retryFired(_ id: String) {
        drive { $0.retryTimerFired(id: id, now: now()) }
    }

    package func timeoutFired() {
        drive { $0.timeoutTimerFired(now: now()) }
    }

    package func cancel(_ id: String) {
        drive { $0.cancelRequested(id: id, now: now()) }
    }

    /// `drowse quit ID`: the app's unfinished transfers are cancelled; how many.
    package func quit(app: String) -> Int {
        var n = 0
        drive { m in
            let (cancelled, actions) = m.appQuit(app, now: now())
            n = cancelled
            return actions
        }
        return n
    }

    // MARK: a session's run (`RunOwner`)

    package func starting(_ run: QueuedRun, app: AppDefinition?) -> RunStart? {
        guard case .transfers(let session, _, _) = run else { return nil }
        guard app != nil else {
            sessionNotDelivered(session)
            return nil
        }
        return RunStart(attempt: 1)
    }

    package func notStarted(_ run: QueuedRun) {}
    package func ending(_ run: QueuedRun, _ outcome: HandlerOutcome, cutShort: Bool) -> RunEffects { RunEffects() }

    package func ended(_ run: QueuedRun, _ outcome: HandlerOutcome) {
        guard case .transfers(_, _, let batch) = run else { return }
        sessionDelivered(batch: batch)
    }

    /// Stopping: the session stays undelivered in the store and is handed over after the restart.
    package func notRun(_ run: QueuedRun) {}

    /// The app's events handler ran for a session.
    package func sessionDelivered(batch: [Transfer]) {
        guard let first = batch.first else { return }
        drive { $0.sessionDelivered(app: first.app, session: first.session) }
    }

    /// A session queued for the events handler could not be handed over (its app is gone).
    package func sessionNotDelivered(_ key: SessionKey) {
        lifecycle.sessionNotDelivered(app: key.app, session: key.session)
    }

    // MARK: what the API shows

    /// How many unfinished transfers make the app's next one refused (`max_per_app`), if it is.
    package func refusal(app: String) -> Int? { lifecycle.refusal(app: app) }

    /// The newest state of a transfer: held by the lifecycle, unsaved in memory, or as stored.
    package func current(_ id: String) -> Transfer? { lifecycle.transfer(id) ?? unsaved[id] ?? (try? store.transfer(id: id)) }

    package func withLive(_ t: Transfer) -> Transfer { lifecycle.shown(unsaved[t.id] ?? t) }

    // MARK: actions out

    /// Feeds one event to the lifecycle (with the conditions as last read) and carries out what
    /// it decides, in order, as one turn (what it posts is heard after).
    func drive(_ event: (inout TransferLifecycle) -> [TransferLifecycle.Action]) {
        lifecycle.conditions = conditions.current
        let actions = event(&lifecycle)
        events.turn { for action in actions { perform(action) } }
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
            countedUpTo[t.id] = t.bytesDone
            if t.bytesDone > 0 || (t.kind == .upload && t.uploadURL != nil) { metrics.transferResumed() }
            switch t.kind {
            case .download:
                if t.destination == nil { inbox(for: t.app) }
                engine.start(job(t))
            case .upload:
                engine.start(uploadJob(t))
            }
        case .stopEngine(let id):
            engine.stop(id: id)
        case .cancelUpload(let t):
            engine.cancel(uploadJob(t))
        case let .setRetryTimer(id, at):
            guard !stopped else { return }
            let wake = retryWakes[id] ?? ServiceWake(clock: clock)
            retryWakes[id] = wake
            wake.set(at) { [weak self] in
                self?.retryWakes[id] = nil
                self?.retryFired(id)
            }
        case .cancelRetryTimer(let id):
            retryWakes.removeValue(forKey: id)?.cancel()
        case .setTimeoutTimer(let at):
            timeoutWake.set(at) { [weak self] in self?.timeoutFired() }
        case .cancelTimeoutTimer:
            timeoutWake.cancel()
        case .removePartFile(let t):
            if let e = files.remove(partPath(t), as: identity(t)) { logger.warning("part file left: \(e)", metadata: ["transfer.id": "\(t.id)"]) }
        case .removeFile(let path):
            if let e = files.remove(path, as: nil) { logger.warning("file left: \(e)") }
        case let .deliverSession(appID, session, batch):
            let skew = clock.timeline.skew
            let doc = APIWire.TransfersInput(app: appID, session: session, transfers: batch.map { $0.wire(wall: skew) }).json
            runs.enqueue(.transfers(session: SessionKey(app: appID, session: session), stdin: Array(doc.serialized.utf8), batch: batch), owner: self)
        case .radioBusy:
            events.post(.radioUsed)
        case let .log(level, message, metadata):
            logger.log(level: level == .warning ? .warning : .info, "\(message)", metadata: metadata.mapValues { .string($0) })
        }
    }

    /// Saves a transfer's state. When the store cannot write (a full disk holds the database
    /// too), the state is kept in memory so the API still tells the truth, and saved later.
    func persist(_ t: Transfer) {
        observe(t)
        if t.state.isFinished { endWaits(t.id) }
        do {
            try store.save(t)
            unsaved[t.id] = nil
        } catch {
            logger.error("store: \(error)", metadata: ["transfer.id": "\(t.id)"])
            unsaved[t.id] = t
        }
    }

    // MARK: waiting for the end

    /// Returns once transfer `id` is finished, after `seconds` (on the agent's clock), or at
    /// the service's stop, whichever comes first. The caller reads the transfer afterwards.
    package func waitFinished(_ id: String, upTo seconds: Double) async {
        guard !stopped, seconds > 0, let t = current(id), !t.state.isFinished else { return }
        // A request whose client hangs up still waits out its time: past this many waiting,
        // one is answered at once (and `drowse transfer wait` asks again a moment later).
        guard finishWaiters.values.reduce(0, { $0 + $1.count }) < Self.maxFinishWaiters else { return }
        nextWaiter += 1
        let token = nextWaiter
        let wake = ServiceWake(clock: clock)
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            finishWaiters[id, default: []].append(FinishWaiter(token: token, wake: wake, resume: c))
            wake.set(clock.timeline.now() + seconds) { [weak self] in self?.waitTimedOut(id, token: token) }
        }
    }

    /// One wait's time is up.
    func waitTimedOut(_ id: String, token: Int) {
        guard let i = finishWaiters[id]?.firstIndex(where: { $0.token == token }) else { return }
        let w = finishWaiters[id]!.remove(at: i)
        if finishWaiters[id]?.isEmpty == true { finishWaiters[id] = nil }
        w.resume.resume()
    }

    /// Ends every wait for `id`: it finished (or the service stops).
    private func endWaits(_ id: String) {
        guard let waiters = finishWaiters.removeValue(forKey: id) else { return }
        for w in waiters {
            w.wake.cancel()
            w.resume.resume()
        }
    }

    // MARK: metrics

    /// Counts the bytes an attempt moved, from the engine's reports of how far it got (an
    /// absolute offset). A report below what was counted means the attempt started over (the
    /// server ignored the range, the file changed): counting goes on from there.
    func countBytes(_ id: String, upTo offset: Int64, mayRestart: Bool) {
        guard let counted = countedUpTo[id], let t = lifecycle.transfer(id) else { return }
        if offset > counted {
            metrics.transferBytes(app: t.app, kind: t.kind, offset - counted)
            countedUpTo[id] = offset
        } else if mayRestart {
            countedUpTo[id] = offset
        }
    }

    /// A transfer's state is saved: a new retry or a failure for good is counted once, and a
    /// finished transfer asks for the metrics textfile to be written.
    func observe(_ t: Transfer) {
        let before = lastSaved[t.id]
        if let before, t.retries > before.retries { metrics.transferRetried(t.retries - before.retries) }
        let wasFinished = before?.state.isFinished ?? false
        if t.state.isFinished, !wasFinished, before != nil || !t.delivered {
            if t.state == .failed { metrics.transferFailed(reason: t.reason ?? "") }
            metrics.transferFinished()
        }
        if t.state.isFinished, t.delivered { lastSaved[t.id] = nil } else { lastSaved[t.id] = (t.state, t.retries) }
    }
}
