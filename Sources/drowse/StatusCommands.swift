import ArgumentParser
import DrowseCore

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The agent, MQTT connection, conditions, next wake window.")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let s = try global.call("GET", "/v1/status")
        if json { printJSON(s); return }
        say("drowsed \(s["version"]?.stringValue ?? "?") on device \(s["device_id"]?.stringValue ?? "?")")
        let m = s["mqtt"]
        if m?["configured"]?.boolValue == true {
            say("mqtt:        \(m?["connected"]?.boolValue == true ? "connected" : "not connected") (\(m?["url"]?.stringValue ?? ""))")
        } else {
            say("mqtt:        not configured")
        }
        if let c = s["conditions"] { say("conditions:  \(ConditionsCommand.summary(c))") }
        let apps = s["next_window_apps"]?.arrayValue?.compactMap(\.stringValue) ?? []
        say("next window: \(Human.when(s["next_window"]?.doubleValue))\(apps.isEmpty ? "" : " (" + apps.joined(separator: ", ") + ")")")
        say("apps:        \(s["apps"]?.intValue ?? 0) valid, \(s["invalid_apps"]?.intValue ?? 0) invalid")
        if let l = s["lifecycle"] {
            let where_ = l["cgroup"]?.stringValue.map { " (\($0))" } ?? ""
            say("suspension:  \(l["suspension"]?.stringValue ?? "?")\(where_)")
            say("memory:      pressure \(l["memory_pressure"]?.stringValue ?? "?")")
        }
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

    static func summary(_ c: JSON) -> String {
        var power = c["power_source"]?.stringValue ?? "unknown"
        if let b = c["battery_percent"]?.intValue { power += ", battery \(b)%" + (c["charging"]?.boolValue == true ? " charging" : "") }
        var net = c["network"]?.stringValue ?? "none"
        if let i = c["interface"]?.stringValue { net += " (\(i))" }
        if c["metered"]?.boolValue == true { net += ", metered" }
        return "power \(power); network \(net)"
    }
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
            say("APP".padded(16) + "STATE".padded(24) + "RESULT".padded(10) + "LAST FETCH".padded(14) + "NEXT FETCH".padded(14) + "WHY")
            for a in apps.arrayValue ?? [] {
                let id = a["id"]?.stringValue ?? "?"
                if a["valid"]?.boolValue == false {
                    say(id.padded(16) + "INVALID: " + (a["error"]?.stringValue ?? ""))
                    continue
                }
                say(id.padded(16) + Apps.state(a).padded(24) + (a["last_result"]?.stringValue ?? "—").padded(10) + Human.when(a["last_fetch"]?.doubleValue).padded(14)
                      + Human.when(a["next_fetch"]?.doubleValue).padded(14) + (a["next_fetch_reason"]?.stringValue ?? ""))
            }
        }
    }

    /// "suspended (idle)", "background (event)", "—".
    static func state(_ a: JSON) -> String {
        guard let s = a["state"]?.stringValue else { return "—" }
        guard let r = a["state_reason"]?.stringValue, !r.isEmpty else { return s }
        return "\(s) (\(r))"
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One app in detail, with its recent runs.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Print JSON.") var json = false
        @Argument(help: "App id.") var id: String

        func run() throws {
            let a = try global.call("GET", "/v1/apps/\(id)")
            if json { printJSON(a); return }
            say("app \(a["id"]?.stringValue ?? id)  (\(a["file"]?.stringValue ?? ""))")
            if a["valid"]?.boolValue == false { say("INVALID: \(a["error"]?.stringValue ?? "")"); return }
            say("state:            \(Apps.state(a)) since \(Human.when(a["state_since"]?.doubleValue))"
                  + (a["resident"]?.boolValue == true ? ", resident" : ""))
            say("minimum interval: \(a["minimum_interval"]?.stringValue ?? "?")")
            say("last result:      \(a["last_result"]?.stringValue ?? "—") (\(Human.when(a["last_fetch"]?.doubleValue)))")
            say("next fetch:       \(Human.when(a["next_fetch"]?.doubleValue)) — \(a["next_fetch_reason"]?.stringValue ?? "")")
            if let l = a["limits"], l["processes_enforced_by"] != nil {
                let procs = l["processes"]?.doubleValue.map { String(Int($0)) } ?? "unlimited"
                say("limits:           processes \(procs) (\(l["processes_enforced_by"]?.stringValue ?? "?")), "
                      + "memory \(l["memory_text"]?.stringValue ?? "?") (\(l["memory_enforced_by"]?.stringValue ?? "?"))")
            }
            let history = a["history"]?.arrayValue ?? []
            if !history.isEmpty {
                say("recent runs:")
                for r in history.prefix(10) {
                    say("  \(Human.when(r["started_at"]?.doubleValue).padded(12))\((r["event"]?.stringValue ?? "").padded(14))\((r["result"]?.stringValue ?? "").padded(10))\(r["ending"]?.stringValue ?? "")")
                }
            }
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
        say("\(id): \(r["result"]?.stringValue ?? "?") (\(r["ending"]?.stringValue ?? ""))")
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
        say("\(id): cancelled \(r["cancelled_transfers"]?.intValue ?? 0) transfer(s)")
    }
}
