#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCLIFormat
import DrowseCore
import DrowseSystem

struct TransferCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transfer", abstract: "Background downloads and uploads owned by drowsed.",
        subcommands: [Download.self, Upload.self, Show.self, Cancel.self, Wait.self])

    struct Download: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Queue a download; prints its id.")
        @OptionGroup var global: GlobalOptions
        @Argument(help: "http or https URL.") var url: String
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Option(help: "Session name (events are delivered per session).") var session = "default"
        @Option(help: "Put the verified file here (absolute path).") var to: String?
        @Option(help: "Expected SHA-256 (hex).") var sha256: String?
        @Option(help: "Fail if not finished within this long (default 7d).") var timeoutResource: String?
        @OptionGroup var conditions: ConditionFlags
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            guard URLParts.isTransferURL(url) else { throw CLIError("only http and https URLs can be transferred: '\(url)'") }
            let body = JSON.object([
                ("kind", "download"), ("url", .string(url)), ("app", .string(app)), ("session", .string(session)),
                ("to", JSON(to.map(resolved))), ("sha256", JSON(sha256)), ("timeout_resource", JSON(try timeoutSeconds(timeoutResource))),
                ("discretionary", .bool(conditions.discretionary)), ("no_cellular", .bool(conditions.noCellular)),
                ("requires_power", .bool(conditions.requiresPower)),
            ])
            try queueTransfer(body, global: global, json: json)
        }
    }

    struct Upload: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Queue an upload of FILE to URL; prints its id.")
        @OptionGroup var global: GlobalOptions
        @Argument(help: "The file to send.") var file: String
        @Argument(help: "http or https URL: the upload endpoint (tus, IETF) or the target of a PUT.") var url: String
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Option(help: "Session name (events are delivered per session).") var session = "default"
        @Option(help: "auto | ietf | ietf-3 (iOS 17's draft) | tus | put") var `protocol` = "auto"
        @Option(help: "The file's media type (tus filetype metadata, a PUT's Content-Type); default application/octet-stream.")
        var contentType: String?
        @Option(help: "Fail if not finished within this long (default 7d).") var timeoutResource: String?
        @OptionGroup var conditions: ConditionFlags
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            guard URLParts.isTransferURL(url) else { throw CLIError("only http and https URLs can be transferred: '\(url)'") }
            guard UploadProtocol(rawValue: `protocol`) != nil else { throw CLIError("--protocol is one of auto, ietf, ietf-3, tus, put") }
            var fields: [(String, JSON)] = []
            if let contentType { fields.append(("content_type", .string(contentType))) }
            let body = JSON.object(fields + [
                ("kind", "upload"), ("url", .string(url)), ("app", .string(app)), ("session", .string(session)),
                ("file", .string(resolved(file))), ("protocol", .string(`protocol`)),
                ("timeout_resource", JSON(try timeoutSeconds(timeoutResource))),
                ("discretionary", .bool(conditions.discretionary)), ("no_cellular", .bool(conditions.noCellular)),
                ("requires_power", .bool(conditions.requiresPower)),
            ])
            try queueTransfer(body, global: global, json: json)
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One transfer.")
        @OptionGroup var global: GlobalOptions
        @Argument var id: String
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let answer = try global.call("GET", "/v1/transfers/\(id)")
            if json { printJSON(answer); return }
            let t = APIWire.Transfer(json: answer)
            let shown = [
                ("id", t.id), ("app", t.app), ("session", t.session), ("kind", t.kind), ("state", t.state), ("url", t.url),
                ("reason", t.reason), ("location", t.location),
            ]
            for (label, value) in shown {
                if let v = value { say("\(label):".padded(10) + v) }
            }
            say("bytes:".padded(10) + "\(Human.bytes(t.bytesDone)) of \(Human.bytes(t.bytesTotal))")
        }
    }

    struct Cancel: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Cancel a transfer.")
        @OptionGroup var global: GlobalOptions
        @Argument var id: String

        func run() throws {
            let t = APIWire.Transfer(json: try global.call("POST", "/v1/transfers/\(id)/cancel"))
            say("\(id): \(t.state ?? "?")")
        }
    }

    struct Wait: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Wait for a transfer to finish. Exit 0 completed, 1 failed or cancelled, 2 timed out.")
        @OptionGroup var global: GlobalOptions
        @Argument var id: String
        @Option(help: "Give up after this long (e.g. 10m).") var timeout: String?

        func run() throws {
            let limit = try timeout.map { s -> Double in
                guard let d = DurationText.parse(s) else { throw CLIError("'\(s)' is not a duration") }
                return d.seconds
            }
            let start = WallClock.monotonic()
            let tty = isatty(1) == 1
            var lastLine = ""
            while true {
                // drowsed answers when the transfer finishes, or after `wait` seconds: once a
                // second for a progress bar, else twice a minute at most.
                let left = limit.map { max(0, $0 - (WallClock.monotonic() - start)) }
                let wait = min(tty ? 1 : 30, left ?? 30)
                let asked = WallClock.monotonic()
                let t = APIWire.Transfer(json: try global.call("GET", "/v1/transfers/\(id)?wait=\(wait)"))
                let state = t.state ?? "?"
                let done = t.bytesSent ?? t.bytesDone ?? 0
                let total = t.bytesTotal
                let line: String
                if tty, let total, total > 0 {
                    let width = 30
                    let filled = Int(Double(width) * Double(done) / Double(total))
                    line = "[" + String(repeating: "#", count: min(width, filled)) + String(repeating: " ", count: max(0, width - filled)) + "] "
                        + "\(Human.bytes(done)) / \(Human.bytes(total)) \(state)"
                } else {
                    line = "\(state) \(Human.bytes(done)) of \(Human.bytes(total))" + (t.reason.map { " (\($0))" } ?? "")
                }
                if tty { StandardStream.output("\r\u{1B}[K" + LogText.escape(line)) } else if line != lastLine { say(line) }
                lastLine = line
                if ["completed", "failed", "cancelled"].contains(state) {
                    if tty { say("") }
                    if state != "completed" {
                        StandardStream.error(LogText.escape("\(id): \(state)\(t.reason.map { ": \($0)" } ?? "")") + "\n")
                        throw ExitCode(1)
                    }
                    return
                }
                if let limit, WallClock.monotonic() - start > limit {
                    if tty { say("") }
                    StandardStream.error(LogText.escape("\(id): still \(state) after \(timeout ?? "")") + "\n")
                    throw ExitCode(2)
                }
                // A drowsed that does not know `wait` answers at once: ask at most 4 times a second.
                let took = WallClock.monotonic() - asked
                if took < 0.25 { Sys.sleep(seconds: 0.25 - took) }
            }
        }
    }
}

struct Transfers: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List transfers.")
    @OptionGroup var global: GlobalOptions
    @Option(help: "Only this app's.") var app: String?
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        let all = try Self.all(global: global, app: app)
        if json { printJSON(.array(all)); return }
        for line in StatusText.transfers(all) { say(line) }
    }
}

extension Transfers {
    /// Transfers come a page at a time (drowsed bounds each answer); this follows the pages
    /// until one is not full, so the listing still shows every transfer.
    static let page = 500

    static func all(global: GlobalOptions, app: String?) throws -> [JSON] {
        var all: [JSON] = []
        var after: String?
        while true {
            var query = "?limit=\(page)"
            if let app { query += "&app=\(app)" }
            if let after { query += "&after=\(after)" }
            let list = try global.call("GET", "/v1/transfers" + query)
            guard let items = list.arrayValue else { throw CLIError("drowsed answered a transfer list that is not a list") }
            all += items
            guard items.count == page, let last = items.last.flatMap({ APIWire.Transfer(json: $0).id }), last != after else { return all }
            after = last
        }
    }
}

/// A path made absolute against the working directory (drowsed has another one).
func absolute(_ path: String) -> String {
    if path.hasPrefix("/") { return path }
    var buf = [CChar](repeating: 0, count: 4096)
    guard getcwd(&buf, buf.count) != nil else { return path }
    return String(cString: buf) + "/" + path
}

/// The path with every symlink resolved, as the user running the CLI sees it: drowsed never
/// follows a link at the last component of a path it opens for someone, so the CLI hands it the
/// real one (a `--to` whose file does not exist yet keeps its name in its resolved folder).
func resolved(_ path: String) -> String {
    let full = absolute(path)
    if let r = realpath(full, nil) {
        defer { free(r) }
        return String(cString: r)
    }
    guard let slash = full.lastIndex(of: "/") else { return full }
    let folder = slash == full.startIndex ? "/" : String(full[..<slash])
    guard let r = realpath(folder, nil) else { return full }
    defer { free(r) }
    let dir = String(cString: r)
    return (dir == "/" ? "" : dir) + "/" + full[full.index(after: slash)...]
}

func timeoutSeconds(_ text: String?) throws -> Double? {
    guard let text else { return nil }
    guard let d = DurationText.parse(text), d > .zero else { throw CLIError("'\(text)' is not a duration (e.g. 2h, 7d)") }
    return d.seconds
}

struct ConditionFlags: ParsableArguments {
    @Flag(help: "Wait for an unmetered network and external power (or a battery above the low mark).") var discretionary = false
    @Flag(help: "Never use a cellular network.") var noCellular = false
    @Flag(help: "Wait for external power.") var requiresPower = false
}

/// Creates the transfer and prints its id alone on a line (with --json: {"id"}).
func queueTransfer(_ body: JSON, global: GlobalOptions, json: Bool) throws {
    let id = APIWire.Transfer(json: try global.call("POST", "/v1/transfers", body: body)).id
    if json { printJSON(.object([("id", JSON(id))])) } else { say(id ?? "") }
}
