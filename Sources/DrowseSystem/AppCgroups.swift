#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys
import Synchronization
import DrowseCore

/// How an app's processes are stopped while it is suspended (`drowse status`, `lifecycle.suspension`).
package enum SuspensionMechanism: String, Sendable, Equatable {
    /// The app's cgroup v2 is frozen (`cgroup.freeze`): the whole subtree, children included.
    case cgroup = "cgroup-v2"
    /// No writable cgroup v2: SIGSTOP / SIGCONT to the app's process groups (`SignalFreezer`).
    case signals = "sigstop"
    case none
}

/// The cgroup v2 subtree drowsed owns (docs/handlers.md, "Containment"):
///
///     <base>/daemon            drowsed itself, when <base> is the cgroup it was started in
///     <base>/apps/<app>/       one per app, frozen and thawed as a whole
///     <base>/apps/<app>/resident-…   the resident process and its children (a fresh leaf per start)
///     <base>/apps/<app>/run-…        one leaf per handler run, killed with cgroup.kill
///
/// Freeze and kill are core cgroup v2 features that need no controller. Per-app limits
/// (`pids.max`, `memory.max` on `<base>/apps/<app>`) need the pids and memory controllers
/// enabled in `<base>` and `<base>/apps` (`enableControllers`); cgroup v2's no-internal-processes
/// rule allows that only in a cgroup with no processes of its own, which is why drowsed lives in
/// `<base>/daemon`, and handlers in leaves below their app. Every wait blocks in poll(2) on `cgroup.events`
/// (the kernel signals POLLPRI when it changes): no timers, no sleep loops.
package final class AppCgroups: Sendable {
    /// The folder of drowsed's subtree (a directory in the cgroup2 file system).
    package let base: String
    /// Always `.cgroup` for a tree that was set up; `SignalFreezer` is the fallback when `setUp` fails.
    package let mechanism: SuspensionMechanism
    /// Where the cgroup2 file system is mounted (found in /proc/self/mountinfo).
    package let mount: String

    init(base: String, mount: String) {
        self.base = base
        self.mount = mount
        self.mechanism = .cgroup
    }

    // MARK: Setting up

    /// Where the tree goes and whether drowsed moves itself into `<base>/daemon`.
    package struct Placement: Sendable, Equatable {
        package var base: String
        /// `<base>` is the cgroup drowsed was started in: it moves into `<base>/daemon`, as
        /// systemd's `Delegate=yes` requires (no processes in inner nodes).
        package var moveSelf: Bool
    }

    /// Sets up the tree for `setting` (`[lifecycle] cgroup`): "auto", "off", an absolute path, or a
    /// path relative to the cgroup2 mount. Fails, saying why, when there is no writable cgroup v2
    /// with `cgroup.freeze` there (the caller then falls back to `SignalFreezer`).
    package static func setUp(setting: CgroupSetting) -> Result<AppCgroups, SystemError> {
        if setting == .off { return .failure(SystemError("cgroup = \"off\" in the configuration", errno: ECANCELED)) }
        let mountinfo: String, ownText: String
        do {
            mountinfo = try FileSystem.readText("/proc/self/mountinfo")
            ownText = try FileSystem.readText("/proc/self/cgroup")
        } catch {
            return .failure(error)
        }
        guard let mount = cgroup2Mount(mountinfo: mountinfo) else {
            return .failure(SystemError("no cgroup2 file system in /proc/self/mountinfo", errno: ENOENT))
        }
        let own = ownCgroup(procSelfCgroup: ownText)
        guard let placement = placement(setting: setting, mount: mount, own: own) else {
            return .failure(SystemError("cgroup = \"\(setting)\": not a path in the cgroup2 file system at \(mount)"
                                        + (own == nil ? " (and no cgroup v2 line in /proc/self/cgroup)" : ""), errno: EINVAL))
        }
        return setUp(placement: placement, mount: mount)
    }

    /// Creates the folders of `placement` (and moves this process when it says so).
    package static func setUp(placement: Placement, mount: String) -> Result<AppCgroups, SystemError> {
        let tree = AppCgroups(base: placement.base, mount: mount)
        do {
            try FileSystem.makeDirectories(placement.base)
            if placement.moveSelf {
                try FileSystem.makeDirectories(placement.base + "/daemon")
                try writeFile(placement.base + "/daemon/cgroup.procs", "0")
            }
            try FileSystem.makeDirectories(placement.base + "/apps")
        } catch {
            return .failure(error)
        }
        guard FileSystem.exists(placement.base + "/apps/cgroup.freeze") else {
            return .failure(SystemError("\(placement.base)/apps has no cgroup.freeze (a kernel before 5.2)", errno: ENOTSUP))
        }
        guard access(placement.base + "/apps/cgroup.procs", W_OK) == 0 else {
            return .failure(SystemError.last("\(placement.base)/apps/cgroup.procs is not writable"))
        }
        return .success(tree)
    }

    /// The cgroup2 mount point in the text of /proc/self/mountinfo (fstype `cgroup2`, the field
    /// after ` - `); escapes such as `\040` in the path are decoded. The first one wins.
    package static func cgroup2Mount(mountinfo: String) -> String? {
        for line in mountinfo.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard let dash = fields.firstIndex(of: "-"), dash >= 5, dash + 1 < fields.count else { continue }
            if fields[dash + 1] == "cgroup2" { return unescapeMountField(String(fields[4])) }
        }
        return nil
    }

    /// Decodes the octal escapes the kernel writes in mountinfo paths (`\040` space, `\011` tab,
    /// `\012` newline, `\134` backslash).
    package static func unescapeMountField(_ field: String) -> String {
        let b = Array(field.utf8)
        var out: [UInt8] = []
        var i = 0
        func octal(_ c: UInt8) -> UInt8? { c >= 0x30 && c <= 0x37 ? c - 0x30 : nil }
        while i < b.count {
            if b[i] == 0x5C, i + 3 < b.count, let a = octal(b[i + 1]), let c = octal(b[i + 2]), let d = octal(b[i + 3]), a <= 3 {
                out.append(a << 6 | c << 3 | d)
                i += 4
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The cgroup v2 path of this process in the text of /proc/self/cgroup (the `0::/path` line),
    /// nil when there is none (a pure cgroup v1 system). A path the kernel marks as unreachable
    /// (another namespace's, shown with ` (deleted)` or outside our root) is taken as it is.
    package static func ownCgroup(procSelfCgroup: String) -> String? {
        for line in procSelfCgroup.split(separator: "\n") where line.hasPrefix("0::") {
            let path = String(line.dropFirst(3))
            return path.isEmpty ? "/" : path
        }
        return nil
    }

    /// Where the tree goes for `setting` (pure): "auto" is drowsed's own cgroup `own` (under the
    /// mount), or `<mount>/drowse` when that is the root cgroup; an absolute path is taken as it
    /// is and must lie under the mount; any other path is relative to the mount. When the result
    /// is drowsed's own cgroup, drowsed moves into `<base>/daemon`. A drowsed started from inside
    /// an earlier drowsed's `daemon` cgroup (its own cgroup ends in `/daemon`) takes the parent.
    package static func placement(setting: CgroupSetting, mount: String, own: String?) -> Placement? {
        let mount = trimmed(mount)
        let ownDir: String?
        if let own, own != "/" {
            var dir = trimmed(mount + own)
            if dir.hasSuffix("/daemon") { dir.removeLast("/daemon".count) }
            ownDir = dir
        } else {
            ownDir = own == nil ? nil : mount
        }
        let base: String
        switch setting {
        case .auto:
            guard let ownDir else { return nil }
            base = ownDir == mount ? mount + "/drowse" : ownDir
        case .off:
            return nil
        case .path(let setting):
            if setting.hasPrefix("/") {
                base = trimmed(setting)
                guard base.hasPrefix(mount + "/") else { return nil }
            } else {
                base = trimmed(mount + "/" + setting)
            }
            let parts = base.split(separator: "/")
            guard !parts.contains("..") && !parts.contains(".") else { return nil }
        }
        return Placement(base: base, moveSelf: base == ownDir && ownDir != mount)
    }

    private static func trimmed(_ path: String) -> String {
        var p = path
        while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
        while p.contains("//") { p = p.replacingOccurrences("//", "/") }
        return p
    }

    // MARK: The tree

    // MARK: Limits

    /// Enables the `pids` and `memory` controllers down to the app cgroups where the tree has
    /// them (`cgroup.controllers` of `<base>`): in `<base>`, then in `<base>/apps`. A controller
    /// the parent does not give (a hybrid tree whose pids and memory live in cgroup v1, or a
    /// delegation without them) is left out; the rest still work. Returns those enabled.
    @discardableResult
    package func enableControllers() -> Set<String> {
        let offered = Set(((try? FileSystem.readText(base + "/cgroup.controllers")) ?? "").split(whereSeparator: { $0 == " " || $0 == "\n" })
                            .map(String.init))
        var enabled: Set<String> = []
        for c in ["pids", "memory"] where offered.contains(c) {
            // Fails (EBUSY) while <base> holds processes: drowsed must be in <base>/daemon by now.
            guard (try? Self.writeFile(base + "/cgroup.subtree_control", "+" + c)) != nil,
                  (try? Self.writeFile(base + "/apps/cgroup.subtree_control", "+" + c)) != nil else { continue }
            enabled.insert(c)
        }
        return enabled
    }

    /// Writes the app's `pids.max` and `memory.max` ("max" for no limit; `memory.swap.max` 0 with
    /// a memory limit, so the limit is not dodged into swap). Returns which of the two the cgroup
    /// holds now; the caller falls back to rlimits for the others.
    package func setLimits(app: String, processes: Int?, memory: Int64?) -> (processes: Bool, memory: Bool) {
        guard let path = try? ensureApp(app) else { return (false, false) }
        let pids = (try? Self.writeFile(path + "/pids.max", processes.map(String.init) ?? "max")) != nil
        let mem = (try? Self.writeFile(path + "/memory.max", memory.map(String.init) ?? "max")) != nil
        if mem { _ = try? Self.writeFile(path + "/memory.swap.max", memory == nil ? "max" : "0") }
        return (pids, mem)
    }

    /// `<base>/apps/<app>` (not created).
    package func appPath(_ app: String) -> String { base + "/apps/" + app }

    /// Creates the app's cgroup if needed; returns its path.
    @discardableResult
    package func ensureApp(_ app: String) throws(SystemError) -> String {
        try Self.checkName(app)
        let path = appPath(app)
        try Sys.mkdir(path, 0o755)
        return path
    }

    /// Creates (or reuses) the leaf `<base>/apps/<app>/<name>` (e.g. `resident`, `run-7`).
    package func makeLeaf(app: String, name: String) throws(SystemError) -> String {
        try Self.checkName(name)
        let path = try ensureApp(app) + "/" + name
        try Sys.mkdir(path, 0o755)
        return path
    }

    /// At drowsed's stop: removes every empty leaf and app folder, `<base>/apps`, and `<base>`
    /// itself unless this process lives in it (under systemd, `<base>/daemon`: systemd removes
    /// the unit's cgroup once drowsed has exited). What still runs keeps its folders.
    package func removeEmptyTree() {
        let apps = base + "/apps"
        // A folder that will not go (still populated, or another drowsed's) stays: nothing to do.
        for app in FileSystem.listDirectory(apps) where FileSystem.isDirectory(apps + "/" + app) {
            for leaf in leaves(app: app) { removeLeafIfEmpty(appPath(app) + "/" + leaf) }
            removeLeafIfEmpty(appPath(app))
        }
        removeLeafIfEmpty(apps)
        let own = (try? FileSystem.readText("/proc/self/cgroup")).flatMap { Self.ownCgroup(procSelfCgroup: $0) }
        if let own, (mount + own + "/").hasPrefix(base + "/") { return }
        removeLeafIfEmpty(base)
    }

    /// Removes a leaf once nothing runs in it; false while populated (EBUSY) or when already gone.
    @discardableResult
    package func removeLeafIfEmpty(_ path: String) -> Bool {
        guard rmdir(path) == 0 else { return false }
        Self.killed.withLock { set in if !set.isEmpty { set.remove(path) } }
        return true
    }

    /// Freezes the app's whole subtree (`cgroup.freeze` = 1); the kernel finishes asynchronously,
    /// see `waitFrozen`.
    package func freeze(app: String) throws(SystemError) {
        try Self.writeFile(appPath(app) + "/cgroup.freeze", "1")
    }

    package func thaw(app: String) throws(SystemError) {
        try Self.writeFile(appPath(app) + "/cgroup.freeze", "0")
    }

    /// Whether every process in the app's subtree is frozen now (`frozen 1` in cgroup.events).
    package func isFrozen(app: String) -> Bool { Self.eventsField(appPath(app), "frozen") == true }

    /// Waits, blocked in poll(2) on cgroup.events, until the app is frozen; false at `timeout`
    /// seconds or when the events file cannot be watched.
    package func waitFrozen(app: String, timeout: Double) -> Bool {
        Self.waitForEvents(appPath(app), timeout: timeout) { $0["frozen"] == true } == .reached
    }

    /// Kills every process in `path` and below: `cgroup.kill` (kernel 5.14). Without that file,
    /// SIGKILL to every pid in `cgroup.procs`, in rounds until it is empty (a process may fork
    /// between the read and the kill), each round waiting on cgroup.events for at most 100 ms.
    package func kill(_ path: String) { Self.kill(path) }

    package static func kill(_ path: String) {
        killed.withLock { _ = $0.insert(path) }
        if (try? writeFile(path + "/cgroup.kill", "1")) != nil { return }
        killByPids(path)
    }

    /// Cgroups `kill` was used on, until they are removed: Linux 6.18 kills at once every process
    /// later cloned into one of them or below one, so none of them may take a process again.
    private static let killed = Mutex<Set<String>>([])

    /// Whether `path`, or a cgroup above it, was killed (`kill`) since it was made.
    package static func wasKilled(_ path: String) -> Bool {
        killed.withLock { set in
            guard !set.isEmpty else { return false }
            var p = Substring(path)
            while !p.isEmpty {
                if set.contains(String(p)) { return true }
                guard let slash = p.lastIndex(of: "/") else { break }
                p = p[..<slash]
            }
            return false
        }
    }

    /// A leaf a handler run ended in may take the next run of its app instead of a fresh one
    /// (a cgroup's mkdir and rmdir were a quarter of the daemon's work per handler in a burst):
    /// it is there and was never killed. Such a leaf is empty: at a run's end a leaf that still
    /// holds a process is killed (`ProcessLauncher`), and an empty one takes no process again
    /// unless drowsed starts one in it.
    package func isReusable(_ path: String) -> Bool {
        !Self.wasKilled(path) && access(path, F_OK) == 0
    }

    /// The fallback of `kill` for kernels before 5.14 (no `cgroup.kill`).
    static func killByPids(_ path: String) {
        for _ in 0..<50 {
            let now = pidsBelow(path)
            if now.isEmpty { return }
            for p in now { Sys.killOwn(p, SIGKILL) }  // what survives is in the next round
            _ = waitForEvents(path, timeout: 0.1) { $0["populated"] == false }
        }
    }

    /// The processes directly in `path` (its `cgroup.procs`).
    package func pids(_ path: String) -> [pid_t] { Self.pids(path) }

    package static func pids(_ path: String) -> [pid_t] {
        guard let text = try? FileSystem.readText(path + "/cgroup.procs") else { return [] }
        return text.split(separator: "\n").compactMap { pid_t($0) }
    }

    /// The processes in `path` and every cgroup below it.
    static func pidsBelow(_ path: String) -> [pid_t] {
        var out = pids(path)
        for name in FileSystem.listDirectory(path) where FileSystem.isDirectory(path + "/" + name) {
            out += pidsBelow(path + "/" + name)
        }
        return out
    }

    /// Whether any process runs in `path` or below (`populated 1` in cgroup.events).
    package func isPopulated(_ path: String) -> Bool { Self.eventsField(path, "populated") == true }

    /// The apps that have a cgroup now (e.g. left by an earlier drowsed, to adopt).
    package func existingApps() -> [String] {
        let apps = base + "/apps"
        return FileSystem.listDirectory(apps).filter { FileSystem.isDirectory(apps + "/" + $0) }
    }

    /// The leaves of an app's cgroup (`resident`, `run-<n>`), as names.
    package func leaves(app: String) -> [String] {
        let dir = appPath(app)
        return FileSystem.listDirectory(dir).filter { FileSystem.isDirectory(dir + "/" + $0) }
    }

    /// Whether a leaf (`NAME-PID-SEQ`, as drowsed names them) belongs to a drowsed other than
    /// this one that is running now: its PID is alive and named drowsed.
    package static func ownedByAnotherLiveDrowsed(_ leaf: String) -> Bool {
        let parts = leaf.split(separator: "-")
        guard parts.count >= 3, let pid = Int32(parts[parts.count - 2]), pid > 0, pid != getpid() else { return false }
        guard let comm = try? FileSystem.readText("/proc/\(pid)/comm", limit: 64) else { return false }
        return comm.hasPrefix("drowsed")
    }

    /// Kills whatever still runs in the app's cgroup, waits (at most `within` seconds) for it to
    /// empty, and removes its leaves and itself. False when something is left.
    @discardableResult
    package func removeApp(_ app: String, within: Double = 2) -> Bool {
        let path = appPath(app)
        guard FileSystem.isDirectory(path) else { return true }
        Self.kill(path)
        // A frozen cgroup's processes die too (SIGKILL wakes them); thawing lets them go sooner.
        _ = try? thaw(app: app)
        _ = Self.waitForEvents(path, timeout: within) { $0["populated"] == false }
        // A leaf that will not go (still populated) keeps the app's folder too: try again later.
        let stuck = leaves(app: app).filter { !removeLeafIfEmpty(path + "/" + $0) }
        return stuck.isEmpty && removeLeafIfEmpty(path)
    }

    // MARK: cgroup.events

    /// Reads `cgroup.events` of `path`: its `key value` lines with the value 1 as true.
    static func events(_ path: String) -> [String: Bool]? {
        guard let text = try? FileSystem.readText(path + "/cgroup.events") else { return nil }
        return parseEvents(text)
    }

    static func parseEvents(_ text: String) -> [String: Bool] {
        var out: [String: Bool] = [:]
        for line in text.split(separator: "\n") {
            let kv = line.split(separator: " ")
            if kv.count == 2 { out[String(kv[0])] = kv[1] == "1" }
        }
        return out
    }

    static func eventsField(_ path: String, _ key: String) -> Bool? { events(path)?[key] }

    package enum WaitResult: Sendable, Equatable {
        case reached, timedOut, cancelled
        /// The events file could not be opened or watched (the cgroup is gone, or poll failed).
        case failed(Int32)
    }

    /// Blocks the calling thread in poll(2) on `<path>/cgroup.events` (POLLPRI on each change)
    /// until `condition` holds for its contents, `timeout` seconds pass (nil: no limit), or
    /// `cancelFD` (an eventfd, -1 for none) is signalled. No timer beyond the one timeout.
    package static func waitForEvents(_ path: String, timeout: Double?, cancelFD: Int32 = -1,
                                      _ condition: ([String: Bool]) -> Bool) -> WaitResult {
        let fd: Int32
        do { fd = try Sys.open(path + "/cgroup.events", O_RDONLY | O_CLOEXEC) } catch { return .failed(error.errno) }
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        let until = timeout.map { WallClock.monotonic() + $0 }
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            // Read first, then wait: a change between the two still wakes the poll (the kernel
            // flags the file until it is read again).
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failed(errno)
            }
            if condition(parseEvents(String(decoding: buf[0..<n], as: UTF8.self))) { return .reached }
            var ms: Int32 = -1
            if let until {
                let left = until - WallClock.monotonic()
                if left <= 0 { return .timedOut }
                ms = Int32(min(left * 1000, 3_600_000).rounded(.up))
            }
            var fds = [pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)]
            if cancelFD >= 0 { fds.append(pollfd(fd: cancelFD, events: Int16(POLLIN), revents: 0)) }
            let r = Glibc.poll(&fds, nfds_t(fds.count), ms)
            if r < 0 {
                if errno == EINTR { continue }
                return .failed(errno)
            }
            if fds.count > 1 && fds[1].revents != 0 { return .cancelled }
        }
    }

    // MARK: Helpers

    static func checkName(_ name: String) throws(SystemError) {
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.contains("\0"),
              !name.hasPrefix("cgroup."), name.utf8.count <= 200 else {
            throw SystemError("invalid cgroup name '\(name)'", errno: EINVAL)
        }
    }

    static func writeFile(_ path: String, _ text: String) throws(SystemError) {
        let fd = try Sys.open(path, O_WRONLY | O_CLOEXEC)
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        try FileSystem.writeAll(fd, Array(text.utf8), what: "write \(path)")
    }
}

extension String {
    fileprivate func replacingOccurrences(_ a: String, _ b: String) -> String {
        var out = ""
        var rest = Substring(self)
        while let r = rest.firstRange(of: a) {
            out += rest[..<r.lowerBound]
            out += b
            rest = rest[r.upperBound...]
        }
        return out + rest
    }
}
