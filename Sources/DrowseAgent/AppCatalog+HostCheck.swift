#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseSystem

extension AppCatalog {
    /// What parses but cannot work on this machine: an app's `user` that does not exist, a
    /// `working_directory` that is not a folder. `drowsed --check-config` reports these, so a
    /// deploy script learns of them before the first handler fails to start at 3 a.m.
    /// (the running daemon keeps such apps: the user or folder may appear later).
    package func hostProblems() -> [ConfigError] {
        apps.values.sorted { $0.file < $1.file }.compactMap { app in
            if let user = app.user, UserAccount.lookup(name: user) == nil {
                return ConfigError(file: app.file, key: "user", problem: "no user '\(LogText.clip(user))' on this system")
            }
            if let dir = app.workingDirectory, !FileSystem.isDirectory(dir) {
                return ConfigError(file: app.file, key: "working_directory", problem: "'\(LogText.clip(dir))' is not a folder")
            }
            return Self.accessProblem(app)
        }
    }

    static func ownGroups() -> [gid_t] {
        let n = getgroups(0, nil)
        guard n > 0 else { return [] }
        var groups = [gid_t](repeating: 0, count: Int(n))
        let got = getgroups(n, &groups)
        return got > 0 ? Array(groups.prefix(Int(got))) : []
    }

    /// The handler PATH (`AppProcesses.environment`), where a command without a slash is looked for.
    static let handlerPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    /// As the app's user (drowsed's own without `user`): it can enter the folder its handlers
    /// start in, and execute each command.
    static func accessProblem(_ app: AppDefinition) -> ConfigError? {
        let who: Permissions.Subject
        let name: String
        if let user = app.user, let account = UserAccount.lookup(name: user) {
            who = Permissions.Subject(uid: account.uid, gids: [account.gid] + account.groups)
            name = "user '\(LogText.clip(user))'"
        } else {
            who = Permissions.Subject(uid: geteuid(), gids: [getegid()] + Self.ownGroups())
            name = "drowsed's user"
        }
        let dir = app.workingDirectory ?? ConfigPath.directory(of: app.file)
        guard Permissions.canEnter(dir, by: who) else {
            return ConfigError(file: app.file, key: "working_directory", problem: "\(name) cannot enter '\(LogText.clip(dir))'")
        }
        let commands: [(String, [String]?)] = [
            ("fetch.command", app.fetchCommand), ("notification.command", app.notificationCommand),
            ("transfers.events_command", app.eventsCommand), ("process.command", app.processCommand),
        ]
        for case let (key, argv?) in commands {
            guard let program = argv.first else { continue }
            let candidates = program.contains("/")
                ? [program.hasPrefix("/") ? program : dir + "/" + program]
                : handlerPath.split(separator: ":").map { "\($0)/\(program)" }
            if !candidates.contains(where: { Permissions.canExecute($0, by: who) }) {
                let where_ = program.contains("/") ? "" : " in PATH (\(handlerPath))"
                return ConfigError(file: app.file, key: key, problem: "\(name) cannot execute '\(LogText.clip(program))'\(where_)")
            }
        }
        return nil
    }
}
