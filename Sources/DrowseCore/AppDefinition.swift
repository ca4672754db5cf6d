/// How often an app wants its fetch handler run (`fetch.minimum_interval`).
package enum FetchInterval: Sendable, Equatable, CustomStringConvertible {
    /// Never fetched in the background (the default, as on iOS).
    case never
    /// As often as the planner allows.
    case minimum
    case every(Duration)

    package var description: String {
        switch self {
        case .never: "never"
        case .minimum: "minimum"
        case .every(let d): DurationText.format(d)
        }
    }
}

/// `apps.d/<id>.toml` (docs/contract.md, "App definition").
package struct AppDefinition: Sendable, Equatable {
    package var id: String
    package var file: String
    /// The line of `id = ...`, for errors about the id that only show beside other files.
    package var idLine: Int?
    package var user: String?
    package var workingDirectory: String?
    package var fetchCommand: [String]?
    package var fetchInterval: FetchInterval
    package var notificationCommand: [String]?
    package var notificationPublicKey: String?
    package var allowDownload: Bool
    package var eventsCommand: [String]?
    package var sendsLaunchEvents: Bool
    /// `[process] command`: a resident app's long-running process; its events go to its stream.
    package var processCommand: [String]? = nil
    /// `[process] always_active`: never suspended.
    package var alwaysActive = false
    /// `[limits]`: overrides of drowse.toml's `[limits]` for this app.
    package var limits = AppLimits.Setting()
    /// `[process] allow_privilege_gain`: the app's processes may gain privileges through setuid
    /// programs or file capabilities (no `no_new_privs`). Only for an app whose user is not root.
    package var allowPrivilegeGain = false

    package var isResident: Bool { processCommand != nil }

    /// The command for an event kind, with the contract's fallbacks.
    package func command(for event: HandlerEvent) -> [String]? {
        switch event {
        case .fetch: fetchCommand
        case .notification: notificationCommand ?? fetchCommand
        case .transfers: eventsCommand
        case .resident: processCommand
        }
    }

    package static func parse(_ text: String, file: String) throws(ConfigError) -> AppDefinition {
        let table: TOMLTable
        do { table = try TOMLParser.parse(text) } catch {
            throw ConfigError(file: file, line: error.line, problem: error.reason)
        }
        let dir = ConfigPath.directory(of: file)
        var r = TableReader(table, file: file)
        guard let id = try r.string("id") else { throw r.error("id", "missing") }
        guard Identifier.isValid(id) else { throw r.error("id", "'\(id)' may hold only letters, digits, '-', '_' and '.'") }
        let user = try r.string("user")
        let wd = try r.string("working_directory").map { ConfigPath.resolve($0, relativeTo: dir) }

        var fetchCommand: [String]?
        var interval = FetchInterval.never
        if var f = try r.table("fetch") {
            fetchCommand = try f.command("command")
            if let s = try f.string("minimum_interval") {
                switch s {
                case "never": interval = .never
                case "minimum": interval = .minimum
                default:
                    guard let d = DurationText.parse(s), d > .zero else {
                        throw f.error("minimum_interval", "'\(s)' is not \"minimum\", \"never\" or a duration like \"15m\"")
                    }
                    interval = .every(d)
                }
            }
            try f.rejectUnknown()
            if interval != .never, fetchCommand == nil, !Self.hasProcessCommand(table) {
                throw f.error("command", "missing, but minimum_interval asks for fetches (and there is no [process] to send them to)")
            }
        }
        var notificationCommand: [String]?
        var publicKey: String?
        var allowDownload = false
        if var n = try r.table("notification") {
            notificationCommand = try n.command("command")
            publicKey = try n.string("public_key")
            if let k = publicKey, Base64.decode(k)?.count != 32 {
                throw n.error("public_key", "expected the base64 of a raw 32-byte Ed25519 public key")
            }
            allowDownload = try n.bool("allow_download") ?? false
            try n.rejectUnknown()
        }
        var events: [String]?
        var launchEvents = true
        if var t = try r.table("transfers") {
            events = try t.command("events_command")
            launchEvents = try t.bool("sends_launch_events") ?? true
            try t.rejectUnknown()
        }
        var process: [String]?
        var alwaysActive = false
        var allowPrivilegeGain = false
        if var p = try r.table("process") {
            // A [process] of only allow_privilege_gain applies to handlers; anything else is a resident process.
            allowPrivilegeGain = try p.bool("allow_privilege_gain") ?? false
            if let c = try p.command("command") {
                process = c
                alwaysActive = try p.bool("always_active") ?? false
            } else if try p.bool("always_active") != nil {
                throw p.error("command", "missing: [process] needs the command to run")
            }
            try p.rejectUnknown()
        }
        var limits = AppLimits.Setting()
        if var l = try r.table("limits") {
            limits = try l.limits()
            try l.rejectUnknown()
        }
        try r.rejectUnknown()
        func resolved(_ argv: [String]?) -> [String]? {
            guard var argv else { return nil }
            // "./x" and "x/y" are relative to the app file's folder unless a working directory is set.
            if argv[0].contains("/"), !argv[0].hasPrefix("/") { argv[0] = ConfigPath.resolve(argv[0], relativeTo: wd ?? dir) }
            return argv
        }
        return AppDefinition(
            id: id, file: file, idLine: table.line(of: "id"), user: user, workingDirectory: wd, fetchCommand: resolved(fetchCommand),
            fetchInterval: interval, notificationCommand: resolved(notificationCommand),
            notificationPublicKey: publicKey, allowDownload: allowDownload, eventsCommand: resolved(events),
            sendsLaunchEvents: launchEvents, processCommand: resolved(process), alwaysActive: alwaysActive, limits: limits,
            allowPrivilegeGain: allowPrivilegeGain)
    }
}

extension AppDefinition {
    /// Whether the file has `[process] command` (a [process] of only allow_privilege_gain does not
    /// make a resident app).
    static func hasProcessCommand(_ table: TOMLTable) -> Bool {
        guard case .table(let p)? = table["process"] else { return false }
        return p["command"] != nil
    }
}

/// What started a handler run (`trigger` in `drowse apps show` and the run history).
package enum RunTrigger: String, Sendable, CaseIterable {
    /// A fetch window the scheduler opened.
    case scheduled
    /// `drowse fetch`.
    case manual
    case notification
    /// A transfer session's end, for the app's events handler.
    case transfers
    /// A background task that overran its allowance (recorded as a failed fetch).
    case taskOverrun = "task-overrun"
}

/// The events a handler is launched for (`DROWSE_EVENT`).
package enum HandlerEvent: String, Sendable, CaseIterable {
    case fetch, notification, transfers
    /// A resident app's long-running process (`[process] command`), not an event handler.
    case resident
}
