#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// The spawn helper (Sources/CDrowseSys/spawner.c): drowsed's own binary run again as a small
/// process that clones handlers into their cgroups for drowsed, so that a start does not copy
/// drowsed's page tables. Handlers are started in-process whenever it is not running.
package enum SpawnHelper {
    /// Starts it (again); nil, or why it could not start (handlers are then started in-process).
    @discardableResult
    package static func start(executable: String = "/proc/self/exe") -> SystemError? {
        let err = drowse_spawner_start(executable)
        return err == 0 ? nil : SystemError("spawn helper \(executable)", errno: err)
    }

    package static func stop() { drowse_spawner_stop() }

    /// Its pid while it runs.
    package static var pid: pid_t? {
        let p = drowse_spawner_pid()
        return p > 0 ? p : nil
    }
}
