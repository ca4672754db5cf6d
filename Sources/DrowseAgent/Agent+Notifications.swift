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
            will: (statusTopic, Array(FleetStatus.offlineJSON(apps: apps.keys.sorted(), version: Agent.version,
                                                              groups: m.groups).serialized.utf8)),
            moreBrokers: m.brokers.dropFirst().map { ($0.host, $0.port) })
        let (stream, continuation) = AsyncStream<MQTTSessionEvent>.makeStream()
        mqttEvents = continuation
        let session = MQTTSession(options: options, logger: logger) { continuation.yield($0) }
        mqtt = session
        session.setSubscriptions(apps.keys.sorted().flatMap {
            Topics.notifyTopics(prefix: m.topicPrefix, device: config.deviceID, groups: m.groups, app: $0)
        })
        loadFailedApps()
        let status = fleetStatus()
        fleet.published = status
        session.setPublishOnConnect([(statusTopic, Array(status.json.serialized.utf8))])
        session.setNetwork(online: conditions.network != .none)
        session.start()
        background.append(Task {
            for await event in stream { await self.mqttEvent(event) }
        })
    }

    func mqttEvent(_ event: MQTTSessionEvent) async {
        switch event {
        case .connected:
            // Work that needs the radio could ride this moment; the planner does so later.
            metrics.mqttConnected()
        case .disconnected(let reason):
            metrics.mqttDisconnected()
            logger.warning("mqtt session down: \(reason)")
        case .pingSent:
            metrics.mqttPinged()
        case .message(let topic, let payload, let receipt):
            // The PUBACK leaves only now: after the record (or a refusal, which is final).
            if notifications.receive(topic: topic, payload: payload) { receipt.acknowledge() } else { receipt.reject() }
        }
    }

    /// The notification service over the real store, handler queue, transfers and NIO timers.
    /// Its closures run on this actor's executor (the service is only called from here).
    func makeNotificationService() -> NotificationService {
        let host = NotificationHost(
            now: { self.now() },
            app: { self.apps[$0] },
            stopping: { self.stopping },
            runHandler: { app, seq, payload in self.enqueueHandler(.notification(app: app, seq: seq, payload: payload)) },
            pushDownload: { req throws(APIError) in try self.createTransfer(req, caller: .daemon) },
            nextFetchWindow: { self.fetch.plannedWindow?.at },
            setDeferredTimer: { at in
                self.deferredTimer?.cancel()
                self.deferredTimer = nil
                guard let at else { return }
                self.deferredTimer = self.clock.wake(after: max(0, at - self.now())) { Task { await self.deferredTimerFired() } }
            },
            fromWall: { [timeline] in timeline.fromWall($0) })
        let service = NotificationService(
            admission: NotificationAdmission(budget: NotificationBudget(maxPerHour: config.notifications.maxPerHour), deviceID: config.deviceID,
                                             maxDeferred: config.notifications.maxDeferred),
            store: store, host: host, topicPrefix: config.mqtt?.topicPrefix ?? "drowse", deviceID: config.deviceID, logger: logger)
        service.metrics = metrics
        service.groups = config.mqtt?.groups ?? []
        return service
    }

    func deferredTimerFired() {
        deferredTimer = nil
        notifications.deferredTimerFired()
    }

    /// A fetch window opens: deferred notifications held back by their rate budget ride it.
    func flushDeferred() { notifications.flushDeferred() }

    /// A notification's queued run ended, or was not started.
    func notificationRunEnded(_ seq: Int64) { notifications.notificationRunEnded(seq) }

    /// Recorded but unhandled notifications from before a crash or restart.
    func handlePendingNotifications() { notifications.handlePendingNotifications() }
}
