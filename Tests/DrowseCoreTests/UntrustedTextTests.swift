import DrowseCore
import Testing

/// Text from others is escaped and bounded wherever it is shown, and
/// config files must be UTF-8 (TOML 1.0).
@Suite("Untrusted text")
struct UntrustedTextTests {
    @Test("clip escapes, keeps short text whole and cuts long text with an ellipsis and the size left out")
    func clip() {
        #expect(LogText.clip("short") == "short")
        #expect(LogText.clip("a\u{1B}b") == #"a\u{1B}b"#)
        let cut = LogText.clip(String(repeating: "k", count: 500_000))
        #expect(cut.count < 230 && cut.hasPrefix(String(repeating: "k", count: 200)) && cut.hasSuffix("…(499800 more bytes)"))
    }

    @Test("a config error quoting a 500 KB key is one short line")
    func configErrorIsBounded() {
        let key = String(repeating: "k", count: 500_000) + "\n\u{1B}[2J"
        let e = ConfigError(file: "/etc/drowse/drowse.toml", key: key, line: 3, problem: "unknown key")
        #expect(e.description.utf8.count < 400)
        #expect(!e.description.contains("\n") && !e.description.contains("\u{1B}"))
        let problem = ConfigError(file: "f.toml", problem: "'" + String(repeating: "v", count: 100_000) + "' is not a duration")
        #expect(problem.description.utf8.count < 500)
    }

    @Test("a 500 KB key in drowse.toml is refused with a short error")
    func bigKeyInMainConfig() {
        let text = "\"" + String(repeating: "k", count: 500_000) + "\" = 1\n"
        do {
            _ = try MainConfig.parse(text, file: "/x/drowse.toml", machineID: "abc")
            Issue.record("expected a ConfigError")
        } catch {
            #expect(error.description.utf8.count < 1024 && error.description.contains("unknown key"))
        }
    }

    @Test("JSON escapes DEL, C1, line separators and bidi controls too, and reads them back the same")
    func jsonEscapes() throws {
        let s = "a\u{7F}b\u{85}c\u{9B}d\u{2028}e\u{202E}f\u{1B}"
        let text = JSON.object([("k", .string(s))]).serialized
        #expect(!text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{2028}" || $0 == "\u{202E}" })
        #expect(try JSON.parse(text)["k"]?.stringValue == s)
    }

    @Test("drowse fleet's lines escape what devices published: no forged line, no ESC")
    func fleetLines() {
        var l = FleetListing()
        let status = #"{"online": true, "version": "1.0\r\npi-fake online", "apps": [], "failed_apps": ["x\u001b[31m"], "time": 1}"#
        _ = l.received(topic: "drowse/pi-real/status", payload: Array(status.utf8), prefix: "drowse")
        let lines = FleetListing.lines(l.list(group: nil), now: 2)
        #expect(lines.count == 2)
        #expect(!lines.joined().unicodeScalars.contains { $0.value < 0x20 })
        #expect(lines[1].contains(#"1.0\r\npi-fake online"#))
    }

    @Test("invalid UTF-8 anywhere in a config file is refused with its line", arguments: [
        [0xC3, 0x28] as [UInt8], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0x80], [0xFF],
    ])
    func invalidUTF8(bad: [UInt8]) {
        let bytes = Array("id = \"a\"\nuser = \"x".utf8) + bad + Array("y\"\n".utf8)
        do {
            _ = try ConfigFile.text(bytes, file: "/apps.d/a.toml")
            Issue.record("accepted \(bad)")
        } catch {
            #expect(error.line == 2 && error.problem == "the file is not valid UTF-8")
        }
        let comment = Array("# caf".utf8) + bad + Array("\nid = \"a\"\n".utf8)
        #expect(throws: ConfigError.self) { try ConfigFile.text(comment, file: "/apps.d/a.toml") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(bytes: bytes) }
        #expect((try? ConfigFile.text(Array("user = \"Grüße 東京\"\n".utf8), file: "f")) == "user = \"Grüße 東京\"\n")
    }

    @Test("min_speed is off by default (libcurl checks 1 byte/s over stall_timeout); on, it checks min_speed over its window")
    func minSpeed() throws {
        let off = try MainConfig.parse("[transfers]\nstall_timeout = \"20s\"\n", file: "/x/d.toml", machineID: "abc").transfers
        #expect(off.minSpeed == 0 && off.lowSpeed == (1, 20))
        let on = try MainConfig.parse("[transfers]\nmin_speed = 1024\nmin_speed_window = \"30s\"\n", file: "/x/d.toml", machineID: "abc").transfers
        #expect(on.minSpeed == 1024 && on.minSpeedWindow == .seconds(30) && on.lowSpeed == (1024, 30))
        #expect(throws: ConfigError.self) { try MainConfig.parse("[transfers]\nmin_speed = -1\n", file: "/x/d.toml", machineID: "abc") }
        #expect(throws: ConfigError.self) { try MainConfig.parse("[transfers]\nmin_speed_window = \"0s\"\n", file: "/x/d.toml", machineID: "abc") }
    }

    @Test("release_code_after: 30 s by default, at least 100 ms")
    func releaseCodeAfter() throws {
        #expect(try MainConfig.parse("", file: "/x/d.toml", machineID: "abc").transfers.releaseCodeAfter == .seconds(30))
        #expect(try MainConfig.parse("[transfers]\nrelease_code_after = \"500ms\"\n", file: "/x/d.toml", machineID: "abc").transfers.releaseCodeAfter == .milliseconds(500))
        #expect(throws: ConfigError.self) { try MainConfig.parse("[transfers]\nrelease_code_after = \"0s\"\n", file: "/x/d.toml", machineID: "abc") }
        // drowsed's own code, after any work: [lifecycle]'s key, the same bounds.
        #expect(try MainConfig.parse("", file: "/x/d.toml", machineID: "abc").lifecycle.releaseCodeAfter == .seconds(30))
        #expect(try MainConfig.parse("[lifecycle]\nrelease_code_after = \"2s\"\n", file: "/x/d.toml", machineID: "abc").lifecycle.releaseCodeAfter == .seconds(2))
        #expect(throws: ConfigError.self) { try MainConfig.parse("[lifecycle]\nrelease_code_after = \"50ms\"\n", file: "/x/d.toml", machineID: "abc") }
    }
}
