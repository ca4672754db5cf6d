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
            refuse("unexpected topic \(topic)", app: nil)
            return true
        }
        guard let app = apps[appID] else {
            refuse("no valid app '\(appID)'", app: nil)
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
                logger.info("notification ignored: duplicate", metadata: ["app.id": "\(appID)", "key": "\(key)"])
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
        logger.warning("notification refused: \(why)", metadata: app.map { ["app.id": "\($0)"] } ?? [:])
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
            logger.info("collapsed \(n) older notification(s) with collapse-id \(collapse)", metadata: ["app.id": "\(app.id)"])
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
        // the message's arrival has woken the radio already. Beyond it, it waits for a window.
        var recent = (launchTimes[app.id] ?? []).filter { $0 > t - 3600 }
        if note.priority == 10 || recent.count < config.notifications.maxPerHour {
            recent.append(t)
            launchTimes[app.id] = recent
            deliver(app, seq: seq, payload: Array(note.raw))
            return
        }
        try? store.markNotification(seq, state: "deferred", at: t)
        logger.info("notification deferred: \(recent.count) in the last hour (max_per_hour \(config.notifications.maxPerHour))",
                    metadata: ["app.id": "\(app.id)"])
        scheduleDeferredFlush()
    }

    /// Deferred notifications run at the next fetch window, or when their app's hourly
    /// budget has room again, whichever comes first.
    func scheduleDeferredFlush() {
        deferredTimer?.cancel()
        deferredTimer = nil
        let deferred = ((try? store.pendingNotifications()) ?? []).filter { $0.state == "deferred" }
        guard !deferred.isEmpty else { return }
        let t = now()
        var next = Double.infinity
        for app in Set(deferred.map(\.app)) {
            let recent = (launchTimes[app] ?? []).filter { $0 > t - 3600 }.sorted()
            let free = recent.count < config.notifications.maxPerHour ? t : recent[recent.count - config.notifications.maxPerHour] + 3600
            next = min(next, free)
        }
        if let w = plannedWindow?.at { next = min(next, w) }
        deferredTimer = WakeTimer.after(max(0, next - t)) { Task { await self.flushDeferred() } }
    }

    /// Runs deferred notifications whose app has budget again (all of them when `window`).
    func flushDeferred(window: Bool = false) {
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
            var recent = (launchTimes[rec.app] ?? []).filter { $0 > t - 3600 }
            guard window || recent.count < config.notifications.maxPerHour else { continue }
            recent.append(t)
            launchTimes[rec.app] = recent
            deliver(app, seq: rec.seq, payload: Array(rec.payload.utf8))
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

    func deliver(_ app: AppDefinition, seq: Int64, payload: [UInt8]) {
        // Stopping: it stays recorded as pending and runs after the restart.
        guard !stopping else { return }
        guard app.command(for: .notification) != nil else {
            logger.warning("notification for '\(app.id)' dropped: the app has no notification or fetch command")
            try? store.markNotification(seq, state: "dropped", at: now())
            return
        }
        // The handler starts first; then the bookkeeping: a notification woke the radio, so due
        // fetches may ride along.
        let started = startHandler(app, event: .notification, stdin: payload, trigger: "notification", notification: seq)
        radioBusy(until: now())
        Task {
            _ = await self.finishHandler(started)
            self.radioBusy(until: self.now())
        }
    }

    /// Recorded but unhandled notifications from before a crash or restart.
    func handlePendingNotifications() {
        guard let pending = try? store.pendingNotifications() else { return }
        for n in pending {
            guard let app = apps[n.app], let note = try? Notification.parse(Array(n.payload.utf8)) else {
                try? store.markNotification(n.seq, state: "dropped", at: now())
                continue
            }
            if n.state == "pending" {
                logger.info("handling a notification received before a restart", metadata: ["app.id": "\(n.app)"])
                dispatch(app, seq: n.seq, note: note, signed: n.signed)
            }
        }
        scheduleDeferredFlush()
        try? store.pruneNotifications(before: now() - 7 * 86400)
    }
}
