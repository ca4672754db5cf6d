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
        case .message(let topic, let payload):
            receive(topic: topic, payload: payload)
        }
    }

    /// A notification arrived. It is recorded before anything acts on it, and deduplicated.
    func receive(topic: String, payload: [UInt8]) {
        guard let m = config.mqtt,
            let appID = Topics.app(inNotifyTopic: topic, prefix: m.topicPrefix, device: config.deviceID)
        else {
            logger.warning("notification refused: unexpected topic", metadata: ["topic": "\(topic)"])
            refusedNotifications += 1
            return
        }
        guard let app = apps[appID] else {
            logger.warning("notification refused: no valid app '\(appID)'")
            refusedNotifications += 1
            return
        }
        guard payload.count <= Notification.maxBytes else {
            logger.warning("notification refused: payload of \(payload.count) bytes is over the \(Notification.maxBytes)-byte limit", metadata: ["app.id": "\(appID)"])
            refusedNotifications += 1
            return
        }
        // Signed notifications: when the app has a public key, nothing else is accepted.
        var body = payload
        if JWS.looksCompact(payload) {
            do {
                let jws = try JWS.parse(payload)
                if let key = app.notificationPublicKey.flatMap(Base64.decode) {
                    guard Ed25519.verify(jws.signature, of: jws.signingInput, publicKey: key) else {
                        logger.warning("notification refused: bad signature", metadata: ["app.id": "\(appID)"])
                        refusedNotifications += 1
                        return
                    }
                }
                body = jws.payload
            } catch {
                logger.warning("notification refused: \(error.description)", metadata: ["app.id": "\(appID)"])
                refusedNotifications += 1
                return
            }
        } else if app.notificationPublicKey != nil {
            logger.warning("notification refused: unsigned, and the app accepts only signed notifications", metadata: ["app.id": "\(appID)"])
            refusedNotifications += 1
            return
        }
        let note: Notification
        do { note = try Notification.parse(body) } catch {
            logger.warning("notification refused: \(error.description)", metadata: ["app.id": "\(appID)"])
            refusedNotifications += 1
            return
        }
        guard note.contentAvailable else {
            logger.info("notification ignored: not silent (no aps.content-available = 1)", metadata: ["app.id": "\(appID)"])
            return
        }
        if let exp = note.expiration, exp < now() {
            logger.info("notification dropped: expired", metadata: ["app.id": "\(appID)"])
            return
        }
        let key = note.id.map { "id:" + $0 } ?? "hash:" + SHA256Hasher.hexDigest(of: Array(topic.utf8) + [0] + body)
        let seq: Int64
        do {
            guard let s = try store.recordNotification(app: appID, dedupeKey: key, payload: String(decoding: body, as: UTF8.self), at: now())
            else {
                logger.info("notification ignored: duplicate", metadata: ["app.id": "\(appID)", "key": "\(key)"])
                return
            }
            seq = s
        } catch {
            logger.error("store: \(error)")
            return
        }
        deliver(app, seq: seq, payload: body)
    }

    func deliver(_ app: AppDefinition, seq: Int64, payload: [UInt8]) {
        guard app.command(for: .notification) != nil else {
            logger.warning("notification for '\(app.id)' dropped: the app has no notification or fetch command")
            try? store.markNotification(seq, state: "dropped", at: now())
            return
        }
        // A notification woke the radio: due fetches may ride along.
        radioBusy(until: now())
        Task {
            let outcome = await self.runHandler(app, event: .notification, stdin: payload, trigger: "notification")
            self.notificationHandled(seq, outcome)
            self.radioBusy(until: self.now())
        }
    }

    func notificationHandled(_ seq: Int64, _ outcome: HandlerOutcome) {
        do { try store.markNotification(seq, state: outcome.result.rawValue, at: now()) } catch { logger.error("store: \(error)") }
    }

    /// Recorded but unhandled notifications from before a crash.
    func handlePendingNotifications() {
        guard let pending = try? store.pendingNotifications() else { return }
        for n in pending {
            guard let app = apps[n.app] else {
                try? store.markNotification(n.seq, state: "dropped", at: now())
                continue
            }
            logger.info("handling a notification received before a restart", metadata: ["app.id": "\(n.app)"])
            deliver(app, seq: n.seq, payload: Array(n.payload.utf8))
        }
        try? store.pruneNotifications(before: now() - 7 * 86400)
    }
}
