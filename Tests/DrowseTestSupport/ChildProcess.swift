import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A helper program a test runs (a broker, a server), started with posix_spawn and reaped by its
/// own pid only. Not Foundation's `Process`: it reaps children it did not start, which takes the
/// exit of a handler away from `ProcessLauncher` tests running in the same process. The signal
/// mask is cleared: the test runner's threads block SIGTERM, and a child inheriting that mask
/// would never stop. Its standard output and error go to /dev/null.
package final class ChildProcess {
    package private(set) var pid: pid_t?

    package init(_ path: String, _ arguments: [String]) throws {
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, &attr, argv, environ)
        guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO) }
        pid = child
    }

    /// Whether it still runs (reaped here once it has exited).
    package var running: Bool {
        guard let pid else { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { self.pid = nil; return false }
        return true
    }

    /// SIGTERM and wait for it to exit; SIGKILL after `grace` seconds.
    package func stop(grace: Double = 10) {
        guard let p = pid else { return }
        kill(p, SIGTERM)
        let end = Date().addingTimeInterval(grace)
        var status: Int32 = 0
        while waitpid(p, &status, WNOHANG) == 0 {
            if Date() > end { kill(p, SIGKILL); _ = waitpid(p, &status, 0); break }
            usleep(20_000)
        }
        pid = nil
    }

    deinit { stop() }
}
