import Foundation
#if canImport(Glibc)
import Glibc
#endif

package let mosquittoPath = "/usr/sbin/mosquitto"

/// A real mosquitto on 127.0.0.1:`port` with its own config and persistence folder, so a
/// restart keeps the persistent sessions (as a production broker does); a `ChildProcess`.
package final class Broker {
    package let port: Int
    package let dir: String
    private var child: ChildProcess?
    package var pid: pid_t? { child?.pid }

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
        child = try ChildProcess(mosquittoPath, ["-c", dir + "/mosquitto.conf"])
        try await waitUntil(10, "mosquitto to listen on \(port)") { !running || portOpen(port) }
        guard running else { throw TimedOut(description: "mosquitto exited: \(log)") }
    }

    package var running: Bool { child?.running ?? false }

    /// SIGTERM (mosquitto saves its sessions) and wait for it to exit; SIGKILL after 10 s.
    package func stop() {
        child?.stop()
        child = nil
    }

    package var log: String { (try? String(contentsOfFile: dir + "/mosquitto.log", encoding: .utf8)) ?? "" }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: dir)
    }
}
