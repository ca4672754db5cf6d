import DrowseCore
import Testing

@Suite("DurationText")
struct DurationTextTests {
    @Test("parses each unit", arguments: [
        ("500ms", Duration.milliseconds(500)), ("30s", .seconds(30)), ("15m", .seconds(900)), ("6h", .seconds(21_600)),
        ("7d", .seconds(604_800)), ("0s", .zero), ("1ms", .milliseconds(1)),
    ])
    func units(text: String, expected: Duration) {
        #expect(DurationText.parse(text) == expected)
    }

    @Test("parses combinations and fractions", arguments: [
        ("1h30m", Duration.seconds(5400)), ("1d2h3m4s5ms", .milliseconds(93_784_005)), ("1.5h", .seconds(5400)),
        ("0.5s", .milliseconds(500)), ("2m0.25s", .milliseconds(120_250)), ("90s", .seconds(90)), ("30s30s", .seconds(60)),
        (".5m", .seconds(30)),
    ])
    func combinations(text: String, expected: Duration) {
        #expect(DurationText.parse(text) == expected)
    }

    @Test("rounds to whole milliseconds")
    func millisecondRounding() {
        #expect(DurationText.parse("0.0004s") == .zero)
        #expect(DurationText.parse("0.0006s") == .milliseconds(1))
        #expect(DurationText.parse("1.2345s") == .milliseconds(1235) || DurationText.parse("1.2345s") == .milliseconds(1234))
    }

    @Test("trims surrounding whitespace")
    func trimsWhitespace() {
        #expect(DurationText.parse("  30s\t") == .seconds(30))
        #expect(DurationText.parse("\n15m\n") == .seconds(900))
    }

    @Test("refuses text that is not a duration", arguments: [
        "", "   ", "30", "s", "ms", "m30", "30x", "30S", "30 s", "1h 30m", "-5s", "+5s", "1..5s", "1.2.3s", "1m30",
        "5sec", "5mss", "five s", "1e3s", "inf s", "nan", "٣s", "5µs", "1h-30m",
    ])
    func refuses(text: String) {
        #expect(DurationText.parse(text) == nil)
    }

    @Test("refuses durations too large to be finite")
    func refusesInfinite() {
        #expect(DurationText.parse(String(repeating: "9", count: 400) + "s") == nil)
    }

    @Test("a huge but finite duration is refused instead of crashing")
    func hugeDurationDoesNotCrash() async {
        // 200 000 000 000 days is 1.7e19 ms, past Int64.max: `Int64(Double)` traps. A typo in
        // an app file (`minimum_interval = "200000000000d"`) must be reported, not kill drowsed.
        await #expect(processExitsWith: .success) {
            _ = DurationText.parse("200000000000d")
        }
    }

    @Test("formats in the short human form", arguments: [
        (Duration.zero, "0s"), (.milliseconds(1), "1ms"), (.milliseconds(500), "500ms"), (.milliseconds(999), "999ms"),
        (.seconds(1), "1s"), (.seconds(30), "30s"), (.seconds(60), "1m"), (.seconds(90), "1m30s"), (.seconds(900), "15m"),
        (.seconds(3600), "1h"), (.seconds(5400), "1h30m"), (.seconds(3601), "1h1s"), (.seconds(86_400), "1d"),
        (.seconds(93_784), "1d2h3m4s"), (.seconds(604_800), "7d"), (.milliseconds(1500), "1s"),
        (.milliseconds(-500), "-500ms"), (.seconds(-90), "-1m30s"),
    ])
    func format(duration: Duration, text: String) {
        #expect(DurationText.format(duration) == text)
    }

    @Test("whole-second and sub-second durations survive format → parse", arguments: [
        0, 1, 59, 60, 61, 599, 3599, 3600, 86_399, 86_400, 90_061, 1_000_000,
    ] as [Int64])
    func roundTrip(seconds: Int64) {
        let d = Duration.seconds(seconds)
        #expect(DurationText.parse(DurationText.format(d)) == d)
        let small = Duration.milliseconds(seconds % 1000)
        #expect(DurationText.parse(DurationText.format(small)) == small)
    }

    @Test("Duration.milliseconds and .seconds read the components")
    func durationAccessors() {
        #expect(Duration.milliseconds(1500).milliseconds == 1500)
        #expect(Duration.milliseconds(-1500).milliseconds == -1500)
        #expect(Duration.seconds(2).milliseconds == 2000)
        #expect(Duration.microseconds(1999).milliseconds == 1)
        #expect(Duration.milliseconds(1500).seconds == 1.5)
        #expect(Duration.seconds(86_400 * 365).seconds == 31_536_000)
        #expect(Duration.zero.seconds == 0)
    }

    @Test("milliseconds saturate for durations beyond Int64 milliseconds, and format does not trap")
    func hugeDurations() {
        #expect(Duration.seconds(Int64.max).milliseconds == .max)
        #expect(Duration.seconds(Int64.min).milliseconds == .min)
        #expect(Duration.seconds(9_223_372_036_854_775).milliseconds == 9_223_372_036_854_775_000)
        #expect(DurationText.format(.seconds(Int64.max)).hasSuffix("s"))
        #expect(DurationText.format(.seconds(Int64.min)).hasPrefix("-"))
    }
}
