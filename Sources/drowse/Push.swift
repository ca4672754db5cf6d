#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCore
import DrowseMQTT
import DrowseSystem

struct Push: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a notification to a device's app (the provider side).",
        discussion: "Example: drowse push --broker mqtt://127.0.0.1:1883 --device pi-kitchen --app weather --silent -d content-id=42")

    @OptionGroup var connection: BrokerOptions
    @Option(help: "Device id (or --group).") var device: String?
    @Option(help: "Group: every device with it in [mqtt] groups gets the notification (or --device).") var group: String?
    @Option(help: "App id.") var app: String
    @Flag(help: "A silent notification: aps.content-available = 1.") var silent = false
    @Option(name: .customShort("d"), help: "Add key=value to the payload (numbers, true/false and null stay JSON).") var data: [String] = []
    @Option(help: "Notification id (for dedupe).") var id: String?
    @Option(help: "Collapse id: pending notifications with the same one keep only the newest.") var collapseId: String?
    @Option(help: "Priority: 10 now, 5 may wait for a wake window.") var priority: Int?
    @Option(help: "Expiration, Unix time.") var expiration: Double?
    @Option(help: "Staged rollout: each device acts at its own delay in [0, SPREAD) seconds (0 to 86400).") var spread: Double?
    @Option(help: "A whole JSON payload instead of building one.") var payload: String?
    @Flag(help: "Print the payload that would be published, and publish nothing.") var dryRun = false
    @Option(help: "Sign with this private key (from `drowse keygen`): the payload becomes a JWS (EdDSA).") var sign: String?
    @Option(help: "With --group: a rollout in stages, cumulative shares of the group's devices, e.g. 5%,100%; each stage is sent to its devices' own topics once the one before is over (every device's update final, or --stage-timeout).") var stages: String?
    @Option(help: "With --stages: stop when this many devices of a stage report the update failed or rolled-back.") var abortAfter = 1
    @Option(help: "With --stages: how long a stage may take before the next one starts anyway (e.g. 1h).") var stageTimeout = "1h"
    @Option(help: "With --stages: how often to read the devices' statuses (e.g. 5s).") var checkEvery = "5s"
    @Flag(help: "With --stages: find the devices with a roll call too (see `drowse fleet --roll-call`).") var rollCall = false

    func validate() throws {
        guard (device == nil) != (group == nil) else { throw ValidationError("give one of --device and --group") }
        if let group, !MainConfig.isValidGroup(group) { throw ValidationError("--group '\(group)' holds '/', '+', '#' or NUL, or is empty") }
        // A whole payload is sent as given: a spread left out of it silently would start the
        // whole fleet at once, the load spike it is there to prevent.
        if payload != nil, spread != nil { throw ValidationError("--spread goes with the payload options, not --payload: put \"spread\" in the payload") }
        if let stages {
            guard group != nil else { throw ValidationError("--stages goes with --group") }
            guard RolloutPlan.parseShares(stages) != nil else { throw ValidationError("--stages '\(stages)' is not increasing percentages ending at 100%, e.g. 5%,100%") }
            guard abortAfter >= 1 else { throw ValidationError("--abort-after must be at least 1") }
            for (name, text) in [("--stage-timeout", stageTimeout), ("--check-every", checkEvery)] where (DurationText.parse(text) ?? .zero) <= .zero {
                throw ValidationError("\(name) '\(text)' is not a duration")
            }
        }
    }

    func run() throws {
        let target = try connection.address()
        var body: [UInt8]
        // A staged rollout matches the devices' update reports to the push by its id.
        var rolloutID: String?
        if let payload {
            body = Array(payload.utf8)
            if stages != nil {
                guard let given = (try? JSON.parse(payload))?["id"]?.stringValue, !given.isEmpty else {
                    throw CLIError("--stages needs the payload's \"id\": the devices' update reports name it")
                }
                rolloutID = given
            }
        } else {
            var members: [(String, JSON)] = []
            if silent { members.append(("aps", .object([("content-available", 1)]))) }
            for item in data {
                guard let eq = item.firstIndex(of: "=") else { throw CLIError("-d takes key=value, got '\(item)'") }
                let k = String(item[..<eq])
                let v = String(item[item.index(after: eq)...])
                let value: JSON
                if let parsed = try? JSON.parse(v), !(parsed.arrayValue != nil) || v.hasPrefix("[") { value = parsed } else { value = .string(v) }
                members.append((k, value))
            }
            if stages != nil {
                rolloutID = id ?? "rollout-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
                if id == nil { say("rollout id \(rolloutID!)") }
            }
            if let id = rolloutID ?? id { members.append(("id", .string(id))) }
            if let collapseId { members.append(("collapse-id", .string(collapseId))) }
            if let priority { members.append(("priority", JSON(priority))) }
            if let expiration { members.append(("expiration", .number(expiration))) }
            if let spread {
                guard spread.isFinite, spread >= 0, spread <= RolloutDelay.maxSpread else { throw CLIError("--spread must be 0 to 86400 seconds") }
                members.append(("spread", .number(spread)))
            }
            body = Array(JSON.object(members).serialized.utf8)
        }
        if let sign {
            let text: String
            do { text = String(try FileSystem.readText(sign, limit: 4096).trimmingSpaces()) } catch { throw CLIError("\(error)") }
            guard let key = Base64.decode(text), key.count == 32 else { throw CLIError("\(sign) does not hold a base64 Ed25519 private key") }
            let input = JWS.signingInput(payload: body)
            guard let sig = Ed25519.sign(Array(input.utf8), privateKey: key) else { throw CLIError("signing failed") }
            body = Array((input + "." + Base64.encode(sig, urlSafe: true, padding: false)).utf8)
        }
        if dryRun {
            StandardStream.output(String(decoding: body, as: UTF8.self) + "\n")
            return
        }
        let password = try connection.password()
        if let stages, let group, let rolloutID, let shares = RolloutPlan.parseShares(stages) {
            try rollout(target: target, password: password, group: group, id: rolloutID, shares: shares, body: body)
            return
        }
        let topic = group.map { Topics.groupNotify(prefix: connection.prefix, group: $0, app: app) }
            ?? Topics.notify(prefix: connection.prefix, device: device ?? "", app: app)
        do {
            try MQTTPublisher.publishOnce(
                host: target.host, port: target.port, tls: target.tls, caFile: connection.cafile, certFile: connection.cert,
                keyFile: connection.key, username: connection.username, password: password, topic: topic, payload: body)
        } catch {
            throw CLIError(error.description)
        }
        say("published \(body.count) bytes to \(topic)")
    }
}

extension Push {
    /// `--stages`: the group's devices (from their fleet statuses) in stages, each stage published
    /// to its devices' own topics and watched in their statuses until it is over (`RolloutPlan`).
    func rollout(target: MainConfig.BrokerAddress, password: String?, group: String, id: String, shares: [Double], body: [UInt8]) throws {
        let limit = DurationText.parse(stageTimeout)!.seconds
        let every = DurationText.parse(checkEvery)!.seconds
        let devices = try connection.fleetListing(target: target, password: password, rollCall: rollCall, timeout: 10).list(group: group).map(\.id)
        guard !devices.isEmpty else { throw CLIError("no device reports being in group '\(group)': nothing to roll out") }
        let plan = RolloutPlan(id: id, devices: devices, shares: shares, abortAfter: abortAfter)
        say("rollout \(id): \(devices.count) devices in group \(group), stages of \(plan.stages.map { String($0.count) }.joined(separator: ", "))")
        for (i, stage) in plan.stages.enumerated() {
            do {
                try MQTTPublisher.publish(
                    host: target.host, port: target.port, tls: target.tls, caFile: connection.cafile, certFile: connection.cert,
                    keyFile: connection.key, username: connection.username, password: password,
                    messages: stage.map { (Topics.notify(prefix: connection.prefix, device: $0, app: app), body) }, timeout: 30)
            } catch {
                throw CLIError("stage \(i + 1): \(error.description)")
            }
            say("stage \(i + 1) of \(plan.stages.count): published to \(stage.count) devices: \(stage.joined(separator: " "))")
            let end = WallClock.monotonic() + limit
            while true {
                let listing = try connection.fleetListing(target: target, password: password, rollCall: rollCall, timeout: 10)
                var reports: [String: UpdateReport] = [:]
                for d in stage { reports[d] = plan.report(in: listing.devices[d]?.status) }
                switch plan.decide(stage: i, reports: reports, timedOut: WallClock.monotonic() >= end) {
                case .wait:
                    usleep(UInt32(min(every, 60) * 1_000_000))
                    continue
                case .next(let silent), .done(let silent):
                    let failed = stage.filter { reports[$0]?.state.isFailure == true }
                    say("stage \(i + 1) over: \(stage.count - failed.count - silent.count) committed, \(failed.count) failed or rolled back"
                        + (silent.isEmpty ? "" : ", no final state from \(silent.joined(separator: " "))"))
                case .abort(let failed):
                    let why = failed.map { d in
                        let r = reports[d]!
                        return "\(d): \(r.state.rawValue)" + (r.reason.map { " (\($0))" } ?? "")
                    }
                    let left = plan.untouched(after: i)
                    throw CLIError("rollout \(id) stopped at stage \(i + 1) of \(plan.stages.count): \(failed.count) devices failed or rolled back (--abort-after \(abortAfter)): "
                        + why.joined(separator: "; ") + "; \(left.count) devices received nothing")
                }
                break
            }
        }
        say("rollout \(id) done")
    }
}

struct Keygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write an Ed25519 key pair: OUT (private, base64, mode 0600) and OUT.pub (the base64 public key).",
        discussion: "Put the contents of OUT.pub in the app's notification.public_key; sign with `drowse push --sign OUT`.")

    @Argument(help: "Where to write the private key.") var out: String

    func run() throws {
        guard let (priv, pub) = Ed25519.generate() else { throw CLIError("key generation failed") }
        do {
            try FileSystem.writeAtomically(out, Array((Base64.encode(priv) + "\n").utf8), mode: 0o600)
            try FileSystem.writeAtomically(out + ".pub", Array((Base64.encode(pub) + "\n").utf8), mode: 0o644)
        } catch {
            throw CLIError("\(error)")
        }
        say(Base64.encode(pub))
    }
}
