import DrowseCore
import DrowseStore
import DrowseSystem
import Logging

/// What the notification service needs of the store.
package protocol NotificationStore: AnyObject {
    func recordNotification(app: String, dedupeKey: String, payload: String, at: Double, signed: Bool,
                            collapseID: String?, attempts: Int, durable: Bool, admit: (Int64) -> NotificationAdmitted) throws(StoreError) -> Int64?
    /// Calls `done` once every record written so far is durable (false: the sync failed).
    func afterJournalSync(_ done: @escaping @Sendable (Bool) -> Void)
    func markNotification(_ seq: Int64, state: NotificationState, at: Double) throws(StoreError)
    func pendingNotifications() throws(StoreError) -> [NotificationRecord]
    func chargeBudget(_ seq: Int64, at: Double) throws(StoreError)
    func budgetUses(app: String, since: Double) throws(StoreError) -> [Double]
    /// Changes when another connection (a tool, an operator's sqlite3) commits to the file.
    func dataVersion() throws(StoreError) -> Int64
    func notificationPayload(_ seq: Int64) throws(StoreError) -> String?
    func pruneNotifications(before: Double) throws(StoreError) -> Double?
    func holdRecorded(_ seq: Int64) throws(StoreError)
    /// Counts a start of a pending notification's handler: the attempt it is, nil when it is no
    /// longer pending.
    func notificationStarting(_ seq: Int64, durable: Bool) throws(StoreError) -> Int?
    /// A counted start that never happened is taken back.
    func notificationNotStarted(_ seq: Int64) throws(StoreError)
}

extension Store: NotificationStore {}

/// Push to transfer: where a signed notification's download is queued (the transfers part).
@DaemonActor package protocol DownloadPusher: AnyObject {
    func pushDownload(_ request: TransferRequest) throws(TransferService.Refusal) -> Transfer
}

/// The next fetch window's time, as far as the fetch scheduler knows it now.
@DaemonActor package protocol NextWindowSource: AnyObject {
    var nextWindowAt: Double? { get }
}

/// Silent notifications as a service: it owns `NotificationAdmission` (every decision about a
/// notification: dedupe, priority, hourly budget, collapse, expiry, deferral, pruning) and the
/// refusal counters, checks what arrives (topic, size, signature, JSON), and carries out the
/// admission's actions: the store, the handler queue (`RunQueue`), the transfers
/// (`DownloadPusher`) and its own wake on the clock. On the daemon's executor, so a
/// notification's handler starts in the turn it is recorded, without a hop.
@DaemonActor package final class NotificationService: DaemonPart, RunOwner {
    package private(set) var admission: NotificationAdmission
    /// Budget uses in the last hour by app, as written to the store (`uses(of:since:)`), in the
    /// order they were charged (oldest first).
    var knownUses: [String: [Double]] = [:]
    /// state.db's `data_version` when `knownUses` was read (nil: unknown, nothing is kept).
    var knownUsesVersion: Int64?
    package private(set) var refusedNotifications = 0
    /// Messages on topics drowsed did not subscribe to; the topics already logged (once each).
    package private(set) var unexpectedMessages = 0
    var unexpectedTopicsLogged: Set<String> = []
    let store: NotificationStore
    let clock: AgentClock
    let registry: AppRegistry
    let wake: ServiceWake
    /// Where admitted notifications' handlers are queued, and whether shutdown has begun.
    let runs: RunQueue
    let downloads: DownloadPusher
    let windows: NextWindowSource
    let topicPrefix: String
    let deviceID: String
    /// `[mqtt] groups`: notifications on these groups' topics are the device's too.
    let groups: [String]
    /// Where notifications of apps whose file cannot be used are held (`hold`); nil: refused.
    let heldStore: Store?
    /// `[notifications] max_payload`.
    let maxPayload: Int
    /// The notification being received now, while its handler may start: its start mark needs
    /// no sync of its own (the PUBACK's sync covers it; without it the broker sends it again,
    /// marked as a redelivery).
    package private(set) var arriving: Int64?
    /// The notification being received now whose start was counted in its record's commit, and
    /// the attempt that start is (`QueuedRun.notification(counted:)`).
    var countedStart: (seq: Int64, attempt: Int)?
    let logger: Logger
    /// Notifications by outcome and refusals by reason are counted here.
    let metrics: AgentMetrics

    package nonisolated var partName: String { "notifications" }

    package init(admission: NotificationAdmission, store: NotificationStore, clock: AgentClock, registry: AppRegistry,
                 runs: RunQueue, downloads: DownloadPusher, windows: NextWindowSource, events: DaemonEvents,
                 topicPrefix: String, deviceID: String, groups: [String] = [], maxPayload: Int = Notification.maxBytes,
                 heldStore: Store? = nil, metrics: AgentMetrics = AgentMetrics(), logger: Logger) {
        self.admission = admission
        self.store = store
        self.clock = clock
        self.registry = registry
        self.runs = runs
        self.downloads = downloads
        self.windows = windows
        wake = ServiceWake(clock: clock)
        self.topicPrefix = topicPrefix
        self.deviceID = deviceID
        self.groups = groups
        self.maxPayload = maxPayload
        self.heldStore = heldStore
        self.metrics = metrics
        self.logger = logger
        events.listen { [unowned self] event in
            switch event {
            // Notifications held back by their rate budget or waiting for their rollout delay ride this window.
            case .windowOpened: flushDeferred()
            case .clockStepped(let step): wallClockStepped(by: step)
            // Notifications held for an app whose file could not be used run once it can.
            case .appsReloaded: releaseHeld()
            case .radioUsed, .runEnded, .taskOverran, .conditionsRead, .conditionsChanged: break
            }
        }
    }

    func now() -> Double { clock.timeline.now() }

    /// Shutdown: deferred notifications stay recorded for after the restart.
    package func stop() async { wake.close() }

    /// What becomes of a received message's PUBACK.
    package enum Settlement: Equatable, Sendable {
        /// Now: refused for good, or not a notification.
        case acknowledge
        /// Never (the connection drops): it could not be recorded (the store failed, e.g. a full
        /// disk), so the broker delivers it again.
        case reject
        /// Once the record is on disk: `settle` says when.
        case acknowledgeWhenSynced
    }

    /// A notification arrived. It is recorded before anything acts on it, and deduplicated.
    /// `redelivered`: the broker marked it as sent before (`MQTTReceipt.redelivered`); its
    /// handler then starts as a possible repeat (DROWSE_ATTEMPT 2).
    @discardableResult
    package func receive(topic: String, payload: [UInt8], redelivered: Bool = false) -> Settlement {
        guard let appID = Topics.app(inNotifyTopic: topic, prefix: topicPrefix, device: deviceID, groups: groups) else {
            unexpected(topic: topic)
            return .acknowledge
        }
        metrics.notification(.received)
        return admit(appID, payload: payload, attempts: redelivered ? 1 : 0, checked: nil)
    }

    /// Whether `app` has a file that cannot be used now (invalid: being edited, or emptied by a
    /// power cut): its notifications are held for when it is valid again. An app with no file
    /// at all is gone, and its notifications are refused.
    func mayHold(_ app: String) -> Bool { registry[app] == nil && registry.invalid.contains { $0.id == app } }

    /// Checks, records and admits a notification for `appID`. `checked`: its signature was
    /// checked when it arrived (the value says whether it was signed), for one held since.
    /// `fromBroker`: a PUBACK waits for the sync of its record (false: a held one released, whose
    /// handler's start is counted on disk before it happens, as for any other waiting one).
    func admit(_ appID: String, payload: [UInt8], attempts: Int, checked: Bool?, fromBroker: Bool = true) -> Settlement {
        guard let app = registry[appID] else {
            if mayHold(appID) { return hold(appID, payload: payload, attempts: attempts) }
            refuse("no valid app '\(LogText.escape(appID))'", app: nil, .unknownApp)
            return .acknowledge
        }
        guard payload.count <= maxPayload else {
            refuse("payload of \(payload.count) bytes is over the \(maxPayload)-byte limit", app: appID, .tooLarge)
            return .acknowledge
        }
        // Signed notifications: when the app has a public key, nothing else is accepted.
        var body = payload
        var signed = checked ?? false
        if checked != nil {
            // Checked when it arrived, against the key the app had then.
        } else if JWS.looksCompact(payload) {
            do {
                let jws = try JWS.parse(payload)
                if let key = app.notificationPublicKey.flatMap(Base64.decode) {
                    guard Ed25519.verify(jws.signature, of: jws.signingInput, publicKey: key) else {
                        refuse("bad signature", app: appID, .badSignature)
                        return .acknowledge
                    }
                    signed = true
                }
                body = jws.payload
            } catch {
                refuse(error.description, app: appID, .malformed)
                return .acknowledge
            }
        } else if app.notificationPublicKey != nil {
            refuse("unsigned, and the app accepts only signed notifications", app: appID, .unsigned)
            return .acknowledge
        }
        let note: Notification
        do { note = try Notification.parse(body, maxBytes: maxPayload) } catch {
            refuse(error.description, app: appID, .malformed)
            return .acknowledge
        }
        guard note.contentAvailable else {
            logger.info("notification ignored: not silent (no aps.content-available = 1)", metadata: ["app.id": "\(appID)"])
            metrics.notification(.ignored)
            return .acknowledge
        }
        // What happens next is NotificationAdmission's to decide; this carries it out.
        var arrival = NotificationAdmission.Arrival(app: appID, note: note, signed: signed, allowDownload: app.allowDownload)
        arrival.expiration = arrival.expiration.map(clock.timeline.fromWall)
        let t = now()
        // The key is the app's (the store's unique index is app + key), never the topic's: a
        // notification that reaches the device by two routes (its own topic and a group's, or two
        // groups) runs once. Without an id, the payload itself is the identity.
        let actions = admission.received(arrival, now: t, idDigest: { SHA256Hasher.hexDigest(of: Array($0.utf8)) }) {
            SHA256Hasher.hexDigest(of: body)
        }
        for action in actions {
            guard case .record(_, let key) = action else {
                carryOut([action])
                continue
            }
            // Admitted inside the record's transaction: the budget use it is charged is written in
            // the same commit, and its actions are carried out in the machine's order once that
            // commit is in the WAL (a kill -9 from there on cannot lose it), so the handler may
            // start; the PUBACK waits until the record is on disk too. A power cut in between runs
            // the handler again after the restart with DROWSE_ATTEMPT set, like any run a crash
            // interrupts (docs/design.md), and the fsync is off the path to the handler's start.
            // A duplicate's first copy may not be on disk yet either (written, then the daemon
            // was killed before its sync): it too is acknowledged only once it is.
            var decided: (seq: Int64, actions: [NotificationAdmission.Action], startsNow: Bool)?
            var checkpoint: NotificationAdmission.Checkpoint?
            do {
                _ = try store.recordNotification(
                    app: appID, dedupeKey: key, payload: String(decoding: body, as: UTF8.self), at: t, signed: signed,
                    collapseID: note.collapseID, attempts: attempts, durable: false
                ) { seq in
                    let (actions, undo) = admission.recordedTentatively(seq: seq, now: now(), uses: budgetUses(plus: appID),
                                                                        nextWindow: nextFetchWindow())
                    checkpoint = undo
                    // Its handler starts in this turn (a free slot, nothing waiting before it, no
                    // other run queued first): the start is counted in this commit, which its
                    // PUBACK's sync makes durable.
                    let firstRun = actions.lazy.compactMap { if case .runHandler(let s, _) = $0 { s } else { nil } }.first
                    let startsNow = fromBroker && firstRun == seq && runs.startsAtOnce
                    decided = (seq, actions, startsNow)
                    return NotificationAdmitted(chargedAt: actions.lazy.compactMap { if case .chargeBudget(seq, let at) = $0 { at } else { nil } }.first,
                                                startsNow: startsNow)
                }
            } catch {
                logger.error("notification not recorded, left to the broker to deliver again: \(error)", metadata: ["app.id": "\(appID)"])
                // Admitted, then the commit failed (a full disk fails at COMMIT): the record was
                // rolled back and its number may be given again, so the machine forgets what it
                // decided for it, and none of it is carried out.
                if let checkpoint { admission.takeBack(checkpoint) }
                return .reject
            }
            // Not admitted: a duplicate of a recorded one.
            guard let (seq, actions, startsNow) = decided else {
                carryOut(admission.recorded(seq: nil, now: now(), uses: budgetUses(plus: appID), nextWindow: nextFetchWindow()))
                return .acknowledgeWhenSynced
            }
            metrics.notification(.accepted)
            for case .chargeBudget(seq, let at) in actions { knownUses[appID]?.append(at) }
            arriving = fromBroker ? seq : nil
            countedStart = startsNow ? (seq, attempts + 1) : nil
            defer { arriving = nil; countedStart = nil }
            carryOut(actions.filter { !Self.charges($0, seq) }, notes: [seq: note])
            return .acknowledgeWhenSynced
        }
        return .acknowledge
    }

    /// Holds a notification for an app whose file cannot be used now, within `max_deferred` per
    /// app (the oldest held goes first) and the dedupe window (held ones are pruned with the
    /// handled); `releaseHeld` admits them once the file is valid again.
    func hold(_ appID: String, payload: [UInt8], attempts: Int) -> Settlement {
        let key = "held:" + SHA256Hasher.hexDigest(of: payload)
        guard let heldStore else {
            refuse("no valid app '\(LogText.escape(appID))'", app: nil, .unknownApp)
            return .acknowledge
        }
        do {
            guard try heldStore.holdNotification(app: appID, dedupeKey: key, payload: String(decoding: payload, as: UTF8.self), at: now(),
                                                   checked: false, signed: false, attempts: attempts) != nil else {
                metrics.notification(.duplicate)
                return .acknowledgeWhenSynced
            }
        } catch {
            logger.error("notification not held, left to the broker to deliver again: \(error)", metadata: ["app.id": "\(appID)"])
            return .reject
        }
        logger.warning("notification held: the app's file cannot be used now; it runs once the file is valid again (a reload)",
                       metadata: ["app.id": "\(appID)"])
        trimHeld(appID)
        return .acknowledgeWhenSynced
    }

    /// Past `max_deferred` held for one app, the oldest go (counted as evicted).
    func trimHeld(_ appID: String) {
        guard let store = heldStore, let held = try? store.heldNotifications().filter({ $0.app == appID }),
              held.count > admission.maxDeferred else { return }
        for h in held.prefix(held.count - admission.maxDeferred) {
            metrics.notification(.evicted)
            logger.info("held notification dropped: \(admission.maxDeferred) already held (max_deferred)", metadata: ["app.id": "\(appID)"])
            try? store.markNotification(h.seq, state: .evicted, at: now())
        }
    }

    /// Apps were loaded (start) or reloaded: held notifications of apps valid again are admitted
    /// (checked, recorded under their own key, run or deferred as any); those of apps that are
    /// gone are dropped; those of apps still invalid wait on.
    package func releaseHeld() {
        guard let store = heldStore, let held = try? store.heldNotifications(), !held.isEmpty else { return }
        for h in held {
            if registry[h.app] != nil {
                let settlement = admit(h.app, payload: Array(h.payload.utf8), attempts: h.attempts, checked: h.checked ? h.signed : nil,
                                       fromBroker: false)
                // Recorded again (or refused for good): the held copy goes. A store failure keeps it.
                if settlement != .reject { try? store.releaseHeld(h.seq) }
            } else if !mayHold(h.app) {
                logger.info("held notification dropped: the app is gone", metadata: ["app.id": "\(h.app)"])
                try? store.markNotification(h.seq, state: .dropped, at: now())
            }
        }
    }

    /// Whether `action` charges notification `seq`'s budget (written with its record).
    static func charges(_ action: NotificationAdmission.Action, _ seq: Int64) -> Bool {
        if case .chargeBudget(seq, _) = action { true } else { false }
    }

    /// Carries out a settlement: `ack(true)` lets the PUBACK go, `ack(false)` drops it. A record
    /// waits for the journal's sync (on its own thread: the daemon goes on meanwhile, and
    /// notifications arriving during one sync share the next).
    package func settle(_ settlement: Settlement, _ ack: @escaping @Sendable (Bool) -> Void) {
        switch settlement {
        case .acknowledge: ack(true)
        case .reject: ack(false)
        case .acknowledgeWhenSynced:
            let logger = logger
            store.afterJournalSync { ok in
                if !ok { logger.error("notification record not synced, left to the broker to deliver again") }
                ack(ok)
            }
        }
    }

    /// A PUBLISH over the session's packet bound: its payload was dropped as it arrived
    /// (`MQTTSessionEvent.oversized`). Refused for good, so the broker does not send it again.
    package func receiveOversized(topic: String, bytes: Int) -> Settlement {
        guard let appID = Topics.app(inNotifyTopic: topic, prefix: topicPrefix, device: deviceID, groups: groups) else {
            unexpected(topic: topic)
            return .acknowledge
        }
        metrics.notification(.received)
        refuse("payload of \(bytes) bytes is over the \(maxPayload)-byte limit (dropped as it arrived, never held)", app: appID, .tooLarge)
        return .acknowledge
    }

    func refuse(_ why: String, app: String?, _ reason: AgentMetrics.RefusalReason) {
        refusedNotifications += 1
        metrics.notificationRefused(reason)
        logger.warning("notification refused: \(LogText.escape(why))", metadata: app.map { ["app.id": "\($0)"] } ?? [:])
    }

    /// A message on a topic drowsed did not subscribe to for a notification: a broker may send
    /// retained messages of other topics (or a persistent session may hold an old subscription).
    /// They are not notifications: acknowledged, counted, and logged once per topic, not per
    /// message. The device's own status topic (our retained status coming back) is ignored silently.
    func unexpected(topic: String) {
        if topic == Topics.status(prefix: topicPrefix, device: deviceID) { return }
        unexpectedMessages += 1
        // Bounded: a broker sending endless distinct topics must not grow memory or the log.
        guard unexpectedTopicsLogged.count <= 100, !unexpectedTopicsLogged.contains(topic) else { return }
        unexpectedTopicsLogged.insert(topic)
        if unexpectedTopicsLogged.count > 100 {
            logger.warning("mqtt: messages on more than 100 unexpected topics; no more are logged (see drowse status: mqtt.unexpected_messages)")
        } else {
            logger.warning("mqtt: ignoring messages on unexpected topic \(LogText.escape(topic)) (logged once per topic)")
        }
    }

    /// The next fetch window's time, as far as the fetch planner knows it now (the one read of it).
    func nextFetchWindow() -> Double? { windows.nextWindowAt }

    /// Each app's budget uses in the last hour, for the apps an admission event needs.
    func budgetUses(plus app: String? = nil) -> [String: [Double]] {
        let since = now() - NotificationBudget.period
        var uses: [String: [Double]] = [:]
        for a in admission.budgetApps(plus: app) { uses[a] = self.uses(of: a, since: since) }
        return uses
    }

    /// An app's budget uses after `since` (on the timeline, which no clock step moves while
    /// drowsed runs). Read from the store once, then kept: each notification admitted would
    /// otherwise read back every use of the last hour, up to `max_per_hour` rows, before its
    /// handler starts. A store that cannot be read gives none (and nothing is kept), and what
    /// another connection commits (`PRAGMA data_version`) has them read again.
    func uses(of app: String, since: Double) -> [Double] {
        // Read again when someone else wrote to state.db meanwhile (the uses are the store's).
        let version = try? store.dataVersion()
        if version == nil || version != knownUsesVersion {
            knownUses = [:]
            knownUsesVersion = version
        }
        if var known = knownUses[app] {
            if let oldest = known.first, oldest <= since {
                known.removeAll { $0 <= since }
                knownUses[app] = known
            }
            return known
        }
        guard let read = try? store.budgetUses(app: app, since: since) else { return [] }
        knownUses[app] = read
        return read
    }

    /// Carries out what `NotificationAdmission` decided. `notes` are the parsed notifications at
    /// hand (by seq); others are read back from the store.
    func carryOut(_ actions: [NotificationAdmission.Action], notes: [Int64: Notification] = [:]) {
        for action in actions {
            switch action {
            case .refuse(let app, .expired):
                refuse("expired", app: app, .expired)
            case .record:
                // Only `receive` asks for records; it writes them itself.
                logger.error("notification admission asked for a record outside an arrival; ignored")
            case .duplicate(let app, let key):
                metrics.notification(.duplicate)
                logger.info("notification ignored: duplicate", metadata: ["app.id": "\(app)", "key": "\(LogText.escape(key))"])
            case .expire(let seq, let app):
                logger.info("notification dropped: expired", metadata: ["app.id": "\(app)"])
                metrics.notification(.expired)
                try? store.markNotification(seq, state: .expired, at: now())
            case .dropCollapsed(let seq, let app, let collapseID):
                logger.info("collapsed an older notification with collapse-id \(LogText.escape(collapseID))", metadata: ["app.id": "\(app)"])
                metrics.notification(.collapsed)
                try? store.markNotification(seq, state: .collapsed, at: now())
            case .evict(let seq, let app, let maxDeferred):
                // Counted and logged, never silent: the provider sent more than the app may keep waiting.
                logger.info("notification dropped: \(maxDeferred) already waiting (max_deferred); the oldest lowest-priority one goes",
                            metadata: ["app.id": "\(app)"])
                metrics.notification(.evicted)
                try? store.markNotification(seq, state: .evicted, at: now())
            case .drop(let seq):
                try? store.markNotification(seq, state: .dropped, at: now())
            case .startDownload(let seq, let appID):
                // At hand when it arrived now; read back when it waited (a rollout delay).
                let note = notes[seq] ?? (try? store.notificationPayload(seq)).flatMap { try? Notification.parse(Array($0.utf8)) }
                guard let app = registry[appID], let note, let d = note.download else {
                    try? store.markNotification(seq, state: .handled(.failed), at: now())
                    continue
                }
                startPushDownload(app, seq: seq, note: note, download: d)
            case .ignoreDownload(_, let app, let why):
                logger.warning("notification's download ignored: \(why == .unsigned ? "the notification is not signed" : "the app does not set notification.allow_download")",
                               metadata: ["app.id": "\(app)"])
            case .chargeBudget(let seq, let at):
                // A deferred one released: which app's uses it adds to is the store's to say.
                knownUses = [:]
                do { try store.chargeBudget(seq, at: at) } catch {
                    logger.error("store: budget use not recorded: \(error)", metadata: ["notification.seq": "\(seq)"])
                }
            case .runHandler(let seq, let app):
                let payload: [UInt8]
                if let note = notes[seq] {
                    payload = note.raw
                } else if let stored = try? store.notificationPayload(seq) {
                    payload = Array(stored.utf8)
                } else {
                    notificationRunEnded(seq)  // pruned or unreadable: nothing to run
                    continue
                }
                deliver(app, seq: seq, payload: payload)
            case .defer(let seq, let app, let until, let inLastHour):
                try? store.markNotification(seq, state: .deferred, at: now())
                metrics.notification(.deferred)
                logger.info("notification deferred: \(inLastHour) in the last hour (max_per_hour \(admission.budget.maxPerHour)); runs in \(DurationText.format(.milliseconds(Int64(max(0, until - now()) * 1000)))) at the latest",
                            metadata: ["app.id": "\(app)"])
            case .spread(_, let app, let until, let delay, let spread):
                metrics.notification(.spread)
                // The record stays `pending`: after a restart the same delay is drawn again from its received time.
                func text(_ seconds: Double) -> String { DurationText.format(.milliseconds(Int64(max(0, seconds) * 1000))) }
                logger.info("notification waits for its rollout delay: \(text(delay)) of a \(text(spread)) spread; goes on in \(text(until - now())) or in an earlier wake window",
                            metadata: ["app.id": "\(app)"])
            case .setTimer(let at):
                wake.set(at) { [weak self] in self?.deferredTimerFired() }
            case .prune(let before):
                // A row received before `before` may carry a use of the last hour (charged
                // after a long stop): the kept uses are read again.
                knownUses = [:]
                do { admission.pruned(oldestLeft: try store.pruneNotifications(before: before)) } catch {
                    logger.error("store: old notifications not pruned: \(error)")
                }
            }
        }
    }

    /// A fetch window opens: deferred notifications held back by their rate budget ride it, as far
    /// as the budget allows.
    package func flushDeferred() {
        carryOut(admission.windowOpened(now: now(), uses: budgetUses(), nextWindow: nextFetchWindow()))
    }

    /// The wall clock was set by `step` seconds: the publishers' expirations move on the timeline.
    package func wallClockStepped(by step: Double) {
        carryOut(admission.wallClockStepped(by: step, now: now(), uses: budgetUses(), nextWindow: nextFetchWindow()))
    }

    package func deferredTimerFired() {
        carryOut(admission.timerFired(now: now(), uses: budgetUses(), nextWindow: nextFetchWindow()))
    }

    /// A notification's queued run ended, or was not started (collapsed meanwhile, no command).
    package func notificationRunEnded(_ seq: Int64) {
        carryOut(admission.handlerFinished(seq: seq, now: now()))
    }

    func startPushDownload(_ app: AppDefinition, seq: Int64, note: Notification, download d: Notification.DownloadRequest) {
        var req = TransferRequest(
            kind: .download, url: d.url, app: app.id, session: d.session ?? "push", destination: nil, sha256: d.sha256, source: nil)
        req.expectedSize = d.size
        do throws(TransferService.Refusal) {
            let t = try downloads.pushDownload(req)
            logger.info("notification enqueued a download; the app runs when the file is ready",
                        metadata: ["app.id": "\(app.id)", "transfer.id": "\(t.id)"])
            try? store.markNotification(seq, state: .downloading(transfer: t.id), at: now())
        } catch {
            logger.warning("notification's download refused: \(error.description)", metadata: ["app.id": "\(app.id)"])
            try? store.markNotification(seq, state: .handled(.failed), at: now())
        }
    }

    /// Queues an admitted notification's handler (it starts at once when a slot is free).
    func deliver(_ appID: String, seq: Int64, payload: [UInt8]) {
        // Stopping: it stays recorded as pending and runs after the restart.
        guard !runs.stopping else { return }
        runs.enqueue(.notification(app: appID, seq: seq, payload: payload, counted: countedStart?.seq == seq ? countedStart?.attempt : nil),
                     owner: self)
    }

    // MARK: a notification's run (`RunOwner`)

    package func starting(_ run: QueuedRun, app: AppDefinition?) -> RunStart? {
        guard case .notification(let appID, let seq, _, let counted) = run else { return nil }
        // Its app may have been removed while it waited (a collapse is found below).
        guard let app else {
            notificationRunEnded(seq)
            return nil
        }
        // The start is counted before it happens (DROWSE_ATTEMPT), unless the commit that
        // recorded it in this turn counted it already; nil: no longer pending (a newer one
        // collapsed it while it waited).
        guard let start = counted.map({ RunStart(attempt: $0) }) ?? countStart(seq, app: appID) else {
            notificationRunEnded(seq)
            return nil
        }
        guard app.command(for: .notification) != nil || app.isResident else {
            logger.warning("notification dropped: the app has no notification or fetch command", metadata: ["app.id": "\(appID)"])
            try? store.markNotification(seq, state: .dropped, at: now())
            notificationRunEnded(seq)
            return nil
        }
        return start
    }

    /// Counts a notification's start in the store; nil when the notification is no longer
    /// pending. Written to the WAL now; the start waits for the journal's next sync, unless this
    /// is the notification being received now: the sync its PUBACK waits for covers the mark, and
    /// a message whose PUBACK never left comes back marked DUP.
    private func countStart(_ seq: Int64, app: String) -> RunStart? {
        do {
            return try store.notificationStarting(seq, durable: false).map { RunStart(attempt: $0, afterSync: arriving != seq) }
        } catch {
            // Not counted: the handler may run again after a restart without knowing. Start it
            // anyway (the notification is recorded); the log says why.
            logger.error("store: the start of a notification's handler not recorded: \(error)", metadata: ["app.id": "\(app)"])
            return RunStart(attempt: 1)
        }
    }

    package func notStarted(_ run: QueuedRun) {
        guard case .notification(_, let seq, _, _) = run else { return }
        try? store.notificationNotStarted(seq)
    }

    /// A resident app's notification cut short by drowsed's stop stays pending: it is delivered
    /// again after the restart, as a handler's interrupted run is.
    package func ending(_ run: QueuedRun, _ outcome: HandlerOutcome, cutShort: Bool) -> RunEffects {
        guard case .notification(_, let seq, _, _) = run, !cutShort else { return RunEffects() }
        return RunEffects(handled: seq)
    }

    package func ended(_ run: QueuedRun, _ outcome: HandlerOutcome) {
        guard case .notification(_, let seq, _, _) = run else { return }
        notificationRunEnded(seq)
    }

    /// Stopping: it stays recorded as pending and runs after the restart.
    package func notRun(_ run: QueuedRun) {}

    /// Start-up: notifications recorded but not handled before a crash or restart run, and those
    /// held for an app whose file could not be used are admitted if it can be now.
    package func start() {
        handlePendingNotifications()
        releaseHeld()
    }

    /// Recorded but unhandled notifications from before a crash or restart.
    package func handlePendingNotifications() {
        let pending = (try? store.pendingNotifications()) ?? []
        var notes: [Int64: Notification] = [:]
        // Those of apps whose file cannot be used now wait for it (`releaseHeld`), not dropped.
        let held = pending.filter { mayHold($0.app) }
        for rec in held { try? store.holdRecorded(rec.seq) }
        if !held.isEmpty { logger.warning("\(held.count) notification(s) held until their app's file is valid again") }
        let restored = pending.filter { !mayHold($0.app) }.map { rec -> NotificationAdmission.Restored in
            var arrival: NotificationAdmission.Arrival?
            if let app = registry[rec.app], let note = try? Notification.parse(Array(rec.payload.utf8)) {
                notes[rec.seq] = note
                var a = NotificationAdmission.Arrival(app: rec.app, note: note, signed: rec.signed, allowDownload: app.allowDownload)
                a.expiration = a.expiration.map(clock.timeline.fromWall)
                arrival = a
                if rec.state == .pending {
                    logger.info("handling a notification received before a restart", metadata: ["app.id": "\(rec.app)"])
                }
            }
            return .init(seq: rec.seq, receivedAt: rec.receivedAt, state: rec.state == .deferred ? .deferred : .pending(budgetAt: rec.budgetAt),
                         arrival: arrival, dedupeKey: rec.dedupeKey)
        }
        let t = now()
        var uses: [String: [Double]] = [:]
        for app in Set(pending.map(\.app)) { uses[app] = self.uses(of: app, since: t - NotificationBudget.period) }
        carryOut(admission.restored(restored, now: t, uses: uses, nextWindow: nextFetchWindow()), notes: notes)
    }
}
