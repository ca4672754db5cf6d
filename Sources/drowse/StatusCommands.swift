import ArgumentParser
import DrowseCLIFormat
import DrowseCore

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The agent, MQTT connection, conditions, next wake window.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let s = try global.call("GET", "/v1/status")
        if json { printJSON(s); return }
        for line in StatusText.status(s, now: Human.now()) { say(line) }
    }
}

struct ConditionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "conditions", abstract: "Power source, battery, network kind, metered.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false
    @Flag(help: "Re-read power and network now.") var refresh = false

    func run() throws {
        let c = try global.call(refresh ? "POST" : "GET", refresh ? "/v1/conditions/refresh" : "/v1/conditions")
        if json { printJSON(c); return }
        say(Self.summary(c))
    }

    static func summary(_ c: JSON) -> String { StatusText.conditions(c) }
}

struct Apps: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apps, their state, last results, next planned fetch and why.",
        subcommands: [List.self, Show.self], defaultSubcommand: List.self)

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the apps.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let apps = try global.call("GET", "/v1/apps")
            if json { printJSON(apps); return }
            for line in StatusText.apps(apps, now: Human.now()) { say(line) }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One app in detail, with its recent runs.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Print JSON.") var json = false
        @Argument(help: "App id.") var id: String

        func run() throws {
            let a = try global.call("GET", "/v1/apps/\(id)")
            if json { printJSON(a); return }
            for line in StatusText.app(a, id: id, now: Human.now()) { say(line) }
        }
    }
}

struct Fetch: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run an app's fetch handler now and wait for its result.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false
    @Argument(help: "App id.") var id: String

    func run() throws {
        let r = try global.call("POST", "/v1/apps/\(id)/fetch")
        if json { printJSON(r); return }
        let end = APIWire.FetchResult(json: r).end
        say("\(id): \(end.result ?? "?") (\(end.ending ?? ""))")
    }
}

struct Used: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Record that an app's data was just used.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "App id.") var id: String

    func run() throws { _ = try global.call("POST", "/v1/apps/\(id)/used") }
}

struct Quit: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Force-quit an app: cancel its unfinished transfers.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "App id.") var id: String

    func run() throws {
        let r = try global.call("POST", "/v1/apps/\(id)/quit")
        say("\(id): cancelled \(APIWire.QuitAnswer(json: r).cancelledTransfers ?? 0) transfer(s)")
    }
}
