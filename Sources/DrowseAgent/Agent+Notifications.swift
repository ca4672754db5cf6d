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
        if let exp = note.expiration, exp < now() {
            refuse("expired", app: appID)
            return true
        }
        let key = note.id.map { "id:" + $0 } ?? "hash:" + SHA256Hasher.hexDigest(of: Array(topic.utf8) + [0] + body)
        let seq: Int64
        do {
            guard let s = try store.recordNotification(
                app: appID, dedupeKey: key, payload: String(decoding: body, as: UTF8.self), at: now(), signed: signed,
                collapseID: note.collapseID, durable: false)
            else {
                logger.info("notification ignored: duplicate", metadata: ["app.id": "\(appID)", "key": "\(LogText.escape(key))"])
                // The first copy's record may not be on disk yet (written, then the daemon was
                // killed before its sync): acknowledge this copy only once it is.
                return syncRecords(app: appID)
            }
            seq = s
        } catch {
            logger.error("notification not recorded, left to the broker to deliver again: \(error)", metadata: ["app.id": "\(appID)"])
            return false
        }
        // Written (a kill -9 from here on cannot lose it), so the handler may start; the PUBACK
        // waits until the record is on disk too. A power cut in between runs the handler again
        // after the restart, like any run a crash interrupts: notifications are hints that are
        // safe to repeat (DESIGN.md), and the fsync is off the path to the handler's start.
        dispatch(app, seq: seq, note: note, signed: signed)
        return syncRecords(app: appID)
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

    /// Decides what a recorded notification does now: run, wait, collapse, or fetch first.
    func dispatch(_ app: AppDefinition, seq: Int64, note: Notification, signed: Bool) {
        let t = now()
        if let exp = note.expiration, exp < t {
            logger.info("notification dropped: expired", metadata: ["app.id": "\(app.id)"])
            try? store.markNotification(seq, state: "expired", at: t)
            return
        }
        if let collapse = note.collapseID, let n = try? store.collapseNotifications(app: app.id, collapseID: collapse, keeping: seq, at: t), n > 0 {
            logger.info("collapsed \(n) older notification(s) with collapse-id \(LogText.escape(collapse))", metadata: ["app.id": "\(app.id)"])
        }
        if let d = note.download {
            if app.allowDownload && signed {
                startPushDownload(app, seq: seq, note: note, download: d)
                return
            }
            logger.warning("notification's download ignored: \(app.allowDownload ? "the notification is not signed" : "the app does not set notification.allow_download")",
                           metadata: ["app.id": "\(app.id)"])
        }
        // Priority 10 runs now. Priority 5 runs now too while within the app's rate budget:
        // the message's arrival has woken the radio already. Beyond it, it waits. The budget is
        // counted from the store, so a restart hands out no fresh hour.
        let used = budgetUses(app.id, now: t)
        if budget.admits(priority: note.priority, used: used, now: t) {
            admit(app.id, seq: seq, payload: Array(note.raw), at: t)
            return
        }
        try? store.markNotification(seq, state: "deferred", at: t)
        logger.info("notification deferred: \(budget.counting(used, now: t).count) in the last hour (max_per_hour \(budget.maxPerHour))",
                    metadata: ["app.id": "\(app.id)"])
        scheduleDeferredFlush()
    }

    var budget: NotificationBudget { NotificationBudget(maxPerHour: config.notifications.maxPerHour) }

    func budgetUses(_ app: String, now t: Double) -> [Double] {
        (try? store.budgetUses(app: app, since: t - NotificationBudget.period)) ?? []
    }

    /// The notification uses its app's budget and queues for a handler slot.
    func admit(_ appID: String, seq: Int64, payload: [UInt8], at t: Double) {
        do { try store.chargeBudget(seq, at: t) } catch {
            logger.error("store: budget use not recorded: \(error)", metadata: ["app.id": "\(appID)"])
        }
        deliver(appID, seq: seq, payload: payload)
    }

    /// Deferred notifications run when their app's hourly budget has room again: at the next
    /// fetch window (the radio is awake) or when a use leaves the hour, whichever comes first.
    /// Either way no more than `max_per_hour` run in any hour.
    func scheduleDeferredFlush() {
        deferredTimer?.cancel()
        deferredTimer = nil
        let deferred = ((try? store.pendingNotifications()) ?? []).filter { $0.state == "deferred" }
        guard !deferred.isEmpty else { return }
        let t = now()
        var next = Double.infinity
        for app in Set(deferred.map(\.app)) {
            next = min(next, budget.nextRoom(used: budgetUses(app, now: t), now: t))
        }
        if let w = plannedWindow?.at { next = min(next, w) }
        // A little later than the room opens, so the use that leaves the hour has left it.
        deferredTimer = WakeTimer.after(max(0, next - t) + 0.01) { Task { await self.flushDeferred() } }
    }

    /// Runs deferred notifications, oldest first, as far as their app's budget has room.
    func flushDeferred() {
        deferredTimer = nil
        let t = now()
        for rec in ((try? store.pendingNotifications()) ?? []) where rec.state == "deferred" {
            guard let app = apps[rec.app], let note = try? Notification.parse(Array(rec.payload.utf8)) else {
                try? store.markNotification(rec.seq, state: "dropped", at: t)
                continue
            }
            if let exp = note.expiration, exp < t {
                try? store.markNotification(rec.seq, state: "expired", at: t)
                logger.info("deferred notification dropped: expired", metadata: ["app.id": "\(rec.app)"])
                continue
            }
            guard budget.room(used: budgetUses(rec.app, now: t), now: t) > 0 else { continue }
            admit(app.id, seq: rec.seq, payload: Array(rec.payload.utf8), at: t)
        }
        scheduleDeferredFlush()
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
        guard let pending = try? store.pendingNotifications() else { return }
        for n in pending {
            guard let app = apps[n.app], let note = try? Notification.parse(Array(n.payload.utf8)) else {
                try? store.markNotification(n.seq, state: "dropped", at: now())
                continue
            }
            guard n.state == "pending" else { continue }
            logger.info("handling a notification received before a restart", metadata: ["app.id": "\(n.app)"])
            if n.budgetAt != nil {
                // Admitted before the restart (it may have been waiting for a slot): it has used
                // its budget already and runs without a second decision.
                deliver(app.id, seq: n.seq, payload: Array(n.payload.utf8))
            } else {
                dispatch(app, seq: n.seq, note: note, signed: n.signed)
            }
        }
        scheduleDeferredFlush()
        try? store.pruneNotifications(before: now() - 7 * 86400)
    }
}
