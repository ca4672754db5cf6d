@testable import DrowseSystem
import DrowseCore
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The cgroup2 mount of this machine, or nil (then the tests on the real tree are skipped).
let testCgroupMount: String? = {
    guard let text = try? FileSystem.readText("/proc/self/mountinfo"),
          let mount = AppCgroups.cgroup2Mount(mountinfo: text),
          FileSystem.exists(mount + "/cgroup.procs"), access(mount, W_OK) == 0 else { return nil }
    return mount
}()

private let counter = Atomic<Int>(0)

/// A fresh tree under the cgroup2 mount (`drowse-test-<pid>-<n>`), removed afterwards with
/// whatever still runs in it.
func withTestCgroups<T>(_ body: (AppCgroups) async throws -> T) async throws -> T {
    let mount = try #require(testCgroupMount)
    let name = "drowse-test-\(getpid())-\(counter.add(1, ordering: .relaxed).newValue)"
    let tree = try AppCgroups.setUp(setting: .path(name)).get()
    defer { removeTestTree(tree.base, mount: mount) }
    return try await body(tree)
}

/// Kills and removes a test tree, deepest first.
func removeTestTree(_ path: String, mount: String) {
    guard path.hasPrefix(mount + "/drowse-test-") else { return }
    AppCgroups.kill(path)
    _ = AppCgroups.waitForEvents(path, timeout: 2) { $0["populated"] == false }
    func remove(_ dir: String) {
        for name in FileSystem.listDirectory(dir) where FileSystem.isDirectory(dir + "/" + name) { remove(dir + "/" + name) }
        rmdir(dir)
    }
    remove(path)
}

/// A shell script started in `leaf` with no deadline.
func startIn(_ leaf: String?, _ script: String, killGrace: Double = 1) -> HandlerRun {
    ProcessLauncher().start(
        LaunchRequest(app: "test", event: .fetch, argv: ["/bin/sh", "-c", script], user: nil, workingDirectory: nil,
                      environment: ["PATH": "/usr/bin:/bin"], stdin: [], deadline: .infinity, killGrace: killGrace, cgroup: leaf),
        output: { _, _ in })
}

/// utime + stime of a process, in clock ticks.
func cpuTicks(_ pid: pid_t) -> Int? {
    guard let stat = try? FileSystem.readText("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    // Field 3 (state) is fields[0]; utime is field 14, stime 15.
    guard fields.count > 13, let u = Int(fields[11]), let s = Int(fields[12]) else { return nil }
    return u + s
}

func processState(_ pid: pid_t) -> Character? {
    guard let stat = try? FileSystem.readText("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
    return stat[stat.index(close, offsetBy: 2)]
}

/// Waits (polling, test only) for `cond` for at most `seconds`.
func eventually(_ seconds: Double = 5, _ cond: () -> Bool) async -> Bool {
    let end = WallClock.monotonic() + seconds
    while WallClock.monotonic() < end {
        if cond() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return cond()
}

private let hybridMountinfo = """
    24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
    31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
    """

@Suite("AppCgroups: parsing")
struct AppCgroupsParsingTests {
    @Test("the cgroup2 mount of a hybrid system is the unified one, not a v1 hierarchy")
    func hybrid() {
        #expect(AppCgroups.cgroup2Mount(mountinfo: hybridMountinfo) == "/sys/fs/cgroup/unified")
    }

    @Test("a unified system, optional fields before the separator")
    func unified() {
        let text = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 master:2 - cgroup2 cgroup2 rw,nsdelegate\n"
        #expect(AppCgroups.cgroup2Mount(mountinfo: text) == "/sys/fs/cgroup")
    }

    @Test("octal escapes in the mount path are decoded")
    func escapes() {
        let text = #"50 24 0:40 / /mnt/my\040cgroup\134x rw,relatime - cgroup2 none rw"#
        #expect(AppCgroups.cgroup2Mount(mountinfo: text) == #"/mnt/my cgroup\x"#)
        #expect(AppCgroups.unescapeMountField(#"a\011b\012c"#) == "a\tb\nc")
        #expect(AppCgroups.unescapeMountField(#"no\9escape\04"#) == #"no\9escape\04"#)
    }

    @Test("no cgroup2 file system, or a line that is not mountinfo: nil")
    func noCgroup2() {
        #expect(AppCgroups.cgroup2Mount(mountinfo: "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n") == nil)
        #expect(AppCgroups.cgroup2Mount(mountinfo: "garbage - cgroup2\n\n") == nil)
        // A mount *named* cgroup2 of another type is not it.
        #expect(AppCgroups.cgroup2Mount(mountinfo: "1 2 0:1 / /cgroup2 rw - tmpfs cgroup2x rw\n") == nil)
    }

    @Test("own cgroup from /proc/self/cgroup: hybrid, systemd service, v1 only")
    func ownCgroup() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/abb8\n1:cpu:/\n0::/\n"
        #expect(AppCgroups.ownCgroup(procSelfCgroup: hybrid) == "/")
        #expect(AppCgroups.ownCgroup(procSelfCgroup: "0::/system.slice/drowsed.service\n") == "/system.slice/drowsed.service")
        #expect(AppCgroups.ownCgroup(procSelfCgroup: "4:memory:/x\n1:cpu:/\n") == nil)
    }

    @Test("placement: auto in the root cgroup → <mount>/drowse, no move")
    func autoRoot() {
        #expect(AppCgroups.placement(setting: CgroupSetting("auto")!, mount: "/sys/fs/cgroup/unified", own: "/")
                == .init(base: "/sys/fs/cgroup/unified/drowse", moveSelf: false))
    }

    @Test("placement: auto in a service's cgroup → that cgroup, and drowsed moves into <base>/daemon")
    func autoService() {
        #expect(AppCgroups.placement(setting: CgroupSetting("auto")!, mount: "/sys/fs/cgroup", own: "/system.slice/drowsed.service")
                == .init(base: "/sys/fs/cgroup/system.slice/drowsed.service", moveSelf: true))
        // Started again from inside an earlier drowsed's daemon cgroup: the same base.
        #expect(AppCgroups.placement(setting: CgroupSetting("auto")!, mount: "/sys/fs/cgroup", own: "/system.slice/drowsed.service/daemon")
                == .init(base: "/sys/fs/cgroup/system.slice/drowsed.service", moveSelf: true))
        #expect(AppCgroups.placement(setting: CgroupSetting("auto")!, mount: "/sys/fs/cgroup", own: nil) == nil)
    }

    @Test("placement: relative and absolute paths, off, and paths that leave the mount")
    func paths() {
        let m = "/sys/fs/cgroup/unified"
        #expect(AppCgroups.placement(setting: CgroupSetting("drowse-x")!, mount: m, own: "/") == .init(base: m + "/drowse-x", moveSelf: false))
        #expect(AppCgroups.placement(setting: CgroupSetting("a/b/")!, mount: m + "/", own: "/") == .init(base: m + "/a/b", moveSelf: false))
        #expect(AppCgroups.placement(setting: CgroupSetting(m + "/mine")!, mount: m, own: "/") == .init(base: m + "/mine", moveSelf: false))
        // The absolute path of drowsed's own cgroup: it moves itself as with auto.
        #expect(AppCgroups.placement(setting: CgroupSetting(m + "/svc")!, mount: m, own: "/svc") == .init(base: m + "/svc", moveSelf: true))
        #expect(AppCgroups.placement(setting: CgroupSetting("/tmp/x")!, mount: m, own: "/") == nil)
        #expect(CgroupSetting("../x") == nil, "refused as the configuration is read")
        #expect(AppCgroups.placement(setting: CgroupSetting("off")!, mount: m, own: "/") == nil)
    }

    @Test("setUp: off is refused with a reason; so is a path outside the mount")
    func setUpRefused() {
        guard case .failure(let off) = AppCgroups.setUp(setting: .off) else { Issue.record("off set up a tree"); return }
        #expect(off.description.contains("off"))
        guard case .failure(let outside) = AppCgroups.setUp(setting: .path("/tmp/drowse-not-a-cgroup")) else {
            Issue.record("a path outside the cgroup2 mount was accepted"); return
        }
        #expect(outside.description.contains("not a path in the cgroup2 file system"))
        #expect(!FileSystem.exists("/tmp/drowse-not-a-cgroup"))
    }
}

@Suite("AppCgroups: the real tree", .enabled(if: testCgroupMount != nil))
struct AppCgroupsTreeTests {
    @Test("setUp with a relative path makes <base>/apps; apps and leaves are listed and removed")
    func layout() async throws {
        try await withTestCgroups { tree in
            let mount = try #require(testCgroupMount)
            #expect(tree.base.hasPrefix(mount + "/drowse-test-"))
            #expect(tree.mechanism == .cgroup)
            #expect(FileSystem.isDirectory(tree.base + "/apps"))
            #expect(!FileSystem.exists(tree.base + "/daemon"), "not drowsed's own cgroup: no move")
            let app = try tree.ensureApp("weather")
            #expect(app == tree.appPath("weather") && FileSystem.isDirectory(app))
            #expect(try tree.ensureApp("weather") == app, "again: the same")
            let resident = try tree.makeLeaf(app: "weather", name: "resident")
            let run = try tree.makeLeaf(app: "weather", name: "run-1")
            _ = try tree.ensureApp("logger")
            #expect(tree.existingApps() == ["logger", "weather"])
            #expect(tree.leaves(app: "weather") == ["resident", "run-1"])
            #expect(!tree.isPopulated(resident))
            #expect(tree.removeLeafIfEmpty(run))
            #expect(tree.leaves(app: "weather") == ["resident"])
            #expect(tree.removeApp("weather"))
            #expect(tree.existingApps() == ["logger"])
            #expect(throws: SystemError.self) { try tree.ensureApp("../escape") }
            #expect(throws: SystemError.self) { try tree.makeLeaf(app: "logger", name: "cgroup.procs") }
        }
    }

    @Test("a run's leaf that ended empty takes the next run; one that had to be killed, or whose app was, never takes a process again")
    func reuse() async throws {
        try await withTestCgroups { tree in
            let clean = try tree.makeLeaf(app: "weather", name: "run-1")
            var outcome = await startIn(clean, "exit 0").outcome()
            #expect(outcome.ending == .exited(0))
            #expect(tree.isReusable(clean) && !tree.isPopulated(clean), "not killed at its end: it was empty")
            outcome = await startIn(clean, "exit 3").outcome()
            #expect(outcome.ending == .exited(3), "a second run in the same leaf runs")
            // A run that ends while its leaf still holds a process: the leaf is killed at that end,
            // and not used again. The process left is another run's, so that it is drowsed's own
            // child: an orphan left by a handler is adopted, and any run's end elsewhere in this
            // process (tests run side by side) may kill it first and empty the leaf.
            let messy = try tree.makeLeaf(app: "weather", name: "run-2")
            let stays = startIn(messy, "exec sleep 30")
            outcome = await startIn(messy, "exit 0").outcome()
            #expect(outcome.ending == .exited(0))
            #expect(await stays.outcome().ending == .signaled(SIGKILL), "the leaf was killed at the first run's end")
            #expect(!tree.isPopulated(messy))
            #expect(!tree.isReusable(messy))
            #expect(tree.removeLeafIfEmpty(messy))
            // The app's cgroup killed as a whole: none of its leaves is reusable.
            let other = try tree.makeLeaf(app: "weather", name: "run-3")
            tree.kill(tree.appPath("weather"))
            #expect(!tree.isReusable(other) && !tree.isReusable(clean))
            // A leaf that is gone is not reusable either.
            #expect(tree.removeLeafIfEmpty(other) && !tree.isReusable(other))
        }
    }

    @Test("a run whose leaf emptied by itself: what it orphaned and has ended is reaped at its end, and the leaf is not killed")
    func endedOrphansReaped() async throws {
        try await withTestCgroups { tree in
            let leaf = try tree.makeLeaf(app: "weather", name: "run-1")
            let file = "/tmp/drowse-orphan-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            defer { unlink(file) }
            // The grandchild outlives its parent, so the handler (a subreaper) adopts it. It ends
            // once the handler has become `sleep`, which never waits for it: a zombie, drowsed's
            // once the handler exits. (A shell would reap it.)
            let script = """
                h=$$
                (setsid sh -c "while read -r c < /proc/$h/comm && [ \\"\\$c\\" != sleep ]; do :; done; echo \\$\\$ > \(file)" &)
                exec sleep 2
                """
            let outcome = await startIn(leaf, script).outcome()
            #expect(outcome.ending == .exited(0))
            let orphan = try #require(pid_t((try FileSystem.readText(file)).trimmingCharacters(in: .whitespacesAndNewlines)))
            #expect(Glibc.kill(orphan, 0) != 0 && errno == ESRCH, "the ended orphan was reaped by the run's end")
            #expect(tree.isReusable(leaf), "nothing was left alive: the leaf was not killed")
        }
    }

    @Test("setUp on drowsed's own cgroup moves this process into <base>/daemon")
    func movesSelf() async throws {
        let mount = try #require(testCgroupMount)
        let original = try #require(AppCgroups.ownCgroup(procSelfCgroup: try FileSystem.readText("/proc/self/cgroup")))
        let name = "drowse-test-\(getpid())-\(counter.add(1, ordering: .relaxed).newValue)"
        let base = mount + "/" + name
        let result = AppCgroups.setUp(placement: .init(base: base, moveSelf: true), mount: mount)
        // Back where it was before anything can fail, with any child started meanwhile by other tests.
        defer {
            // This process first, so that what it starts from now on is born outside the tree.
            try? AppCgroups.writeFile(mount + original + "/cgroup.procs", "0")
            for p in AppCgroups.pids(base + "/daemon") { try? AppCgroups.writeFile(mount + original + "/cgroup.procs", "\(p)") }
            removeTestTree(base, mount: mount)
        }
        let tree = try result.get()
        #expect(AppCgroups.pids(tree.base + "/daemon").contains(getpid()))
        #expect(AppCgroups.ownCgroup(procSelfCgroup: try FileSystem.readText("/proc/self/cgroup")) == "/\(name)/daemon")
        #expect(FileSystem.isDirectory(base + "/apps"))
    }

    @Test("freeze stops the CPU of the app's processes (waitFrozen, frozen 1), thaw lets them run")
    func freezeThaw() async throws {
        try await withTestCgroups { tree in
            let leaf = try tree.makeLeaf(app: "spin", name: "resident")
            let run = startIn(leaf, "while :; do :; done")
            let pid = try #require(run.pid)
            #expect(tree.pids(leaf) == [pid])
            #expect(tree.isPopulated(leaf) && tree.isPopulated(tree.appPath("spin")))
            #expect(!tree.isFrozen(app: "spin"))
            try tree.freeze(app: "spin")
            #expect(tree.waitFrozen(app: "spin", timeout: 5))
            #expect(tree.isFrozen(app: "spin"))
            let before = try #require(cpuTicks(pid))
            try await Task.sleep(for: .milliseconds(500))
            #expect(cpuTicks(pid) == before, "a frozen process gains no CPU time")
            try tree.thaw(app: "spin")
            #expect(!tree.isFrozen(app: "spin"))
            #expect(await eventually { (cpuTicks(pid) ?? 0) > before }, "thawed, it runs again")
            run.terminate()
            #expect(await run.outcome().ending == .signaled(SIGTERM))
        }
    }

    @Test("waitFrozen times out on an app that is not being frozen")
    func waitFrozenTimesOut() async throws {
        try await withTestCgroups { tree in
            let leaf = try tree.makeLeaf(app: "a", name: "resident")
            let run = startIn(leaf, "sleep 300")
            let start = WallClock.monotonic()
            #expect(!tree.waitFrozen(app: "a", timeout: 0.3))
            #expect(WallClock.monotonic() - start >= 0.29)
            tree.kill(tree.appPath("a"))
            #expect(await run.outcome().ending == .signaled(SIGKILL))
        }
    }

    @Test("kill empties a frozen app's cgroup, setsid children included; so does the fallback without cgroup.kill")
    func kill() async throws {
        try await withTestCgroups { tree in
            for (name, useFallback) in [("k1", false), ("k2", true)] {
                let leaf = try tree.makeLeaf(app: name, name: "resident")
                let run = startIn(leaf, "setsid sleep 300 & setsid sh -c 'sleep 300 & sleep 300' & sleep 300")
                #expect(await eventually { tree.pids(leaf).count >= 5 })
                try tree.freeze(app: name)
                if useFallback {
                    try tree.thaw(app: name)
                    AppCgroups.killByPids(tree.appPath(name))
                } else {
                    tree.kill(tree.appPath(name))
                }
                #expect(AppCgroups.waitForEvents(leaf, timeout: 5) { $0["populated"] == false } == .reached)
                #expect(tree.pids(leaf).isEmpty)
                #expect(await run.outcome().ending == .signaled(SIGKILL))
                #expect(tree.removeApp(name))
            }
        }
    }

    @Test("PopulatedWatch reports a cgroup that empties, without a timer; stop() before that reports nothing")
    func populatedWatch() async throws {
        try await withTestCgroups { tree in
            let leaf = try tree.makeLeaf(app: "w", name: "resident")
            let run = startIn(leaf, "sleep 300")
            let fired = Atomic<Int>(0)
            let watch = try PopulatedWatch.start(path: leaf) { fired.add(1, ordering: .relaxed) }.get()
            try await Task.sleep(for: .milliseconds(200))
            #expect(fired.load(ordering: .relaxed) == 0, "still populated")
            tree.kill(leaf)
            #expect(await eventually { fired.load(ordering: .relaxed) == 1 })
            watch.stop()
            _ = await run.outcome()

            let leaf2 = try tree.makeLeaf(app: "w", name: "resident2")
            let run2 = startIn(leaf2, "sleep 300")
            let fired2 = Atomic<Int>(0)
            let watch2 = try PopulatedWatch.start(path: leaf2) { fired2.add(1, ordering: .relaxed) }.get()
            let t = WallClock.monotonic()
            watch2.stop()
            watch2.stop()
            #expect(WallClock.monotonic() - t < 1, "stop joins promptly")
            tree.kill(leaf2)
            _ = await run2.outcome()
            #expect(fired2.load(ordering: .relaxed) == 0)
            #expect(throws: SystemError.self) { try PopulatedWatch.start(path: tree.base + "/nope") {}.get() }
        }
    }
}

@Suite("SignalFreezer")
struct SignalFreezerTests {
    @Test("stop and resume a process group with SIGSTOP / SIGCONT")
    func stopResume() async throws {
        let run = startIn(nil, "sleep 300 & while :; do :; done")
        let pid = try #require(run.pid)
        let freezer = SignalFreezer()
        #expect(freezer.stop(processGroups: [pid]).isEmpty)
        #expect(await eventually { processState(pid) == "T" })
        let before = try #require(cpuTicks(pid))
        try await Task.sleep(for: .milliseconds(300))
        #expect(cpuTicks(pid) == before)
        #expect(freezer.resume(processGroups: [pid]).isEmpty)
        #expect(await eventually { processState(pid) != "T" })
        #expect(freezer.stop(processGroups: [999_999_999, 1]) == [999_999_999, 1], "gone or refused: reported")
        run.terminate()
        #expect(await run.outcome().ending == .signaled(SIGTERM))
    }
}

@Suite("Leaves of another drowsed")
struct LeafOwnerTests {
    @Test("a leaf named for a live process called drowsed is another agent's; ours, a dead pid's or another program's are not")
    func owner() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("drowse-owner-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        // A process whose name (comm: its executable's file name) is "drowsed".
        let fake = dir.appendingPathComponent("drowsed").path
        try FileManager.default.copyItem(atPath: "/bin/sleep", toPath: fake)
        var pid: pid_t = 0
        let args = [strdup(fake), strdup("30"), nil]
        defer { for a in args { free(a) } }
        #expect(posix_spawn(&pid, fake, nil, nil, args, environ) == 0)
        defer {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        }
        // Named once it has exec'd.
        for _ in 0..<400 where (try? FileSystem.readText("/proc/\(pid)/comm")) != "drowsed\n" { usleep(5000) }
        #expect(AppCgroups.ownedByAnotherLiveDrowsed("run-\(pid)-7"), "\((try? FileSystem.readText("/proc/\(pid)/comm")) ?? "unreadable")")
        #expect(AppCgroups.ownedByAnotherLiveDrowsed("resident-\(pid)-1"))
        #expect(!AppCgroups.ownedByAnotherLiveDrowsed("run-\(getpid())-7"), "this drowsed's own")
        #expect(!AppCgroups.ownedByAnotherLiveDrowsed("run-1-7"), "pid 1 is not a drowsed")
        #expect(!AppCgroups.ownedByAnotherLiveDrowsed("run-999999999-7"), "no such process")
        #expect(!AppCgroups.ownedByAnotherLiveDrowsed("resident") && !AppCgroups.ownedByAnotherLiveDrowsed("run-x-1"))
    }
}
