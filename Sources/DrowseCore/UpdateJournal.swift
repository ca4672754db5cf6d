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
    /// The package the file must hold; nil: whichever it holds.
    package var package: String?
    /// Install at this Unix time (the publisher's clock) even outside the maintenance window.
    package var installBy: Double?

    package static let defaultHealthFor: Double = 30
    package static let defaultCheckWithin: Double = 300

    package init(id: String, service: String? = nil, check: [String] = [], healthFor: Double = defaultHealthFor,
                 checkWithin: Double = defaultCheckWithin, package: String? = nil, installBy: Double? = nil) {
        self.id = id
        self.service = service
        self.check = check
        self.healthFor = healthFor
        self.checkWithin = checkWithin
        self.package = package
        self.installBy = installBy
    }

    /// The longest id: "update-" and it make the download's session name (at most 64).
    package static let maxIDBytes = 56

    /// An id names a directory, a systemd unit and a transfer session: 1 to 56 of A-Z a-z 0-9 .
    /// _ - (not starting with . or -).
    package static func isValidID(_ id: String) -> Bool {
        guard let first = id.utf8.first, id.utf8.count <= maxIDBytes, first != UInt8(ascii: "."), first != UInt8(ascii: "-") else { return false }
        return id.utf8.allSatisfy { b in
            (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) || b == 0x2E || b == 0x5F || b == 0x2D
        }
    }

    /// A unit name systemctl takes as one unit: no spaces, no control characters, no leading dash.
    package static func isValidUnit(_ unit: String) -> Bool {
        !unit.isEmpty && unit.utf8.count <= 256 && !unit.hasPrefix("-")
            && unit.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "/") }
    }

    /// A Debian package name (policy 5.6.7): lower case letters, digits, + - ., two or more, a letter or digit first.
    package static func isValidPackage(_ name: String) -> Bool {
        guard name.utf8.count >= 2, name.utf8.count <= 128, let first = name.utf8.first,
              (0x61...0x7A).contains(first) || (0x30...0x39).contains(first) else { return false }
        return name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E }
    }

    /// The download's transfer session: finished, it tells `drowse update downloaded` which update it was.
    package var session: String { "update-" + id }

    /// The update id of a transfer session of `session`, or nil when it is not an update's.
    package static func id(ofSession session: String) -> String? {
        guard session.hasPrefix("update-") else { return nil }
        let id = String(session.dropFirst(7))
        return isValidID(id) ? id : nil
    }

    /// The unit the check watches for the given package when none was named: drowse's own.
    package static func defaultService(forPackage package: String) -> String? { package == "drowse" ? "drowsed.service" : nil }

    package var json: JSON {
        .object([
            ("id", .string(id)), ("service", JSON(service)), ("check", .array(check.map { .string($0) })),
            ("health_for", .number(healthFor)), ("check_within", .number(checkWithin)), ("package", JSON(package)),
            ("install_by", installBy.map { JSON.number($0) } ?? .null),
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
        let package = json["package"]?.stringValue
        if let package, !isValidPackage(package) { return nil }
        let installBy = json["install_by"]?.doubleValue
        if let installBy, !installBy.isFinite { return nil }
        return UpdateRequest(id: id, service: service, check: check, healthFor: healthFor, checkWithin: within, package: package, installBy: installBy)
    }
}

/// How far an update got: `state.json`. `report` is what the fleet sees; `step` is where the
/// installer resumes.
package struct UpdateProgress: Sendable, Equatable {
    /// The installer's steps, in order; `rollback` only after a failed check or install.
    package enum Step: String, Sendable, Equatable {
        /// drowsed downloads the package (a transfer of session `update-<id>`).
        case download
        /// Downloaded; the maintenance window (or `install_by`) is awaited by a systemd timer.
        case hold
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
    private var activeRun: String?
    private var last = "unknown"
    private var breaks = 0

    /// Watching from `start` (monotonic seconds) for at most `within` seconds.
    package init(service: String, healthFor: Double, start: Double, within: Double) {
        self.service = service
        self.healthFor = healthFor
        self.within = within
        deadline = start + within
    }

    /// `state` is the unit's ActiveState at `now` (active, activating, failed, ...), as
    /// `systemctl is-active` prints it. `run` names the service's current run (systemd's
    /// `NRestarts` and `ActiveEnterTimestampMonotonic`): a service that stopped and was started
    /// again between two looks is active at both, and only the changed run tells the break.
    package mutating func observe(_ state: String, run: String? = nil, at now: Double) -> Verdict {
        if state == "active" {
            if activeSince != nil, let run, let known = activeRun, run != known {
                breaks += 1
                activeSince = now
            }
            if activeSince == nil { activeSince = now }
            activeRun = run
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

/// An update notification's payload (docs/updates.md, "From a notification"): `{"id", "url",
/// "sha256", "package"?, "service"?, "check"?, "health_for"?, "check_within"?, "install_by"?,
/// "discretionary"?}`. The notification's signature was checked by drowsed before its handler
/// ran; this checks the fields.
package struct UpdateNotice: Sendable, Equatable {
    package var request: UpdateRequest
    package var url: String
    package var sha256: String
    package var discretionary: Bool

    package init(request: UpdateRequest, url: String, sha256: String, discretionary: Bool) {
        self.request = request
        self.url = url
        self.sha256 = sha256
        self.discretionary = discretionary
    }

    package struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        package var description: String
        init(_ d: String) { description = d }
    }

    package static func parse(_ text: String, defaults: MainConfig.UpdatesConfig) throws(Problem) -> UpdateNotice {
        guard let json = try? JSON.parse(text, maxDepth: 8), case .object = json else { throw Problem("the payload is not a JSON object") }
        guard let id = json["id"]?.stringValue, UpdateRequest.isValidID(id) else {
            throw Problem("'id' must be 1 to \(UpdateRequest.maxIDBytes) of A-Z a-z 0-9 . _ - (it names the update)")
        }
        guard let url = json["url"]?.stringValue, URLParts.isTransferURL(url) else { throw Problem("'url' must be an http(s) URL") }
        guard let sha = json["sha256"]?.stringValue, sha.utf8.count == 64, sha.allSatisfy(\.isHexDigit) else {
            throw Problem("'sha256' must be 64 hex digits")
        }
        let package = json["package"]?.stringValue
        if let package, !UpdateRequest.isValidPackage(package) { throw Problem("'package' is not a Debian package name") }
        let service = json["service"]?.stringValue
        if let service, !UpdateRequest.isValidUnit(service) { throw Problem("'service' is not a systemd unit name") }
        var check: [String] = []
        if let c = json["check"], !c.isNull {
            guard let text = c.stringValue, !text.isEmpty, text.utf8.count <= 1024 else { throw Problem("'check' must be a shell command of at most 1024 bytes") }
            check = ["/bin/sh", "-c", text]
        }
        func seconds(_ key: String, _ fallback: Duration) throws(Problem) -> Double {
            guard let v = json[key], !v.isNull else { return fallback.seconds }
            if let d = v.doubleValue, d.isFinite, d >= 0 { return d }
            if let s = v.stringValue, let d = DurationText.parse(s) { return d.seconds }
            throw Problem("'\(key)' must be seconds or a duration such as \"30s\"")
        }
        let healthFor = try seconds("health_for", defaults.healthFor)
        let within = try seconds("check_within", defaults.checkWithin)
        guard within > healthFor else { throw Problem("'check_within' must be longer than 'health_for'") }
        var installBy: Double?
        if let v = json["install_by"], !v.isNull {
            guard let t = v.doubleValue, t.isFinite else { throw Problem("'install_by' must be a Unix time") }
            installBy = t
        }
        let request = UpdateRequest(
            id: id, service: service, check: check, healthFor: healthFor, checkWithin: within, package: package, installBy: installBy)
        return UpdateNotice(request: request, url: url, sha256: sha.lowercased(), discretionary: json["discretionary"]?.boolValue ?? false)
    }
}
