import DrowseCore
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import DrowseKit
import DrowsePOSIX
import DrowseTestSupport

/// A scripted drowsed: a Unix-socket HTTP server whose answer to each request is decided by
/// `script`, and which records every request it gets.
private final class ScriptedServer: Sendable {
    struct Request: Sendable, Equatable {
        var method: String
        var path: String
        var body: String
    }

    enum Answer: Sendable {
        case json(Int, String)
        /// A chunked event stream: these lines (one chunk each), then `close` ends it (else it
        /// stays open until the client hangs up).
        case stream([String], close: Bool)
    }

    let path: String
    private let listener: Int32
    private let log = Mutex<[Request]>([])
    private let script: @Sendable (Request, Int) -> Answer

    /// `connectionNumber` counts event-stream connections from 0.
    init(path: String, script: @escaping @Sendable (_ request: Request, _ connectionNumber: Int) -> Answer) throws {
        self.path = path
        self.script = script
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(fd >= 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(rc == 0 && listen(fd, 16) == 0)
        listener = fd
        KitThread.detach { [self] in acceptLoop() }
    }

    /// Stops accepting (the socket file stays: clients get ECONNREFUSED, as after a crash).
    func stop() { shutdown(listener, Int32(SHUT_RDWR)) }

    var requests: [Request] { log.withLock { $0 } }

    private let streams = Atomic<Int>(0)

    private func acceptLoop() {
        while true {
            let conn = accept(listener, nil, nil)
            if conn < 0 {
                if errno == EINTR { continue }
                close(listener)
                return
            }
            KitThread.detach { [self] in serve(conn) }
        }
    }

    private func serve(_ conn: Int32) {
        defer { close(conn) }
        var data: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        var request: Request?
        while request == nil {
            let n = read(conn, &buf, buf.count)
            if n <= 0 { return }
            data += buf[0..<n]
            request = Self.parse(data)
        }
        let r = request!
        log.withLock { $0.append(r) }
        let isStream = r.method == "GET" && r.path.hasSuffix("/events")
        let number = isStream ? streams.add(1, ordering: .relaxed).oldValue : 0
        switch script(r, number) {
        case .json(let status, let body):
            send(conn, "HTTP/1.1 \(status) X\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
        case .stream(let lines, let close):
            send(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
            for line in lines {
                let l = line + "\n"
                send(conn, String(l.utf8.count, radix: 16) + "\r\n" + l + "\r\n")
            }
            if close {
                send(conn, "0\r\n\r\n")
            } else {
                while read(conn, &buf, buf.count) > 0 {}  // until the client hangs up
            }
        }
    }

    private func send(_ fd: Int32, _ s: String) {
        let b = Array(s.utf8)
        _ = b.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    private static func parse(_ data: [UInt8]) -> Request? {
        guard let sep = HTTPResponseDecoder.find(data, from: 0) else { return nil }
        let head = String(decoding: data[..<sep], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        let first = lines.first?.split(separator: " ") ?? []
        guard first.count >= 2 else { return nil }
        let length = lines.compactMap { l -> Int? in
            let lower = l.lowercased()
            guard lower.hasPrefix("content-length:") else { return nil }
            return Int(lower.dropFirst("content-length:".count).trimmingPrefix(" "))
        }.first ?? 0
        guard data.count >= sep + 4 + length else { return nil }
        return Request(method: String(first[0]), path: String(first[1]),
                       body: String(decoding: data[(sep + 4)..<(sep + 4 + length)], as: UTF8.self))
    }
}

/// Waits (up to 5 s) until `condition` holds.
private func eventually(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<500 {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

private let hello = #"{"event":"hello","app":"demo","state":"background"}"#

@Suite("DrowseApp against a scripted drowsed")
struct DrowseAppTests {
    @Test("the stream is read, hello is not yielded, and a closed stream is reopened")
    func reconnects() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let server = try ScriptedServer(path: dir + "/d.sock") { _, n in
            n == 0
                ? .stream([hello, #"{"event":"fetch","id":"e1","deadline":10,"reason":"window"}"#, "garbage",
                           #"{"event":"notification","id":"e2","deadline":11,"payload":{"task":2}}"#], close: true)
                : .stream([hello, #"{"event":"fetch","id":"e3","deadline":12,"reason":"manual"}"#], close: false)
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        var seen: [DrowseEvent] = []
        for try await e in app.events {
            seen.append(e)
            if seen.count == 3 { break }
        }
        #expect(seen.map(\.id) == ["e1", "e2", "e3"])
        #expect(seen.map(\.kind) == [.fetch, .notification, .fetch])
        #expect(seen[1].payload?["task"]?.intValue == 2)
        let streams = server.requests.filter { $0.path == "/v1/apps/demo/events" }
        #expect(streams.count == 2 && streams.allSatisfy { $0.method == "GET" })
    }

    @Test("a daemon that is not there yet is waited for")
    func waitsForDaemon() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let app = DrowseApp(app: "demo", socket: dir + "/late.sock")
        let starter = Task {
            try await Task.sleep(for: .milliseconds(400))
            return try ScriptedServer(path: dir + "/late.sock") { _, _ in
                .stream([hello, #"{"event":"fetch","id":"e9","deadline":1}"#], close: false)
            }
        }
        var first: DrowseEvent?
        for try await e in app.events {
            first = e
            break
        }
        #expect(first?.id == "e9")
        _ = try await starter.value
    }

    @Test("a refused stream (4xx) ends with the API's error")
    func refused() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let server = try ScriptedServer(path: dir + "/d.sock") { _, _ in
            .json(404, #"{"error":{"code":"not_found","message":"no app 'demo'"}}"#)
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        await #expect(throws: DrowseError(status: 404, code: "not_found", message: "no app 'demo'")) {
            for try await _ in app.events {}
        }
    }

    @Test("complete, begin, time remaining and end send the right method, path and body")
    func requestShapes() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let server = try ScriptedServer(path: dir + "/d.sock") { r, _ in
            switch (r.method, r.path) {
            case ("POST", "/v1/apps/demo/events/e7/complete"): return .json(200, #"{"id":"e7","recorded":true}"#)
            case ("POST", "/v1/apps/demo/tasks"):
                return .json(200, #"{"id":"t3","app":"demo","name":"sync","state":"open","expires_at":100,"time_remaining":29.5}"#)
            case ("GET", "/v1/apps/demo/tasks/t3"):
                return .json(200, #"{"id":"t3","app":"demo","name":"sync","state":"open","expires_at":100,"time_remaining":12.25}"#)
            case ("POST", "/v1/apps/demo/tasks/t3/end"):
                return .json(200, #"{"id":"t3","app":"demo","name":"sync","state":"ended","expires_at":100,"time_remaining":12}"#)
            default: return .json(404, #"{"error":{"code":"not_found","message":"no route"}}"#)
            }
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        #expect(try await app.backgroundTimeRemaining == 0)
        #expect(server.requests.isEmpty)  // no task open: nothing to ask

        try await app.complete(DrowseEvent(kind: .fetch, id: "e7"), result: .newData)
        let task = try await app.beginBackgroundTask(name: "sync") {}
        #expect(task == BackgroundTaskID("t3"))
        #expect(try await app.backgroundTimeRemaining == 12.25)
        try await app.endBackgroundTask(task)
        #expect(try await app.backgroundTimeRemaining == 0)
        try await app.endBackgroundTask(task)  // already ended: asks drowsed again, which answers

        let r = server.requests
        #expect(r.count == 5)
        #expect(r[0] == .init(method: "POST", path: "/v1/apps/demo/events/e7/complete", body: #"{"result":"new-data"}"#))
        #expect(r[1] == .init(method: "POST", path: "/v1/apps/demo/tasks", body: #"{"name":"sync"}"#))
        #expect(r[2] == .init(method: "GET", path: "/v1/apps/demo/tasks/t3", body: ""))
        #expect(r[3] == .init(method: "POST", path: "/v1/apps/demo/tasks/t3/end", body: ""))
        #expect(r[4] == r[3])
        #expect(DrowseResult.allCases.map(\.rawValue) == ["new-data", "no-data", "failed"])
    }

    @Test("an exhausted allowance is a DrowseError with the API's code")
    func noBackgroundTime() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let server = try ScriptedServer(path: dir + "/d.sock") { _, _ in
            .json(409, #"{"error":{"code":"no_background_time","message":"used up"}}"#)
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        await #expect(throws: DrowseError(status: 409, code: "no_background_time", message: "used up")) {
            _ = try await app.beginBackgroundTask {}
        }
    }

    @Test("task-expiring runs the task's expiration handler, then the library ends the task")
    func expirationHandler() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let server = try ScriptedServer(path: dir + "/d.sock") { r, _ in
            switch (r.method, r.path) {
            case ("POST", "/v1/apps/demo/tasks"): return .json(200, #"{"id":"t4","state":"open","time_remaining":6}"#)
            case ("POST", "/v1/apps/demo/tasks/t4/end"): return .json(200, #"{"id":"t4","state":"ended","time_remaining":1}"#)
            case ("GET", "/v1/apps/demo/events"):
                return .stream([hello, #"{"event":"task-expiring","id":"e5","task":"t4","expires_at":9,"time_remaining":4.5}"#], close: false)
            default: return .json(404, #"{"error":{"code":"not_found","message":"no route"}}"#)
            }
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        let ran = Atomic<Int>(0)
        let task = try await app.beginBackgroundTask { ran.add(1, ordering: .relaxed) }
        var got: DrowseEvent?
        for try await e in app.events {
            got = e
            break
        }
        #expect(got?.kind == .taskExpiring && got?.task == task && got?.timeRemaining == 4.5)
        #expect(await eventually { server.requests.contains { $0.path == "/v1/apps/demo/tasks/t4/end" } })
        #expect(ran.load(ordering: .relaxed) == 1)
        #expect(server.requests.filter { $0.path == "/v1/apps/demo/tasks/t4/end" }.count == 1)
        try await app.endBackgroundTask(task)  // the library ended it already: nothing is sent
        #expect(server.requests.filter { $0.path == "/v1/apps/demo/tasks/t4/end" }.count == 1)
    }

    @Test("transfers go to /v1/transfers with the app's id")
    func transfers() async throws {
        let dir = try makeTempDir(in: "/tmp", prefix: "drowsekit")
        let t = #"{"id":"x1","app":"demo","session":"s","kind":"download","state":"waiting","url":"https://h/f","bytes_done":0,"bytes_total":null,"reason":null,"location":null}"#
        let server = try ScriptedServer(path: dir + "/d.sock") { r, _ in
            switch (r.method, r.path) {
            case ("POST", "/v1/transfers"), ("GET", "/v1/transfers/x1"): return .json(200, t)
            case ("GET", "/v1/transfers?app=demo&limit=500"): return .json(200, "[\(t)]")
            default: return .json(404, #"{"error":{"code":"not_found","message":"no route"}}"#)
            }
        }
        let app = DrowseApp(app: "demo", socket: server.path)
        let d = try await app.download(url: "https://h/f", to: "/srv/f", sha256: "ab", session: "s")
        #expect(d.id == "x1" && d.kind == .download && d.state == .waiting && d.bytesTotal == nil)
        _ = try await app.upload(file: "/srv/up", url: "https://h/u")
        #expect(try await app.transfer("x1").url == "https://h/f")
        #expect(try await app.transfers().map(\.id) == ["x1"])
        let r = server.requests
        let create = try #require(JSON.parse(r[0].body) as JSON?)
        #expect(create["kind"] == "download" && create["app"] == "demo" && create["session"] == "s")
        #expect(create["to"] == "/srv/f" && create["sha256"] == "ab" && create["url"] == "https://h/f")
        let up = try JSON.parse(r[1].body)
        #expect(up["kind"] == "upload" && up["file"] == "/srv/up" && up["app"] == "demo")
        #expect(r.map(\.path) == ["/v1/transfers", "/v1/transfers", "/v1/transfers/x1", "/v1/transfers?app=demo&limit=500"])
    }
}
