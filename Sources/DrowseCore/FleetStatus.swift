/// The retained status a device publishes at `<prefix>/<device_id>/status`, and how `drowse
/// fleet` reads it back (docs/contract.md, "Notifications over MQTT"; docs/fleets.md, "Fleet status and
/// `drowse fleet`").
///
/// Online: `{"online": true, "apps": [...], "version", "last_window", "app_count", "failed_apps",
/// "groups", "time", "started", "reports", "updates"}`. The last will (and the status at a clean stop) is
/// `{"online": false}` with what does not change while the daemon runs (`apps`, `version`,
/// `app_count`, `groups`, `started`): it replaces the retained status, and a listing by group must
/// still find a dead device. The broker publishes it for a device that vanished, so it holds no
/// `time`, `last_window` or `failed_apps`; `drowse fleet` shows those from the device's last
/// status when it saw both. `started` (when the daemon started) orders copies of a device's
/// status from several brokers: newest wins (`FleetListing.Freshness`, docs/fleets.md).
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
    /// Unix time the daemon that published it started: a later run's status is newer.
    package var started: Double?
    /// What each app reported of itself (`drowse report`), by app: e.g. its version.
    package var reports: [String: [String: String]] = [:]
    /// Each package's newest update through the daemon (docs/updates.md), by package.
    package var updates: [String: UpdateReport] = [:]

    package init(online: Bool, apps: [String] = [], version: String? = nil, lastWindow: Double? = nil, appCount: Int? = nil,
                 failedApps: [String] = [], groups: [String] = [], time: Double? = nil, reports: [String: [String: String]] = [:],
                 updates: [String: UpdateReport] = [:], started: Double? = nil) {
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
        self.started = started
    }

    /// The last will's payload with nothing known about the device.
    package static let offlineJSON: JSON = .object([("online", false)])

    /// The last will (and clean-stop) payload of a device: offline, with the fields that stay the
    /// same while its daemon runs.
    package static func offlineJSON(apps: [String], version: String, groups: [String], started: Double? = nil) -> JSON {
        .object([
            ("online", false), ("apps", .array(apps.map { .string($0) })), ("version", .string(version)),
            ("app_count", JSON(apps.count)), ("groups", .array(groups.map { .string($0) })),
        ] + (started.map { [("started", JSON($0))] } ?? []))
    }

    /// The message's JSON. Keys docs/contract.md named first (`online`, `apps`) keep their place.
    package var json: JSON {
        guard online else {
            return .object([("online", false)] + (time.map { [("time", JSON($0))] } ?? []) + (started.map { [("started", JSON($0))] } ?? []))
        }
        return .object([
            ("online", true), ("apps", .array(apps.map { .string($0) })), ("version", JSON(version)),
            ("last_window", JSON(lastWindow)), ("app_count", JSON(appCount ?? apps.count)),
            ("failed_apps", .array(failedApps.map { .string($0) })), ("groups", .array(groups.map { .string($0) })),
            ("time", JSON(time)),
        ] + (started.map { [("started", JSON($0))] } ?? []) + [
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
            updates: updates, started: json["started"]?.doubleValue)
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

    /// How new a copy of a device's status is. A device's status may be seen more than once: a
    /// cluster's nodes each keep their own retained copy, and a device answers a roll call
    /// (`Topics.rollCall`) live. Copies a broker kept are ordered by what they carry: a later
    /// run of the daemon (`started`) beats an earlier one; within a run the offline status (the
    /// will, or the status at a clean stop) is the last one; then the later `time`. A message
    /// received live (not retained) was published after every kept copy, and among live ones
    /// the later arrival wins. A payload of an older drowsed carries no `started`: older than
    /// any that does.
    package struct Freshness: Sendable, Equatable, Comparable {
        package var live: UInt64?
        package var started: Double?
        package var offline: Bool
        package var time: Double?

        package init(_ s: FleetStatus, live: UInt64?) {
            self.live = live
            started = s.started
            offline = !s.online
            time = s.time
        }

        package static func < (a: Freshness, b: Freshness) -> Bool {
            switch (a.live, b.live) {
            case (let x?, let y?): return x < y
            case (nil, .some): return true
            case (.some, nil): return false
            case (nil, nil): break
            }
            if a.started != b.started { return (a.started ?? -.infinity) < (b.started ?? -.infinity) }
            if a.offline != b.offline { return b.offline }
            return (a.time ?? -.infinity) < (b.time ?? -.infinity)
        }
    }

    package private(set) var devices: [String: Device] = [:]
    private var freshness: [String: Freshness] = [:]
    /// The newest online status seen of each device: an offline one shows what it said last.
    private var lastOnline: [String: (FleetStatus, Freshness)] = [:]
    /// What each device's newest status and newest online status said, as received: what a
    /// listing with a session remembers (`memory`).
    private var newestPayload: [String: [UInt8]] = [:]
    private var onlinePayload: [String: [UInt8]] = [:]
    private var arrivals: UInt64 = 0

    package init() {}

    package static func == (a: FleetListing, b: FleetListing) -> Bool { a.devices == b.devices }

    /// A message on `topic` arrived (`retained`: a copy the broker kept; false: published now);
    /// messages that are not a device's status are ignored, and so is a copy older than one
    /// already seen (`Freshness`). An offline status keeps what the device said before it (from
    /// the newest online one seen of the same run, or of any run when the offline one has no
    /// `started`).
    @discardableResult
    package mutating func received(topic: String, payload: [UInt8], prefix: String, retained: Bool = true) -> Bool {
        guard let id = Topics.device(inStatusTopic: topic, prefix: prefix), let s = FleetStatus.parse(payload) else { return false }
        var live: UInt64?
        if !retained {
            arrivals += 1
            live = arrivals
        }
        let f = Freshness(s, live: live)
        if s.online, lastOnline[id].map({ $0.1 < f }) ?? true {
            lastOnline[id] = (s, f)
            onlinePayload[id] = payload
        }
        if let known = freshness[id], f < known {
            // An older copy: only an online one can tell what the newest (offline) one lacks.
            if let d = devices[id], !d.status.online { devices[id] = Device(id: id, status: Self.filled(d.status, from: lastOnline[id]?.0)) }
            return true
        }
        freshness[id] = f
        newestPayload[id] = payload
        devices[id] = Device(id: id, status: s.online ? s : Self.filled(s, from: lastOnline[id]?.0))
        return true
    }

    /// What a listing with a session keeps between runs (`drowse fleet --session`,
    /// docs/fleets.md): each device's newest status and newest online status, as the device
    /// published them. `remember` reads it back.
    package var memory: JSON {
        .object([("devices", .object(devices.keys.sorted().map { id in
            let kept = [("status", newestPayload[id]), ("online_status", onlinePayload[id] == newestPayload[id] ? nil : onlinePayload[id])]
            return (id, .object(kept.compactMap { key, bytes in
                bytes.flatMap { try? JSON.parse(bytes: $0, maxDepth: 8) }.map { (key, $0) }
            }))
        }))])
    }

    /// Takes in a `memory` of an earlier listing: its statuses count as copies a broker kept
    /// (`Freshness`), so whatever this listing receives live, or was queued for its session,
    /// is newer. Entries that do not parse are skipped.
    package mutating func remember(_ memory: JSON, prefix: String) {
        guard case .object(let entries)? = memory["devices"] else { return }
        for (id, entry) in entries {
            let topic = Topics.status(prefix: prefix, device: id)
            for key in ["online_status", "status"] {
                guard let status = entry[key], case .object = status else { continue }
                received(topic: topic, payload: Array(status.serialized.utf8), prefix: prefix, retained: true)
            }
        }
    }

    /// Leaves a device out of the listing (and of its `memory`) until it is heard from again.
    package mutating func forget(_ id: String) {
        devices[id] = nil
        freshness[id] = nil
        lastOnline[id] = nil
        newestPayload[id] = nil
        onlinePayload[id] = nil
    }

    /// An offline status with what the device's last online one said (same run, or any when
    /// unknown): the offline message carries only what never changes during a run.
    private static func filled(_ offline: FleetStatus, from last: FleetStatus?) -> FleetStatus {
        guard var known = last, offline.started == nil || known.started == offline.started || known.started == nil else { return offline }
        known.online = false
        known.time = offline.time ?? known.time
        known.started = offline.started ?? known.started
        if !offline.apps.isEmpty { known.apps = offline.apps }
        if offline.version != nil { known.version = offline.version }
        if !offline.groups.isEmpty { known.groups = offline.groups }
        if offline.appCount != nil { known.appCount = offline.appCount }
        return known
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
