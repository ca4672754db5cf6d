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
        subcommands: [UpdateInstall.self, UpdateList.self, UpdateApply.self, UpdateResume.self])
}

/// Where the updates live: `<state_dir>/updates` of drowse.toml.
struct UpdatesPlace: ParsableArguments {
    @Option(help: "drowse.toml, whose state_dir holds the updates (env DROWSE_CONFIG).") var config: String?

    func directory() throws -> String {
        let path = config ?? getenv("DROWSE_CONFIG").map { String(cString: $0) } ?? MainConfig.defaultPath
        do {
            let bytes = try FileSystem.readRegularFile(path, limit: ConfigFile.maxSize)
            let c = try MainConfig.parse(ConfigFile.text(bytes, file: path), file: path, machineID: FileSystem.machineID())
            return UpdateFiles.directory(stateDir: c.stateDir)
        } catch let e as ConfigError {
            throw CLIError(e.description)
        } catch let e as RefusedFile {
            throw CLIError("\(path): \(e.reason)")
        }
    }
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
    @Option(help: "The update's id (1 to 64 of A-Z a-z 0-9 . _ -; default: from the time).") var id: String?
    @Option(help: "The systemd unit that must stay active (default: drowsed.service for the drowse package, else none).") var service: String?
    @Option(help: "A shell command that must exit 0 once the service has been healthy.") var check: String?
    @Option(help: "How long the service must stay active without a break.") var healthFor = "30s"
    @Option(help: "How long the whole check may take before the update is rolled back.") var checkWithin = "5m"
    @Flag(help: "Wait for the end and exit 0 only if the update was committed.") var wait = false

    func run() throws {
        guard geteuid() == 0 else { throw CLIError("installing a package needs root") }
        guard let health = DurationText.parse(healthFor), health >= .zero else { throw CLIError("--health-for '\(healthFor)' is not a duration") }
        guard let within = DurationText.parse(checkWithin), within > health else {
            throw CLIError("--check-within '\(checkWithin)' must be a duration longer than --health-for")
        }
        if let service, !UpdateRequest.isValidUnit(service) { throw CLIError("--service '\(service)' is not a unit name") }
        let updateID = id ?? "u\(Int(WallClock.now()))-\(getpid())"
        guard UpdateRequest.isValidID(updateID) else { throw CLIError("--id '\(updateID)': 1 to 64 of A-Z a-z 0-9 . _ - please") }
        let files = UpdateFiles(root: try place.directory(), id: updateID)
        let request = UpdateRequest(
            id: updateID, service: service, check: check.map { ["/bin/sh", "-c", $0] } ?? [], healthFor: health.seconds,
            checkWithin: within.seconds)
        do {
            if try files.progress() == nil {
                try files.create(request: request, package: file, now: WallClock.now())
            }
        } catch {
            throw CLIError("\(error)")
        }
        let started = UpdateInstaller.launch(files)
        guard let progress = try? files.progress() else { throw CLIError("\(files.dir): no state") }
        if !started.ok && !progress.report.state.isFinal { throw CLIError("could not start the installer: \(started.reason)") }
        say("update \(updateID): \(progress.report.state.rawValue)")
        guard wait else { return }
        var last = progress
        while !last.report.state.isFinal {
            usleep(500_000)
            if let p = try? files.progress() {
                if p.report.state != last.report.state { say("update \(updateID): \(p.report.state.rawValue)") }
                last = p
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

    @Option(help: "The update's directory.") var dir: String

    func run() throws {
        guard let files = UpdateFiles(dir: dir) else { throw CLIError("\(dir) is not an update's directory") }
        try UpdateInstaller(files: files).run()
    }
}

struct UpdateResume: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume", abstract: "Start the installer again for every update a power cut or a crash left unfinished (run before drowsed starts).")

    @OptionGroup var place: UpdatesPlace

    func run() throws {
        for p in UpdateFiles.all(in: try place.directory()) where p.step != .done && p.report.state != .downloading && p.report.state != .waiting {
            let files = UpdateFiles(root: try place.directory(), id: p.report.id)
            let r = UpdateInstaller.launch(files)
            say("update \(p.report.id): \(r.ok ? "resumed" : r.reason)")
        }
    }
}
