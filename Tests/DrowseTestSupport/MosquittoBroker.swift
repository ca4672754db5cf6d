import Foundation
#if canImport(Glibc)
import Glibc
#endif

package let mosquittoPath = "/usr/sbin/mosquitto"

/// A real mosquitto on 127.0.0.1:`port` with its own config and persistence folder, so a
/// restart keeps the persistent sessions (as a production broker does). Spawned with
/// posix_spawn and a cleared signal mask: the test runner's threads block SIGTERM, and a
/// child inheriting that mask would never stop.
package final class Broker {
    package let port: Int
    package let dir: String
    package var pid: pid_t?

    package init(port: Int) throws {
        self.port = port
        dir = NSTemporaryDirectory() + "drowse-mqtt-test-\(getpid())-\(port)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    package static var available: Bool { FileManager.default.isExecutableFile(atPath: mosquittoPath) }

    package func start() async throws {
        let conf = [
            "listener \(port) 127.0.0.1",
            "allow_anonymous true",
            geteuid() == 0 ? "user root" : "",
            "persistence true",
            "persistence_location \(dir)/",
            "log_dest file \(dir)/mosquitto.log",
            "log_type all",
        ].filter { !$0.isEmpty }.joined(separator: "\n") + "\n"
        try conf.write(toFile: dir + "/mosquitto.conf", atomically: true, encoding: .utf8)
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
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(mosquittoPath), strdup("-c"), strdup(dir + "/mosquitto.conf"), nil]
        defer { for a in argv { free(a) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, mosquittoPath, &actions, &attr, argv, environ)
        guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO) }
        pid = child
        try await waitUntil(10, "mosquitto to listen on \(port)") { !running || portOpen(port) }
        guard running else { throw TimedOut(description: "mosquitto exited: \(log)") }
    }

    package var running: Bool {
        guard let pid else { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { self.pid = nil; return false }
        return true
    }

    /// SIGTERM (mosquitto saves its sessions) and wait for it to exit; SIGKILL after 10 s.
    package func stop() {
        guard let p = pid else { return }
        kill(p, SIGTERM)
        let end = Date().addingTimeInterval(10)
        var status: Int32 = 0
        while waitpid(p, &status, WNOHANG) == 0 {
            if Date() > end { kill(p, SIGKILL); _ = waitpid(p, &status, 0); break }
            usleep(20_000)
        }
        pid = nil
    }

    package var log: String { (try? String(contentsOfFile: dir + "/mosquitto.log", encoding: .utf8)) ?? "" }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: dir)
    }
}
