#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCore
import DrowseDaemon
import DrowseSystem

/// One program, two names: `drowse`, the command-line tool, and `drowsed`, the daemon (a link to
/// this binary). The board then holds the Swift runtime and every module the two share once.
@main
enum Main {
    static func main() async {
        let name = CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
        let args = Array(CommandLine.arguments.dropFirst())
        if name.hasPrefix("drowsed") {
            await DaemonEntry.main(arguments: args)
        } else {
            cli(args)
        }
    }

    /// `--socket` before the subcommand reaches it through DROWSE_SOCKET.
    static func socketFromArguments(_ path: String) {
        do { try Sys.setenv("DROWSE_SOCKET", path) } catch {
            StandardStream.error("drowse: --socket \(path): \(error)\n")
            exit(1)
        }
    }

    /// `--socket PATH` may also come before the subcommand (`drowse --socket S status`).
    static func cli(_ arguments: [String]) {
        var args = arguments
        while let first = args.first, first.hasPrefix("--socket") {
            if first == "--socket", args.count >= 2 {
                socketFromArguments(args[1])
                args.removeFirst(2)
            } else if first.hasPrefix("--socket=") {
                socketFromArguments(String(first.dropFirst(9)))
                args.removeFirst()
            } else {
                break
            }
        }
        Drowse.main(args)
    }
}

struct Drowse: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "drowse",
        abstract: "Talk to drowsed, the background-execution agent.",
        discussion: """
            Environment: DROWSE_SOCKET, drowsed's API socket (as --socket); DROWSE_APP, the app of --app (drowsed sets it for the processes it starts).

            drowsed, the daemon, is this program run under the name drowsed: `drowsed --help` and drowsed(8) list its options, among them --config (DROWSE_CONFIG) and --log-level (DROWSE_LOG_LEVEL).
            """,
        version: "0.1.0",
        subcommands: [
            Status.self, Apps.self, Fetch.self, Used.self, ConditionsCommand.self, Push.self, TransferCommand.self,
            Transfers.self, Quit.self, Activate.self, Deactivate.self, TaskCommand.self, Keygen.self, Simulate.self, MetricsCommand.self,
            UpdateCommand.self,
            FleetCommand.self, Report.self, Payload.self, TimelineCommand.self, RadioCommand.self,
        ])
}

struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "drowsed's API socket (env DROWSE_SOCKET).")
    var socket: String?

    var socketPath: String {
        socket ?? getenv("DROWSE_SOCKET").map { String(cString: $0) } ?? "/run/drowse/drowse.sock"
    }

    /// Calls the API; prints the error and exits non-zero on failure.
    func call(_ method: String, _ path: String, body: JSON? = nil) throws -> JSON {
        let r: UnixHTTPClient.Response
        do { r = try UnixHTTPClient.request(socket: socketPath, method: method, path: path, body: body) } catch {
            throw CLIError(error.description)
        }
        guard let json = r.json else { throw CLIError("drowsed answered HTTP \(r.status) with a body that is not JSON") }
        guard (200..<300).contains(r.status) else {
            throw CLIError(APIWire.Error(json: json).message ?? "HTTP \(r.status)")
        }
        return json
    }
}

/// `--app ID`; inside a handler or a resident app's process, drowsed's `DROWSE_APP` (the app it
/// started the process for) when `--app` is not given, so a shell handler need not repeat it.
struct AppOption: ParsableArguments {
    @Option(name: .customLong("app"), help: "The app (default: $DROWSE_APP, which drowsed sets for the processes it starts).")
    var given: String?

    mutating func validate() throws {
        if given == nil, let env = getenv("DROWSE_APP"), env.pointee != 0 { given = String(cString: env) }
        guard given != nil else { throw ValidationError("--app is required (or DROWSE_APP, as drowsed sets it for its handlers)") }
    }

    var id: String { given ?? "" }
}

/// An error the tool reports (ArgumentParser prints it as `Error: …`). It often quotes others'
/// text (drowsed's answer, a server's reason, an argument): escaped like every printed line, and
/// cut, so a 500 KB key sent back in an error message does not fill the terminal.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = LogText.clip(d, limit: 4 * LogText.quoteLimit) }
}

func printJSON(_ j: JSON) { Swift.print(j.pretty) }
