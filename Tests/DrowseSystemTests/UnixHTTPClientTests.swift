import DrowseCore
import DrowseSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

/// A one-connection HTTP server on a Unix socket: reads one request (head and
/// Content-Length body), answers with `response` (nil: never answers, waits for the
/// client to hang up), then closes.
private final class OneShotServer: Sendable {
    let path: String
    private let listener: Int32
    private let received = Mutex<[UInt8]?>(nil)

    init(path: String, response: String?) throws {
        self.path = path
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
        try #require(rc == 0 && listen(fd, 4) == 0)
        listener = fd
        OSThread.detach(name: "test-http") { [self] in serve(response) }
    }

    private func serve(_ response: String?) {
        let conn = accept(listener, nil, nil)
        close(listener)
        guard conn >= 0 else { return }
        var data: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        func complete() -> Bool {
            guard let sep = UnixHTTPClientTests.find(data, Array("\r\n\r\n".utf8)) else { return false }
            let head = String(decoding: data[..<sep], as: UTF8.self).lowercased()
            let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            return data.count >= sep + 4 + length
        }
        while !complete() {
            let n = read(conn, &buf, buf.count)
            if n <= 0 { break }
            data.append(contentsOf: buf[0..<n])
        }
        received.withLock { $0 = data }
        if let response {
            let bytes = Array(response.utf8)
            _ = bytes.withUnsafeBytes { send(conn, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        } else {
            while read(conn, &buf, buf.count) > 0 {}  // until the client gives up
        }
        close(conn)
    }

    var request: String? { received.withLock { $0.map { String(decoding: $0, as: UTF8.self) } } }
}

@Suite("UnixHTTPClient")
struct UnixHTTPClientTests {
    static func find(_ hay: [UInt8], _ needle: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        return (0...(hay.count - needle.count)).first { Array(hay[$0..<$0 + needle.count]) == needle }
    }

    @Test("a GET gets status and JSON body; the request is HTTP/1.1 with Connection: close")
    func get() async throws {
        try await withTempDir { dir in
            let body = #"{"version":"1","apps":[]}"#
            let server = try OneShotServer(
                path: dir + "/s.sock",
                response: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
            let response = try UnixHTTPClient.request(socket: server.path, method: "GET", path: "/v1/status", timeout: 5)
            #expect(response.status == 200)
            #expect(response.body == Array(body.utf8))
            #expect(response.json?["version"]?.stringValue == "1")
            let request = try #require(server.request)
            #expect(request.hasPrefix("GET /v1/status HTTP/1.1\r\n"))
            #expect(request.contains("\r\nHost: drowse\r\n"))
            #expect(request.contains("\r\nConnection: close\r\n"))
            #expect(request.contains("\r\nContent-Length: 0\r\n"))
            #expect(!request.contains("Content-Type"))
        }
    }

    @Test("a POST sends its JSON body with type and length; error statuses come back as they are")
    func post() async throws {
        try await withTempDir { dir in
            let server = try OneShotServer(
                path: dir + "/s.sock",
                response: "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}")
            let json: JSON = ["url": "https://example.invalid/f", "app": "weather"]
            let response = try UnixHTTPClient.request(socket: server.path, method: "POST", path: "/v1/transfers", body: json, timeout: 5)
            #expect(response.status == 404)
            #expect(response.json == .object([]))
            let request = try #require(server.request)
            let payload = json.serialized
            #expect(request.hasPrefix("POST /v1/transfers HTTP/1.1\r\n"))
            #expect(request.contains("\r\nContent-Type: application/json\r\n"))
            #expect(request.contains("\r\nContent-Length: \(payload.utf8.count)\r\n"))
            #expect(request.hasSuffix("\r\n\r\n" + payload))
        }
    }

    @Test("no socket: a clear error that asks whether drowsed runs")
    func noSocket() async throws {
        try await withTempDir { dir in
            let error = #expect(throws: UnixHTTPClient.Failure.self) {
                _ = try UnixHTTPClient.request(socket: dir + "/missing.sock", method: "GET", path: "/v1/status")
            }
            #expect(error?.description.contains("is drowsed running?") == true)
        }
    }

    @Test("a socket path too long for sockaddr_un is refused")
    func pathTooLong() {
        let error = #expect(throws: UnixHTTPClient.Failure.self) {
            _ = try UnixHTTPClient.request(socket: "/tmp/" + String(repeating: "x", count: 200), method: "GET", path: "/v1/status")
        }
        #expect(error?.description.contains("too long") == true)
    }

    @Test("a response without a header end is malformed")
    func malformed() async throws {
        try await withTempDir { dir in
            let server = try OneShotServer(path: dir + "/s.sock", response: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n")
            let error = #expect(throws: UnixHTTPClient.Failure.self) {
                _ = try UnixHTTPClient.request(socket: server.path, method: "GET", path: "/v1/status", timeout: 5)
            }
            #expect(error?.description.contains("malformed") == true)
        }
    }

    @Test("a server that never answers times out")
    func timeout() async throws {
        try await withTempDir { dir in
            let server = try OneShotServer(path: dir + "/s.sock", response: nil)
            let start = WallClock.monotonic()
            let error = #expect(throws: UnixHTTPClient.Failure.self) {
                _ = try UnixHTTPClient.request(socket: server.path, method: "GET", path: "/v1/status", timeout: 0.3)
            }
            #expect(error?.description.contains("timed out") == true)
            #expect(WallClock.monotonic() - start < 5)  // the 0.3 s timeout, not a hang
        }
    }
}
