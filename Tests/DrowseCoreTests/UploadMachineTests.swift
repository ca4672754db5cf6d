import Testing
@testable import DrowseCore

@Suite("UploadMachine")
struct UploadMachineTests {
    static func requests(_ actions: [UploadMachine.Action]) -> [UploadRequest] {
        actions.compactMap { if case .request(let r) = $0 { return r }; return nil }
    }

    static func header(_ r: UploadRequest, _ name: String) -> String? {
        r.headers.last { $0.0.lowercased() == name.lowercased() }?.1
    }

    @Test("tus: discover, create, append everything, complete")
    func tusHappyPath() throws {
        var m = UploadMachine(target: "http://h/files/", total: 100, fileName: "a.bin", protocol: .tus, resource: nil)
        var r = try #require(Self.requests(m.start()).first)
        #expect(r.method == "OPTIONS")
        var a = m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0", "tus-version": "1.0.0", "tus-extension": "creation,termination"]))
        r = try #require(Self.requests(a).first)
        #expect(r.method == "POST" && Self.header(r, "Upload-Length") == "100")
        a = m.handle(UploadResponse(status: 201, headers: ["location": "/files/abc"]))
        #expect(a.contains(.resource(url: "http://h/files/abc", protocol: .tus)))
        r = try #require(Self.requests(a).first)
        #expect(r.method == "PATCH" && r.url == "http://h/files/abc" && r.body == 0..<100 && !r.checksum)
        #expect(Self.header(r, "Upload-Offset") == "0")
        a = m.handle(UploadResponse(status: 204, headers: ["upload-offset": "100"]))
        #expect(a == [.offset(100), .completed])
    }

    @Test("tus: a short PATCH continues from the server's offset; a 409 asks again instead of guessing")
    func tusShortAndConflict() throws {
        var m = UploadMachine(target: "http://h/files/", total: 100, fileName: "", protocol: .tus, resource: "http://h/files/x")
        var r = try #require(Self.requests(m.resume()).first)
        #expect(r.method == "OPTIONS")  // what does the server offer (checksums)?
        r = try #require(Self.requests(m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0"]))).first)
        #expect(r.method == "HEAD")
        var a = m.handle(UploadResponse(status: 200, headers: ["upload-offset": "40", "upload-length": "100"]))
        r = try #require(Self.requests(a).first)
        #expect(a.first == .offset(40) && r.method == "PATCH" && r.body == 40..<100)
        a = m.handle(UploadResponse(status: 204, headers: ["upload-offset": "70"]))
        r = try #require(Self.requests(a).first)
        #expect(r.body == 70..<100)
        a = m.handle(UploadResponse(status: 409, headers: [:]))
        r = try #require(Self.requests(a).first)
        #expect(r.method == "HEAD")
        a = m.handle(UploadResponse(status: 200, headers: ["upload-offset": "55"]))
        #expect(Self.requests(a).first?.body == 55..<100)  // backtracks to what the server really has
    }

    @Test("tus: checksums are sent per chunk when the server offers sha1")
    func tusChecksum() throws {
        var m = UploadMachine(target: "http://h/f/", total: 40 << 20, fileName: "", protocol: .tus, resource: nil)
        _ = m.start()
        _ = m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0", "tus-extension": "creation,checksum", "tus-checksum-algorithm": "md5,sha1"]))
        let a = m.handle(UploadResponse(status: 201, headers: ["location": "http://h/f/1"]))
        let r = try #require(Self.requests(a).first)
        #expect(r.checksum && r.body == 0..<(16 << 20))
        let b = m.handle(UploadResponse(status: 460, headers: [:]))
        #expect(Self.requests(b).first?.method == "HEAD")
    }

    @Test("a forgotten upload (404 on HEAD) starts again from byte 0")
    func forgotten() throws {
        var m = UploadMachine(target: "http://h/files/", total: 10, fileName: "", protocol: .tus, resource: "http://h/files/gone")
        _ = m.resume()
        _ = m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0"]))
        let a = m.handle(UploadResponse(status: 404, headers: [:]))
        #expect(a.first == .offset(0))
        #expect(Self.requests(a).first?.method == "POST")
    }

    @Test("IETF current draft: creation without data, then one PATCH with Upload-Complete ?1")
    func ietfCurrent() throws {
        var m = UploadMachine(target: "https://h/up", total: 10, fileName: "", protocol: .ietf, resource: nil)
        var r = try #require(Self.requests(m.start()).first)
        #expect(r.method == "POST" && r.body == nil)
        #expect(Self.header(r, "Upload-Draft-Interop-Version") == "8" && Self.header(r, "Upload-Complete") == "?0")
        #expect(Self.header(r, "Upload-Length") == "10")
        var a = m.handle(UploadResponse(status: 201, headers: ["location": "https://h/uploads/1"], informationalLocation: "https://h/uploads/1"))
        r = try #require(Self.requests(a).first)
        #expect(r.method == "PATCH" && r.body == 0..<10)
        #expect(Self.header(r, "Upload-Complete") == "?1" && Self.header(r, "Content-Type") == "application/partial-upload")
        a = m.handle(UploadResponse(status: 200, headers: ["upload-complete": "?1"]))
        #expect(a == [.offset(10), .completed])
    }

    @Test("iOS 17's draft uses the inverted Upload-Incomplete and interop 3")
    func ietf3() throws {
        var m = UploadMachine(target: "http://h/up", total: 10, fileName: "", protocol: .ietf3, resource: nil)
        let r = try #require(Self.requests(m.start()).first)
        #expect(Self.header(r, "Upload-Draft-Interop-Version") == "3" && Self.header(r, "Upload-Incomplete") == "?1")
        #expect(Self.header(r, "Upload-Length") == nil)
        let a = m.handle(UploadResponse(status: 201, headers: ["location": "/uploads/9", "upload-offset": "0", "upload-incomplete": "?1"]))
        let p = try #require(Self.requests(a).first)
        #expect(p.url == "http://h/uploads/9" && Self.header(p, "Upload-Incomplete") == "?0")
    }

    @Test("an IETF resume whose HEAD says everything arrived but not complete sends an empty completing PATCH")
    func ietfEmptyCompletion() throws {
        var m = UploadMachine(target: "http://h/up", total: 10, fileName: "", protocol: .ietf, resource: "http://h/uploads/1")
        _ = m.resume()
        let a = m.handle(UploadResponse(status: 204, headers: ["upload-offset": "10", "upload-complete": "?0"]))
        let r = try #require(Self.requests(a).first)
        #expect(r.method == "PATCH" && r.body == 10..<10 && Self.header(r, "Upload-Complete") == "?1")
        var done = UploadMachine(target: "http://h/up", total: 10, fileName: "", protocol: .ietf, resource: "http://h/uploads/1")
        _ = done.resume()
        #expect(done.handle(UploadResponse(status: 204, headers: ["upload-offset": "10", "upload-complete": "?1"])) == [.offset(10), .completed])
    }

    @Test("auto falls back from tus to IETF to a plain PUT")
    func autoFallback() throws {
        var m = UploadMachine(target: "http://h/x.bin", total: 5, fileName: "", protocol: .auto, resource: nil)
        _ = m.start()
        var a = m.handle(UploadResponse(status: 405, headers: [:]))
        #expect(Self.requests(a).first?.method == "POST")
        a = m.handle(UploadResponse(status: 405, headers: [:]))
        let r = try #require(Self.requests(a).first)
        #expect(r.method == "PUT" && r.body == 0..<5 && m.proto == .put)
        #expect(a.first == .chose(.put))
        #expect(m.handle(UploadResponse(status: 201, headers: [:])) == [.offset(5), .completed])
    }

    @Test("a server that speaks only iOS 17's draft gets interop 3")
    func ietfDowngrade() throws {
        var m = UploadMachine(target: "http://h/up", total: 5, fileName: "", protocol: .ietf, resource: nil)
        _ = m.start()
        let a = m.handle(UploadResponse(status: 400, headers: ["upload-draft-interop-version": "3"]))
        let r = try #require(Self.requests(a).first)
        #expect(m.proto == .ietf3 && Self.header(r, "Upload-Draft-Interop-Version") == "3" && Self.header(r, "Upload-Incomplete") == "?1")
    }

    @Test("transient and permanent failures are told apart")
    func failures() {
        var m = UploadMachine(target: "http://h/x", total: 5, fileName: "", protocol: .put, resource: nil)
        _ = m.start()
        #expect(m.handle(UploadResponse(status: 503, headers: [:])) == [.failed(reason: "PUT: HTTP 503", transient: true)])
        var n = UploadMachine(target: "http://h/x", total: 5, fileName: "", protocol: .put, resource: nil)
        _ = n.start()
        #expect(n.handle(UploadResponse(status: 403, headers: [:])) == [.failed(reason: "PUT: HTTP 403", transient: false)])
    }

    @Test("a 503 or 429 with Retry-After carries it in the failure; garbage and other statuses do not")
    func retryAfter() {
        func fail(_ status: Int, _ headers: [String: String], _ proto: UploadProtocol = .put) -> [UploadMachine.Action] {
            var m = UploadMachine(target: "http://h/x", total: 5, fileName: "", protocol: proto, resource: proto == .put ? nil : "http://h/x/1")
            _ = m.start()
            return m.handle(UploadResponse(status: status, headers: headers))
        }
        #expect(fail(503, ["retry-after": "7"]) == [.failed(reason: "PUT: HTTP 503 (Retry-After: 7s)", transient: true, retryAfter: .seconds(7))])
        #expect(fail(429, ["retry-after": "Sun, 06 Nov 1994 08:49:37 GMT"]).first == .failed(
            reason: "PUT: HTTP 429 (Retry-After: until 784111777 Unix time)", transient: true, retryAfter: .date(784_111_777)))
        #expect(fail(503, ["retry-after": "soon"]) == [.failed(reason: "PUT: HTTP 503", transient: true)])
        #expect(fail(500, ["retry-after": "7"]) == [.failed(reason: "PUT: HTTP 500", transient: true)])
        // tus asking for the offset: the same rule.
        #expect(fail(503, ["retry-after": "2"], .tus).first == .failed(
            reason: "asking for the upload offset: HTTP 503 (Retry-After: 2s)", transient: true, retryAfter: .seconds(2)))
    }

    @Test("cancel ends a created resource with DELETE, and a PUT has nothing to end")
    func cancel() {
        var m = UploadMachine(target: "http://h/f/", total: 5, fileName: "", protocol: .tus, resource: "http://h/f/1")
        #expect(m.cancel()?.method == "DELETE")
        var p = UploadMachine(target: "http://h/x", total: 5, fileName: "", protocol: .put, resource: nil)
        #expect(p.cancel() == nil)
    }

    @Test("tus: creation sends filename and filetype metadata")
    func tusMetadata() throws {
        var m = UploadMachine(target: "http://h/files/", total: 10, fileName: "a.bin", protocol: .tus, resource: nil)
        _ = m.start()
        let r = try #require(Self.requests(m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0"]))).first)
        #expect(Self.header(r, "Upload-Metadata") == "filename YS5iaW4=,filetype YXBwbGljYXRpb24vb2N0ZXQtc3RyZWFt")
    }

    @Test("tus: an offset query refused with a 4xx starts a new upload and ends the old one only once the new one exists")
    func tusOffsetRefused() throws {
        var m = UploadMachine(target: "http://h/files/", total: 100, fileName: "a.bin", protocol: .tus, resource: "http://h/files/old")
        _ = m.resume()
        _ = m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0"]))  // OPTIONS → HEAD
        var a = m.handle(UploadResponse(status: 400, headers: [:], body: "missing filetype"))
        #expect(a.first == .offset(0))
        #expect(!a.contains { if case .abandon = $0 { return true }; return false })  // nothing ended yet
        #expect(Self.requests(a).first?.method == "POST")
        a = m.handle(UploadResponse(status: 201, headers: ["location": "/files/new"]))
        #expect(a.prefix(2) == [.resource(url: "http://h/files/new", protocol: .tus), .abandon(url: "http://h/files/old", protocol: .tus)])
        #expect(Self.requests(a).first?.body == 0..<100)
    }

    @Test("tus: a second refusal of the offset fails with the server's reason instead of looping")
    func tusOffsetRefusedTwice() throws {
        var m = UploadMachine(target: "http://h/files/", total: 100, fileName: "", protocol: .tus, resource: "http://h/files/old")
        _ = m.resume()
        _ = m.handle(UploadResponse(status: 204, headers: ["tus-resumable": "1.0.0"]))
        _ = m.handle(UploadResponse(status: 403, headers: [:]))
        _ = m.handle(UploadResponse(status: 201, headers: ["location": "/files/new"]))
        _ = m.handle(UploadResponse(status: 409, headers: [:]))  // → HEAD of the new one
        let a = m.handle(UploadResponse(status: 403, headers: [:], body: "quota exceeded\nmore"))
        #expect(a == [.failed(reason: "asking for the upload offset: HTTP 403 (server: quota exceeded)", transient: false)])
    }
}
