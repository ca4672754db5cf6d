import DrowseCore
import DrowseMQTT
import DrowseStore
import DrowseSystem
import Logging

/// What the retained status (`<prefix>/<device_id>/status`) is made of beyond the app list.
struct FleetStatusState {
    /// When the last wake window since the daemon started opened (on the timeline; shown in wall time).
    var lastWindow: Double?
    /// Whether each app's last handler run (any event) failed.
    var lastRunFailed: [String: Bool] = [:]
    /// What was published last (or set for the next connect): a change is republished, the
    /// same content is not.
    var published: FleetStatus?
    /// Each app's report (`drowse report`), as stored: read with the app files, kept here after.
    var reports: [String: [String: String]] = [:]
    /// Each package's newest update (docs/updates.md), read from the updates' directories at
    /// start and at every reload (the installer asks for one at each step).
    var updates: [String: UpdateReport] = [:]
}

/// The MQTT side of the daemon: the persistent session (libmosquitto on its own thread), the
/// messages it delivers (handed to the notification service, PUBACK after the record), and the
/// retained fleet status, republished when something in it changes (a wake window, a run's
/// result, a report, a reload), never on a timer of its own. Without `[mqtt]` there is no
/// session, and the status is kept only for `drowse apps show`.
@DaemonActor package final class MQTTLink: DaemonPart {
    let config: MainConfig
    let logger: Logger
    let store: Store
    let timeline: Timeline
    let registry: AppRegistry
    let notifications: NotificationService
    let metrics: AgentMetrics
    package private(set) var session: MQTTSession?
    let events: DaemonEvents
    /// The network the session starts on.
    let conditions: ConditionsReading
    /// Told of each message: work, after which drowsed's code is given back.
    let code: CodeRelease?
    /// What the session's thread reports, in its order (`serve`); finished when the thread ends.
    let reports = Reports<MQTTSessionEvent>()
    var fleet = FleetStatusState()
    /// When this daemon started (wall time), in every status and the will: copies of the status
    /// from several brokers are ordered by it (docs/fleets.md, "Newest wins").
    lazy var started = timeline.wall(timeline.now())

    package nonisolated var partName: String { "mqtt" }

    init(config: MainConfig, logger: Logger, store: Store, timeline: Timeline, registry: AppRegistry, conditions: ConditionsReading,
         notifications: NotificationService, metrics: AgentMetrics, events: DaemonEvents, code: CodeRelease? = nil) {
        self.code = code
        self.config = config
        self.conditions = conditions
        self.logger = logger
        self.store = store
        self.timeline = timeline
        self.registry = registry
        self.notifications = notifications
        self.metrics = metrics
        self.events = events
        events.listen { [unowned self] event in
            switch event {
            case .windowOpened:
                fleet.lastWindow = timeline.now()
                republishStatusIfChanged()
                // The keepalive rides the window.
                session?.rideWindow()
            case .runEnded(let app, _, let failed, _, _):
                // The status says only whether an app's last run failed: a run that ends as the
                // last one did changes nothing in it (a burst's thousand ends built it for nothing).
                if fleet.lastRunFailed.updateValue(failed, forKey: app) != failed { republishStatusIfChanged() }
            case .conditionsRead(let c):
                // Every reading tells the session whether there is a default route.
                session?.setNetwork(online: c.network != .none, path: c.networkKey)
            case .clockStepped:
                republishStatusIfChanged()
            case .appsReloaded:
                appsReloaded()
            case .radioUsed, .conditionsChanged, .taskOverran:
                break
            }
        }
    }

    func loadUpdates() {
        fleet.updates = UpdateFiles.newestByPackage(in: UpdateFiles.directory(stateDir: config.stateDir))
    }

    /// `POST /v1/updates/refresh`: the installer wrote a step; the status says it.
    package func refreshUpdates() -> [String: UpdateReport] {
        loadUpdates()
        republishStatusIfChanged()
        return fleet.updates
    }

    /// What each app last reported of itself: shown by `drowse apps show` and in the fleet status.
    func loadReports() {
        fleet.reports = Dictionary(uniqueKeysWithValues: registry.ids.map { ($0, (try? store.report(app: $0)) ?? [:]) })
    }

    /// Start-up: the apps' reports are read, and the session connects (in the background: it
    /// retries on its own thread) on the network the conditions part read.
    package func start() {
        loadReports()
        loadUpdates()
        connect(online: conditions.current.network != .none, path: conditions.current.networkKey)
    }

    /// Connects with the apps' subscriptions and the status to publish on connect.
    func connect(online: Bool, path: String?) {
        guard let m = config.mqtt else { return }
        var password: String?
        if let file = m.passwordFile {
            // Checked at start too (drowsed refuses to start); read again here the same way.
            do { password = String(String(decoding: try FileSystem.readSecretFile(file, limit: 4096).bytes, as: UTF8.self).trimmingSpaces()) } catch {
                logger.error("mqtt: password_file \(file) \(error.reason); connecting without it")
            }
        }
        let statusTopic = Topics.status(prefix: m.topicPrefix, device: config.deviceID)
        var options = MQTTSessionOptions(
            host: m.host, port: m.port, clientID: m.clientID, keepalive: m.keepalive.seconds, tls: m.tls,
            username: m.username, password: password, caFile: m.caFile, certFile: m.certFile, keyFile: m.keyFile,
            will: (statusTopic, Array(FleetStatus.offlineJSON(apps: registry.ids, version: Agent.version, groups: m.groups, started: started).serialized.utf8)),
            moreBrokers: m.brokers.dropFirst().map { ($0.host, $0.port) })
        options.maxPacket = MQTTSessionOptions.packetBound(maxPayload: config.notifications.maxPayload)
        options.maxKeepalive = Int(m.maxKeepalive.seconds)
        options.pingTopic = Topics.keepalive(prefix: m.topicPrefix, device: config.deviceID)
        do {
            options.learnedPaths = try store.keepalivePaths().mapValues { LearnedPath(held: $0.held, failed: $0.failed) }
        } catch {
            logger.warning("mqtt: cannot read what the keepalive learned before (\(error)); learning again")
        }
        let reports = self.reports
        let session = MQTTSession(options: options, logger: logger, onEnd: { reports.finish() }) { reports.yield($0) }
        self.session = session
        session.setSubscriptions(subscriptions(m))
        loadFailedApps()
        let status = fleetStatus()
        fleet.published = status
        session.setPublishOnConnect([(statusTopic, Array(status.json.serialized.utf8))])
        session.setNetwork(online: online, path: path)
        session.start()
    }

    /// What the session reports, in its order, until its thread ends; then what the keepalive
    /// learned is written. Without `[mqtt]` there is nothing to serve.
    package func serve() async -> Served {
        guard session != nil else { return .nothing }
        for await event in reports.stream { sessionEvent(event) }
        do { try store.flushPending() } catch {
            logger.warning("mqtt: cannot keep what the keepalive learned: \(error)")
        }
        return .ended
    }

    /// Shutdown: no new notifications (those that still arrive stay with the broker, or recorded,
    /// for after the restart); the offline status goes out, and the session's thread ends.
    package func stop() async {
        if let session { await session.stop() }
    }

    func subscriptions(_ m: MainConfig.MQTTConfig) -> [String] {
        registry.ids.flatMap { Topics.notifyTopics(prefix: m.topicPrefix, device: config.deviceID, groups: m.groups, app: $0) }
            + (m.rollCall ? [Topics.rollCall(prefix: m.topicPrefix)] : [])
    }

    func sessionEvent(_ event: MQTTSessionEvent) {
        switch event {
        case .message, .oversized: code?.worked()
        default: break
        }
        switch event {
        case .connected:
            metrics.mqttConnected()
        case .disconnected(let reason):
            metrics.mqttDisconnected()
            logger.warning("mqtt session down: \(reason)")
        case .pingSent:
            metrics.mqttPinged()
            // The radio wakes for the ping anyway: fetches whose tolerance allows ride along
            // (docs/design.md, "The adaptive keepalive").
            events.post(.radioUsed)
        case .keepaliveLearned(let network, let learned):
            // Kept for the next start: a restart need not find the path's interval again. Written
            // with the next commit, or at the stop: idle, drowsed writes nothing of its own.
            store.keepKeepalivePath(network, held: learned.held, failed: learned.failed, at: timeline.now())
        case .message(let topic, _, let receipt) where config.mqtt?.rollCall == true && topic == config.mqtt.map({ Topics.rollCall(prefix: $0.topicPrefix) }):
            // A roll call (`drowse fleet`): the status again, live, whatever it holds.
            receipt.acknowledge()
            fleet.published = nil
            republishStatusIfChanged()
        case .message(let topic, let payload, let receipt):
            // The PUBACK leaves only after the record is on disk (or a refusal, which is final).
            notifications.settle(notifications.receive(topic: topic, payload: payload, redelivered: receipt.redelivered)) {
                $0 ? receipt.acknowledge() : receipt.reject()
            }
        case .oversized(let topic, let bytes, let receipt):
            notifications.settle(notifications.receiveOversized(topic: topic, bytes: bytes)) { $0 ? receipt.acknowledge() : receipt.reject() }
        }
    }

    /// A reload: subscriptions follow the apps; removed apps leave the status.
    func appsReloaded() {
        for id in fleet.lastRunFailed.keys where registry[id] == nil { fleet.lastRunFailed[id] = nil }
        loadUpdates()
        guard let m = config.mqtt, let session else { return }
        session.setSubscriptions(subscriptions(m))
        loadFailedApps()
        republishStatusIfChanged()
    }

    // MARK: the fleet status

    func fleetStatus() -> FleetStatus {
        let ids = registry.ids
        let failed = ids.filter { fleet.lastRunFailed[$0] == true } + registry.invalid.map(\.id).sorted()
        return FleetStatus(
            online: true, apps: ids, version: Agent.version, lastWindow: timeline.wall(fleet.lastWindow), appCount: ids.count,
            failedApps: failed, groups: config.mqtt?.groups ?? [], time: timeline.wall(timeline.now()),
            reports: fleet.reports.filter { registry[$0.key] != nil && !$0.value.isEmpty }, updates: fleet.updates, started: started)
    }

    /// The last results the store remembers (fetches), before any run of this daemon's.
    func loadFailedApps() {
        for id in registry.ids where fleet.lastRunFailed[id] == nil {
            fleet.lastRunFailed[id] = (try? store.app(id, now: timeline.now()))?.lastResult == .failed
        }
    }

    /// Why a request was refused.
    package enum Refusal: Error, Sendable, Equatable {
        /// The store failed.
        case store(String)
    }

    /// `POST /v1/apps/ID/report`: kept across restarts and sent in the fleet status.
    func reported(app: String, fields: [String: String]) throws(Refusal) {
        do { try store.setReport(app: app, fields, now: timeline.now()) } catch { throw .store("\(error)") }
        fleet.reports[app] = fields
        republishStatusIfChanged()
    }

    func report(of app: String) -> [String: String] { fleet.reports[app] ?? [:] }

    func republishStatusIfChanged() {
        guard let session, let m = config.mqtt else { return }
        let status = fleetStatus()
        guard status.differs(from: fleet.published) else { return }
        fleet.published = status
        session.updateRetained(topic: Topics.status(prefix: m.topicPrefix, device: config.deviceID), payload: Array(status.json.serialized.utf8))
    }
}
