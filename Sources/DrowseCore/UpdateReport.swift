/// Where an update of a package stands on a device (docs/updates.md, "States"): the names an
/// operator sees in the fleet status under `updates`, and a staged rollout counts.
package enum UpdateState: String, Sendable, Equatable, CaseIterable {
    /// The package is being downloaded (a transfer of the daemon's).
    case downloading
    /// Downloaded and verified; held until the maintenance window (or the deadline).
    case waiting
    /// dpkg is installing it (or reinstalling the previous version after a failed check).
    case installing
    /// Installed; its health check runs.
    case checking
    /// The check passed: the new version stays.
    case committed
    /// The check failed: the previous version is installed again.
    case rolledBack = "rolled-back"
    /// The update could not be done (the download, the package, or the rollback failed).
    case failed

    /// Whether the update is over.
    package var isFinal: Bool { self == .committed || self == .rolledBack || self == .failed }

    /// Whether a rollout counts it against its abort threshold.
    package var isFailure: Bool { self == .rolledBack || self == .failed }
}

/// One package's newest update on a device, as the fleet status carries it under
/// `updates.<package>`: `{"id", "from", "to", "state", "reason", "times": {state: unix time}}`.
package struct UpdateReport: Sendable, Equatable {
    /// The update's id: the notification's `id` (or the one `drowse update` gave it).
    package var id: String
    /// The version installed when the update began; nil when the package was not installed.
    package var from: String?
    /// The version the update installs; nil until the package file is read.
    package var to: String?
    package var state: UpdateState
    /// Why it failed or rolled back.
    package var reason: String?
    /// When it entered each state it went through (Unix time).
    package var times: [UpdateState: Double]

    package init(id: String, from: String? = nil, to: String? = nil, state: UpdateState, reason: String? = nil, times: [UpdateState: Double] = [:]) {
        self.id = id
        self.from = from
        self.to = to
        self.state = state
        self.reason = reason
        self.times = times
    }

    /// Longest reason carried (it rides every status message).
    package static let maxReasonBytes = 200

    package var json: JSON {
        .object([
            ("id", .string(id)), ("from", JSON(from)), ("to", JSON(to)), ("state", .string(state.rawValue)),
            ("reason", JSON(reason.map { String(decoding: Array($0.utf8.prefix(Self.maxReasonBytes)), as: UTF8.self) })),
            ("times", .object(UpdateState.allCases.compactMap { s in times[s].map { (s.rawValue, JSON($0)) } })),
        ])
    }

    /// A published report read back; nil when it lacks an id or a known state.
    package static func parse(_ json: JSON?) -> UpdateReport? {
        guard let json, let id = json["id"]?.stringValue, let state = json["state"]?.stringValue.flatMap(UpdateState.init(rawValue:))
        else { return nil }
        var times: [UpdateState: Double] = [:]
        if case .object(let members)? = json["times"] {
            for (k, v) in members {
                if let s = UpdateState(rawValue: k), let t = v.doubleValue { times[s] = t }
            }
        }
        return UpdateReport(
            id: id, from: json["from"]?.stringValue, to: json["to"]?.stringValue, state: state, reason: json["reason"]?.stringValue, times: times)
    }
}
