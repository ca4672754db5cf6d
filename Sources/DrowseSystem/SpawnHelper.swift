#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// The spawn helper (Sources/CDrowseSys/spawner.c, Sources/drowse-spawner): a small process that
/// clones handlers into their cgroups for drowsed, so that a start does not copy drowsed's page
/// tables. Handlers are started in-process whenever it is not running.
package enum SpawnHelper {
    /// Starts it (again); nil, or why it could not start (handlers are then started in-process).
    @discardableResult
    package static func start(executable: String = program()) -> SystemError? {
        let err = drowse_spawner_start(executable)
        return err == 0 ? nil : SystemError("spawn helper \(executable)", errno: err)
    }

    package static func stop() { drowse_spawner_stop() }

    /// The helper's program: `drowse-spawner` beside this executable (a build folder, a
    /// `bin` folder) or in `../libexec/drowse/` (the package), when it is a regular executable
    /// file only root or this user may change; else this executable itself, run under the
    /// helper's name (the same loop, in a process that maps all of drowsed's libraries).
    package static func program(self own: String = "/proc/self/exe") -> String {
        guard let real = realpath(own, nil) else { return own }
        defer { free(real) }
        let path = String(cString: real)
        guard let slash = path.lastIndex(of: "/") else { return own }
        let dir = String(path[..<slash])
        for candidate in [dir + "/drowse-spawner", dir + "/../libexec/drowse/drowse-spawner"] where trusted(candidate) {
            return candidate
        }
        return own
    }

    /// A regular executable file owned by root or this user, writable by nobody else, in a
    /// folder that nobody else may change either (or the file could be swapped after the check).
    static func trusted(_ path: String) -> Bool {
        func ownedAndClosed(_ p: String, file: Bool) -> Bool {
            var st = stat()
            guard stat(p, &st) == 0, st.st_mode & 0o022 == 0, st.st_uid == 0 || st.st_uid == geteuid() else { return false }
            return file ? st.st_mode & S_IFMT == S_IFREG && st.st_mode & 0o111 != 0 : st.st_mode & S_IFMT == S_IFDIR
        }
        guard let slash = path.lastIndex(of: "/") else { return false }
        return ownedAndClosed(path, file: true) && ownedAndClosed(String(path[..<slash]), file: false)
    }

    /// Its pid while it runs.
    package static var pid: pid_t? {
        let p = drowse_spawner_pid()
        return p > 0 ? p : nil
    }
}
