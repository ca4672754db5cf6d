import CCurl
import DrowseCore
import Logging
import Testing
@testable import DrowseTransfers

@Suite("CurlURL")
struct CurlURLTests {
    static let base = "https://up.example.com/files/a/b?x=1"

    static func resolve(_ ref: String, _ base: String = base) -> String? {
        try? CurlURL.resolve(ref, against: base).get()
    }

    @Test("RFC 3986 references against the request URL")
    func references() {
        #expect(Self.resolve("//other.example.net/path") == "https://other.example.net/path")
        #expect(Self.resolve("/abs") == "https://up.example.com/abs")
        #expect(Self.resolve("rel") == "https://up.example.com/files/a/rel")
        #expect(Self.resolve("../up") == "https://up.example.com/files/up")
        #expect(Self.resolve("https://other/") == "https://other/")
        #expect(Self.resolve("http://h:8080/u/1", "http://127.0.0.1/files/") == "http://h:8080/u/1")
        #expect(Self.resolve("/files/abc", "http://h/files/") == "http://h/files/abc")
    }

    @Test("anything but http or https is refused")
    func refused() {
        if case .failure(let e) = CurlURL.resolve("ftp://x", against: Self.base) {
            #expect(!e.transient && e.reason.contains("not an http or https URL"))
        } else {
            Issue.record("ftp://x was accepted")
        }
        #expect(Self.resolve("file:///etc/passwd") == nil)
        #expect(Self.resolve("gopher://h/") == nil)
        #expect(Self.resolve("") == nil)
        // Protocol-relative keeps the base's scheme, which must itself be http(s).
        #expect(Self.resolve("//h/p", "ftp://x/") == nil)
    }
}

@Suite("ProtocolRule")
struct ProtocolRuleTests {
    @Test("the _STR options from 7.85, the bitmask before")
    func byVersion() {
        #expect(ProtocolRule.preferred(forVersion: 0x07_55_00) == .names)
        #expect(ProtocolRule.preferred(forVersion: 0x08_05_00) == .names)
        #expect(ProtocolRule.preferred(forVersion: 0x07_54_00) == .bitmask)
        #expect(ProtocolRule.preferred(forVersion: 0x07_44_00) == .bitmask)
    }

    @Test("falls back to the other rule; none when neither takes")
    func fallback() {
        var tried: [ProtocolRule] = []
        #expect(ProtocolRule.choose(version: 0x07_58_01) { tried.append($0); return $0 == .bitmask } == .bitmask)
        #expect(tried == [.names, .bitmask])
        tried = []
        #expect(ProtocolRule.choose(version: 0x07_4A_00) { tried.append($0); return true } == .bitmask)
        #expect(tried == [.bitmask])
        #expect(ProtocolRule.choose(version: 0x07_4A_00) { _ in false } == nil)
    }

    @Test("this libcurl takes a rule, and both rules really restrict")
    func probe() throws {
        let rule = try ProtocolRule.probe().get()
        #expect(rule == ProtocolRule.preferred(forVersion: ccurl_version_num()))
        for r in [ProtocolRule.names, .bitmask] where r == .bitmask || ccurl_version_num() >= ProtocolRule.namesSince {
            let easy = try #require(ccurl_easy_init())
            defer { ccurl_easy_cleanup(easy) }
            #expect(r.apply(to: easy).0 == CURLE_OK)
            // A file:// URL must now be refused by libcurl before any I/O.
            #expect(ccurl_setopt_str(easy, CURLOPT_URL, "file:///etc/hostname") == CURLE_OK)
            #expect(ccurl_setopt_long(easy, CURLOPT_NOBODY, 1) == CURLE_OK)
            #expect(ccurl_easy_perform(easy) == CURLE_UNSUPPORTED_PROTOCOL)
        }
    }
}

@Suite("CurlCheck")
struct CurlCheckTests {
    @Test("a refused setting names the option and libcurl's reason; a tuning only warns")
    func refusals() throws {
        let easy = try #require(ccurl_easy_init())
        defer { ccurl_easy_cleanup(easy) }
        let c = CurlCheck(easy: easy, logger: Logger(label: "test"))
        let bogus = CURLoption(rawValue: 99_999)
        do {
            try c.setopt(bogus, "CURLOPT_BOGUS", 1)
            Issue.record("an unknown option was taken")
        } catch {
            #expect(error.reason.contains("CURLOPT_BOGUS") && error.reason.contains("nknown option"))
            #expect(!error.transient)
        }
        try c.setopt(bogus, "CURLOPT_BOGUS", 1, .warn)
        try c.setopt(CURLOPT_URL, "CURLOPT_URL", "https://example.com/")
        #expect(throws: TransferError.self) { try c.setopt(CURLOPT_MAXREDIRS, "CURLOPT_MAXREDIRS", -2) }
    }
}

@Suite("Upload Location")
struct UploadLocationTests {
    static func created(_ location: String, target: String = "https://h/files/") -> [UploadMachine.Action] {
        var m = UploadMachine(target: target, total: 10, fileName: "a", protocol: .ietf, resource: nil)
        m.resolveLocation = { try? CurlURL.resolve($0, against: $1).get() }
        _ = m.start()
        return m.handle(UploadResponse(status: 201, headers: ["location": location, "upload-offset": "0"]))
    }

    @Test("the resource is resolved by libcurl: protocol-relative and dot segments")
    func resolved() {
        #expect(Self.created("//store.example.net/u/1").contains(.resource(url: "https://store.example.net/u/1", protocol: .ietf)))
        #expect(Self.created("../u/2").contains(.resource(url: "https://h/u/2", protocol: .ietf)))
    }

    @Test("a Location that is not http or https is refused, and nothing is sent to it")
    func refused() {
        let a = Self.created("ftp://x/u/1")
        #expect(a.count == 1)
        guard case .failed(let reason, let transient, _) = a.first else { Issue.record("not refused: \(a)"); return }
        #expect(!transient && reason.contains("ftp://x/u/1"))
    }
}
