import DrowseCore
import Testing

/// The Prometheus text exposition: HELP/TYPE lines, series, label escaping, names, values.
@Suite struct MetricsRegistryTests {
    @Test func exposition() {
        var r = MetricsRegistry()
        r.declare("drowse_things_total", .counter, help: "Things that happened.")
        r.declare("drowse_level", .gauge, help: "A level.")
        r.seed("drowse_things_total", [("kind", "b")])
        r.add("drowse_things_total", [("kind", "a")])
        r.add("drowse_things_total", [("kind", "a")], 2)
        r.set("drowse_level", 0.25)
        #expect(r.exposition() == """
            # HELP drowse_things_total Things that happened.
            # TYPE drowse_things_total counter
            drowse_things_total{kind="a"} 3
            drowse_things_total{kind="b"} 0
            # HELP drowse_level A level.
            # TYPE drowse_level gauge
            drowse_level 0.25

            """)
        #expect(r.value("drowse_things_total", [("kind", "a")]) == 3)
        #expect(r.value("drowse_things_total", [("kind", "c")]) == nil)
    }

    @Test func counterOnlyGoesUp() {
        var r = MetricsRegistry()
        r.declare("drowse_x_total", .counter, help: "x")
        r.add("drowse_x_total", [], 5)
        r.add("drowse_x_total", [], -3)
        r.add("drowse_x_total", [], .nan)
        #expect(r.value("drowse_x_total") == 5)
    }

    @Test func labelsAreSortedAndEscaped() {
        #expect(MetricsRegistry.labelText([("z", "1"), ("a", "2")]) == #"{a="2",z="1"}"#)
        #expect(MetricsRegistry.escapeLabelValue("a\\b\"c\nd") == #"a\\b\"c\nd"#)
        #expect(MetricsRegistry.escapeHelp("a\\b\"c\nd") == #"a\\b"c\nd"#)
        var r = MetricsRegistry()
        r.declare("drowse_y_total", .counter, help: "line one\nline two")
        r.add("drowse_y_total", [("app", "we\"ird\\\napp")])
        #expect(r.exposition().contains(#"drowse_y_total{app="we\"ird\\\napp"} 1"#))
        #expect(r.exposition().contains(#"# HELP drowse_y_total line one\nline two"#))
        #expect(MetricsRegistry.labelText([]) == "")
    }

    @Test func values() {
        #expect(MetricsRegistry.format(3) == "3")
        #expect(MetricsRegistry.format(-2) == "-2")
        #expect(MetricsRegistry.format(1.5) == "1.5")
        #expect(MetricsRegistry.format(1e20) == "1e+20")
        #expect(MetricsRegistry.format(.infinity) == "+Inf")
        #expect(MetricsRegistry.format(-.infinity) == "-Inf")
        #expect(MetricsRegistry.format(.nan) == "NaN")
    }

    @Test func names() {
        #expect(MetricsRegistry.isValidName("drowse_fetch_runs_total"))
        #expect(MetricsRegistry.isValidName("ns:sub_total"))
        #expect(!MetricsRegistry.isValidName("9lives"))
        #expect(!MetricsRegistry.isValidName("a-b"))
        #expect(!MetricsRegistry.isValidName(""))
        #expect(MetricsRegistry.isValidLabelName("app"))
        #expect(!MetricsRegistry.isValidLabelName("__name"))
        #expect(!MetricsRegistry.isValidLabelName("a:b"))
    }

    @Test(arguments: [
        ("HTTP 404", "http_4xx"), ("creating the upload: HTTP 403 (server says: no)", "http_4xx"),
        ("HTTP 503", "http_5xx"), ("unexpected HTTP status 500", "http_5xx"),
        ("sha256 mismatch: expected aa, got bb", "checksum"),
        ("the server sent more than 10 bytes without announcing a length ([transfers] max_unknown_size)", "too_large"),
        ("server sent more than the announced 5 bytes", "too_large"),
        ("paused: disk full (No space left on device)", "disk_full"),
        ("timed out: not finished within its --timeout-resource", "timeout"),
        ("timed out after: HTTP 503", "timeout"),
        ("stalled: Couldn't connect to server", "network"), ("TLS verification failed: x", "network"),
        ("body ended at 3 of 10 bytes", "network"),
        ("refused: redirect to a URL that is not http or https", "other"),
    ])
    func transferFailureReasons(reason: String, label: String) {
        #expect(TransferFailureReason.classify(reason).rawValue == label)
    }

    @Test func processStats() throws {
        // A command with spaces and a parenthesis, as /proc/self/stat may hold.
        let stat = "4242 (drow sed) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 150 0 0 20 0 5 0 123456 30000000 1500 18446744073709551615"
        let p = try #require(ProcessStats.parse(stat: stat, statm: "7324 1500 900 10 0 600 0\n", smapsRollup: "55aa-ffff ---p 00000000 00:00 0 [rollup]\nRss: 6000 kB\nPss: 4096 kB\n",
                                                pageSize: 4096, ticksPerSecond: 100))
        #expect(p.cpuSeconds == 4)
        #expect(p.residentBytes == 1500 * 4096)
        #expect(p.virtualBytes == 7324 * 4096)
        #expect(p.startTicksSeconds == 1234.56)
        #expect(p.pssBytes == Optional(4_194_304.0))
        #expect(ProcessStats.parse(stat: "garbage", statm: "1 2", smapsRollup: nil, pageSize: 4096, ticksPerSecond: 100) == nil)
        #expect(ProcessStats.parse(stat: stat, statm: "", smapsRollup: nil, pageSize: 4096, ticksPerSecond: 100) == nil)
    }
}
