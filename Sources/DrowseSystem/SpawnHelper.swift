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
    package static func program(self own: String = "/proc/self/exe") -> String { choose(self: own).program }

    /// The helper's program, and the candidates that exist but were refused, with why (for the log).
    package static func choose(self own: String = "/proc/self/exe") -> (program: String, refused: [String]) {
        guard let real = realpath(own, nil) else { return (own, []) }
        defer { free(real) }
        let path = String(cString: real)
        guard let slash = path.lastIndex(of: "/") else { return (own, []) }
        let dir = String(path[..<slash])
        var refused: [String] = []
        for candidate in [dir + "/drowse-spawner", dir + "/../libexec/drowse/drowse-spawner"] {
            guard let resolved = realpath(candidate, nil) else { continue }
            let canonical = String(cString: resolved)
            free(resolved)
            if let why = untrusted(canonical) { refused.append("\(canonical): \(why)") } else { return (canonical, refused) }
        }
        return (path, refused)
    }

    /// Why `path` may not be run as root for the helper (`drowse_spawner_path_trusted`: the
    /// file and every folder above it closed to others, no symbolic link), or nil. drowsed
    /// checks again before every start of the helper.
    package static func untrusted(_ path: String) -> String? {
        var why = [CChar](repeating: 0, count: 512)
        return drowse_spawner_path_trusted(path, &why, why.count) == 1 ? nil : String(cString: why)
    }

    /// Starts refused by that check since drowsed started, and the last reason.
    package static var refusals: (count: Int, last: String) {
        var why = [CChar](repeating: 0, count: 512)
        let n = drowse_spawner_refusals(&why, why.count)
        return (Int(n), String(cString: why))
    }

    /// Handlers started in-process while a helper was wanted (it had died or was refused).
    package static var fallbacks: Int { Int(drowse_spawner_fallbacks()) }

    /// Its pid while it runs.
    package static var pid: pid_t? {
        let p = drowse_spawner_pid()
        return p > 0 ? p : nil
    }
}
