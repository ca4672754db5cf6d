#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCore
import DrowseMQTT
import DrowseSystem

/// The broker and its credentials, as `drowse push` and `drowse fleet` take them.
struct BrokerOptions: ParsableArguments {
    @Option(help: "Broker URL, mqtt:// or mqtts://.") var broker: String
    @Option(help: "Topic prefix.") var prefix = "drowse"
    @Option(help: "CA file for mqtts://.") var cafile: String?
    @Option(help: "Client certificate for mqtts://.") var cert: String?
    @Option(help: "Client key for mqtts://.") var key: String?
    @Option(help: "Username.") var username: String?
    @Option(help: "File holding the password.") var passwordFile: String?

    func address() throws -> MainConfig.BrokerAddress {
        // Refused rather than used: a password on the command line is visible to every local
        // user in /proc/PID/cmdline, and libmosquitto would not read it from the URL anyway.
        if URLParts.parse(broker)?.hasUserInfo == true {
            throw CLIError("--broker '\(URLParts.redacting(broker))' carries a user name or password: use --username and --password-file")
        }
        guard let b = MainConfig.BrokerAddress.parse(broker) else { throw CLIError("--broker must be an mqtt:// or mqtts:// URL") }
        return b
    }

    func password() throws -> String? {
        guard let f = passwordFile else { return nil }
        return String(try FileSystem.readText(f).trimmingSpaces())
    }

    /// The devices' statuses as the broker has them now (`drowse fleet`, `drowse push --stages`):
    /// the retained ones, and with `rollCall` the online devices' answers; with `session`, also
    /// what the session's earlier listings kept and what the broker queued for it since (the
    /// wills of devices that went away). Newest wins.
    func fleetListing(target: MainConfig.BrokerAddress, password: String?, rollCall: Bool, timeout: Double,
                      session: FleetSession? = nil, forget: [String] = []) throws -> FleetListing {
        var listing = FleetListing()
        if let session {
            if let memory = try session.load(prefix: prefix) { listing.remember(memory, prefix: prefix) }
            for id in forget { listing.forget(id) }
        }
        let collected: MQTTRetainedReader.Collected
        do {
            collected = try MQTTRetainedReader.collect(
                host: target.host, port: target.port, tls: target.tls, caFile: cafile, certFile: cert, keyFile: key,
                username: username, password: password, filter: Topics.allStatuses(prefix: prefix),
                rollCall: rollCall ? Topics.rollCall(prefix: prefix) : nil,
                session: session.map { MQTTRetainedReader.Session(clientID: $0.clientID, markTopic: Topics.listingMark(prefix: prefix, session: $0.name)) },
                quiet: rollCall ? 1 : 0.5, timeout: timeout)
        } catch {
            throw CLIError(error.description)
        }
        for m in collected.messages { listing.received(topic: m.topic, payload: m.payload, prefix: prefix, retained: m.retained) }
        if let session {
            // Saved before anything else can fail: the broker handed these over once.
            try session.save(listing.memory, prefix: prefix)
            if !collected.complete {
                StandardStream.error("drowse: warning: the broker had not handed over all it kept for session '\(session.name)' within the timeout; the rest comes with the next listing\n")
            }
        }
        return listing
    }

    /// Ends `session` on the broker and removes this machine's copy of it.
    func endSession(_ session: FleetSession, target: MainConfig.BrokerAddress, password: String?, timeout: Double) throws {
        do {
            try MQTTRetainedReader.endSession(host: target.host, port: target.port, tls: target.tls, caFile: cafile, certFile: cert,
                                              keyFile: key, username: username, password: password, clientID: session.clientID, timeout: timeout)
        } catch {
            throw CLIError(error.description)
        }
        try session.remove()
    }
}

/// `drowse fleet --session NAME`: a listing that remembers. The broker keeps a persistent session
/// (client id `drowse-fleet-NAME`, subscribed to every status) and queues every status and last
/// will published while no listing runs; this machine keeps the newest status of each device seen
/// in `$XDG_STATE_HOME/drowse/fleet/NAME.json` (default `~/.local/state/…`). Together they list
/// devices that went offline since, on a broker that does not hand out retained statuses to a
/// wildcard (RabbitMQ; docs/fleets.md).
struct FleetSession {
    var name: String
    var dir: String
    var file: String

    var clientID: String { "drowse-fleet-\(name)" }

    init(name: String) throws {
        guard Identifier.isValid(name) else {
            throw CLIError("--session '\(name)': 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'")
        }
        self.name = name
        let base: String
        if let x = getenv("XDG_STATE_HOME"), x.pointee == UInt8(ascii: "/") {
            base = String(cString: x)
        } else if let h = getenv("HOME"), h.pointee != 0 {
            base = String(cString: h) + "/.local/state"
        } else {
            throw CLIError("--session: neither XDG_STATE_HOME nor HOME is set, so there is nowhere to keep the listing")
        }
        dir = "\(base)/drowse/fleet"
        file = "\(dir)/\(name).json"
    }

    /// The earlier listings' memory, or nil before the first; one made for another topic
    /// prefix is refused, not mixed in.
    func load(prefix: String) throws -> JSON? {
        guard FileSystem.exists(file) else { return nil }
        let memory: JSON
        do {
            memory = try JSON.parse(bytes: FileSystem.readFile(file, limit: 64 << 20), maxDepth: 16)
        } catch {
            throw CLIError("cannot read session '\(name)' (\(file)): \(error); --end-session starts it afresh")
        }
        if let p = memory["prefix"]?.stringValue, p != prefix {
            throw CLIError("session '\(name)' lists the devices under --prefix '\(p)', not '\(prefix)'")
        }
        return memory
    }

    func save(_ memory: JSON, prefix: String) throws {
        guard case .object(let members) = memory else { return }
        do {
            try FileSystem.makeDirectories(dir, mode: 0o700)
            try FileSystem.writeAtomically(file, Array(JSON.object([("prefix", .string(prefix))] + members).pretty.utf8), mode: 0o600)
        } catch {
            throw CLIError("cannot keep session '\(name)' in \(file): \(error)")
        }
    }

    func remove() throws {
        do { _ = try FileSystem.remove(file) } catch { throw CLIError("cannot remove \(file): \(error)") }
    }
}
