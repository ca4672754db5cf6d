#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem

/// The installer of `drowse update apply` (docs/updates.md): prepare (keep the installed
/// version's package), install (dpkg, then the service restarts), check (the service active for
/// `health_for`, then the check command), then commit, or roll back to the kept version. Each
/// step is written to `state.json` before it starts, and every step can run again: a power cut
/// anywhere resumes at the step written (`drowse update resume`, before drowsed starts).
struct UpdateInstaller {
    let files: UpdateFiles
    /// `[updates] window`: an update held for it starts only inside it (or after `install_by`).
    let window: MaintenanceWindow
    /// drowsed's API socket, to tell it of each step.
    let socket: String

    static let environment = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "DEBIAN_FRONTEND=noninteractive"]

    static func unit(_ files: UpdateFiles) -> String { "drowse-update-\(files.id)" }

    /// Starts `drowse update apply` for `files` as the transient unit `drowse-update-<id>.service`,
    /// outside drowsed's cgroup: stopping or restarting drowsed does not stop it. An installer
    /// already running for the update is fine (ok).
    static func launch(_ files: UpdateFiles, config: String) -> (ok: Bool, reason: String) {
        let service = unit(files) + ".service"
        guard FileSystem.isDirectory("/run/systemd/system") else { return (false, "systemd is not running: an update needs it") }
        if isActive(service) { return (true, "running") }
        // Made with a timer (waiting for the window): the unit is there, start it.
        if systemctl(["show", "-p", "LoadState", "--value", service]).output.hasPrefix("loaded") {
            let r = systemctl(["start", "--no-block", service])
            return r.status == 0 ? (true, "started") : (false, "systemctl start \(service): \(r.lastLine)")
        }
        let r = runCommand(["/usr/bin/systemd-run", "--quiet", "--collect", "--unit", unit(files), "--description", "drowse update \(files.id)",
                            "-p", "TimeoutStopSec=60", "--"] + applyCommand(files, config: config), timeout: 30)
        if r.status == 0 { return (true, "started") }
        // Started by another caller in between: the unit is there.
        if isActive(service) { return (true, "running") }
        return (false, "systemd-run: \(r.lastLine)")
    }

    /// An update that may be installed now starts now; else a systemd timer starts it when the
    /// window opens or `install_by` comes, whichever is first. systemd follows every step of the
    /// wall clock (a board's first time sync among them) and a change of time zone.
    static func schedule(_ files: UpdateFiles, config: String, window: MaintenanceWindow) -> (ok: Bool, reason: String) {
        guard let request = try? files.request(), let p = try? files.progress() else { return (false, "\(files.dir): unreadable") }
        let now = WallClock.now()
        guard p.step == .hold, !window.allowsInstall(atMinute: localMinuteOfDay(at: now) ?? 0, now: now, installBy: request.installBy) else {
            return launch(files, config: config)
        }
        guard FileSystem.isDirectory("/run/systemd/system") else { return (false, "systemd is not running: an update needs it") }
        let timer = unit(files) + ".timer"
        if isActive(timer) { return (true, "waiting for the window (\(window.description))") }
        var events = window.calendarEvents
        if let by = request.installBy, let text = utcCalendarText(by) { events.append(text) }
        let r = runCommand(["/usr/bin/systemd-run", "--quiet", "--unit", unit(files), "--description", "drowse update \(files.id)",
                            "--timer-property=AccuracySec=1s"] + events.map { "--on-calendar=\($0)" }
                           + ["-p", "TimeoutStopSec=60", "--"] + applyCommand(files, config: config), timeout: 30)
        if r.status == 0 || isActive(timer) {
            return (true, "waiting for the window (\(window.description))\(request.installBy.map { ", or until \(utcCalendarText($0) ?? "\($0)")" } ?? "")")
        }
        return (false, "systemd-run --on-calendar: \(r.lastLine)")
    }

    static func applyCommand(_ files: UpdateFiles, config: String) -> [String] {
        [ownPath(), "update", "apply", "--config", config, "--dir", files.dir]
    }

    static func isActive(_ unit: String) -> Bool { systemctl(["is-active", "--quiet", unit]).status == 0 }

    static func systemctl(_ args: [String]) -> CommandResult { runCommand(["/usr/bin/systemctl"] + args, timeout: 30, mergeErrors: false) }

    /// This program's path (the installed binary, so the unit runs what was installed).
    static func ownPath() -> String {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        guard n > 0 else { return "/usr/bin/drowse" }
        let path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // Replaced by dpkg while running: the kernel says "(deleted)"; the name is the new one.
        return path.hasSuffix(" (deleted)") ? String(path.dropLast(10)) : path
    }

    func run() throws {
        let lock: Int32
        do { lock = try Sys.open(files.dir + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, mode: 0o600) } catch { throw CLIError("\(error)") }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            say("update \(files.id): another installer has it")
            return
        }
        let request: UpdateRequest
        do { request = try files.request() } catch { throw CLIError("\(error)") }
        guard var p = try files.progress() else { throw CLIError("\(files.statePath): missing") }
        if p.step == .download {
            say("update \(files.id): still downloading")
            return
        }
        if p.step == .hold {
            let now = WallClock.now()
            guard window.allowsInstall(atMinute: localMinuteOfDay(at: now) ?? 0, now: now, installBy: request.installBy) else {
                say("update \(files.id): waiting for the window (\(window.description))")
                return
            }
            p.step = .prepare
            p.enter(.installing, at: now)
            do { try files.save(p) } catch { throw CLIError("\(error)") }
            Self.tellDrowsed(socket: socket)
        }
        while p.step != .done {
            let next = step(p, request)
            do { try files.save(next) } catch { throw CLIError("\(error)") }
            if next.report.state != p.report.state { Self.tellDrowsed(socket: socket) }
            p = next
        }
        // Over: a timer that waited for the window has nothing left to start, and a package
        // that was not committed (a commit moved it to the kept folder) is of no more use.
        _ = Self.systemctl(["stop", "--no-block", Self.unit(files) + ".timer"])
        _ = try? FileSystem.remove(files.packagePath)
        say("update \(files.id): \(p.report.state.rawValue)\(p.report.reason.map { " (\($0))" } ?? "")")
    }

    /// One step from `p`: the progress to write next.
    func step(_ p: UpdateProgress, _ request: UpdateRequest) -> UpdateProgress {
        var p = p
        let now = WallClock.now()
        switch p.step {
        case .prepare:
            finishInterrupted()
            guard let package = debField("Package"), let to = debField("Version") else {
                p.enter(.failed, at: now, reason: "\(files.packagePath) is not a readable package")
                p.step = .done
                return p
            }
            if let expected = request.package, expected != package {
                p.enter(.failed, at: now, reason: "the file holds \(package), not \(expected)")
                p.step = .done
                return p
            }
            p.package = package
            p.report.to = to
            p.report.from = installedVersion(package)
            if let from = p.report.from, from != to, !FileSystem.exists(files.kept(package, from)) {
                if let why = keep(package, from) {
                    p.enter(.failed, at: now, reason: "the installed \(package) \(from) could not be kept for a rollback: \(why)")
                    p.step = .done
                    return p
                }
            }
            p.step = .install
        case .install:
            guard let package = p.package, let to = p.report.to else { p.step = .prepare; return p }
            finishInterrupted()
            let service = request.service ?? UpdateRequest.defaultService(forPackage: package)
            let startedBefore = service.map(mainStart)
            if installedVersion(package) != to {
                let r = runCommand(["/usr/bin/dpkg", "--force-confdef", "--force-confold", "-i", files.packagePath],
                                   environment: Self.environment, timeout: 1800)
                if r.status != 0 {
                    finishInterrupted()
                    p.report.reason = "dpkg -i failed (\(r.status.map(String.init) ?? "killed")): \(r.lastLine)"
                    p.step = .rollback
                    return p
                }
            }
            // A package whose scripts did not restart its service would be checked on the old code.
            if let service, mainStart(service) == startedBefore ?? "" {
                _ = runCommand(["/usr/bin/systemctl", "restart", service], timeout: 120)
            }
            p.enter(.checking, at: WallClock.now())
            p.step = .check
        case .check:
            if let reason = check(request, package: p.package ?? "") {
                p.report.reason = reason
                p.step = .rollback
            } else {
                commit(p)
                p.enter(.committed, at: WallClock.now())
                p.step = .done
            }
        case .rollback:
            p.enter(.installing, at: now)
            finishInterrupted()
            let reason = p.report.reason ?? "rolled back"
            if let why = rollBack(p, request) {
                p.enter(.failed, at: WallClock.now(), reason: "\(reason); the rollback failed too: \(why)")
            } else {
                p.enter(.rolledBack, at: WallClock.now(), reason: reason)
            }
            p.step = .done
        case .done, .download, .hold:
            // `run` takes an update out of download and hold before the loop.
            p.step = .done
        }
        return p
    }

    // MARK: the steps' parts

    /// The service active for `health_for` without a break, within `check_within`; then the
    /// check command. nil: healthy; else why not.
    func check(_ request: UpdateRequest, package: String) -> String? {
        let start = WallClock.monotonic()
        if let service = request.service ?? UpdateRequest.defaultService(forPackage: package) {
            var watch = HealthWatch(service: service, healthFor: request.healthFor, start: start, within: request.checkWithin)
            watching: while true {
                // Looked at once a second; the run's restart count and start time tell a stop
                // and a start between two looks.
                let shown = runCommand(["/usr/bin/systemctl", "show", "--property=ActiveState,NRestarts,ActiveEnterTimestampMonotonic", service],
                                       timeout: 10).output
                var property: [String: String] = [:]
                for line in shown.split(whereSeparator: { $0 == "\n" }) {
                    guard let eq = line.firstIndex(of: "=") else { continue }
                    property[String(line[..<eq])] = String(line[line.index(after: eq)...])
                }
                let state = property["ActiveState"] ?? "unknown"
                let run = "\(property["NRestarts"] ?? "?")/\(property["ActiveEnterTimestampMonotonic"] ?? "?")"
                switch watch.observe(state, run: run, at: WallClock.monotonic()) {
                case .wait: usleep(1_000_000)
                case .healthy: break watching
                case .unhealthy(let why): return why
                }
            }
        }
        guard !request.check.isEmpty else { return nil }
        let left = max(10, request.checkWithin - (WallClock.monotonic() - start))
        let r = runCommand(request.check, environment: Self.environment, timeout: left)
        guard r.status == 0 else {
            return "the check command \(r.status.map { "exited \($0)" } ?? "did not finish"): \(LogText.clip(r.lastLine))"
        }
        return nil
    }

    /// The new version stays: its package file becomes the kept one (the next update's rollback).
    func commit(_ p: UpdateProgress) {
        guard let package = p.package, let to = p.report.to else { return }
        try? FileSystem.makeDirectories(files.keptDir, mode: 0o755)
        let target = files.kept(package, to)
        if FileSystem.exists(files.packagePath) {
            do { try FileSystem.rename(files.packagePath, to: target) } catch { StandardStream.error("drowse: \(error)\n") }
        }
        for name in FileSystem.listDirectory(files.keptDir) where name.hasPrefix(package + "_") && files.keptDir + "/" + name != target {
            _ = try? FileSystem.remove(files.keptDir + "/" + name)
        }
    }

    /// Installs the kept version again (or removes a package that was not installed before), and
    /// restarts the service on it. nil: done.
    func rollBack(_ p: UpdateProgress, _ request: UpdateRequest) -> String? {
        guard let package = p.package else { return nil }
        let r: CommandResult
        if let from = p.report.from {
            if installedVersion(package) == from { return restart(request, package) }
            r = runCommand(["/usr/bin/dpkg", "--force-confdef", "--force-confold", "--force-downgrade", "-i", files.kept(package, from)],
                           environment: Self.environment, timeout: 1800)
        } else {
            r = runCommand(["/usr/bin/dpkg", "--purge", package], environment: Self.environment, timeout: 1800)
        }
        guard r.status == 0 else { return "dpkg (\(r.status.map(String.init) ?? "killed")): \(r.lastLine)" }
        return restart(request, package)
    }

    func restart(_ request: UpdateRequest, _ package: String) -> String? {
        guard let service = request.service ?? UpdateRequest.defaultService(forPackage: package) else { return nil }
        let r = runCommand(["/usr/bin/systemctl", "restart", service], timeout: 120)
        return r.status == 0 ? nil : "systemctl restart \(service): \(r.lastLine)"
    }

    /// dpkg's own recovery: a run cut short is configured now (each step begins with it).
    func finishInterrupted() {
        _ = runCommand(["/usr/bin/dpkg", "--configure", "-a"], environment: Self.environment, timeout: 1800)
    }

    func debField(_ name: String) -> String? { Self.field(name, of: files.packagePath) }

    /// A control field of a package file, or nil when it is not a readable package.
    static func field(_ name: String, of path: String) -> String? {
        let r = runCommand(["/usr/bin/dpkg-deb", "-f", path, name], timeout: 60, mergeErrors: false)
        let v = r.output.trimmingSpaces()
        return r.status == 0 && !v.isEmpty ? String(v) : nil
    }

    /// The version dpkg has installed (fully: "ii"), or nil.
    func installedVersion(_ package: String) -> String? {
        let r = runCommand(["/usr/bin/dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", package], timeout: 60, mergeErrors: false)
        guard r.status == 0 else { return nil }
        let parts = r.output.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].hasPrefix("ii") else { return nil }
        return String(parts[1])
    }

    /// When the service's main process last started (systemd's monotonic microseconds).
    func mainStart(_ service: String) -> String {
        runCommand(["/usr/bin/systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value", service], timeout: 10).output
    }

    /// The status drowsed publishes carries the updates: it reads them again when asked. A
    /// drowsed that is not running (restarting for its own update) reads them at its start.
    static func tellDrowsed(socket: String) {
        _ = try? UnixHTTPClient.request(socket: socket, method: "POST", path: "/v1/updates/refresh", timeout: 10)
    }

    /// Builds the installed `package` at `version` back into a package file in the kept folder,
    /// from dpkg's database: its files as they are on disk, its control fields and maintainer
    /// scripts. nil: done; else why not.
    func keep(_ package: String, _ version: String) -> String? {
        let work = files.dir + "/repack"
        _ = runCommand(["/bin/rm", "-rf", "--", work], timeout: 120)
        defer { _ = runCommand(["/bin/rm", "-rf", "--", work], timeout: 120) }
        do {
            try FileSystem.makeDirectories(work + "/root/DEBIAN", mode: 0o755)
            try FileSystem.makeDirectories(files.keptDir, mode: 0o755)
        } catch { return "\(error)" }
        let listed = runCommand(["/usr/bin/dpkg-query", "-L", package], timeout: 60, mergeErrors: false)
        guard listed.status == 0 else { return "dpkg-query -L: \(listed.lastLine)" }
        let paths = listed.output.split(whereSeparator: { $0 == "\n" }).map(String.init).filter { $0.hasPrefix("/") && $0 != "/." }
            .filter { var st = stat(); return lstat($0, &st) == 0 }
        do { try FileSystem.writeAtomically(work + "/files", Array((paths.map { "." + $0 }.joined(separator: "\n") + "\n").utf8), durable: false) } catch {
            return "\(error)"
        }
        let copy = runCommand([
            "/bin/sh", "-c", "tar -C / --no-recursion -cf - -T \"$1\" | tar -C \"$2\" -xpf -", "sh", work + "/files", work + "/root",
        ], timeout: 1800)
        guard copy.status == 0 else { return "tar: \(copy.lastLine)" }
        // The control file as dpkg has it, without what only the database holds.
        let status = runCommand(["/usr/bin/dpkg-query", "-s", package], timeout: 60, mergeErrors: false)
        guard status.status == 0 else { return "dpkg-query -s: \(status.lastLine)" }
        var control: [Substring] = []
        var skipping = false
        for line in status.output.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.first == " " || line.first == "\t" {
                if !skipping { control.append(line) }
                continue
            }
            let field = line.split(separator: ":", maxSplits: 1).first ?? ""
            skipping = ["Status", "Config-Version", "Conffiles"].contains(field) || line.isEmpty
            if !skipping { control.append(line) }
        }
        do { try FileSystem.writeAtomically(work + "/root/DEBIAN/control", Array((control.joined(separator: "\n") + "\n").utf8), durable: false) } catch {
            return "\(error)"
        }
        let scripts = runCommand(["/usr/bin/dpkg-query", "--control-path", package], timeout: 60, mergeErrors: false)
        let kinds = ["preinst", "postinst", "prerm", "postrm", "config", "templates", "triggers", "conffiles", "shlibs", "symbols"]
        for path in scripts.output.split(separator: "\n").map(String.init) {
            guard let dot = path.lastIndex(of: "."), kinds.contains(String(path[path.index(after: dot)...])) else { continue }
            let kind = String(path[path.index(after: dot)...])
            let mode = ["preinst", "postinst", "prerm", "postrm", "config"].contains(kind) ? "0755" : "0644"
            let r = runCommand(["/usr/bin/install", "-m", mode, "--", path, work + "/root/DEBIAN/" + kind], timeout: 60)
            guard r.status == 0 else { return "\(path): \(r.lastLine)" }
        }
        let out = files.kept(package, version)
        // Fast compression: it is built on the board, and rarely installed.
        let built = runCommand(["/usr/bin/dpkg-deb", "-Zgzip", "-z1", "--build", work + "/root", out + ".part"], timeout: 1800)
        guard built.status == 0 else { return "dpkg-deb --build: \(built.lastLine)" }
        _ = runCommand(["/bin/sync", "--", out + ".part"], timeout: 600)
        do { try FileSystem.rename(out + ".part", to: out) } catch { return "\(error)" }
        return nil
    }
}
