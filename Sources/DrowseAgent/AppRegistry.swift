import DrowseCore
import DrowseSystem
import Logging

/// The apps as the app files define them now: the valid ones by id, and the files that could
/// not be used, with why. Read at start (first of the parts) and at each reload; every other
/// part asks here.
@DaemonActor package final class AppRegistry: DaemonPart, FetchIntervals {
    /// Valid apps by id.
    package private(set) var apps: [String: AppDefinition] = [:]
    /// App files that could not be used, with why.
    package private(set) var invalid: [(file: String, id: String, error: String)] = []
    let directory: String
    /// `[scheduler] minimum_interval` in seconds: the interval of an app that asks for the minimum.
    let minimumInterval: Double
    let logger: Logger

    package nonisolated var partName: String { "apps" }

    package init(directory: String, minimumInterval: Double = 900, logger: Logger) {
        self.directory = directory
        self.minimumInterval = minimumInterval
        self.logger = logger
    }

    /// Start-up: the app files are read before any other part starts.
    package func start() { load() }

    package func stop() async {}

    /// Each app's fetch interval in seconds (nil: it never fetches), for the fetch scheduler.
    package var fetchIntervals: [(id: String, interval: Double?)] {
        apps.values.map { app in
            switch app.fetchInterval {
            case .never: (app.id, nil)
            case .minimum: (app.id, minimumInterval)
            case .every(let d): (app.id, d.seconds)
            }
        }
    }

    /// A registry holding these apps (a test's).
    package convenience init(apps: [AppDefinition], logger: Logger = Logger(label: "drowse")) {
        self.init(directory: "/nonexistent", logger: logger)
        set(apps)
    }

    /// Holds these apps instead of what the files say (a test's).
    package func set(_ apps: [AppDefinition]) {
        self.apps = Dictionary(uniqueKeysWithValues: apps.map { ($0.id, $0) })
        invalid = []
    }

    package subscript(_ id: String) -> AppDefinition? { apps[id] }

    /// The valid apps' ids, sorted.
    package var ids: [String] { apps.keys.sorted() }

    /// Reads the app files (reading and checking live in AppCatalog, shared with
    /// `drowsed --check-config`).
    package func load() {
        if !FileSystem.isDirectory(directory) {
            logger.warning("apps_dir \(directory) does not exist: no apps")
        }
        let catalog = AppCatalog.load(directory: directory)
        apps = catalog.apps
        invalid = catalog.invalid.map { ($0.file, $0.id, $0.error.description) }
        for bad in catalog.invalid { logger.error("app file skipped: \(bad.error.description)") }
        logger.info("loaded \(apps.count) app(s), \(invalid.count) invalid", metadata: ["apps": "\(ids)"])
    }

    /// Why an app was not given.
    package enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// No such app, or one the caller may not see: the two answer alike, so the API tells
        /// no local user which apps exist.
        case noApp(String)
        /// Its file is there but cannot be used (said only to an admin).
        case invalid(String)

        package var description: String {
            switch self {
            case .noApp(let id): "no app '\(id)'"
            case .invalid(let id): "app '\(id)' has an invalid definition"
            }
        }
    }

    /// The app `id` if `caller` may see it. Another user's app answers exactly as a missing one
    /// does, so the API tells no local user which apps exist.
    package func app(_ id: String, for caller: Caller) throws(Refusal) -> AppDefinition {
        guard let app = apps[id], visible(app, to: caller) else {
            if caller.isAdmin, invalid.contains(where: { $0.id == id }) { throw .invalid(id) }
            throw .noApp(id)
        }
        return app
    }

    package func visible(_ app: AppDefinition, to caller: Caller) -> Bool {
        caller.isAdmin || (app.user != nil && app.user == caller.userName)
    }
}
