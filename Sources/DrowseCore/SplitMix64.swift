/// SplitMix64 (Steele, Lea and Flood, "Fast Splittable Pseudorandom Number Generators",
/// OOPSLA 2014): tiny, fast and the same on every platform, so `drowse simulate` gives the
/// same report for the same seed everywhere. Not for anything secret.
package struct SplitMix64: RandomNumberGenerator, Sendable, Equatable {
    package private(set) var state: UInt64

    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits.
    package mutating func unit() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// Uniform in `range` (a point range gives its one value).
    package mutating func uniform(_ range: ClosedRange<Double>) -> Double {
        range.lowerBound + (range.upperBound - range.lowerBound) * unit()
    }

    /// An independent generator for one purpose of a seed (`stream(seed, purpose, app, run)`),
    /// so the draws for one run do not shift when another purpose draws more or less.
    package static func stream(_ seed: UInt64, _ parts: UInt64...) -> SplitMix64 {
        var g = SplitMix64(seed: seed)
        var mixed = g.next()
        for p in parts {
            g = SplitMix64(seed: mixed ^ (p &* 0xD1B5_4A32_D192_ED03))
            mixed = g.next()
        }
        return SplitMix64(seed: mixed)
    }
}
