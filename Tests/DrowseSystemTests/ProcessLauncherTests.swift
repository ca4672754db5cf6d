import DrowseCore
import DrowseSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

/// Collects what a handler prints, as the launcher delivers it.
final class OutputLines: Sendable {
    private let lines = Mutex<[(line: String, isStderr: Bool)]>([])

    var callback: @Sendable (String, Bool) -> Void {
        { line, isStderr in self.lines.withLock { $0.append((line, isStderr)) } }
    }
    var stdout: [String] { lines.withLock { $0.filter { !$0.isStderr }.map(\.line) } }
    var stderr: [String] { lines.withLock { $0.filter { $0.isStderr }.map(\.line) } }
}

private let testPATH = "/usr/local/bin:/usr/bin:/bin"

/// A `/bin/sh -c script` launch with a clean environment holding PATH and `env`.
private func shell(
    _ script: String, stdin: [UInt8] = [], deadlineIn: Double = 20, killGrace: Double = 1,
    env: [String: String] = [:], user: String? = nil, cwd: String? = nil
) -> LaunchRequest {
    LaunchRequest(
        app: "test", event: .fetch, argv: ["/bin/sh", "-c", script], user: user, workingDirectory: cwd,
        environment: ["PATH": testPATH].merging(env) { _, new in new }, stdin: stdin,
        deadline: WallClock.now() + deadlineIn, killGrace: killGrace)
}

private func run(_ req: LaunchRequest, _ out: OutputLines = OutputLines()) async -> HandlerOutcome {
    await ProcessLauncher().run(req, output: out.callback)
}

/// Whether `pid` has died. A dead orphan may linger as a zombie when PID 1 (as in some
/// containers) does not reap: that counts as gone, since it can no longer run.
private func isGone(_ pid: pid_t) -> Bool {
    if kill(pid, 0) != 0 { return errno == ESRCH }
    guard let stat = contents("/proc/\(pid)/stat") else { return true }
    guard let close = stat.range(of: ") ", options: .backwards) else { return false }
    return stat[close.upperBound...].first == "Z"
}

private func waitUntilGone(_ pid: pid_t, within seconds: Double = 1) async -> Bool {
    let end = WallClock.monotonic() + seconds
    while WallClock.monotonic() < end {
        if isGone(pid) { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return isGone(pid)
}

private func readPID(_ path: String) throws -> pid_t {
    let text = try #require(contents(path)).trimmingCharacters(in: .whitespacesAndNewlines)
    return try #require(pid_t(text))
}

@Suite("ProcessLauncher")
struct ProcessLauncherTests {
    init() {
        // drowsed ignores SIGPIPE (Drowsed.swift); the launcher's stdin writer relies on it.
        signal(SIGPIPE, SIG_IGN)
    }

    // MARK: Results

    @Test("exit status maps to the result", arguments: [
        (Int32(0), FetchResult.newData), (100, .noData), (3, .failed), (1, .failed), (255, .failed),
    ])
    func exitStatus(status: Int32, expected: FetchResult) async {
        let outcome = await run(shell("exit \(status)"))
        #expect(outcome.ending == .exited(status))
        #expect(outcome.result == expected)
        #expect(outcome.startedAt <= outcome.endedAt)
    }

    @Test("a handler killed by a signal fails")
    func killedBySignal() async {
        let outcome = await run(shell("kill -9 $$"))
        #expect(outcome.ending == .signaled(SIGKILL))
        #expect(outcome.result == .failed)
    }

    // MARK: What the handler gets

    @Test("standard input reaches the handler, then EOF")
    func stdinReachesHandler() async throws {
        try await withTempDir { dir in
            let json = Array(#"{"aps":{"content-available":1},"content-id":42}"#.utf8)
            let outcome = await run(shell("cat > \(dir)/in.json", stdin: json))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/in.json") == String(decoding: json, as: UTF8.self))
        }
    }

    @Test("empty standard input is EOF at once")
    func emptyStdin() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("cat > \(dir)/in; echo done", deadlineIn: 5))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/in") == "")
        }
    }

    @Test("1 MiB of standard input arrives whole")
    func largeStdinDelivered() async throws {
        try await withTempDir { dir in
            let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
            let outcome = await run(shell("cat > \(dir)/in", stdin: bytes))
            #expect(outcome.ending == .exited(0))
            let got = try Data(contentsOf: URL(fileURLWithPath: "\(dir)/in"))
            #expect(got.count == bytes.count)
            #expect(Array(got) == bytes)
        }
    }

    @Test("1 MiB of standard input to a handler that exits without reading it")
    func largeStdinUnreadExit() async {
        let outcome = await run(shell("exit 100", stdin: [UInt8](repeating: 0x41, count: 1 << 20), deadlineIn: 30))
        #expect(outcome.ending == .exited(100))
        #expect(outcome.endedAt - outcome.startedAt < 15)  // well before the 30 s deadline (room for a loaded machine)
    }

    @Test("1 MiB of standard input never read does not hang past the deadline")
    func largeStdinUnreadDeadline() async {
        let req = shell("sleep 30", stdin: [UInt8](repeating: 0x41, count: 1 << 20), deadlineIn: 1, killGrace: 1)
        let outcome = await run(req)
        #expect(outcome.ending == .timedOut)
        #expect(outcome.endedAt < req.deadline + req.killGrace + 3)
    }

    @Test("only the request's environment reaches the handler")
    func environment() async throws {
        try await withTempDir { dir in
            let env = [
                "DROWSE_APP": "weather", "DROWSE_EVENT": "fetch", "DROWSE_DEADLINE": "1700000000.5",
                "DROWSE_SOCKET": "/run/drowse/drowse.sock", "ODD": "a b=c 'd'",
            ]
            let outcome = await run(shell("env > \(dir)/env", env: env))
            #expect(outcome.ending == .exited(0))
            let lines = try #require(contents("\(dir)/env")).split(separator: "\n").map(String.init)
            var got: [String: String] = [:]
            for line in lines {
                guard let eq = line.firstIndex(of: "=") else { continue }
                got[String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
            for (k, v) in env { #expect(got[k] == v, "\(k)") }
            #expect(got["PATH"] == testPATH)
            // Nothing of the test process's environment leaks in; only what a shell adds itself.
            let extra = Set(got.keys).subtracting(env.keys).subtracting(["PATH", "PWD", "OLDPWD", "SHLVL", "_"])
            #expect(extra.isEmpty, "unexpected variables: \(extra.sorted())")
        }
    }

    @Test("the handler runs in the working directory")
    func workingDirectory() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("pwd -P > out", cwd: dir))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/out") == dir + "\n")
        }
    }

    @Test("the handler leads its own process group")
    func ownProcessGroup() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("cut -d' ' -f1,5 /proc/$$/stat > \(dir)/pg"))
            #expect(outcome.ending == .exited(0))
            let f = try #require(contents("\(dir)/pg")).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
            try #require(f.count == 2)
            #expect(f[0] == f[1])
            #expect(f[1] != getpgrp())
        }
    }

    @Test("the handler inherits no descriptor but standard input, output and error")
    func onlyStdioInherited() async {
        // An inheritable descriptor in the parent must not leak into the handler.
        let leaky = open("/dev/null", O_RDONLY)
        defer { close(leaky) }
        // `exec` so no shell holds saved copies; ls itself opens the listing at the lowest
        // free descriptor, which is 3 exactly when nothing else leaked in.
        let out = OutputLines()
        let outcome = await run(shell("exec ls /proc/self/fd"), out)
        #expect(outcome.ending == .exited(0))
        #expect(out.stdout == ["0", "1", "2", "3"])
    }

    // MARK: Output

    @Test("output is delivered by line, tagged stdout or stderr, unterminated last line included")
    func outputLines() async {
        let out = OutputLines()
        let outcome = await run(shell("echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf tail"), out)
        #expect(outcome.ending == .exited(0))
        #expect(out.stdout == ["out1", "out2", "tail"])
        #expect(out.stderr == ["err1", "err2"])
    }

    @Test("many lines printed right before exit all arrive, in order")
    func manyLines() async {
        let out = OutputLines()
        let outcome = await run(shell("seq 1 5000"), out)
        #expect(outcome.ending == .exited(0))
        #expect(out.stdout == (1...5000).map(String.init))
    }

    @Test("control characters in output are escaped before they reach the log")
    func outputEscaped() async {
        let out = OutputLines()
        let outcome = await run(shell(#"printf 'a\033[2Jb\rc\tok\n'; printf 'forged\342\200\250line' >&2"#), out)
        #expect(outcome.ending == .exited(0))
        #expect(out.stdout == [#"a\u{1B}[2Jb\rc\tok"#])
        #expect(out.stderr == [#"forged\u{2028}line"#])
    }

    @Test("a flood of output is rate-limited in the log, and says so")
    func outputRateLimited() async {
        let out = OutputLines()
        // 20 MB in 100-byte lines, as fast as the pipe takes it.
        let outcome = await run(shell("head -c 20000000 /dev/zero | tr '\\0' x | fold -w 100"), out)
        #expect(outcome.ending == .exited(0))
        let logged = out.stdout.reduce(0) { $0 + $1.utf8.count }
        #expect(logged > 10_000)
        #expect(logged < 1_000_000, "\(logged) bytes of output reached the log")
        #expect(out.stderr.contains { $0.contains("not logged (rate limit)") })
    }

    @Test("a long line without newline is cut into pieces of at most 4 KiB")
    func longLine() async {
        let out = OutputLines()
        let outcome = await run(shell("head -c 10000 /dev/zero | tr '\\0' x"), out)
        #expect(outcome.ending == .exited(0))
        #expect(out.stdout.allSatisfy { $0.utf8.count <= 4096 })
        #expect(out.stdout.joined() == String(repeating: "x", count: 10000))
    }

    // MARK: Deadline

    @Test("past its deadline the handler and its whole process group are killed")
    func deadlineKillsGroup() async throws {
        try await withTempDir { dir in
            let req = shell("sleep 100 & echo $! > \(dir)/child.pid; sleep 60", deadlineIn: 1, killGrace: 1)
            let outcome = await run(req)
            #expect(outcome.ending == .timedOut)
            #expect(outcome.result == .failed)
            #expect(outcome.endedAt - outcome.startedAt < 15)  // killed at 2 s, not the 60 s sleep (room for a loaded machine)
            let child = try readPID("\(dir)/child.pid")
            #expect(await waitUntilGone(child), "background child \(child) survived its handler")
            #expect(kill(child, 0) != 0 || isGone(child))
        }
    }

    @Test("a handler that exits leaves nothing running in its group")
    func exitKillsLeftovers() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("sleep 100 & echo $! > \(dir)/child.pid; exit 0", deadlineIn: 40))
            #expect(outcome.ending == .exited(0))
            #expect(outcome.endedAt - outcome.startedAt < 15)  // not the 40 s deadline (room for a loaded machine)
            let child = try readPID("\(dir)/child.pid")
            #expect(await waitUntilGone(child), "background child \(child) outlived its handler")
        }
    }

    /// Whether `pid` is gone for good: not running and reaped (no zombie left either).
    private func waitUntilReaped(_ pid: pid_t, within seconds: Double = 3) async -> Bool {
        let end = WallClock.monotonic() + seconds
        while WallClock.monotonic() < end {
            if kill(pid, 0) != 0 && errno == ESRCH { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// Starts a process in its own session that writes its pid to `file` and sleeps.
    private func setsidChild(_ file: String) -> String {
        "setsid sh -c 'echo $$ > \(file); exec sleep 100' & while [ ! -s \(file) ]; do sleep 0.01; done"
    }

    @Test("past its deadline a child that called setsid is killed and reaped too")
    func deadlineKillsSetsidChild() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("\(setsidChild("\(dir)/gc.pid")); sleep 30", deadlineIn: 1, killGrace: 1))
            #expect(outcome.ending == .timedOut)
            let gc = try readPID("\(dir)/gc.pid")
            #expect(await waitUntilReaped(gc), "setsid'd child \(gc) survived the deadline (or is an unreaped zombie)")
        }
    }

    @Test("a handler that exits normally leaves no setsid'd child behind, not even a zombie")
    func exitKillsSetsidChild() async throws {
        try await withTempDir { dir in
            let outcome = await run(shell("\(setsidChild("\(dir)/gc.pid")); exit 0"))
            #expect(outcome.ending == .exited(0))
            let gc = try readPID("\(dir)/gc.pid")
            #expect(await waitUntilReaped(gc), "setsid'd child \(gc) outlived its handler")
        }
    }

    @Test("a handler's orphan stays its own while it runs: another handler's end does not kill it")
    func leftoversAreAttributedToTheirRun() async throws {
        try await withTempDir { dir in
            // The middle shell exits at once: its setsid'd child is orphaned inside handler B's tree.
            let b = ProcessLauncher().start(shell(
                "sh -c \"setsid sh -c 'echo \\$\\$ > \(dir)/b.pid; exec sleep 100' &\"; "
                // B runs until the test releases it (at most 120 s): no race with a slow handler A,
                // nor with a test process whose other tests hold every thread for half a minute.
                + "while [ ! -s \(dir)/b.pid ]; do sleep 0.01; done; touch \(dir)/ready; "
                + "i=0; while [ ! -e \(dir)/release ] && [ $i -lt 12000 ]; do sleep 0.01; i=$((i+1)); done; exit 7", deadlineIn: 300),
                output: { _, _ in })
            let end = WallClock.monotonic() + 60
            while !FileManager.default.fileExists(atPath: "\(dir)/ready"), WallClock.monotonic() < end {
                try? await Task.sleep(for: .milliseconds(20))
            }
            let orphan = try readPID("\(dir)/b.pid")
            // Handler A ends meanwhile; its leftovers sweep must spare B's running orphan.
            #expect(await run(shell("exit 0")).ending == .exited(0))
            #expect(kill(orphan, 0) == 0, "handler B's orphan was killed when handler A ended")
            FileManager.default.createFile(atPath: "\(dir)/release", contents: nil)
            #expect(await b.outcome().ending == .exited(7))
            #expect(await waitUntilReaped(orphan), "handler B's orphan outlived B")
        }
    }

    @Test("ending leftovers never touches other running handlers")
    func leftoversSweepSparesRunningHandlers() async {
        let long = ProcessLauncher().start(shell("sleep 2; exit 7"), output: { _, _ in })
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<10 { group.addTask { _ = await run(shell("setsid sleep 100 & exit 0")) } }
        }
        #expect(await long.outcome().ending == .exited(7))
    }

    @Test("a handler that traps SIGTERM gets it, then SIGKILL after the grace")
    func sigtermThenSigkill() async {
        let out = OutputLines()
        let req = shell("trap 'echo got-term' TERM; while true; do sleep 0.1; done", deadlineIn: 1, killGrace: 1)
        let outcome = await run(req, out)
        #expect(outcome.ending == .timedOut)
        #expect(out.stdout.contains("got-term"))
        #expect(outcome.endedAt >= req.deadline + req.killGrace - 0.05)
        #expect(outcome.endedAt < req.deadline + req.killGrace + 3)
    }

    @Test("a handler that ignores SIGTERM entirely is still killed")
    func ignoresSigterm() async {
        let req = shell("trap '' TERM; sleep 30", deadlineIn: 1, killGrace: 1)
        let outcome = await run(req)
        #expect(outcome.ending == .timedOut)
        #expect(outcome.endedAt >= req.deadline + req.killGrace - 0.05)
        #expect(outcome.endedAt < req.deadline + req.killGrace + 3)
    }

    @Test("a handler launched after its deadline is stopped at once")
    func deadlineAlreadyPast() async {
        // SIGTERM at once, not SIGKILL after the 30 s grace (with room for a loaded machine).
        let req = shell("sleep 60", deadlineIn: -1, killGrace: 30)
        let outcome = await run(req)
        #expect(outcome.ending == .timedOut)
        #expect(outcome.endedAt - outcome.startedAt < 15)
    }

    @Test("handlers run side by side, not one after another")
    func concurrentRuns() async {
        let outcomes = await withTaskGroup(of: (Int32, HandlerOutcome).self) { group in
            for status: Int32 in [0, 100, 7, 0] {
                group.addTask { (status, await run(shell("sleep 2; exit \(status)"))) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.count == 4)
        for (status, outcome) in outcomes { #expect(outcome.ending == .exited(status)) }
        // All four were running at once: the last one started before the first one ended.
        let lastStart = outcomes.map(\.1.startedAt).max() ?? 0
        let firstEnd = outcomes.map(\.1.endedAt).min() ?? 0
        #expect(lastStart < firstEnd)
    }

    // MARK: Launch failures

    @Test("launch failures are reported, not thrown", arguments: [
        ["/nonexistent/drowse-handler"], ["drowse-no-such-program-xyz"], [],
    ])
    func launchFailed(argv: [String]) async {
        var req = shell("true")
        req.argv = argv
        let outcome = await run(req)
        guard case .launchFailed(let why) = outcome.ending else {
            Issue.record("expected launchFailed, got \(outcome.ending)")
            return
        }
        #expect(!why.isEmpty)
        #expect(outcome.result == .failed)
    }

    @Test("a file without execute permission fails to launch")
    func notExecutable() async throws {
        try await withTempDir { dir in
            try put("#!/bin/sh\nexit 0\n", at: "\(dir)/handler.sh")
            chmod("\(dir)/handler.sh", 0o644)
            var req = shell("true")
            req.argv = ["\(dir)/handler.sh"]
            // root may execute a file with no x bit only if some x bit is set: none is.
            let outcome = await run(req)
            guard case .launchFailed = outcome.ending else {
                Issue.record("expected launchFailed, got \(outcome.ending)")
                return
            }
        }
    }

    @Test("a missing working directory fails to launch")
    func missingWorkingDirectory() async {
        let outcome = await run(shell("true", cwd: "/nonexistent-drowse-dir/\(UUID().uuidString)"))
        guard case .launchFailed = outcome.ending else {
            Issue.record("expected launchFailed, got \(outcome.ending)")
            return
        }
    }

    @Test("an unknown user fails to launch")
    func unknownUser() async {
        let outcome = await run(shell("true", user: "drowse-no-such-user-xyz"))
        guard case .launchFailed(let why) = outcome.ending else {
            Issue.record("expected launchFailed, got \(outcome.ending)")
            return
        }
        #expect(why.contains("drowse-no-such-user-xyz"))
    }

    // MARK: Users

    @Test("running as the daemon's own user sets USER and LOGNAME, and HOME unless given")
    func ownUser() async throws {
        let me = try #require(UserAccount.lookup(uid: geteuid()))
        try await withTempDir { dir in
            var outcome = await run(shell("echo \"$HOME|$USER|$LOGNAME\" > \(dir)/a", user: me.name))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/a") == "\(me.home)|\(me.name)|\(me.name)\n")
            outcome = await run(shell("echo \"$HOME\" > \(dir)/b", env: ["HOME": "/custom"], user: me.name))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/b") == "/custom\n")
        }
    }

    @Test("user = \"nobody\" runs the handler as nobody, with nobody's groups only",
          .enabled(if: geteuid() == 0, "switching users needs root"))
    func runsAsNobody() async throws {
        let nobody = try #require(UserAccount.lookup(name: "nobody"))
        try await withTempDir { dir in
            chmod(dir, 0o777)
            let outcome = await run(shell("id -u > uid; id -g > gid; id -G > groups; echo \"$HOME|$USER\" > env", user: "nobody", cwd: dir))
            #expect(outcome.ending == .exited(0))
            #expect(contents("\(dir)/uid") == "\(nobody.uid)\n")
            #expect(nobody.uid == 65534)
            #expect(contents("\(dir)/gid") == "\(nobody.gid)\n")
            let groups = Set((contents("\(dir)/groups") ?? "").split(whereSeparator: \.isWhitespace).compactMap { gid_t($0) })
            #expect(groups == Set(nobody.groups + [nobody.gid]))
            #expect(!groups.contains(0), "root's group leaked into the handler")
            #expect(contents("\(dir)/env") == "\(nobody.home)|nobody\n")
        }
    }

    @Test("switching the handler's user leaves every thread of the daemon as it was",
          .enabled(if: geteuid() == 0, "switching users needs root"))
    func userSwitchStaysInTheChild() async throws {
        // The child shares the daemon's memory until exec (CLONE_VM): glibc's setuid() there
        // would signal every thread of the daemon to change its credentials too.
        func threadIDs() -> [String] {
            let task = "/proc/self/task"
            guard let dir = opendir(task) else { return [] }
            defer { closedir(dir) }
            var out: [String] = []
            while let e = readdir(dir) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                if name.first?.isNumber == true { out.append(name) }
            }
            return out
        }
        try await withTempDir { dir in
            chmod(dir, 0o777)
            for _ in 0..<5 {
                let outcome = await run(shell("id -u > uid", user: "nobody", cwd: dir))
                #expect(outcome.ending == .exited(0))
                #expect(contents("\(dir)/uid") == "65534\n")
            }
            #expect(getuid() == 0 && geteuid() == 0 && getgid() == 0)
            let ids = threadIDs()
            #expect(ids.count > 1)
            for tid in ids {
                let status = contents("/proc/self/task/\(tid)/status") ?? ""
                let uids = status.split(separator: "\n").first { $0.hasPrefix("Uid:") }.map(String.init) ?? "?"
                #expect(uids.split(whereSeparator: \.isWhitespace).dropFirst().allSatisfy { $0 == "0" }, "thread \(tid): \(uids)")
            }
        }
    }

    @Test("the working directory is entered as the app's user, not as root",
          .enabled(if: geteuid() == 0, "switching users needs root"))
    func workingDirectoryEnteredAsUser() async throws {
        try await withTempDir { dir in
            // dir is root's, 0700: nobody may not pass through it to sub/ or sub/data.
            chmod(dir, 0o700)
            try put("secret\n", at: dir + "/sub/data")
            chmod(dir + "/sub", 0o755)
            chmod(dir + "/sub/data", 0o644)
            let out = OutputLines()
            let outcome = await run(shell("cat data", user: "nobody", cwd: dir + "/sub"), out)
            // Bug: drowse_spawn (Sources/CDrowseSys/shim.c) calls chdir(cwd) before setgroups/
            // setgid/setuid, so root enters the folder and the handler, now nobody, reads a file
            // it could never reach by path. systemd's WorkingDirectory= is entered as the user.
            #expect(out.stdout.isEmpty, "nobody read a file behind root's 0700 folder")
            guard case .launchFailed = outcome.ending else {
                Issue.record("launched as nobody in a folder nobody cannot reach: \(outcome.ending)")
                return
            }
        }
    }
    // MARK: Cgroups and runs without a deadline

    @Test("in a cgroup leaf, a child that called setsid is killed at the deadline: the leaf ends empty",
          .enabled(if: testCgroupMount != nil))
    func setsidChildKilledInCgroup() async throws {
        try await withTestCgroups { tree in
            try await withTempDir { dir in
                let leaf = try tree.makeLeaf(app: "test", name: "run-1")
                var req = shell("setsid sh -c 'echo $$ > \(dir)/escaped; exec sleep 300' & sleep 300", deadlineIn: 1, killGrace: 1)
                req.cgroup = leaf
                let outcome = await run(req)
                #expect(outcome.ending == .timedOut)
                #expect(outcome.endedAt - outcome.startedAt < 15, "far below the 300 s a missed kill would take")
                let escaped = try readPID("\(dir)/escaped")
                #expect(tree.pids(leaf).isEmpty)
                #expect(!tree.isPopulated(leaf), "populated 0 when the outcome arrives")
                #expect(isGone(escaped))
                #expect(tree.removeLeafIfEmpty(leaf))
            }
        }
    }

    @Test("the handler and its children run in the leaf; after a normal exit the leftovers go too",
          .enabled(if: testCgroupMount != nil))
    func runsInLeaf() async throws {
        try await withTestCgroups { tree in
            try await withTempDir { dir in
                let leaf = try tree.makeLeaf(app: "test", name: "run-2")
                var req = shell("cat /proc/self/cgroup > \(dir)/cg; setsid sleep 300 & exit 100")
                req.cgroup = leaf
                let outcome = await run(req)
                #expect(outcome.ending == .exited(100))
                let mount = try #require(testCgroupMount)
                let expected = "0::" + String(leaf.dropFirst(mount.count))
                #expect(contents("\(dir)/cg")?.split(separator: "\n").contains { $0 == expected } == true)
                #expect(!tree.isPopulated(leaf))
            }
        }
    }

    @Test("a leaf that cannot be joined fails the launch, saying why")
    func cgroupJoinFails() async throws {
        var req = shell("exit 0")
        req.cgroup = "/nonexistent/drowse-cgroup"
        let outcome = await run(req)
        guard case .launchFailed(let why) = outcome.ending else { Issue.record("launched: \(outcome.ending)"); return }
        #expect(why.contains("cannot join cgroup /nonexistent/drowse-cgroup"))
    }

    @Test("a directory that is not a cgroup is refused, not joined")
    func notACgroup() async throws {
        try await withTempDir { dir in
            var req = shell("exit 0")
            req.cgroup = dir
            let outcome = await run(req)
            guard case .launchFailed(let why) = outcome.ending else { Issue.record("launched: \(outcome.ending)"); return }
            #expect(why.contains("cannot join cgroup \(dir)"))
        }
    }

    @Test("inside a leaf (clone3 into the cgroup, the child on its own memory), a failed exec is still reported",
          .enabled(if: testCgroupMount != nil))
    func execFailureInLeaf() async throws {
        try await withTestCgroups { tree in
            try await withTempDir { dir in
                let leaf = try tree.makeLeaf(app: "test", name: "run-3")
                // A file that exists but is not executable: resolved, then refused by execve.
                try FileSystem.writeAtomically("\(dir)/not-exec", Array("#!/bin/sh\n".utf8), mode: 0o644)
                var req = shell("exit 0")
                req.argv = ["\(dir)/not-exec"]
                req.cgroup = leaf
                let outcome = await run(req)
                guard case .launchFailed(let why) = outcome.ending else { Issue.record("launched: \(outcome.ending)"); return }
                #expect(why.contains(String(cString: strerror(EACCES))))
                #expect(!tree.isPopulated(leaf))
            }
        }
    }

    @Test("no deadline: the run goes on until terminate(), which ends it with SIGTERM, not as timed out")
    func terminateResident() async throws {
        var req = shell("sleep 300")
        req.deadline = .infinity
        let handle = ProcessLauncher().start(req, output: { _, _ in })
        let pid = try #require(handle.pid)
        try await Task.sleep(for: .milliseconds(300))
        #expect(!isGone(pid))
        // The end as the supervising thread saw it (on the launcher's clock, the wall clock), not
        // when this test's task resumed: other tests may hold every thread meanwhile.
        let start = WallClock.now()
        handle.terminate()
        let outcome = await handle.outcome()
        #expect(outcome.ending == .signaled(SIGTERM))
        #expect(outcome.endedAt - start < 2)
        #expect(isGone(pid))
        handle.terminate()  // after the end: nothing happens
    }

    @Test("terminate() of a run that ignores SIGTERM: SIGKILL after the grace")
    func terminateIgnored() async throws {
        var req = shell("trap '' TERM; echo up; while :; do sleep 1; done", killGrace: 0.5)
        req.deadline = .infinity
        let out = OutputLines()
        let handle = ProcessLauncher().start(req, output: out.callback)
        _ = await waitUntil(3) { out.stdout == ["up"] }
        let start = WallClock.now()
        handle.terminate()
        let outcome = await handle.outcome()
        #expect(outcome.ending == .signaled(SIGKILL))
        let took = outcome.endedAt - start
        #expect(took >= 0.45 && took < 3)
    }

    @Test("terminate() in a cgroup leaf: SIGTERM to every process in it, setsid or not",
          .enabled(if: testCgroupMount != nil))
    func terminateInLeaf() async throws {
        try await withTestCgroups { tree in
            let leaf = try tree.makeLeaf(app: "test", name: "resident")
            var req = shell("setsid sleep 300 & sleep 300")
            req.deadline = .infinity
            req.cgroup = leaf
            let handle = ProcessLauncher().start(req, output: { _, _ in })
            _ = await waitUntil(3) { tree.pids(leaf).count == 3 }
            handle.terminate()
            #expect(await handle.outcome().ending == .signaled(SIGTERM))
            #expect(!tree.isPopulated(leaf))
        }
    }
}

private func waitUntil(_ seconds: Double, _ cond: () -> Bool) async -> Bool {
    let end = WallClock.monotonic() + seconds
    while WallClock.monotonic() < end {
        if cond() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return cond()
}
