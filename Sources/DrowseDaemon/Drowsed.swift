#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import CDrowseSys
import DrowseAgent
import DrowseCore
import DrowseSystem
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// drowsed's entry point. `drowse` is one multi-call program: run under the name `drowsed` (a
/// link to it), it calls this instead of the command-line tool, so the Swift runtime and the code
/// both share exist once on the board.
public enum DaemonEntry {
    /// Runs the daemon with `arguments` (without the program name) and exits.
    ///
    /// On the main actor, like the caller's `main`: a nonisolated async function would start on
    /// the global executor, that is on libdispatch's pool before the hook below is installed,
    /// and that pool's monitor then wakes the process every second for good.
    @MainActor
    public static func main(arguments: [String]) async {
        // Before any other thread exists: malloc's arenas and thresholds (MallocBounds says why).
        let refused = MallocBounds.apply()
        if !refused.isEmpty {
            StandardStream.error("drowsed: warning: mallopt refused \(refused.joined(separator: ", ")); memory freed after work may stay private\n")
        }
        // Swift concurrency runs on NIO's event loops, not libdispatch's worker pool: that pool
        // starts a 1 Hz monitor timer on Linux, and drowsed must not wake when idle.
        NIOSingletons.groupLoopCountSuggestion = 2
        if !NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() && !installEnqueueHook() {
            StandardStream.error("drowsed: warning: could not run Swift concurrency on NIO's event loops; libdispatch's pool will wake the process every second\n")
        }
        await Drowsed.main(arguments)
    }

    typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    /// The same as NIO's installer, for a statically linked Swift runtime, whose hook symbol
    /// dlsym cannot see: every global job runs on one of NIO's singleton event loops.
    static func installEnqueueHook() -> Bool {
        withUnsafeTemporaryAllocation(of: EnqueueGlobalHook.self, capacity: 1) { slot in
            slot.baseAddress!.initialize(to: { job, _ in
                let loop = MultiThreadedEventLoopGroup.singleton.any()
                guard let serial = loop as? any NIOSerialEventLoopExecutor else { fatalError("NIO event loops are serial executors") }
                let executor = serial.asUnownedSerialExecutor()
                loop.execute { job.runSynchronously(on: executor) }
            })
            return slot.baseAddress!.withMemoryRebound(to: UnsafeMutableRawPointer.self, capacity: 1) {
                drowse_set_enqueue_global_hook($0.pointee) == 1
            }
        }
    }
}

struct Drowsed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "drowsed",
        abstract: "The Drowse background-execution agent.",
        discussion: """
            Environment (an option given on the command line wins over its variable):

            DROWSE_CONFIG: the main config, as --config.

            DROWSE_LOG_LEVEL: the lowest level logged, as --log-level: trace, debug, info, notice, warning, error or critical; another name means info. Handler output is logged at info, so warning and above leave it out.

            Under systemd, a drop-in sets them (systemctl edit drowsed): [Service] Environment=DROWSE_LOG_LEVEL=debug. Every option and key: docs/configuration.md in Drowse's source.
            """,
        version: Agent.version)

    @Option(name: .long, help: "Main config file (env DROWSE_CONFIG).")
    var config: String?

    @Option(name: .long, help: "Lowest level logged: trace, debug, info (the default), notice, warning, error or critical (env DROWSE_LOG_LEVEL).")
    var logLevel: String?

    @Flag(name: .long, help: "Check the configuration and app files, then exit.")
    var checkConfig = false

    @Option(name: .long, help: "Write every event fed to the fetch scheduler and its actions to this file, one JSON line each (replay with `drowse simulate --replay FILE`).")
    var schedulerTrace: String?

    func run() async throws {
        try Sys.ignoreSignal(SIGPIPE)
        // State, partial downloads and the database are private unless handed to someone.
        umask(0o077)
        let env = { (k: String) -> String? in getenv(k).map { String(cString: $0) } }
        var path = config ?? env("DROWSE_CONFIG") ?? MainConfig.defaultPath
        // Absolute, so every path derived from it (socket, state) is absolute for handlers too.
        if let real = realpath(path, nil) {
            path = String(cString: real)
            free(real)
        }
        let level = Logger.Level(rawValue: logLevel ?? env("DROWSE_LOG_LEVEL") ?? "info") ?? .info
        // Under systemd, standard error is the journal: lines carry their priority instead of a
        // time and level of their own.
        if JournalLogHandler.isJournal(journalStream: env("JOURNAL_STREAM")) {
            LoggingSystem.bootstrap { _ in
                var h = EscapingLogHandler(inner: JournalLogHandler())
                h.logLevel = level
                return h
            }
        } else {
            LoggingSystem.bootstrap { label in
                var h = EscapingLogHandler(inner: StreamLogHandler.standardError(label: label))
                h.logLevel = level
                return h
            }
        }
        let logger = Logger(label: "drowsed")

        let mainConfig: MainConfig
        do {
            // Refused, not cut, when too big; never blocks on a FIFO.
            let bytes = try FileSystem.readRegularFile(path, limit: ConfigFile.maxSize)
            mainConfig = try MainConfig.parse(ConfigFile.text(bytes, file: path), file: path, machineID: FileSystem.machineID())
        } catch let e as ConfigError {
            Self.fail(e.description)
        } catch let e as RefusedFile {
            Self.fail("\(path): \(e.reason)")
        }
        // The MQTT password file: refused here, at start and by --check-config alike.
        if let file = mainConfig.mqtt?.passwordFile {
            do {
                if try FileSystem.readSecretFile(file, limit: 4096).othersMayRead {
                    let warning = "\(file): [mqtt] password_file may be read by every user; chmod o-r it"
                    if checkConfig { StandardStream.error("drowsed: warning: \(LogText.escape(warning))\n") } else { logger.warning("\(warning)") }
                }
            } catch {
                Self.fail("\(path): [mqtt] password_file \(file) \(error.reason)")
            }
        }
        if checkConfig {
            Self.checkApps(mainConfig)
            return
        }

        let agent: Agent
        do { agent = try await Agent(config: mainConfig, logger: logger, schedulerTrace: schedulerTrace) } catch {
            Self.fail("\(path): cannot use state_dir \(mainConfig.stateDir): \(error)")
        }
        let order = await agent.startOrder()
        let api = APIServer(path: mainConfig.socket, router: APIRouter(agent: agent), logger: logger,
                            maxConnectionsPerUID: mainConfig.api.maxConnectionsPerUID) { await order.ready(0) }
        let notify: @Sendable (String) -> Void = { state in
            let err = drowse_sd_notify(state)
            if err != 0 { logger.warning("sd_notify failed: \(String(cString: strerror(err)))") }
        }
        let service = AgentService(agent: agent, order: order, logger: logger, notify: notify) {
            // An errno: NOTIFY_SOCKET is set but unusable; systemd will time the start out, so say why.
            let err = drowse_sd_notify("READY=1")
            if err != 0 { logger.warning("sd_notify READY=1 failed: \(String(cString: strerror(err)))") }
        }
        let group = ServiceGroup(
            configuration: .init(
                // A part that ends on its own (a thread of it died) stops the others gracefully, in
                // order; drowsed then exits 1 and systemd starts it again.
                services: (await agent.services(api: api, order: order, agent: service)).map {
                    .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup)
                },
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        logger.info("drowsed \(Agent.version) starting", metadata: ["config": "\(path)", "device_id": "\(mainConfig.deviceID)"])
        var failure: (any Error)?
        do { try await group.run() } catch { failure = error }
        // Every part has stopped: nothing of drowsed's runs in its app cgroups any more.
        await agent.removeLeftovers()
        if let failure {
            logger.critical("drowsed stopped: \(failure)")
            Glibc.exit(1)
        }
    }

    /// `--check-config` after drowse.toml passed: every app file too (and that its user and
    /// working directory exist here), one `file:line: reason` line on stderr per bad one and
    /// exit 78, so a deploy script or a postinst can trust it.
    static func checkApps(_ config: MainConfig) {
        let catalog = AppCatalog.load(directory: config.appsDir)
        let problems = catalog.invalid.map(\.error) + catalog.hostProblems()
        for error in problems { StandardStream.error(LogText.escape(error.description) + "\n") }
        guard problems.isEmpty else { Glibc.exit(78) }
        let apps = catalog.apps.count == 1 ? "1 app" : "\(catalog.apps.count) apps"
        let missing = FileSystem.isDirectory(config.appsDir) ? "" : "; apps_dir \(config.appsDir) does not exist"
        StandardStream.output(LogText.escape("\(config.file): ok (device \(config.deviceID), \(apps)\(missing))") + "\n")
    }

    /// One clear line, then exit 78 (EX_CONFIG) so systemd does not restart in a loop. Escaped:
    /// the line may quote a path or an error that holds a newline or ESC.
    static func fail(_ line: String) -> Never {
        StandardStream.error("drowsed: \(LogText.escape(line))\n")
        Glibc.exit(78)
    }
}
