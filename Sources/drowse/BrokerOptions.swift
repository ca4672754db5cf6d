import ArgumentParser
import DrowseCore
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
}
