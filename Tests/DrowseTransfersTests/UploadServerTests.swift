import DrowseCore
import DrowseSystem
import DrowseTestSupport
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization
import Testing
@testable import DrowseTransfers

/// A small HTTP/1.1 server on 127.0.0.1 (Python's http.server, run as a child process): `/put/…`
/// takes a PUT, `/tus/` speaks tus 1.0.0 (creation, termination), `/fail/…` answers 500 to
/// everything, `/tusfail/` creates tus uploads and answers 500 to their PATCH. What a finished upload delivered is written to `received-<name>` in its folder.
private let serverScript = #"""
import http.server, sys, os, threading
root = sys.argv[1]
uploads = {}
lock = threading.Lock()

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk: break
            data += chunk
        return data
    def answer(self, status, headers=(), text=b""):
        self.send_response(status)
        for k, v in headers: self.send_header(k, v)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)
    def tus(self):
        return [("Tus-Resumable", "1.0.0")]
    def do_OPTIONS(self):
        if self.path.startswith("/fail/"): return self.answer(500, text=b"broken\n")
        if self.path.startswith("/tus/") or self.path.startswith("/tusfail/"):
            return self.answer(204, self.tus() + [("Tus-Version", "1.0.0"), ("Tus-Extension", "creation,termination")])
        self.answer(200)
    def do_PUT(self):
        data = self.body()
        if self.path.startswith("/fail/"): return self.answer(500, text=b"broken\n")
        name = self.path.strip("/").replace("/", "_")
        with open(os.path.join(root, "received-" + name), "wb") as f: f.write(data)
        self.answer(201)
    def do_POST(self):
        self.body()
        base = "/" + self.path.strip("/").split("/")[0] + "/"
        if base not in ("/tus/", "/tusfail/"): return self.answer(404)
        with lock:
            uid = str(len(uploads) + 1)
            uploads[uid] = {"length": int(self.headers["Upload-Length"]), "data": b""}
        self.answer(201, self.tus() + [("Location", base + uid)])
    def do_HEAD(self):
        u = uploads.get(self.path.rsplit("/", 1)[-1])
        if u is None: return self.answer(404, self.tus())
        self.answer(200, self.tus() + [("Upload-Offset", str(len(u["data"]))), ("Upload-Length", str(u["length"]))])
    def do_PATCH(self):
        data = self.body()
        if self.path.startswith("/tusfail/"): return self.answer(500, self.tus(), b"broken\n")
        uid = self.path.rsplit("/", 1)[-1]
        u = uploads.get(uid)
        if u is None: return self.answer(404, self.tus())
        if int(self.headers["Upload-Offset"]) != len(u["data"]): return self.answer(409, self.tus())
        u["data"] += data
        if len(u["data"]) == u["length"]:
            with open(os.path.join(root, "received-tus_" + uid), "wb") as f: f.write(u["data"])
        self.answer(204, self.tus() + [("Upload-Offset", str(len(u["data"])))])
    def do_DELETE(self):
        self.answer(204, self.tus())

class S(http.server.ThreadingHTTPServer):
    daemon_threads = True

s = S(("127.0.0.1", 0), H)
with open(os.path.join(root, "port.tmp"), "w") as f: f.write(str(s.server_address[1]))
os.rename(os.path.join(root, "port.tmp"), os.path.join(root, "port"))
s.serve_forever()
"""#

/// The server, in a temporary folder of its own; stopped (and the folder removed) by `stop()`.
private final class LoopbackUploadServer {
    let dir: String
    let process: ChildProcess
    var port = 0

    init() throws {
        dir = try makeTempDir()
        try put(serverScript, at: dir + "/server.py")
        process = try ChildProcess("/usr/bin/python3", [dir + "/server.py", dir])
    }

    func waitReady() async throws {
        try await waitUntil(10, "the upload server to listen") { !process.running || contents(dir + "/port") != nil }
        guard let p = contents(dir + "/port").flatMap({ Int($0) }) else { throw TimedOut(description: "the upload server did not start") }
        port = p
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    func received(_ name: String) -> [UInt8]? { FileManager.default.contents(atPath: dir + "/received-" + name).map(Array.init) }

    func stop() {
        process.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// Runs one upload on a real engine and returns the events it reported, up to the final one.
private func upload(_ file: String, size: Int64, to url: String, protocol proto: UploadProtocol) async throws -> [TransferEvent] {
    let events = Mutex<[TransferEvent]>([])
    let engine = try TransferEngine.start(
        options: .init(maxConnectionsPerHost: 2, commitInterval: 2, commitBytes: 8 << 20),
        logger: Logger(label: "upload-test")) { e in events.withLock { $0.append(e) } }
    engine.start(UploadJob(id: "u1", url: url, sourcePath: file, total: size, protocolName: proto, resource: nil))
    func finished() -> Bool {
        events.withLock { $0.contains { if case .completed = $0 { true } else if case .failed = $0 { true } else { false } } }
    }
    try await waitUntil(20, "the upload to finish") { finished() }
    await engine.shutdown()
    return events.withLock { $0 }
}

/// Some megabytes that are not all alike, so a byte out of place changes the hash.
private func makeSource(in dir: String, size: Int) throws -> (path: String, sha256: String) {
    var bytes = [UInt8](repeating: 0, count: size)
    var x: UInt64 = 0x9E37_79B9_7F4A_7C15
    for i in 0..<size {
        x = x &* 6364136223846793005 &+ 1442695040888963407
        bytes[i] = UInt8(truncatingIfNeeded: x >> 33)
    }
    let path = dir + "/source.bin"
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { throw POSIXError(.EIO) }
    return (path, sha256(bytes))
}

private func sha256(_ bytes: [UInt8]) -> String { SHA256Hasher.hexDigest(of: bytes) }

@Suite("Upload against a loopback server", .serialized)
struct UploadServerTests {
    static let size = 3 << 20 + 12345

    @Test("PUT: the server receives every byte, and the upload completes", arguments: [UploadProtocol.put, .auto])
    func putUpload(_ proto: UploadProtocol) async throws {
        let server = try LoopbackUploadServer()
        defer { server.stop() }
        try await server.waitReady()
        try await withTempDir { dir in
            let source = try makeSource(in: dir, size: Self.size)
            let events = try await upload(source.path, size: Int64(Self.size), to: server.url("/put/a.bin"), protocol: proto)
            guard case .completed(let id, let bytes, _)? = events.last else { Issue.record("not completed: \(events)"); return }
            #expect(id == "u1" && bytes == Int64(Self.size))
            let got = try #require(server.received("put_a.bin"))
            #expect(got.count == Self.size)
            #expect(sha256(got) == source.sha256)
        }
    }

    @Test("tus: created, sent with PATCH, the server holds every byte and the upload completes")
    func tusUpload() async throws {
        let server = try LoopbackUploadServer()
        defer { server.stop() }
        try await server.waitReady()
        try await withTempDir { dir in
            let source = try makeSource(in: dir, size: Self.size)
            let events = try await upload(source.path, size: Int64(Self.size), to: server.url("/tus/"), protocol: .tus)
            guard case .completed(_, let bytes, _)? = events.last else { Issue.record("not completed: \(events)"); return }
            #expect(bytes == Int64(Self.size))
            #expect(events.contains {
                if case .uploadResource(_, let url?, "tus") = $0 { url == server.url("/tus/1") } else { false }
            })
            #expect(events.contains { if case .committed(_, Int64(Self.size), _, _, _) = $0 { true } else { false } })
            let got = try #require(server.received("tus_1"))
            #expect(sha256(got) == source.sha256)
        }
    }

    @Test("a server that answers 500 fails the upload (transient), for PUT and tus",
          arguments: [(UploadProtocol.put, "/fail/x"), (.tus, "/tusfail/")])
    func serverError(_ proto: UploadProtocol, _ path: String) async throws {
        let server = try LoopbackUploadServer()
        defer { server.stop() }
        try await server.waitReady()
        try await withTempDir { dir in
            let source = try makeSource(in: dir, size: 4096)
            let events = try await upload(source.path, size: 4096, to: server.url(path), protocol: proto)
            guard case .failed(_, let error)? = events.last else { Issue.record("did not fail: \(events)"); return }
            #expect(error.transient)
            #expect(error.reason.contains("500"))
            #expect(!events.contains { if case .completed = $0 { true } else { false } })
        }
    }
}
