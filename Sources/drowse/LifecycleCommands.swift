#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import CDrowseSys
import DrowseCLIFormat
import DrowseCore
import DrowseSystem

/// `drowse activate ID`: the app is the board's foreground (never suspended) until deactivated.
struct Activate: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Mark an app active (the foreground: never suspended).")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The app's id.") var id: String
    @Flag(help: "Print JSON.") var json = false

    func run() throws { try changeState(global, id, "activate", json: json) }
}

struct Deactivate: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "End an app's active state (it may be suspended when idle).")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The app's id.") var id: String
    @Flag(help: "Print JSON.") var json = false

    func run() throws { try changeState(global, id, "deactivate", json: json) }
}

private func changeState(_ global: GlobalOptions, _ id: String, _ verb: String, json: Bool) throws {
    let answer = try global.call("POST", "/v1/apps/\(id)/\(verb)")
    if json { printJSON(answer); return }
    let a = APIWire.StateAnswer(json: answer)
    let reason = a.state.reason.map { " (\($0))" } ?? ""
    say("\(a.id ?? id): \(a.state.state ?? "?")\(reason)")
}

/// Finite background tasks (iOS's beginBackgroundTask) for scripts and operators.
struct TaskCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "task", abstract: "Finite background tasks: begin, end, show, or run a command inside one.",
        subcommands: [Begin.self, End.self, Show.self, Run.self])

    struct Begin: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Begin a task; prints its id.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Option(help: "A name for the task (shown in logs).") var name: String?
        @Flag(help: "Print the whole task as JSON.") var json = false

        func run() throws {
            let t = try global.call("POST", "/v1/apps/\(app)/tasks", body: .object(name.map { [("name", .string($0))] } ?? []))
            if json { printJSON(t) } else { say(APIWire.Task(json: t).id ?? "") }
        }
    }

    struct End: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "End a task.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Argument(help: "The task's id.") var task: String
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let t = try global.call("POST", "/v1/apps/\(app)/tasks/\(task)/end")
            if json { printJSON(t) } else { say("\(task): \(APIWire.Task(json: t).state ?? "?")") }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One task: its state and the time remaining.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Argument(help: "The task's id.") var task: String
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let answer = try global.call("GET", "/v1/apps/\(app)/tasks/\(task)")
            if json { printJSON(answer); return }
            let t = APIWire.Task(json: answer)
            for (label, value) in [("id", t.id), ("app", t.app), ("name", t.name), ("state", t.state)] {
                if let v = value { say("\(label):".padded(11) + v) }
            }
            say("expires:".padded(11) + Human.when(t.expiresAt))
            if let r = t.timeRemaining { say("remaining:".padded(11) + seconds(r)) }
        }
    }

    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a command inside a task; end the task when it exits.",
            discussion: """
                Exits with the command's status (128+N when killed by signal N). If the task's time \
                runs out first, the command's process group gets SIGTERM, SIGKILL 2 s later, and \
                drowse exits 124. SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the command.
                """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var appOption: AppOption
        var app: String { appOption.id }
        @Option(help: "A name for the task (default: the command's name).") var name: String?
        @Argument(parsing: .captureForPassthrough, help: "-- CMD ARGS…") var command: [String] = []

        func run() throws {
            var argv = command
            if argv.first == "--" { argv.removeFirst() }
            guard let program = argv.first else { throw ValidationError("give the command after --: drowse task run --app ID -- CMD ARGS…") }
            let env = currentEnvironment()
            guard let path = resolveInPath(program, env: env) else { throw CLIError("'\(program)' not found in PATH") }

            let label = name ?? String(program.split(separator: "/").last ?? "")
            let t = APIWire.Task(json: try global.call("POST", "/v1/apps/\(app)/tasks", body: .object([("name", .string(label))])))
            guard let task = t.id else { throw CLIError("drowsed answered a task without an id") }
            // Enforced on the monotonic clock; `time_remaining` says how long from now.
            var deadline = WallClock.monotonic() + max(0, t.timeRemaining ?? 0)

            let child: Child
            do { child = try Child.spawn(path: path, argv: argv, env: env) } catch {
                endQuietly(task)
                throw error
            }
            forwardSignals(to: child.pid)
            var expired = false
            while !child.wait(timeout: deadline - WallClock.monotonic()) {
                // Time is up by our clock: ask drowsed before acting (the answer is the truth).
                if let now = (try? global.call("GET", "/v1/apps/\(app)/tasks/\(task)")).map(APIWire.Task.init(json:)), now.state == "open",
                    let left = now.timeRemaining, left > 0
                {
                    deadline = WallClock.monotonic() + left
                    continue
                }
                expired = true
                StandardStream.error(LogText.escape("drowse: task \(task) of app \(app) ran out of background time; stopping \(program)") + "\n")
                child.signal(SIGTERM)
                if !child.wait(timeout: 2) {
                    child.signal(SIGKILL)
                    _ = child.wait(timeout: -1)
                }
                break
            }
            let status = child.exitStatus
            if expired {
                endQuietly(task)
                throw ExitCode(124)
            }
            do { _ = try global.call("POST", "/v1/apps/\(app)/tasks/\(task)/end") } catch {
                StandardStream.error(LogText.clip("drowse: could not end task \(task): \(error)", limit: 4 * LogText.quoteLimit) + "\n")
            }
            throw ExitCode(status)
        }

        /// Ends the task, saying nothing if it has ended already.
        private func endQuietly(_ task: String) {
            _ = try? global.call("POST", "/v1/apps/\(app)/tasks/\(task)/end")
        }
    }
}

private func seconds(_ s: Double) -> String {
    let tenths = Int((s * 10).rounded())
    return "\(tenths / 10).\(tenths % 10) s"
}

private func currentEnvironment() -> [String] {
    var out: [String] = []
    var p = environ
    while let entry = p.pointee {
        out.append(String(cString: entry))
        p += 1
    }
    return out
}

private func resolveInPath(_ name: String, env: [String]) -> String? {
    if name.contains("/") { return name }
    let path = env.first { $0.hasPrefix("PATH=") }.map { String($0.dropFirst(5)) } ?? "/usr/local/bin:/usr/bin:/bin"
    for dir in path.split(separator: ":") where !dir.isEmpty {
        let candidate = "\(dir)/\(name)"
        var st = stat()
        if access(candidate, X_OK) == 0, stat(candidate, &st) == 0, (st.st_mode & S_IFMT) != S_IFDIR { return candidate }
    }
    return nil
}

/// The command of `task run`, in a process group of its own (so an expiry stops all of it), with
/// a thread blocked in waitpid that reports its end through a pipe: waiting with a timeout is
/// one poll(2), no sleeping loop.
private final class Child: Sendable {
    let pid: pid_t
    private let doneRead: Int32
    private let status = SharedStatus()

    private final class SharedStatus: @unchecked Sendable {
        // Written by the waiter thread before it writes to the pipe; read after the pipe says so.
        var raw: Int32 = 0
    }

    private init(pid: pid_t, doneRead: Int32, doneWrite: Int32) {
        self.pid = pid
        self.doneRead = doneRead
        let status = status
        OSThread.detach(name: "task-run-wait") {
            do { status.raw = try Sys.waitForExit(pid) } catch { StandardStream.error("drowse: \(error)\n") }
            drowse_forget_child(pid)
            do { _ = try Sys.write(doneWrite, [1]) } catch { StandardStream.error("drowse: \(error)\n") }
            // Closing the write end wakes the reader as well (end of file), whatever the write did.
            Sys.close(doneWrite, ignoringErrors: .nothingToFlush)
        }
    }

    static func spawn(path: String, argv: [String], env: [String]) throws -> Child {
        var fds: [Int32] = [0, 0]
        let rcPipe = drowse_pipe(&fds)
        guard rcPipe == 0 else { throw CLIError("pipe: \(String(cString: strerror(rcPipe)))") }
        var pid: pid_t = 0
        let rc = withCStrings(argv) { a in
            withCStrings(env) { e in drowse_spawn(path, a, e, nil, 0, 0, 0, nil, 0, 0, 1, 2, -1, nil, &pid) }
        }
        guard rc == 0 else {
            for fd in fds { Sys.close(fd, ignoringErrors: .afterError) }
            throw CLIError("\(path): \(String(cString: strerror(rc)))")
        }
        return Child(pid: pid, doneRead: fds[0], doneWrite: fds[1])
    }

    /// True once the command has exited; waits at most `timeout` seconds (negative: forever).
    func wait(timeout: Double) -> Bool {
        var p = pollfd(fd: doneRead, events: Int16(POLLIN), revents: 0)
        let end = WallClock.monotonic() + timeout
        while true {
            let left = timeout < 0 ? -1 : Int32(max(0, (end - WallClock.monotonic()) * 1000).rounded(.up))
            let rc = poll(&p, 1, left)
            if rc > 0 { return true }
            if rc == 0 { return false }
            if errno != EINTR { return false }
            // A forwarded signal interrupted the wait: go on waiting for the rest of the time.
        }
    }

    /// Sends `sig` to the command's process group; a failure other than "gone already" is said.
    func signal(_ sig: Int32) {
        do { try Sys.killpg(pid, sig) } catch { StandardStream.error("drowse: \(error)\n") }
    }

    /// The shell's convention: the exit status, or 128 + the signal that killed it.
    var exitStatus: Int32 {
        let s = status.raw
        if s & 0x7f == 0 { return (s >> 8) & 0xff }
        return 128 + (s & 0x7f)
    }
}

/// The process group signals go to while `task run` waits (0: none yet).
nonisolated(unsafe) private var forwardTarget: pid_t = 0

/// Passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on to the command's process group: it is not in
/// the terminal's foreground group, so Ctrl-C reaches only drowse.
private func forwardSignals(to pid: pid_t) {
    forwardTarget = pid
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
        do {
            // In a signal handler nothing can be reported: a group already gone is fine.
            try Sys.setSignalHandler(sig) { sig in if forwardTarget > 0 { Sys.killpgOwn(forwardTarget, sig) } }
        } catch {
            StandardStream.error("drowse: signals will not reach the command: \(error)\n")
        }
    }
}

/// Calls `body` with a NULL-terminated C string array that lives for the call.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var ptrs: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    ptrs.append(nil)
    defer { for p in ptrs { free(p) } }
    return ptrs.withUnsafeBufferPointer { body($0.baseAddress!) }
}
