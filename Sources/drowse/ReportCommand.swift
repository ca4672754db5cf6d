import ArgumentParser
import DrowseCore

/// `drowse report --app ID KEY=VALUE…`: what the app says of itself for the fleet (e.g. the
/// version it now runs), published in the device's retained status under `reports`.
struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Report facts about an app (e.g. version=1.2) in the device's fleet status.",
        discussion: """
            The report replaces the app's last one and is kept across restarts. At most \(AppReport.maxFields) fields; \
            keys are a-z, 0-9, '_', '-' and '.'. With no fields the report is cleared.
            """)
    @OptionGroup var global: GlobalOptions
    @OptionGroup var appOption: AppOption
    var app: String { appOption.id }
    @Flag(help: "Print JSON.") var json = false
    @Argument(help: "KEY=VALUE fields.") var fields: [String] = []

    func run() throws {
        var members: [(String, JSON)] = []
        for f in fields {
            guard let eq = f.firstIndex(of: "=") else { throw CLIError("'\(f.prefix(64))' is not KEY=VALUE") }
            members.append((String(f[..<eq]), .string(String(f[f.index(after: eq)...]))))
        }
        let r = try global.call("POST", "/v1/apps/\(app)/report", body: .object(members))
        if json { printJSON(r) }
    }
}
