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
            Reads the retained status every device keeps at <prefix>/<device_id>/status; with --roll-call, \
            also asks the online devices (those with [mqtt] roll_call) to publish it again, which a broker \
            that keeps retained messages per node needs (RabbitMQ). With --session NAME, the broker keeps a \
            persistent session for the listing and queues every status and last will meanwhile, and this \
            machine keeps the newest status of each device seen, so devices that went offline since are \
            listed too. The newest copy of each wins. Example:
            drowse fleet --broker mqtts://mqtt.example.org:8883 --cafile ca.crt --cert provider.crt --key provider.key --group eu
            """)

    @OptionGroup var connection: BrokerOptions
    @Option(help: "Only devices that report being in this group.") var group: String?
    @Flag(help: "Print a JSON array.") var json = false
    @Option(help: "Give up waiting for the broker after this long (e.g. 10s).") var timeout = "10s"
    @Flag(help: "Publish a roll call: online devices with [mqtt] roll_call publish their status again.") var rollCall = false
    @Option(help: "Keep a persistent session on the broker and the listing on this machine under this name (letters, digits, -, _ and .).")
    var session: String?
    @Option(help: "With --session: leave this device out until it is heard from again (repeatable).") var forget: [String] = []
    @Flag(help: "With --session: end the session on the broker and remove this machine's copy.") var endSession = false

    func run() throws {
        let target = try connection.address()
        guard let limit = DurationText.parse(timeout), limit > .zero else { throw CLIError("--timeout '\(timeout)' is not a duration") }
        let password = try connection.password()
        let kept = try session.map { try FleetSession(name: $0) }
        if kept == nil, endSession || !forget.isEmpty { throw CLIError("--end-session and --forget need --session") }
        if let kept, endSession {
            try connection.endSession(kept, target: target, password: password, timeout: limit.seconds)
            say("session '\(kept.name)' ended")
            return
        }
        let listing = try connection.fleetListing(target: target, password: password, rollCall: rollCall, timeout: limit.seconds,
                                                  session: kept, forget: forget)
        let devices = listing.list(group: group)
        if json {
            printJSON(.array(devices.map(\.json)))
        } else {
            for line in FleetListing.lines(devices, now: WallClock.now()) { say(line) }
        }
    }
}
