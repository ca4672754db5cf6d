import Foundation
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A free TCP port on 127.0.0.1 (bound, read back, released).
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = 0
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &addr) { p in
        p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
    }
    guard ok else { throw POSIXError(.EADDRINUSE) }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
func portOpen(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &addr) { p in
        p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

struct TimedOut: Error, CustomStringConvertible {
    var description: String
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass.
func waitUntil(_ seconds: Double, _ what: String, _ condition: () -> Bool) async throws {
    let end = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < end else { throw TimedOut(description: "timed out after \(seconds) s waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}

let mosquittoPath = "/usr/sbin/mosquitto"

/// A real mosquitto on 127.0.0.1:`port` with its own config and persistence folder, so a
/// restart keeps the persistent sessions (as a production broker does). Spawned with
/// posix_spawn and a cleared signal mask: the test runner's threads block SIGTERM, and a
/// child inheriting that mask would never stop.
final class Broker {
    let port: Int
    let dir: String
    var pid: pid_t?

    init(port: Int) throws {
        self.port = port
        dir = NSTemporaryDirectory() + "drowse-mqtt-test-\(getpid())-\(port)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    static var available: Bool { FileManager.default.isExecutableFile(atPath: mosquittoPath) }

    func start() async throws {
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

    var running: Bool {
        guard let pid else { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { self.pid = nil; return false }
        return true
    }

    /// SIGTERM (mosquitto saves its sessions) and wait for it to exit; SIGKILL after 10 s.
    func stop() {
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

    var log: String { (try? String(contentsOfFile: dir + "/mosquitto.log", encoding: .utf8)) ?? "" }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// Keeps every log message, for assertions on what was logged.
struct CapturingLogHandler: LogHandler {
    final class Box: Sendable {
        let lines = Mutex<[(Logger.Level, String)]>([])
        var all: [(Logger.Level, String)] { lines.withLock { $0 } }
        func contains(_ s: String) -> Bool { all.contains { $0.1.contains(s) } }
    }

    let box: Box
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        box.lines.withLock { $0.append((event.level, "\(event.message)")) }
    }

    static func logger() -> (Logger, Box) {
        let box = Box()
        return (Logger(label: "test") { _ in CapturingLogHandler(box: box) }, box)
    }
}
