#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import DrowseCore
import Synchronization

/// One launch of an app's handler (docs/contract.md, "Handler protocol").
package struct LaunchRequest: Sendable {
    package var app: String
    package var event: HandlerEvent
    package var argv: [String]
    package var user: String?
    package var workingDirectory: String?
    package var environment: [String: String]
    package var stdin: [UInt8]
    /// When the handler must finish, on drowsed's timeline (`Timeline`); `.infinity`: never (a resident process), and
    /// then its supervisor sets no timer at all.
    package var deadline: Double
    /// Between SIGTERM and SIGKILL.
    package var killGrace: Double
    /// A leaf cgroup directory (`AppCgroups.makeLeaf`) the process joins before it runs; nil:
    /// none, and containment relies on the process tree (`ProcessTree`).
    package var cgroup: String?
    /// Limits set as rlimits in the child (where the app's cgroup cannot hold them): RLIMIT_NPROC
    /// (per user) and RLIMIT_DATA (bytes); nil leaves them as inherited.
    package var processLimit: Int?
    package var dataLimit: Int64?
    /// `[process] allow_privilege_gain`: without it a handler not run as root starts with
    /// `no_new_privs` (setuid programs and file capabilities give it nothing).
    package var allowPrivilegeGain = false

    package init(app: String, event: HandlerEvent, argv: [String], user: String?, workingDirectory: String?,
                environment: [String: String], stdin: [UInt8], deadline: Double, killGrace: Double = 2,
                cgroup: String? = nil) {
        self.app = app
        self.event = event
        self.argv = argv
        self.user = user
        self.workingDirectory = workingDirectory
        self.environment = environment
        self.stdin = stdin
        self.deadline = deadline
        self.killGrace = killGrace
        self.cgroup = cgroup
    }
}

/// Launches handlers. `ProcessLauncher` is the real one; tests may supply a twin.
package protocol HandlerLaunching: Sendable {
    /// Starts the handler now, on the caller's thread, and returns its run; `output` gets each
    /// line it prints (`true` for stderr). The process exists when this returns.
    func start(_ request: LaunchRequest, output: @escaping @Sendable (String, Bool) -> Void) -> HandlerRun
}

extension HandlerLaunching {
    /// Runs the handler to its end.
    package func run(_ request: LaunchRequest, output: @escaping @Sendable (String, Bool) -> Void) async -> HandlerOutcome {
        await start(request, output: output).outcome()
    }
}

/// Runs handlers as real processes: own process group, the app's user, a clean environment,
/// JSON on stdin, output by line, and the deadline enforced with SIGTERM then SIGKILL to the
/// whole group. The process is spawned on the caller's thread (no fork of the daemon's memory,
/// see `drowse_spawn`), so a notification's handler starts without a thread hop; each running
/// handler is then supervised by one thread blocked in poll(2) on a pidfd and its pipes, so a
/// quiet handler costs no wakeups (the agent's `max_concurrent_handlers` bounds those threads).
///
/// Containment: past the deadline SIGTERM, then SIGKILL, go to the group and to every
/// descendant (a child that called `setsid` too). When a run ends, by its deadline or by a
/// normal exit, whatever it left running is killed: the run is over, and a leftover would hold
/// the app's resources (and its output pipe) outside any deadline. See `ProcessTree`.
/// A request with a `cgroup` leaf is contained by the kernel instead: the child joins the leaf
/// before exec, SIGTERM goes to every process in it and SIGKILL is `cgroup.kill`, from which no
/// `setsid` escapes; the leaf is empty when the outcome arrives.
///
/// A request whose deadline is `.infinity` (a resident process) runs until it exits or
/// `HandlerRun.terminate()` ends it; its supervisor wakes only for the process, its pipes and
/// that request (an eventfd), never on a timer.
///
/// Output reaches `output` line by line with control characters escaped (`LogText.escape`) and
/// rate-limited per run (`OutputRateLimiter`): it is meant for the daemon's log.
package struct ProcessLauncher: HandlerLaunching {
    /// The timeline `LaunchRequest.deadline` and the outcome's times are on (the agent's).
    let timeline: Timeline

    package init(timeline: Timeline = .process) { self.timeline = timeline }

    package func start(_ request: LaunchRequest, output: @escaping @Sendable (String, Bool) -> Void) -> HandlerRun {
        let run = HandlerRun()
        _ = ProcessTree.subreaperSet
        let timeline = self.timeline
        switch Self.spawn(request, timeline: timeline) {
        case .failed(let outcome, let shortage):
            if let shortage { run.markResourceShortage(shortage) }
            run.finish(outcome)
        case .started(let child):
            run.attach(pid: child.pid, wakeFD: child.wakeFD)
            OSThread.detach(name: "handler-\(request.app)") {
                let ending = Self.supervise(pid: child.pid, stdinFD: child.stdinFD, stdinWritten: child.stdinWritten,
                                            stdoutFD: child.stdoutFD, stderrFD: child.stderrFD,
                                            wakeFD: child.wakeFD, run: run, req: request, timeline: timeline, output: output)
                run.finish(HandlerOutcome(ending: ending, startedAt: child.startedAt, endedAt: timeline.now()))
            }
        }
        return run
    }

    struct Child {
        var pid: pid_t
        var stdinFD: Int32, stdoutFD: Int32, stderrFD: Int32
        /// Bytes of the standard input already in the pipe when the child started.
        var stdinWritten: Int
        /// An eventfd `HandlerRun.terminate` signals.
        var wakeFD: Int32
        var startedAt: Double
    }

    enum Spawned {
        case started(Child)
        /// With the errno when it was a lack of resources (worth trying again).
        case failed(HandlerOutcome, shortage: Int32?)
    }

    static func isShortage(_ err: Int32) -> Bool {
        err == EMFILE || err == ENFILE || err == EAGAIN || err == ENOMEM
    }

    static func resolveProgram(_ name: String, path: String) -> String? {
        if name.contains("/") { return name }
        for dir in path.split(separator: ":") where !dir.isEmpty {
            let candidate = "\(dir)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    static func spawn(_ req: LaunchRequest, timeline: Timeline) -> Spawned {
        let start = timeline.now()
        func failed(_ why: String, errno err: Int32 = 0) -> Spawned {
            .failed(HandlerOutcome(ending: .launchFailed(why), startedAt: start, endedAt: timeline.now()),
                    shortage: isShortage(err) ? err : nil)
        }
        guard let name = req.argv.first else { return failed("empty command") }
        var env = req.environment
        var setIDs: Int32 = 0
        var uid = getuid(), gid = getgid()
        var groups: [gid_t] = []
        if let userName = req.user {
            guard let account = UserAccount.lookup(name: userName) else { return failed("no such user '\(userName)'") }
            if account.uid != geteuid() {
                guard geteuid() == 0 else { return failed("cannot run as '\(userName)': drowsed is not running as root") }
                setIDs = 1
                uid = account.uid
                gid = account.gid
                groups = account.groups
            }
            env["HOME"] = env["HOME"] ?? account.home
            env["USER"] = account.name
            env["LOGNAME"] = account.name
        }
        let searchPath = env["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        guard let program = resolveProgram(name, path: searchPath) else { return failed("'\(name)' not found in PATH") }

        var inPipe: [Int32] = [0, 0], outPipe: [Int32] = [0, 0], errPipe: [Int32] = [0, 0]
        var rcPipe = drowse_pipe(&inPipe)
        guard rcPipe == 0 else { return failed("pipe: \(String(cString: strerror(rcPipe)))", errno: rcPipe) }
        rcPipe = drowse_pipe(&outPipe)
        guard rcPipe == 0 else {
            for fd in inPipe { Sys.close(fd, ignoringErrors: .afterError) }
            return failed("pipe: \(String(cString: strerror(rcPipe)))", errno: rcPipe)
        }
        rcPipe = drowse_pipe(&errPipe)
        guard rcPipe == 0 else {
            for fd in inPipe + outPipe { Sys.close(fd, ignoringErrors: .afterError) }
            return failed("pipe: \(String(cString: strerror(rcPipe)))", errno: rcPipe)
        }

        // The standard input goes into the pipe before the handler exists (a pipe holds 64 KiB, a
        // notification is at most 4 KiB): a drowsed killed right after the start cannot leave a
        // handler with an empty or cut payload. What does not fit is written as the handler reads.
        var stdinWritten = 0
        if !req.stdin.isEmpty, fcntl(inPipe[1], F_SETFL, fcntl(inPipe[1], F_GETFL) | O_NONBLOCK) == 0 {
            // What does not fit now (or a failure, seen again in the loop) is left for the loop.
            if let w = try? Sys.write(inPipe[1], req.stdin) { stdinWritten = w }
        }

        let wakeFD = drowse_eventfd()
        guard wakeFD >= 0 else {
            let e = errno
            for fd in inPipe + outPipe + errPipe { Sys.close(fd, ignoringErrors: .afterError) }
            return failed("eventfd: \(String(cString: strerror(e)))", errno: e)
        }
        // The child starts inside the leaf (clone3 CLONE_INTO_CGROUP, see drowse_spawn); opened
        // here, where failing is cheap to report.
        var cgroupFD: Int32 = -1
        if let cg = req.cgroup {
            do { cgroupFD = try Sys.open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
                let e = error.errno
                for fd in inPipe + outPipe + errPipe + [wakeFD] { Sys.close(fd, ignoringErrors: .afterError) }
                return failed("cannot join cgroup \(cg): \(String(cString: strerror(e)))", errno: e)
            }
        }

        // Every handler leads a session of its own, with no controlling terminal (it cannot open
        // drowsed's /dev/tty); one not run as root cannot gain privileges unless its app allows it.
        setIDs |= DROWSE_SPAWN_NEW_SESSION
        let runsAsRoot = setIDs & 1 != 0 ? uid == 0 : geteuid() == 0
        if !runsAsRoot, !req.allowPrivilegeGain { setIDs |= DROWSE_SPAWN_NO_NEW_PRIVS }
        let envStrings = env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        var failedStep: Int32 = 0
        let rc = withCStrings(req.argv) { argv in
            withCStrings(envStrings) { envp in
                groups.withUnsafeBufferPointer { g in
                    return drowse_spawn_limited(program, argv, envp, req.workingDirectory, setIDs, uid, gid, g.baseAddress, Int32(g.count),
                                         inPipe[0], outPipe[1], errPipe[1], cgroupFD, Int64(req.processLimit ?? -1),
                                         req.dataLimit ?? -1, &failedStep, &pid)
                }
            }
        }
        // The child's ends: it has its own copies now.
        for fd in [inPipe[0], outPipe[1], errPipe[1]] { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        if cgroupFD >= 0 { Sys.close(cgroupFD, ignoringErrors: .nothingToFlush) }
        guard rc == 0 else {
            for fd in [inPipe[1], outPipe[0], errPipe[0], wakeFD] { Sys.close(fd, ignoringErrors: .afterError) }
            if failedStep == Int32(DROWSE_SPAWN_STEP_CGROUP), let cg = req.cgroup {
                return failed("cannot join cgroup \(cg): \(String(cString: strerror(rc)))", errno: rc)
            }
            if failedStep == Int32(DROWSE_SPAWN_STEP_LIMITS) {
                return failed("cannot set the app's rlimits: \(String(cString: strerror(rc)))", errno: rc)
            }
            return failed("\(program): \(String(cString: strerror(rc)))", errno: rc)
        }
        return .started(Child(pid: pid, stdinFD: inPipe[1], stdoutFD: outPipe[0], stderrFD: errPipe[0], stdinWritten: stdinWritten,
                              wakeFD: wakeFD, startedAt: start))
    }

    private static func supervise(pid: pid_t, stdinFD: Int32, stdinWritten: Int, stdoutFD: Int32, stderrFD: Int32, wakeFD: Int32, run: HandlerRun,
                                  req: LaunchRequest, timeline: Timeline,
                                  output: @escaping @Sendable (String, Bool) -> Void) -> HandlerOutcome.Ending {
        for fd in [stdinFD, stdoutFD, stderrFD] {
            // A pipe left blocking could stall this thread on a read; say so in the handler's log.
            if let e = Sys.noted("fcntl(O_NONBLOCK) on a handler pipe", { Int(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) }) {
                output("drowsed: \(e)", true)
            }
        }
        let pidfd = drowse_pidfd_open(pid)
        var inFD: Int32 = stdinFD
        var written = stdinWritten
        var outFD = stdoutFD, errFD = stderrFD
        var lines: [Int32: [UInt8]] = [stdoutFD: [], stderrFD: []]
        var limiter = OutputRateLimiter()
        func note(_ d: OutputRateLimiter.Dropped) {
            output("drowse: \(d.lines) line(s), \(d.bytes) bytes of this handler's output not logged (rate limit)", true)
        }
        func emit<S: Collection<UInt8>>(_ bytes: S, stderr: Bool) {
            switch limiter.offer(bytes: bytes.count, at: WallClock.monotonic()) {
            case .drop: return
            case .log(let dropped): if let dropped { note(dropped) }
            }
            output(LogText.escape(String(decoding: bytes, as: UTF8.self)), stderr)
        }
        var status: Int32 = 0
        // When and how the handler is stopped is HandlerShutdown's to decide; this carries it out.
        var shutdown = HandlerShutdown(grace: req.killGrace)
        var timerAt: Double?
        var ending: HandlerOutcome.Ending?
        // A signal that cannot be sent (EPERM: a set-uid program while drowsed is not root) is
        // said in the handler's log; a process already gone is what was wanted.
        func signalGroup(_ sig: Int32) {
            do { try Sys.killpg(pid, sig) } catch { output("drowsed: \(error)", true) }
        }
        func carryOut(_ actions: [HandlerShutdown.Action]) {
            for action in actions {
                switch action {
                case .signal(let signal, let wholeTree):
                    let sig = signal == .term ? SIGTERM : SIGKILL
                    if !wholeTree {
                        signalGroup(sig)
                    } else if let cg = req.cgroup {
                        // The leaf holds the whole run, setsid or not: every pid in it gets
                        // SIGTERM; SIGKILL is cgroup.kill, which also catches a fork in flight.
                        signalGroup(sig)
                        if sig == SIGKILL {
                            AppCgroups.kill(cg)
                        } else {
                            for p in AppCgroups.pids(cg) {
                                do { try Sys.kill(p, sig) } catch { output("drowsed: \(error)", true) }
                            }
                        }
                    } else {
                        ProcessTree.signalTree(pid, sig)
                    }
                case .setTimer(let at): timerAt = at
                case .killLeftovers:
                    if let cg = req.cgroup, AppCgroups.eventsField(cg, "populated") != false {
                        // The run is over: its leaf is emptied (bounded wait on cgroup.events), so
                        // that it can be removed once the outcome is out. One already empty is not
                        // killed: it may take the app's next run (`AppCgroups.isReusable`).
                        AppCgroups.kill(cg)
                        _ = AppCgroups.waitForEvents(cg, timeout: 2) { $0["populated"] == false }
                    } else if req.cgroup != nil, ProcessTree.reapEndedAdopted() {
                        // The leaf emptied by itself: whatever the run left has ended, and its
                        // orphans, drowsed's now, are reaped without a walk over /proc.
                        break
                    }
                    // Reaps what drowsed adopted (the leaf's setsid children among them).
                    ProcessTree.killLeftovers()
                case .finished(let e): ending = e
                }
            }
        }
        // Enforced on the monotonic clock: `req.deadline` is on drowsed's timeline (boot clock), which
        // a step of the wall clock does not move (boards without an RTC jump at their first sync).
        let deadline = WallClock.monotonic() + (req.deadline - timeline.now())
        carryOut(shutdown.started(now: WallClock.monotonic(), deadline: deadline))
        if written >= req.stdin.count { Sys.close(inFD, ignoringErrors: .nothingToFlush); inFD = -1 }

        func flush(_ fd: Int32, final: Bool) {
            guard var buf = lines[fd] else { return }
            // Lines are cut out by index and the rest moved once: a flood of short lines must not
            // cost a copy of the buffer per line.
            var from = buf.startIndex
            while let nl = buf[from...].firstIndex(of: 0x0A) {
                emit(buf[from..<nl], stderr: fd == stderrFD)
                from = nl + 1
            }
            buf.removeSubrange(..<from)
            if final, !buf.isEmpty { emit(buf, stderr: fd == stderrFD); buf.removeAll() }
            // A handler that prints a huge line without newlines is cut into 4 KiB pieces.
            while buf.count > 4096 {
                emit(buf.prefix(4096), stderr: fd == stderrFD)
                buf.removeFirst(4096)
            }
            lines[fd] = buf
        }

        func drain(_ fd: inout Int32) {
            guard fd >= 0 else { return }
            var chunk = [UInt8](repeating: 0, count: 8192)
            while true {
                // Nothing more now: wait for the next poll. The end, or a failure: the stream is over.
                let n: Int
                do {
                    guard let read = try Sys.read(fd, into: &chunk) else { return }
                    n = read
                } catch { n = 0 }
                if n > 0 { lines[fd, default: []].append(contentsOf: chunk[0..<n]); flush(fd, final: false); continue }
                flush(fd, final: true)
                Sys.close(fd, ignoringErrors: .nothingToFlush)
                fd = -1
                return
            }
        }

        func reap() -> Bool {
            let r = waitpid(pid, &status, WNOHANG)
            return r == pid
        }

        while ending == nil {
            let now = WallClock.monotonic()
            // Until the timer (at most an hour at a time); none: until the process or a pipe wakes us.
            var timeoutMS: Int32 = timerAt.map { Int32(max(0, min(3_600_000, (($0 - now) * 1000).rounded(.up)))) } ?? -1
            if pidfd < 0 { timeoutMS = timeoutMS < 0 ? 50 : min(timeoutMS, 50) }  // kernels before 5.3: no pidfd, fall back to short checks
            var fds: [pollfd] = []
            if pidfd >= 0 { fds.append(pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)) }
            if outFD >= 0 { fds.append(pollfd(fd: outFD, events: Int16(POLLIN), revents: 0)) }
            if errFD >= 0 { fds.append(pollfd(fd: errFD, events: Int16(POLLIN), revents: 0)) }
            if inFD >= 0 { fds.append(pollfd(fd: inFD, events: Int16(POLLOUT), revents: 0)) }
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            let n = poll(&fds, nfds_t(fds.count), timeoutMS)
            if n < 0 && errno != EINTR {
                carryOut(shutdown.supervisionLost(now: WallClock.monotonic()))
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                drowse_forget_child(pid)
                carryOut(shutdown.exited(status: status, now: WallClock.monotonic()))
                break
            }
            for p in fds where p.revents != 0 {
                if p.fd == wakeFD {
                    EventFD.read(wakeFD)
                    carryOut(shutdown.terminateRequested(now: WallClock.monotonic()))
                }
                else if p.fd == outFD { drain(&outFD) }
                else if p.fd == errFD { drain(&errFD) }
                else if p.fd == inFD {
                    if p.revents & Int16(POLLERR | POLLHUP) != 0 { Sys.close(inFD, ignoringErrors: .nothingToFlush); inFD = -1; continue }
                    do { written += try Sys.write(inFD, req.stdin, from: written) ?? 0 } catch {
                        // The handler closed its standard input (EPIPE): the rest is not wanted.
                        Sys.close(inFD, ignoringErrors: .nothingToFlush); inFD = -1; continue
                    }
                    if written >= req.stdin.count { Sys.close(inFD, ignoringErrors: .nothingToFlush); inFD = -1 }
                }
            }
            if reap() {
                drowse_forget_child(pid)
                // The run is over: whatever it left behind goes too, in its group or not (a
                // child that called setsid is now drowsed's, adopted as subreaper).
                carryOut(shutdown.exited(status: status, now: WallClock.monotonic()))
                break
            }
            let after = WallClock.monotonic()
            if let at = timerAt, after >= at { carryOut(shutdown.timerFired(now: after)) }
        }
        if pidfd >= 0 { Sys.close(pidfd, ignoringErrors: .nothingToFlush) }
        run.detachWake()
        Sys.close(wakeFD, ignoringErrors: .nothingToFlush)
        if inFD >= 0 { Sys.close(inFD, ignoringErrors: .nothingToFlush) }
        // Collect the last output; the leftovers are gone, so the pipes reach EOF promptly.
        let drainUntil = shutdown.outputCollectedUntil(endedAt: WallClock.monotonic())
        while (outFD >= 0 || errFD >= 0) && WallClock.monotonic() < drainUntil {
            var fds: [pollfd] = []
            if outFD >= 0 { fds.append(pollfd(fd: outFD, events: Int16(POLLIN), revents: 0)) }
            if errFD >= 0 { fds.append(pollfd(fd: errFD, events: Int16(POLLIN), revents: 0)) }
            // A poll that fails cannot wait: drain what is there and stop collecting.
            let waited = (try? Sys.poll(&fds, timeoutMs: 100)) != nil
            drain(&outFD)
            drain(&errFD)
            if !waited { break }
        }
        if outFD >= 0 { flush(outFD, final: true); Sys.close(outFD, ignoringErrors: .nothingToFlush) }
        if errFD >= 0 { flush(errFD, final: true); Sys.close(errFD, ignoringErrors: .nothingToFlush) }
        if let dropped = limiter.finish() { note(dropped) }
        return ending ?? .launchFailed("lost supervision of the handler")
    }
}

/// Calls `body` with a NULL-terminated C string array that lives for the call.
func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var ptrs: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    ptrs.append(nil)
    defer { for p in ptrs { free(p) } }
    return ptrs.withUnsafeBufferPointer { body($0.baseAddress!) }
}
