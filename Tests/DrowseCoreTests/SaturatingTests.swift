import DrowseCore
import Testing

@Suite("Saturating conversions and time limits")
struct SaturatingTests {
    @Test("Int64(saturating:) clamps what Int64(_:) would trap on", arguments: [
        (1e300, Int64.max), (-1e300, Int64.min), (Double.infinity, Int64.max), (-Double.infinity, Int64.min),
        (9_223_372_036_854_775_808.0, Int64.max), (-9_223_372_036_854_775_808.0, Int64.min),
        (9.2e18, 9_200_000_000_000_000_000), (-0.0, 0), (1.9, 1), (-1.9, -1), (Double.nan, 0),
    ] as [(Double, Int64)])
    func int64(value: Double, expected: Int64) {
        #expect(Int64(saturating: value) == expected)
    }

    @Test("the rounding rule applies before clamping, and NaN takes the given value")
    func roundingAndNaN() {
        #expect(Int64(saturating: 1.2, rounding: .up) == 2)
        #expect(Int64(saturating: -1.2, rounding: .down) == -2)
        #expect(Int64(saturating: .nan, nanValue: 7) == 7)
        #expect(Int(saturating: 1e300) == Int.max)
    }

    @Test("durations from requests: finite, above zero, at most ten years", arguments: [
        (1.0, true), (0.001, true), (TimeLimits.maxDuration, true), (TimeLimits.maxDuration + 1, false), (0, false),
        (-0.0, false), (-1, false), (1e300, false), (.infinity, false), (-.infinity, false), (.nan, false),
    ] as [(Double, Bool)])
    func durations(seconds: Double, valid: Bool) {
        #expect(TimeLimits.isValidDuration(seconds) == valid)
    }

    @Test("Unix times from 1970 to the end of year 9999 are believed", arguments: [
        (0.0, true), (1_700_000_000, true), (253_402_300_799, true), (253_402_300_800, false), (-1, false),
        (1e300, false), (.infinity, false), (.nan, false),
    ] as [(Double, Bool)])
    func unixTimes(t: Double, valid: Bool) {
        #expect(TimeLimits.isValidUnixTime(t) == valid)
    }

    @Test("a timer delay is always within [0, ten years]; NaN waits the longest rather than spinning")
    func timerDelays() {
        #expect(TimeLimits.timerDelay(-5) == 0)
        #expect(TimeLimits.timerDelay(2.5) == 2.5)
        #expect(TimeLimits.timerDelay(1e300) == TimeLimits.maxTimerDelay)
        #expect(TimeLimits.timerDelay(.infinity) == TimeLimits.maxTimerDelay)
        #expect(TimeLimits.timerDelay(.nan) == TimeLimits.maxTimerDelay)
        // What WakeTimer hands NIO: whole milliseconds, no trap.
        #expect(Int64(saturating: TimeLimits.timerDelay(1e300) * 1000, rounding: .up) == 315_360_000_000)
    }
}
