import DrowseCore
import DrowseSystem
import Logging

/// The apps as the app files define them now: the valid ones by id, and the files that could
/// not be used, with why. Read at start and at each reload; every other part asks here.
@DaemonActor package final class AppRegistry {
    /// Valid apps by id.
    package private(set) var apps: [String: AppDefinition] = [:]
    /// App files that could not be used, with why.
    package private(set) var invalid: [(file: String, id: String, error: String)] = []
    let directory: String
    let logger: Logger

    package init(directory: String, logger: Logger) {
        self.directory = directory
        self.logger = logger
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
