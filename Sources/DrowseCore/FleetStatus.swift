/// The retained status a device publishes at `<prefix>/<device_id>/status`, and how `drowse
/// fleet` reads it back (docs/contract.md, "Notifications over MQTT"; docs/fleets.md, "Fleet status and
/// `drowse fleet`").
///
/// Online: `{"online": true, "apps": [...], "version", "last_window", "app_count", "failed_apps",
/// "groups", "time", "reports"}`. The last will (and the status at a clean stop) is `{"online": false}` with
/// what does not change while the daemon runs (`apps`, `version`, `app_count`, `groups`): it
/// replaces the retained status, and a listing by group must still find a dead device. The
/// broker publishes it for a device that vanished, so it holds no `time`, `last_window` or
/// `failed_apps`; `drowse fleet` shows those from the device's last status when it saw both.
package struct FleetStatus: Sendable, Equatable {
    package var online: Bool
    package var apps: [String] = []
    package var version: String?
    /// Unix time of the last wake window, or nil (none since the daemon started).
    package var lastWindow: Double?
    package var appCount: Int?
    /// Apps whose last handler run failed, and invalid app definitions.
    package var failedApps: [String] = []
    package var groups: [String] = []
    /// Unix time the message was published.
    package var time: Double?
    /// What each app reported of itself (`drowse report`), by app: e.g. its version.
    package var reports: [String: [String: String]] = [:]
    /// Each package's newest update through the daemon (docs/updates.md), by package.
    package var updates: [String: UpdateReport] = [:]

    package init(online: Bool, apps: [String] = [], version: String? = nil, lastWindow: Double? = nil, appCount: Int? = nil,
                 failedApps: [String] = [], groups: [String] = [], time: Double? = nil, reports: [String: [String: String]] = [:],
                 updates: [String: UpdateReport] = [:]) {
        self.online = online
        self.apps = apps
        self.version = version
        self.lastWindow = lastWindow
        self.appCount = appCount
        self.failedApps = failedApps
        self.groups = groups
        self.time = time
        self.reports = reports
        self.updates = updates
    }

    /// The last will's payload with nothing known about the device.
    package static let offlineJSON: JSON = .object([("online", false)])

    /// The last will (and clean-stop) payload of a device: offline, with the fields that stay the
    /// same while its daemon runs.
    package static func offlineJSON(apps: [String], version: String, groups: [String]) -> JSON {
        .object([
            ("online", false), ("apps", .array(apps.map { .string($0) })), ("version", .string(version)),
            ("app_count", JSON(apps.count)), ("groups", .array(groups.map { .string($0) })),
        ])
    }

    /// The message's JSON. Keys docs/contract.md named first (`online`, `apps`) keep their place.
    package var json: JSON {
        guard online else { return .object([("online", false)] + (time.map { [("time", JSON($0))] } ?? [])) }
        return .object([
            ("online", true), ("apps", .array(apps.map { .string($0) })), ("version", JSON(version)),
            ("last_window", JSON(lastWindow)), ("app_count", JSON(appCount ?? apps.count)),
            ("failed_apps", .array(failedApps.map { .string($0) })), ("groups", .array(groups.map { .string($0) })),
            ("time", JSON(time)),
            ("reports", .object(reports.keys.sorted().map { ($0, AppReport.json(reports[$0]!)) })),
            ("updates", .object(updates.keys.sorted().map { ($0, updates[$0]!.json) })),
        ])
    }

    /// Whether publishing `self` after `previous` tells anything new: every field but `time`
    /// (which alone changes on each publication) counts.
    package func differs(from previous: FleetStatus?) -> Bool {
        guard var p = previous else { return true }
        p.time = time
        return p != self
    }

    /// A status message as read back; nil when it is not a JSON object with a boolean `online`.
    /// Fields of the wrong type are treated as absent: a fleet listing shows what it can.
    package static func parse(_ payload: [UInt8]) -> FleetStatus? {
        guard payload.count <= 65536, let json = try? JSON.parse(bytes: payload, maxDepth: 8), case .object = json,
              let online = json["online"]?.boolValue
        else { return nil }
        func strings(_ key: String) -> [String] { json[key]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        let apps = strings("apps")
        var reports: [String: [String: String]] = [:]
        if case .object(let members)? = json["reports"] {
            for (app, r) in members { reports[app] = AppReport.parse(r) }
        }
        var updates: [String: UpdateReport] = [:]
        if case .object(let members)? = json["updates"] {
            for (package, u) in members { updates[package] = UpdateReport.parse(u) }
        }
        return FleetStatus(
            online: online, apps: apps, version: json["version"]?.stringValue, lastWindow: json["last_window"]?.doubleValue,
            appCount: json["app_count"]?.intValue ?? (json["apps"]?.arrayValue != nil ? apps.count : nil),
            failedApps: strings("failed_apps"), groups: strings("groups"), time: json["time"]?.doubleValue, reports: reports,
            updates: updates)
    }
}

/// `drowse fleet`'s view of the devices, built from the retained status messages it received.
package struct FleetListing: Sendable, Equatable {
    package struct Device: Sendable, Equatable {
        package var id: String
        package var status: FleetStatus

        package init(id: String, status: FleetStatus) {
            self.id = id
            self.status = status
        }

        /// `--json`'s object for the device.
        package var json: JSON {
            .object([
                ("device_id", .string(id)), ("online", .bool(status.online)), ("version", JSON(status.version)),
                ("last_seen", JSON(status.time)), ("last_window", JSON(status.lastWindow)),
                ("failed_apps", .array(status.failedApps.map { .string($0) })),
                ("groups", .array(status.groups.map { .string($0) })), ("app_count", JSON(status.appCount)),
                ("reports", .object(status.reports.keys.sorted().map { ($0, AppReport.json(status.reports[$0]!)) })),
                ("updates", .object(status.updates.keys.sorted().map { ($0, status.updates[$0]!.json) })),
            ])
        }
    }

    package private(set) var devices: [String: Device] = [:]

    package init() {}

    /// A message on `topic` arrived; messages that are not a device's status are ignored. An
    /// offline status keeps what the device said before it (from an earlier message).
    @discardableResult
    package mutating func received(topic: String, payload: [UInt8], prefix: String) -> Bool {
        guard let id = Topics.device(inStatusTopic: topic, prefix: prefix), let s = FleetStatus.parse(payload) else { return false }
        if !s.online, var known = devices[id]?.status {
            known.online = false
            known.time = s.time ?? known.time
            devices[id] = Device(id: id, status: known)
        } else {
            devices[id] = Device(id: id, status: s)
        }
        return true
    }

    /// The devices sorted by id; with `group`, only those that report being in it.
    package func list(group: String?) -> [Device] {
        devices.values.filter { d in group.map { d.status.groups.contains($0) } ?? true }.sorted { $0.id < $1.id }
    }

    /// One text line per device: id, online/offline, version, last seen, failing apps.
    /// Every cell comes from what a device published: escaped (a newline in a version would
    /// forge another device's line) and cut to `LogText.quoteLimit` before the columns are sized.
    package static func lines(_ devices: [Device], now: Double) -> [String] {
        let rows = devices.map { d -> [String] in
            let s = d.status
            let seen = s.time.map { Self.ago($0, now: now) } ?? "-"
            let failing = s.failedApps.isEmpty ? "-" : s.failedApps.joined(separator: ",")
            return [d.id, s.online ? "online" : "offline", s.version ?? "-", seen, failing].map { LogText.clip($0) }
        }
        let header = ["DEVICE", "STATE", "VERSION", "LAST SEEN", "FAILING APPS"]
        let widths = (0..<header.count).map { i in ([header] + rows).map { $0[i].count }.max() ?? 0 }
        return ([header] + rows).map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count) }
                .joined(separator: "  ")
        }
    }

    /// "5m ago", "now", or "in 3s" for a clock that is ahead.
    static func ago(_ t: Double, now: Double) -> String {
        let d = now - t
        guard abs(d) >= 1, abs(d) < 1e12 else { return "now" }
        let text = DurationText.format(.seconds(Int64(abs(d).rounded())))
        return d > 0 ? "\(text) ago" : "in \(text)"
    }
}
