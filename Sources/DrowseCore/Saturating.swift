/// Conversions and time arithmetic that never trap.
///
/// Swift traps on `Int64(1e300)`, `Int64(Double.nan)` and on integer overflow. Values reach
/// drowsed from the local API, from MQTT payloads and from rows of `state.db` that anyone with
/// the file can edit; the edges validate them (`TimeLimits`), and these helpers make the inner
/// sites safe anyway, so a value that slipped past an edge gives a wrong-but-bounded answer
/// instead of killing the daemon (and, when it was stored, killing it again on every start).
extension Int64 {
    /// The nearest `Int64` to `value` rounded by `rule`: values beyond the range give
    /// `.max`/`.min`, NaN gives `nanValue` (0 unless the caller knows better).
    package init(saturating value: Double, rounding rule: FloatingPointRoundingRule = .towardZero, nanValue: Int64 = 0) {
        guard !value.isNaN else { self = nanValue; return }
        let r = value.rounded(rule)
        // 2⁶³ is exactly representable as a Double; Int64.max is not (it rounds up to 2⁶³).
        if r >= 9_223_372_036_854_775_808.0 { self = .max; return }
        if r < -9_223_372_036_854_775_808.0 { self = .min; return }
        self = Int64(r)
    }
}

extension Int {
    /// `Int64(saturating:)` for `Int` (64 bits on every platform drowsed runs on).
    package init(saturating value: Double, rounding rule: FloatingPointRoundingRule = .towardZero, nanValue: Int = 0) {
        self = Int(truncatingIfNeeded: Int64(saturating: value, rounding: rule, nanValue: Int64(nanValue)))
    }
}

extension Double {
    /// `self` limited to `range`; NaN becomes `nanValue`.
    package func clamped(to range: ClosedRange<Double>, nanValue: Double) -> Double {
        isNaN ? nanValue : Swift.min(Swift.max(self, range.lowerBound), range.upperBound)
    }
}

/// The bounds drowsed accepts for times and durations, wherever they come from.
package enum TimeLimits {
    /// The longest duration a request may ask for (`--timeout-resource` and the like): about
    /// ten years. Longer is a typo or an attack; no board waits that long for a download.
    package static let maxDuration: Double = 3650 * 86400
    /// Unix times drowsed believes: 1970 up to the end of year 9999. A stored time outside
    /// this (or not finite) cannot have been written by drowsed.
    package static let unixTimes: ClosedRange<Double> = 0...253_402_300_799
    /// The longest a timer is set for; a later deadline is re-checked when it fires.
    package static let maxTimerDelay: Double = maxDuration

    /// Whether `seconds` is a duration drowsed accepts: finite, above zero, at most `maxDuration`.
    package static func isValidDuration(_ seconds: Double) -> Bool {
        seconds.isFinite && seconds > 0 && seconds <= maxDuration
    }

    /// Whether `t` is a Unix time drowsed could have written.
    package static func isValidUnixTime(_ t: Double) -> Bool {
        t.isFinite && unixTimes.contains(t)
    }

    /// A delay for a timer, in [0, maxTimerDelay]. NaN (a deadline computed from a bad value)
    /// waits the longest: firing at once would re-arm at once, a busy loop.
    package static func timerDelay(_ seconds: Double) -> Double {
        seconds.clamped(to: 0...maxTimerDelay, nanValue: maxTimerDelay)
    }
}
