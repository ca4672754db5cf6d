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
    /// the retained ones, and with `rollCall` the online devices' answers; newest wins.
    func fleetListing(target: MainConfig.BrokerAddress, password: String?, rollCall: Bool, timeout: Double) throws -> FleetListing {
        let messages: [MQTTRetainedReader.Message]
        do {
            messages = try MQTTRetainedReader.collect(
                host: target.host, port: target.port, tls: target.tls, caFile: cafile, certFile: cert, keyFile: key,
                username: username, password: password, filter: Topics.allStatuses(prefix: prefix),
                rollCall: rollCall ? Topics.rollCall(prefix: prefix) : nil, quiet: rollCall ? 1 : 0.5, timeout: timeout)
        } catch {
            throw CLIError(error.description)
        }
        var listing = FleetListing()
        for m in messages { listing.received(topic: m.topic, payload: m.payload, prefix: prefix, retained: m.retained) }
        return listing
    }
}
