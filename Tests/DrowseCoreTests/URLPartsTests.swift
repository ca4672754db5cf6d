@testable import DrowseCore
import Testing

@Suite("URLParts")
struct URLPartsTests {
    @Test("splits scheme, host, port and path")
    func basic() throws {
        let u = try #require(URLParts.parse("mqtt://127.0.0.1:1883"))
        #expect(u == URLParts(scheme: "mqtt", host: "127.0.0.1", port: 1883, path: "/"))
        let h = try #require(URLParts.parse("https://example.com/a/b.zip?x=1#top"))
        #expect(h.scheme == "https")
        #expect(h.host == "example.com")
        #expect(h.port == nil)
        #expect(h.path == "/a/b.zip?x=1#top")
    }

    @Test("lower-cases the scheme, not the host")
    func schemeCase() throws {
        let u = try #require(URLParts.parse("HTTPS://Example.COM/Path"))
        #expect(u.scheme == "https")
        #expect(u.host == "Example.COM")
        #expect(u.path == "/Path")
    }

    @Test("drops user info, up to the last '@'")
    func userInfo() throws {
        #expect(URLParts.parse("mqtts://user:secret@broker:8883")?.host == "broker")
        #expect(URLParts.parse("mqtts://user:secret@broker:8883")?.port == 8883)
        #expect(URLParts.parse("http://a@b@host/x")?.host == "host")
        #expect(URLParts.parse("http://user@host")?.path == "/")
    }

    @Test("reads IPv6 literals in brackets")
    func ipv6() throws {
        #expect(URLParts.parse("http://[::1]:8080/x") == URLParts(scheme: "http", host: "::1", port: 8080, path: "/x"))
        #expect(URLParts.parse("mqtt://[fe80::1%25eth0]") == URLParts(scheme: "mqtt", host: "fe80::1%25eth0", port: nil, path: "/"))
        #expect(URLParts.parse("http://[::1") == nil)
        #expect(URLParts.parse("http://[::1]:0") == nil)
        #expect(URLParts.parse("http://[::1]:x") == nil)
    }

    @Test("a path may start with a query or fragment")
    func queryWithoutPath() {
        #expect(URLParts.parse("http://host?x=1")?.path == "?x=1")
        #expect(URLParts.parse("http://host#f")?.path == "#f")
        #expect(URLParts.parse("http://host?x=1")?.host == "host")
    }

    @Test("accepts ports 1…65535 only", arguments: [
        ("http://h:1", 1), ("http://h:80", 80), ("http://h:65535", 65535),
    ])
    func validPorts(url: String, port: Int) {
        #expect(URLParts.parse(url)?.port == port)
    }

    @Test("refuses malformed URLs", arguments: [
        "", "host:80", "example.com/path", "://host", "http//host", "http:/host", "ht tp://host", "h_t://host",
        "http://", "http:///path", "http://:80", "http://h:", "http://h:0", "http://h:65536", "http://h:-1",
        "http://h:abc", "http://h:99999999999999999999", "mqtt://user@",
    ])
    func refuses(url: String) {
        #expect(URLParts.parse(url) == nil)
    }

    @Test("allows an empty host only for file URLs")
    func fileURLs() {
        #expect(URLParts.parse("file:///etc/drowse/x") == URLParts(scheme: "file", host: "", port: nil, path: "/etc/drowse/x"))
        #expect(URLParts.parse("https:///etc") == nil)
    }

    @Test("schemes may hold letters, digits, '+', '-' and '.'")
    func schemeCharacters() {
        #expect(URLParts.parse("svn+ssh://host")?.scheme == "svn+ssh")
        #expect(URLParts.parse("x-y.z1://host")?.scheme == "x-y.z1")
    }

    @Test("transfers accept http and https only", arguments: [
        ("http://example.com/f", true), ("https://example.com/f", true), ("HTTPS://example.com", true),
        ("ftp://example.com/f", false), ("file:///etc/passwd", false), ("gopher://h", false), ("mqtt://h", false),
        ("httpx://h", false), ("http:/h", false), ("http://", false), ("example.com", false), ("", false),
    ])
    func transferURLs(url: String, accepted: Bool) {
        #expect(URLParts.isTransferURL(url) == accepted)
    }

    @Test("the last path component ignores the query and trailing slashes", arguments: [
        ("https://h/a/b/file.tar.gz", "file.tar.gz"), ("https://h/a/b.zip?token=1/2", "b.zip"), ("https://h/dir/", "dir"),
        ("https://h/", ""), ("https://h", ""), ("https://h/?x=1", ""), ("https://h//a//", "a"),
    ])
    func lastPathComponent(url: String, name: String) {
        #expect(URLParts.parse(url)?.lastPathComponent == name)
    }

    @Test("a URL with a query but no path has no last path component")
    func lastPathComponentOfBareQuery() {
        #expect(URLParts.parse("https://h?name=evil.sh")?.lastPathComponent == "")
    }

    @Test("the last path component leaves out the fragment")
    func lastPathComponentFragment() {
        #expect(URLParts.parse("https://h/a/b.zip#part2")?.lastPathComponent == "b.zip")
    }

    @Test("refuses junk after an IPv6 literal's closing bracket")
    func junkAfterIPv6() {
        #expect(URLParts.parse("http://[::1]evil.com/x") == nil)
    }
}

@Suite("URLParts credentials")
struct URLPartsCredentialsTests {
    @Test("notes user info and redacts it for display")
    func redaction() {
        #expect(URLParts.parse("mqtt://u:pw@broker:1883")?.hasUserInfo == true)
        #expect(URLParts.parse("mqtt://broker:1883")?.hasUserInfo == false)
        #expect(URLParts.redacting("mqtt://u:pw@broker:1883") == "mqtt://***@broker:1883")
        #expect(URLParts.redacting("mqtts://a@b:c@host/x@y") == "mqtts://***@host/x@y")
        #expect(URLParts.redacting("mqtt://broker/a@b") == "mqtt://broker/a@b")
        #expect(URLParts.redacting("not a url") == "not a url")
    }
}
