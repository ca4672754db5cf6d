import DrowseCore
import DrowseMQTT
import DrowseStore
import DrowseSystem

extension Agent {
    func startMQTT() {
        guard let m = config.mqtt else { return }
        var password: String?
        if let file = m.passwordFile {
            do { password = String(try FileSystem.readText(file, limit: 4096).trimmingSpaces()) } catch {
                logger.error("mqtt: cannot read password_file: \(error)")
            }
        }
        let statusTopic = Topics.status(prefix: m.topicPrefix, device: config.deviceID)
        let options = MQTTSessionOptions(
            host: m.host, port: m.port, clientID: m.clientID, keepalive: Int(m.keepalive.seconds), tls: m.tls,
            username: m.username, password: password, caFile: m.caFile, certFile: m.certFile, keyFile: m.keyFile,
            will: (statusTopic, Array(JSON.object([("online", false)]).serialized.utf8)))
        let (stream, continuation) = AsyncStream<MQTTSessionEvent>.makeStream()
        mqttEvents = continuation
        let session = MQTTSession(options: options, logger: logger) { continuation.yield($0) }
        mqtt = session
        session.setSubscriptions(apps.keys.sorted().map { Topics.notify(prefix: m.topicPrefix, device: config.deviceID, app: $0) })
        session.setPublishOnConnect([(statusTopic, Array(statusPayload().serialized.utf8))])
        session.setNetwork(online: conditions.network != .none)
        session.start()
        background.append(Task {
            for await event in stream { await self.mqttEvent(event) }
        })
    }

    func statusPayload() -> JSON {
        .object([("online", true), ("apps", .array(apps.keys.sorted().map { .string($0) })), ("version", .string(Agent.version))])
    }

    func mqttEvent(_ event: MQTTSessionEvent) async {
        switch event {
        case .connected:
            // Work that needs the radio could ride this moment; the planner does so later.
            break
        case .disconnected(let reason):
            logger.warning("mqtt session down: \(reason)")
        case .message(let topic, let payload, let receipt):
            // The PUBACK leaves only now: after the record (or a refusal, which is final).
            if receive(topic: topic, payload: payload) { receipt.acknowledge() } else { receipt.reject() }
        }
    }

    /// A notification arrived. It is recorded before anything acts on it, and deduplicated.
    /// Returns false only when it could not be recorded (the store failed, e.g. a full disk):
    /// then it must not be acknowledged, so the broker delivers it again.
    @discardableResult
    func receive(topic: String, payload: [UInt8]) -> Bool {
        guard let m = config.mqtt,
            let appID = Topics.app(inNotifyTopic: topic, prefix: m.topicPrefix, device: config.deviceID)
        else {
            unexpected(topic: topic)
            return true
        }
        guard let app = apps[appID] else {
            refuse("no valid app '\(LogText.escape(appID))'", app: nil)
            return true
        }
        guard payload.count <= Notification.maxBytes else {
            refuse("payload of \(payload.count) bytes is over the \(Notification.maxBytes)-byte limit", app: appID)
            return true
        }
        // Signed notifications: when the app has a public key, nothing else is accepted.
        var body = payload
        var signed = false
        if JWS.looksCompact(payload) {
            do {
                let jws = try JWS.parse(payload)
                if let key = app.notificationPublicKey.flatMap(Base64.decode) {
                    guard Ed25519.verify(jws.signature, of: jws.signingInput, publicKey: key) else {
                        refuse("bad signature", app: appID)
                        return true
                    }
                    signed = true
                }
                body = jws.payload
            } catch {
                refuse(error.description, app: appID)
                return true
            }
        } else if app.notificationPublicKey != nil {
            refuse("unsigned, and the app accepts only signed notifications", app: appID)
            return true
        }
        let note: Notification
        do { note = try Notification.parse(body) } catch {
            refuse(error.description, app: appID)
            return true
        }
        guard note.contentAvailable else {
            logger.info("notification ignored: not silent (no aps.content-available = 1)", metadata: ["app.id": "\(appID)"])
            return true
        }
        // What happens next is NotificationAdmission's to decide; this carries it out.
        let arrival = NotificationAdmission.Arrival(app: appID, note: note, signed: signed, allowDownload: app.allowDownload)
        let t = now()
        let actions = admission.received(arrival, now: t) {
            SHA256Hasher.hexDigest(of: Array(topic.utf8) + [0] + body)
        }
        for action in actions {
            guard case .record(_, let key) = action else {
                carryOut([action])
                continue
            }
            let seq: Int64?
            do {
                seq = try store.recordNotification(
                    app: appID, dedupeKey: key, payload: String(decoding: body, as: UTF8.self), at: t, signed: signed,
                    collapseID: note.collapseID, durable: false)
            } catch {
                logger.error("notification not recorded, left to the broker to deliver again: \(error)", metadata: ["app.id": "\(appID)"])
                return false
            }
            // Written (a kill -9 from here on cannot lose it), so the handler may start; the PUBACK
            // waits until the record is on disk too. A power cut in between runs the handler again
            // after the restart, like any run a crash interrupts: notifications are hints that are
            // safe to repeat (DESIGN.md), and the fsync is off the path to the handler's start.
            // A duplicate's first copy may not be on disk yet either (written, then the daemon was
            // killed before its sync): it too is acknowledged only once it is.
            carryOut(admission.recorded(seq: seq, now: now(), uses: budgetUses(plus: appID), nextWindow: nextFetchWindow()),
                     notes: seq.map { [$0: note] } ?? [:])
            return syncRecords(app: appID)
        }
        return true
    }

    /// fdatasync of the records written so far; false (do not acknowledge) when it fails.
    func syncRecords(app appID: String) -> Bool {
        do { try store.syncJournal() } catch {
            logger.error("notification record not synced, left to the broker to deliver again: \(error)", metadata: ["app.id": "\(appID)"])
            return false
        }
        return true
    }

    func refuse(_ why: String, app: String?) {
        refusedNotifications += 1
        logger.warning("notification refused: \(LogText.escape(why))", metadata: app.map { ["app.id": "\($0)"] } ?? [:])
    }

    /// A message on a topic drowsed did not subscribe to for a notification: a broker may send
    /// retained messages of other topics (or a persistent session may hold an old subscription).
    /// They are not notifications: acknowledged, counted, and logged once per topic, not per
    /// message. The device's own status topic (our retained status coming back) is ignored silently.
    func unexpected(topic: String) {
        if let m = config.mqtt, topic == Topics.status(prefix: m.topicPrefix, device: config.deviceID) { return }
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
    func nextFetchWindow() -> Double? { fetch.plannedWindow?.at }

    /// Each app's budget uses in the last hour, for the apps an admission event needs.
    func budgetUses(plus app: String? = nil) -> [String: [Double]] {
        let t = now()
        var uses: [String: [Double]] = [:]
        for a in admission.budgetApps(plus: app) {
            uses[a] = (try? store.budgetUses(app: a, since: t - NotificationBudget.period)) ?? []
        }
        return uses
    }

    /// Carries out what `NotificationAdmission` decided. `notes` are the parsed notifications at
    /// hand (by seq); others are read back from the store.
    func carryOut(_ actions: [NotificationAdmission.Action], notes: [Int64: Notification] = [:]) {
        for action in actions {
            switch action {
            case .refuse(let app, .expired):
                refuse("expired", app: app)
            case .record:
                // Only `receive` asks for records; it writes them itself.
                logger.error("notification admission asked for a record outside an arrival; ignored")
            case .duplicate(let app, let key):
                logger.info("notification ignored: duplicate", metadata: ["app.id": "\(app)", "key": "\(LogText.escape(key))"])
            case .expire(let seq, let app):
                logger.info("notification dropped: expired", metadata: ["app.id": "\(app)"])
                try? store.markNotification(seq, state: "expired", at: now())
            case .dropCollapsed(let seq, let app, let collapseID):
                logger.info("collapsed an older notification with collapse-id \(LogText.escape(collapseID))", metadata: ["app.id": "\(app)"])
                try? store.markNotification(seq, state: "collapsed", at: now())
            case .drop(let seq):
                try? store.markNotification(seq, state: "dropped", at: now())
            case .startDownload(let seq, let appID):
                guard let app = apps[appID], let note = notes[seq], let d = note.download else {
                    try? store.markNotification(seq, state: "failed", at: now())
                    continue
                }
                startPushDownload(app, seq: seq, note: note, download: d)
            case .ignoreDownload(_, let app, let why):
                logger.warning("notification's download ignored: \(why == .unsigned ? "the notification is not signed" : "the app does not set notification.allow_download")",
                               metadata: ["app.id": "\(app)"])
            case .chargeBudget(let seq, let at):
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
                try? store.markNotification(seq, state: "deferred", at: now())
                logger.info("notification deferred: \(inLastHour) in the last hour (max_per_hour \(admission.budget.maxPerHour)); runs in \(DurationText.format(.milliseconds(Int64(max(0, until - now()) * 1000)))) at the latest",
                            metadata: ["app.id": "\(app)"])
            case .setTimer(let at):
                deferredTimer?.cancel()
                deferredTimer = nil
                if let at {
                    deferredTimer = WakeTimer.after(max(0, at - now())) { Task { await self.deferredTimerFired() } }
                }
            case .prune(let before):
                do { admission.pruned(oldestLeft: try store.pruneNotifications(before: before)) } catch {
                    logger.error("store: old notifications not pruned: \(error)")
                }
            }
        }
    }

    /// A fetch window opens: deferred notifications held back by their rate budget ride it, as far
    /// as the budget allows.
    func flushDeferred() {
        carryOut(admission.windowOpened(now: now(), uses: budgetUses(), nextWindow: nextFetchWindow()))
    }

    func deferredTimerFired() {
        deferredTimer = nil
        carryOut(admission.timerFired(now: now(), uses: budgetUses(), nextWindow: nextFetchWindow()))
    }

    /// A notification's queued run ended, or was not started (collapsed meanwhile, no command).
    func notificationRunEnded(_ seq: Int64) {
        carryOut(admission.handlerFinished(seq: seq, now: now()))
    }

    func startPushDownload(_ app: AppDefinition, seq: Int64, note: Notification, download d: Notification.DownloadRequest) {
        var req = TransferRequest(
            kind: .download, url: d.url, app: app.id, session: d.session ?? "push", destination: nil, sha256: d.sha256, source: nil)
        req.expectedSize = d.size
        do {
            let t = try createTransfer(req, caller: .daemon)
            logger.info("notification enqueued a download; the app runs when the file is ready",
                        metadata: ["app.id": "\(app.id)", "transfer.id": "\(t.id)"])
            try? store.markNotification(seq, state: "download:" + t.id, at: now())
        } catch {
            logger.warning("notification's download refused: \(error.message)", metadata: ["app.id": "\(app.id)"])
            try? store.markNotification(seq, state: "failed", at: now())
        }
    }

    /// Queues an admitted notification's handler (it starts at once when a slot is free).
    func deliver(_ appID: String, seq: Int64, payload: [UInt8]) {
        // Stopping: it stays recorded as pending and runs after the restart.
        guard !stopping else { return }
        enqueueHandler(.notification(app: appID, seq: seq, payload: payload))
    }

    /// Recorded but unhandled notifications from before a crash or restart.
    func handlePendingNotifications() {
        let pending = (try? store.pendingNotifications()) ?? []
        var notes: [Int64: Notification] = [:]
        let restored = pending.map { rec -> NotificationAdmission.Restored in
            var arrival: NotificationAdmission.Arrival?
            if let app = apps[rec.app], let note = try? Notification.parse(Array(rec.payload.utf8)) {
                notes[rec.seq] = note
                arrival = .init(app: rec.app, note: note, signed: rec.signed, allowDownload: app.allowDownload)
                if rec.state == "pending" {
                    logger.info("handling a notification received before a restart", metadata: ["app.id": "\(rec.app)"])
                }
            }
            return .init(seq: rec.seq, receivedAt: rec.receivedAt, state: rec.state == "deferred" ? .deferred : .pending(budgetAt: rec.budgetAt),
                         arrival: arrival)
        }
        let t = now()
        var uses: [String: [Double]] = [:]
        for app in Set(pending.map(\.app)) {
            uses[app] = (try? store.budgetUses(app: app, since: t - NotificationBudget.period)) ?? []
        }
        carryOut(admission.restored(restored, now: t, uses: uses, nextWindow: nextFetchWindow()), notes: notes)
    }
}
