#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCore
import DrowseSystem

/// `drowse update`: installs a package so that it stays only if it proves healthy, else the
/// version it replaced is installed again (docs/updates.md). The install runs in a systemd unit
/// of its own, so it outlives drowsed's restart when the package is drowse itself.
struct UpdateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Install a package with a health check and rollback (drowse itself included).",
        subcommands: [UpdateInstall.self, UpdateList.self, UpdateNotified.self, UpdateDownloaded.self, UpdateApply.self, UpdateResume.self])
}

/// Where the updates live (`<state_dir>/updates`) and when they may be installed (`[updates]`),
/// from drowse.toml.
struct UpdatesPlace: ParsableArguments {
    @Option(help: "drowse.toml, whose state_dir holds the updates (env DROWSE_CONFIG).") var config: String?

    var path: String { config ?? getenv("DROWSE_CONFIG").map { String(cString: $0) } ?? MainConfig.defaultPath }

    func load() throws -> MainConfig {
        do {
            let bytes = try FileSystem.readRegularFile(path, limit: ConfigFile.maxSize)
            return try MainConfig.parse(ConfigFile.text(bytes, file: path), file: path, machineID: FileSystem.machineID())
        } catch let e as ConfigError {
            throw CLIError(e.description)
        } catch let e as RefusedFile {
            throw CLIError("\(path): \(e.reason)")
        }
    }

    func directory() throws -> String { UpdateFiles.directory(stateDir: try load().stateDir) }
}

struct UpdateInstall: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install",
        abstract: "Install FILE.deb in a unit of its own; commit it once healthy, else reinstall the previous version.",
        discussion: """
            The same id twice is one update: a second call starts nothing new (it resumes the first if it was cut short).
            Example: drowse update install drowse_0.2.0-1_arm64.deb --wait
            """)

    @OptionGroup var place: UpdatesPlace
    @Argument(help: "The package file (.deb).") var file: String
    @Option(help: "The update's id (1 to 56 of A-Z a-z 0-9 . _ -; default: from the time).") var id: String?
    @Option(help: "The systemd unit that must stay active (default: drowsed.service for the drowse package, else none).") var service: String?
    @Option(help: "A shell command that must exit 0 once the service has been healthy.") var check: String?
    @Option(help: "How long the service must stay active without a break (default: [updates] health_for, 30s).") var healthFor: String?
    @Option(help: "How long the whole check may take before the update is rolled back (default: [updates] check_within, 5m).") var checkWithin: String?
    @Flag(help: "Wait for the end and exit 0 only if the update was committed.") var wait = false

    func run() throws {
        guard geteuid() == 0 else { throw CLIError("installing a package needs root") }
        let config = try place.load()
        guard let health = healthFor.map(DurationText.parse) ?? config.updates.healthFor, health >= .zero else {
            throw CLIError("--health-for '\(healthFor ?? "")' is not a duration")
        }
        guard let within = checkWithin.map(DurationText.parse) ?? config.updates.checkWithin, within > health else {
            throw CLIError("--check-within '\(checkWithin ?? "")' must be a duration longer than --health-for")
        }
        if let service, !UpdateRequest.isValidUnit(service) { throw CLIError("--service '\(service)' is not a unit name") }
        let updateID = id ?? "u\(Int(WallClock.now()))-\(getpid())"
        guard UpdateRequest.isValidID(updateID) else { throw CLIError("--id '\(updateID)': 1 to 56 of A-Z a-z 0-9 . _ - please") }
        let files = UpdateFiles(root: UpdateFiles.directory(stateDir: config.stateDir), id: updateID)
        let request = UpdateRequest(
            id: updateID, service: service, check: check.map { ["/bin/sh", "-c", $0] } ?? [], healthFor: health.seconds,
            checkWithin: within.seconds)
        var created = false
        do {
            if try files.progress() == nil {
                try files.create(request: request, package: file, now: WallClock.now())
                created = true
            }
        } catch {
            throw CLIError("\(error)")
        }
        let started = UpdateInstaller.launch(files, config: place.path)
        guard let progress = try? files.progress() else { throw CLIError("\(files.dir): no state") }
        if !started.ok && !progress.report.state.isFinal {
            // Nothing was done: an update made by this call leaves nothing to resume.
            if created { _ = runCommand(["/bin/rm", "-rf", "--", files.dir], timeout: 60) }
            throw CLIError("could not start the installer: \(started.reason)")
        }
        say("update \(updateID): \(progress.report.state.rawValue)")
        guard wait else { return }
        var last = progress
        var idle = 0
        while !last.report.state.isFinal {
            usleep(500_000)
            if let p = try? files.progress() {
                if p.report.state != last.report.state { say("update \(updateID): \(p.report.state.rawValue)") }
                last = p
            }
            // An installer that is gone with the update unfinished (stopped by hand) ends the wait.
            idle = UpdateInstaller.isActive(UpdateInstaller.unit(files) + ".service") ? 0 : idle + 1
            if idle >= 20, !last.report.state.isFinal, (try? files.progress())?.report.state.isFinal != true {
                throw CLIError("the installer is not running and update \(updateID) is \(last.report.state.rawValue): `drowse update resume` carries it on")
            }
        }
        if let reason = last.report.reason { say("reason: \(reason)") }
        if last.report.state != .committed { throw ExitCode(1) }
    }
}

struct UpdateList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "The updates on this device, newest last.")

    @OptionGroup var place: UpdatesPlace
    @Flag(help: "Print a JSON array.") var json = false

    func run() throws {
        let all = UpdateFiles.all(in: try place.directory())
        if json {
            printJSON(.array(all.map { p in
                .object([("package", JSON(p.package)), ("step", .string(p.step.rawValue)), ("update", p.report.json)])
            }))
            return
        }
        for p in all {
            let r = p.report
            say("\(r.id)  \(p.package ?? "-")  \(r.from ?? "-") -> \(r.to ?? "-")  \(r.state.rawValue)\(r.reason.map { "  (\($0))" } ?? "")")
        }
    }
}

struct UpdateApply: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply", abstract: "The installer (run by `update install` in a unit of its own): carry an update on from its last step.",
        shouldDisplay: false)

    @OptionGroup var place: UpdatesPlace
    @Option(help: "The update's directory.") var dir: String

    func run() throws {
        guard let files = UpdateFiles(dir: dir) else { throw CLIError("\(dir) is not an update's directory") }
        let config = try place.load()
        try UpdateInstaller(files: files, window: config.updates.window, socket: config.socket).run()
    }
}

struct UpdateResume: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume", abstract: "Start the installer again for every update a power cut or a crash left unfinished (run before drowsed starts).")

    @OptionGroup var place: UpdatesPlace

    func run() throws {
        let config = try place.load()
        let root = UpdateFiles.directory(stateDir: config.stateDir)
        // A download goes on in drowsed, which delivers its finished session again.
        for p in UpdateFiles.all(in: root) where p.step != .done && p.step != .download {
            let files = UpdateFiles(root: root, id: p.report.id)
            let r = UpdateInstaller.schedule(files, config: place.path, window: config.updates.window)
            say("update \(p.report.id): \(r.ok ? r.reason : "not resumed: \(r.reason)")")
        }
    }
}

/// The notification handler of an updates app (docs/updates.md, "From a notification"): the
/// signed notification's payload on standard input names a package; drowsed downloads it as a
/// transfer of session `update-<id>`, and `drowse update downloaded` takes it from there.
struct UpdateNotified: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notified",
        abstract: "An updates app's notification handler: queue the download of the package the notification names.",
        discussion: """
            Standard input: {"id", "url", "sha256", "package"?, "service"?, "check"?, "health_for"?, "check_within"?, "install_by"?, "discretionary"?}.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var place: UpdatesPlace
    @OptionGroup var appOption: AppOption

    func run() throws {
        guard geteuid() == 0 else { throw CLIError("installing a package needs root: the updates app runs as root (no `user`)") }
        let config = try place.load()
        let note: UpdateNotice
        do { note = try UpdateNotice.parse(readStandardInput(), defaults: config.updates) } catch let e as UpdateNotice.Problem {
            throw CLIError("not an update: \(e.description)")
        }
        let files = UpdateFiles(root: UpdateFiles.directory(stateDir: config.stateDir), id: note.request.id)
        if let p = try? files.progress(), p.step != .download {
            say("update \(note.request.id): \(p.report.state.rawValue) already")
            return
        }
        do {
            if try files.progress() == nil {
                try files.begin(request: note.request, state: .downloading, step: .download, now: WallClock.now())
                UpdateInstaller.tellDrowsed(socket: config.socket)
            }
        } catch { throw CLIError("\(error)") }
        let body = JSON.object([
            ("kind", "download"), ("url", .string(note.url)), ("app", .string(appOption.id)), ("session", .string(note.request.session)),
            ("sha256", .string(note.sha256)), ("discretionary", .bool(note.discretionary)),
        ])
        let answer = try global.call("POST", "/v1/transfers", body: body)
        say("update \(note.request.id): downloading as transfer \(APIWire.Transfer(json: answer).id ?? "?")")
    }
}

/// The transfers handler of an updates app: a finished download of session `update-<id>` is
/// taken into its update, which then waits for the maintenance window or installs at once.
struct UpdateDownloaded: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "downloaded",
        abstract: "An updates app's transfers handler: take each downloaded package into its update, then install it (in the window).")

    @OptionGroup var place: UpdatesPlace

    func run() throws {
        guard geteuid() == 0 else { throw CLIError("installing a package needs root") }
        let config = try place.load()
        let root = UpdateFiles.directory(stateDir: config.stateDir)
        guard let json = try? JSON.parse(readStandardInput()) else { throw CLIError("standard input is not a transfers document") }
        var failed = false
        for t in APIWire.TransfersInput(json: json).transfers ?? [] {
            guard let id = t.session.flatMap(UpdateRequest.id(ofSession:)) else { continue }
            let files = UpdateFiles(root: root, id: id)
            guard var p = try? files.progress(), p.step == .download else { continue }
            let now = WallClock.now()
            do {
                if t.state == "completed", let location = t.location {
                    try files.adoptPackage(from: location)
                    // The fleet status shows the update under its package from now on.
                    let package = UpdateInstaller.field("Package", of: files.packagePath)
                    let expected = try? files.request().package
                    if let package, expected == nil || expected == package {
                        p.package = package
                        p.report.to = UpdateInstaller.field("Version", of: files.packagePath)
                        p.enter(.waiting, at: now)
                        p.step = .hold
                    } else {
                        p.enter(.failed, at: now, reason: package.map { "the file holds \($0), not \(expected ?? "")" } ?? "the file is not a package")
                        p.step = .done
                    }
                } else {
                    p.enter(.failed, at: now, reason: "the download \(t.state ?? "ended"): \(t.reason ?? "no reason given")")
                    p.step = .done
                }
                try files.save(p)
            } catch {
                say("update \(id): \(error)")
                failed = true
                continue
            }
            UpdateInstaller.tellDrowsed(socket: config.socket)
            guard p.step == .hold else { continue }
            let r = UpdateInstaller.schedule(files, config: place.path, window: config.updates.window)
            say("update \(id): \(r.reason)")
            failed = failed || !r.ok
        }
        if failed { throw ExitCode(1) }
    }
}

/// Standard input, at most 64 KiB (a notification is at most 4 KiB; a transfers document of a
/// session of updates is small).
func readStandardInput() throws -> String {
    var data: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while data.count <= 65536 {
        let n: Int?
        do { n = try Sys.read(0, into: &buf) } catch { throw CLIError("standard input: \(error)") }
        guard let n, n > 0 else { break }
        data += buf[0..<n]
    }
    guard data.count <= 65536 else { throw CLIError("standard input is over 64 KiB") }
    return String(decoding: data, as: UTF8.self)
}
