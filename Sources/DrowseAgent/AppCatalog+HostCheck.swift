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
            return nil
        }
    }
}
