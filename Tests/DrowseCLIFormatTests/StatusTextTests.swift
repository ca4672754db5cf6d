import DrowseCore
import Testing
@testable import DrowseCLIFormat

/// The text the CLI prints, from JSON as drowsed answers it (and as it should never answer it).
@Suite("StatusText")
struct StatusTextTests {
    static let now = 1_700_000_000.0

    static func json(_ text: String) throws -> JSON { try JSON.parse(text) }

    /// What the terminal gets: every line through the CLI's escaping.
    static func printed(_ lines: [String]) -> String { lines.map(StatusText.printable).joined(separator: "\n") }

    @Test("drowse status: a full answer")
    func statusFull() throws {
        let s = try Self.json("""
            {"version": "1.4.0", "device_id": "pi-kitchen",
             "mqtt": {"configured": true, "connected": true, "url": "mqtts://broker:8883"},
             "conditions": {"power_source": "battery", "battery_percent": 71, "charging": true,
                            "network": "wifi", "interface": "wlan0", "metered": true},
             "next_window": \(Self.now + 300), "next_window_apps": ["news", "weather"],
             "apps": 3, "invalid_apps": 1,
             "lifecycle": {"suspension": "cgroup-v2", "cgroup": "/sys/fs/cgroup/drowse", "memory_pressure": "low"}}
            """)
        #expect(StatusText.status(s, now: Self.now) == [
            "drowsed 1.4.0 on device pi-kitchen",
            "mqtt:        connected (mqtts://broker:8883)",
            "conditions:  power battery, battery 71% charging; network wifi (wlan0), metered",
            "next window: in 5m (news, weather)",
            "apps:        3 valid, 1 invalid",
            "suspension:  cgroup-v2 (/sys/fs/cgroup/drowse)",
            "memory:      pressure low",
        ])
    }

    @Test("drowse status: missing keys, nulls and values of the wrong type")
    func statusSparse() throws {
        #expect(StatusText.status(try Self.json("{}"), now: Self.now) == [
            "drowsed ? on device ?",
            "mqtt:        not configured",
            "next window: —",
            "apps:        0 valid, 0 invalid",
        ])
        let odd = try Self.json("""
            {"version": null, "device_id": 7, "mqtt": {"configured": true, "connected": "yes"},
             "next_window": "soon", "next_window_apps": [1, null, "a"], "apps": 2.5, "invalid_apps": -1,
             "conditions": {}, "lifecycle": {"cgroup": null}}
            """)
        #expect(StatusText.status(odd, now: Self.now) == [
            "drowsed ? on device ?",
            "mqtt:        not connected ()",
            "conditions:  power unknown; network none",
            "next window: — (a)",
            "apps:        0 valid, -1 invalid",
            "suspension:  ?",
            "memory:      pressure ?",
        ])
    }

    @Test("huge numbers give text, not a crash")
    func hugeNumbers() throws {
        let s = try Self.json("""
            {"next_window": 1e300, "apps": 1e300, "conditions": {"battery_percent": 1e300}}
            """)
        let lines = StatusText.status(s, now: Self.now)
        #expect(lines.contains("apps:        0 valid, 0 invalid"))
        #expect(lines.contains("conditions:  power unknown; network none"))
        #expect(lines.contains { $0.hasPrefix("next window: in ") })
        let past = StatusText.status(try Self.json(#"{"next_window": -1e300}"#), now: Self.now)
        #expect(past.contains { $0.hasPrefix("next window: ") && $0.hasSuffix(" ago") })
        let app = try Self.json("""
            {"id": "x", "last_fetch": -1e308, "limits": {"processes": 1e300, "processes_enforced_by": "cgroup"}}
            """)
        let detail = StatusText.app(app, id: "x", now: Self.now)
        #expect(detail.contains { $0.hasPrefix("limits:           processes ") })
        let t = try Self.json(#"{"id": "t", "bytes_done": 1e300, "bytes_total": 9007199254740993}"#)
        #expect(StatusText.transfers([t])[1].contains("?/?"))
    }

    @Test("control characters, line breaks and bidi overrides in others' text are escaped")
    func escaped() throws {
        let s = try Self.json(#"{"version": "1\u001b[2J", "device_id": "pi\nforged online", "mqtt": {"configured": true, "url": "x\r\u202e"}}"#)
        let text = Self.printed(StatusText.status(s, now: Self.now))
        #expect(text.split(separator: "\n").count == 4)
        #expect(text.hasPrefix(#"drowsed 1\u{1B}[2J on device pi\nforged online"#))
        #expect(text.contains(#"(x\r\u{202E})"#))
        #expect(!text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" })
        let apps = try Self.json(#"[{"id": "a\u0007", "valid": false, "error": "bad\tfile\n"}]"#)
        #expect(Self.printed(StatusText.apps(apps, now: Self.now)).hasSuffix("\n" + #"a\u{07}"# + String(repeating: " ", count: 14) + #"INVALID: bad\tfile\n"#))
    }

    @Test("drowse apps: rows, an invalid app, an app with nothing known")
    func apps() throws {
        let apps = try Self.json("""
            [{"id": "news", "state": "suspended", "state_reason": "idle", "last_result": "new_data",
              "last_fetch": \(Self.now - 7200), "next_fetch": \(Self.now + 90), "next_fetch_reason": "window"},
             {"id": "broken", "valid": false, "error": "apps/broken.toml: line 3: no fetch.command"},
             {}]
            """)
        #expect(StatusText.apps(apps, now: Self.now) == [
            "APP             STATE                   RESULT    LAST FETCH    NEXT FETCH    WHY",
            "news            suspended (idle)        new_data  2h ago        in 1m30s      window",
            "broken          INVALID: apps/broken.toml: line 3: no fetch.command",
            "?               —                       —         —             —             ",
        ])
        #expect(StatusText.apps(try Self.json(#"{"not": "a list"}"#), now: Self.now).count == 1)
    }

    @Test("drowse apps show: detail with limits and recent runs")
    func appDetail() throws {
        let a = try Self.json("""
            {"id": "news", "file": "/etc/drowse/apps/news.toml", "state": "background", "state_reason": "",
             "state_since": \(Self.now - 30), "resident": true, "minimum_interval": "15m",
             "last_result": "no_data", "last_fetch": \(Self.now), "next_fetch": null,
             "limits": {"processes": 32, "processes_enforced_by": "cgroup", "memory_text": "64MiB", "memory_enforced_by": "cgroup"},
             "history": [{"started_at": \(Self.now - 60), "event": "fetch", "result": "no_data", "ending": "exited 0"}]}
            """)
        #expect(StatusText.app(a, id: "news", now: Self.now) == [
            "app news  (/etc/drowse/apps/news.toml)",
            "state:            background since 30s ago, resident",
            "minimum interval: 15m",
            "last result:      no_data (now)",
            "next fetch:       — — ",
            "limits:           processes 32 (cgroup), memory 64MiB (cgroup)",
            "recent runs:",
            "  1m ago      fetch         no_data   exited 0",
        ])
        #expect(StatusText.app(try Self.json(#"{"valid": false}"#), id: "gone", now: Self.now) == ["app gone  ()", "INVALID: "])
    }

    @Test("drowse transfers: bytes in units, the reason before the URL")
    func transfers() throws {
        let list = try Self.json("""
            [{"id": "t1", "app": "news", "state": "running", "bytes_done": 1572864, "bytes_total": 10485760, "url": "https://x/a"},
             {"id": "t2", "app": "news", "state": "failed", "bytes_done": 512, "bytes_total": null, "url": "https://x/b", "reason": "404"},
             {"id": null}]
            """)
        #expect(StatusText.transfers(list.arrayValue ?? []) == [
            "ID                APP         STATE      BYTES                 URL / REASON",
            "t1                news        running    1.5 MiB/10.0 MiB      https://x/a",
            "t2                news        failed     512 B/?               404",
            "                                         ?/?                   ",
        ])
    }

    @Test("Human.when and Human.bytes")
    func human() {
        #expect(Human.when(nil, now: 0) == "—")
        #expect(Human.when(0.4, now: 0) == "now")
        #expect(Human.when(3600 + 120, now: 0) == "in 1h2m")
        #expect(Human.when(-86400, now: 0) == "1d ago")
        #expect(Human.bytes(nil) == "?")
        #expect(Human.bytes(1023) == "1023 B")
        #expect(Human.bytes(1024) == "1.0 KiB")
        #expect(Human.bytes(Int64.max) == "8388608.0 TiB")
    }
}
