import DrowseCore
import DrowseStore

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
}

/// The fleet status: built from the agent's state, republished when something in it changes (a
/// wake window, a run's result), never on a timer of its own.
extension Agent {
    func fleetStatus() -> FleetStatus {
        let ids = apps.keys.sorted()
        let failed = ids.filter { fleet.lastRunFailed[$0] == true } + invalidApps.map(\.id).sorted()
        return FleetStatus(
            online: true, apps: ids, version: Agent.version, lastWindow: wall(fleet.lastWindow), appCount: ids.count,
            failedApps: failed, groups: config.mqtt?.groups ?? [], time: wall(now()),
            reports: fleet.reports.filter { apps[$0.key] != nil && !$0.value.isEmpty })
    }

    /// The last results the store remembers (fetches), before any run of this daemon's.
    func loadFailedApps() {
        for id in apps.keys where fleet.lastRunFailed[id] == nil {
            fleet.lastRunFailed[id] = (try? store.app(id, now: now()))?.lastResult == .failed
        }
    }

    /// `POST /v1/apps/ID/report`: the app's report replaces its last one, is kept across restarts
    /// and goes out in the fleet status.
    package func report(_ id: String, fields: [String: String], caller: Caller) throws(APIError) -> JSON {
        let app = try app(id, for: caller)
        do { try store.setReport(app: app.id, fields, now: now()) } catch { throw .internal("\(error)") }
        fleet.reports[app.id] = fields
        republishStatusIfChanged()
        return .object([("id", .string(app.id)), ("report", AppReport.json(fields))])
    }

    func windowOpenedForStatus() {
        fleet.lastWindow = now()
        republishStatusIfChanged()
    }

    func runResulted(app: String, failed: Bool) {
        fleet.lastRunFailed[app] = failed
        republishStatusIfChanged()
    }

    func republishStatusIfChanged() {
        guard let mqtt, let m = config.mqtt else { return }
        let status = fleetStatus()
        guard status.differs(from: fleet.published) else { return }
        fleet.published = status
        mqtt.updateRetained(topic: Topics.status(prefix: m.topicPrefix, device: config.deviceID), payload: Array(status.json.serialized.utf8))
    }
}
