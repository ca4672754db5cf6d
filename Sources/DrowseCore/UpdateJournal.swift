/// An update's own directory (docs/updates.md, "On the device"): `update.json` says what it asks
/// for, `state.json` how far it got, `package.deb` is the package. The installer (`drowse update
/// apply`, in a systemd unit of its own) writes `state.json` atomically and durably at every step,
/// so a power cut at any point resumes from the last step written.

/// What an update asks for: `update.json`, written once by `drowse update install`.
package struct UpdateRequest: Sendable, Equatable {
    package var id: String
    /// The unit that must stay active for the check; nil: the package has no service (only the
    /// check command, if any, decides). For the drowse package it is drowsed.service.
    package var service: String?
    /// A command whose exit status 0 passes the check, run once the service has been active for
    /// `healthFor`; empty: none.
    package var check: [String]
    /// How long the service must stay active without a break, in seconds.
    package var healthFor: Double
    /// How long after the install the check may take before the update is rolled back, in seconds.
    package var checkWithin: Double

    package static let defaultHealthFor: Double = 30
    package static let defaultCheckWithin: Double = 300

    package init(id: String, service: String? = nil, check: [String] = [], healthFor: Double = defaultHealthFor,
                 checkWithin: Double = defaultCheckWithin) {
        self.id = id
        self.service = service
        self.check = check
        self.healthFor = healthFor
        self.checkWithin = checkWithin
    }

    /// An id names a directory and a systemd unit: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . or -).
    package static func isValidID(_ id: String) -> Bool {
        guard let first = id.utf8.first, id.utf8.count <= 64, first != UInt8(ascii: "."), first != UInt8(ascii: "-") else { return false }
        return id.utf8.allSatisfy { b in
            (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) || b == 0x2E || b == 0x5F || b == 0x2D
        }
    }

    /// A unit name systemctl takes as one unit: no spaces, no control characters, no leading dash.
    package static func isValidUnit(_ unit: String) -> Bool {
        !unit.isEmpty && unit.utf8.count <= 256 && !unit.hasPrefix("-")
            && unit.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "/") }
    }

    /// The unit the check watches for the given package when none was named: drowse's own.
    package static func defaultService(forPackage package: String) -> String? { package == "drowse" ? "drowsed.service" : nil }

    package var json: JSON {
        .object([
            ("id", .string(id)), ("service", JSON(service)), ("check", .array(check.map { .string($0) })),
            ("health_for", .number(healthFor)), ("check_within", .number(checkWithin)),
        ])
    }

    package static func parse(_ json: JSON) -> UpdateRequest? {
        guard let id = json["id"]?.stringValue, isValidID(id) else { return nil }
        let service = json["service"]?.stringValue
        if let service, !isValidUnit(service) { return nil }
        let check = json["check"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let healthFor = json["health_for"]?.doubleValue ?? defaultHealthFor
        let within = json["check_within"]?.doubleValue ?? defaultCheckWithin
        guard healthFor.isFinite, healthFor >= 0, within.isFinite, within > 0 else { return nil }
        return UpdateRequest(id: id, service: service, check: check, healthFor: healthFor, checkWithin: within)
    }
}

/// How far an update got: `state.json`. `report` is what the fleet sees; `step` is where the
/// installer resumes.
package struct UpdateProgress: Sendable, Equatable {
    /// The installer's steps, in order; `rollback` only after a failed check or install.
    package enum Step: String, Sendable, Equatable {
        /// Read the package, keep the installed version's package file.
        case prepare
        /// dpkg installs the new version, then the service restarts.
        case install
        /// The health check.
        case check
        /// dpkg reinstalls the kept version (or removes a package that was not installed before).
        case rollback
        /// Nothing left to do: `report.state` is final.
        case done
    }

    package var report: UpdateReport
    /// The package's name, once read from the file.
    package var package: String?
    package var step: Step

    package init(report: UpdateReport, package: String? = nil, step: Step) {
        self.report = report
        self.package = package
        self.step = step
    }

    /// Moves to `state` at `time` (the first entry into a state keeps its time).
    package mutating func enter(_ state: UpdateState, at time: Double, reason: String? = nil) {
        report.state = state
        if let reason { report.reason = reason }
        if report.times[state] == nil { report.times[state] = time }
    }

    package var json: JSON {
        .object([("package", JSON(package)), ("step", .string(step.rawValue)), ("report", report.json)])
    }

    package static func parse(_ json: JSON) -> UpdateProgress? {
        guard let report = UpdateReport.parse(json["report"]), let step = json["step"]?.stringValue.flatMap(Step.init(rawValue:))
        else { return nil }
        return UpdateProgress(report: report, package: json["package"]?.stringValue, step: step)
    }
}

/// The health check's verdict from what `systemctl is-active` says over time (sans I/O: the
/// installer polls and feeds each answer in).
package struct HealthWatch: Sendable, Equatable {
    package enum Verdict: Sendable, Equatable {
        /// Keep watching.
        case wait
        /// Active for `healthFor` without a break.
        case healthy
        /// The deadline passed first; the reason says what the service was doing.
        case unhealthy(String)
    }

    package let service: String
    package let healthFor: Double
    package let within: Double
    package let deadline: Double
    private var activeSince: Double?
    private var last = "unknown"
    private var breaks = 0

    /// Watching from `start` (monotonic seconds) for at most `within` seconds.
    package init(service: String, healthFor: Double, start: Double, within: Double) {
        self.service = service
        self.healthFor = healthFor
        self.within = within
        deadline = start + within
    }

    /// `state` is what `systemctl is-active` printed at `now` (active, activating, failed, ...).
    package mutating func observe(_ state: String, at now: Double) -> Verdict {
        if state == "active" {
            if activeSince == nil { activeSince = now }
        } else {
            if activeSince != nil { breaks += 1 }
            activeSince = nil
        }
        last = state
        if let since = activeSince, now - since >= healthFor { return .healthy }
        guard now >= deadline else { return .wait }
        let held = activeSince.map { "active for only \(Self.seconds(now - $0))" } ?? "'\(last)'"
        let restarts = breaks > 0 ? ", \(breaks) stop\(breaks == 1 ? "" : "s") seen" : ""
        return .unhealthy("\(service) was not active for \(Self.seconds(healthFor)) within \(Self.seconds(within)) (at the deadline: \(held)\(restarts))")
    }

    static func seconds(_ s: Double) -> String { "\(Int(s.rounded())) s" }
}
