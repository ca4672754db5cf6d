import ArgumentParser
import DrowseCore
import DrowseMQTT
import DrowseSystem

/// `drowse fleet`: the devices' retained status messages, one line (or JSON object) per device.
struct FleetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet",
        abstract: "List the devices that report to a broker: online or not, version, last seen, failing apps.",
        discussion: """
            Reads the retained status every device keeps at <prefix>/<device_id>/status. Example:
            drowse fleet --broker mqtts://mqtt.example.org:8883 --cafile ca.crt --cert provider.crt --key provider.key --group eu
            """)

    @OptionGroup var connection: BrokerOptions
    @Option(help: "Only devices that report being in this group.") var group: String?
    @Flag(help: "Print a JSON array.") var json = false
    @Option(help: "Give up waiting for the broker after this long (e.g. 10s).") var timeout = "10s"

    func run() throws {
        let target = try connection.address()
        guard let limit = DurationText.parse(timeout), limit > .zero else { throw CLIError("--timeout '\(timeout)' is not a duration") }
        let password = try connection.password()
        let messages: [(topic: String, payload: [UInt8])]
        do {
            messages = try MQTTRetainedReader.collect(
                host: target.host, port: target.port, tls: target.tls, caFile: connection.cafile, certFile: connection.cert,
                keyFile: connection.key, username: connection.username, password: password,
                filter: Topics.allStatuses(prefix: connection.prefix), timeout: limit.seconds)
        } catch {
            throw CLIError(error.description)
        }
        var listing = FleetListing()
        for m in messages { listing.received(topic: m.topic, payload: m.payload, prefix: connection.prefix) }
        let devices = listing.list(group: group)
        if json {
            printJSON(.array(devices.map(\.json)))
        } else {
            for line in FleetListing.lines(devices, now: WallClock.now()) { say(line) }
        }
    }
}
