/// `[radio] model`: a named model, or the one that fits the current network.
package enum RadioModelSetting: Sendable, Equatable, CustomStringConvertible {
    /// The model of the network the default route goes through (LTE for a cellular link).
    case auto
    case fixed(RadioModel)

    /// "auto", or a model's name; nil for any other text.
    package init?(_ text: String) {
        if text == "auto" {
            self = .auto
        } else if let m = RadioModel.named(text) {
            self = .fixed(m)
        } else {
            return nil
        }
    }

    package var description: String {
        switch self {
        case .auto: "auto"
        case .fixed(let m): m.name
        }
    }

    /// The model for a reading of the network.
    package func model(network: Conditions.Network) -> RadioModel {
        switch self {
        case .fixed(let m): m
        case .auto: RadioModel.forConfig("auto", network: network)
        }
    }
}

/// `[lifecycle] cgroup`: where the apps' cgroups go.
package enum CgroupSetting: Sendable, Equatable, CustomStringConvertible {
    /// Beside drowsed's own cgroup (delegated by systemd), or none where it cannot be had.
    case auto
    /// No cgroups: apps are suspended with signals.
    case off
    /// An absolute path, or one relative to the cgroup2 mount.
    case path(String)

    /// nil for an empty path or one with `..`.
    package init?(_ text: String) {
        switch text {
        case "auto": self = .auto
        case "off": self = .off
        default:
            guard !text.isEmpty, !text.contains("..") else { return nil }
            self = .path(text)
        }
    }

    package var description: String {
        switch self {
        case .auto: "auto"
        case .off: "off"
        case .path(let p): p
        }
    }
}

/// `[lifecycle] memory_pressure`: a PSI trigger on /proc/pressure/memory, or off.
package enum MemoryPressureSetting: Sendable, Equatable, CustomStringConvertible {
    case off
    /// `full`: every task stalled (else some); the stall and the window in microseconds.
    case trigger(full: Bool, stallMicros: Int, windowMicros: Int)

    /// "off", or "some|full STALL_US WINDOW_US" with a window of 0.5 to 10 s and a stall of at
    /// most the window; nil otherwise.
    package init?(_ text: String) {
        if text == "off" {
            self = .off
            return
        }
        let f = text.split(separator: " ")
        guard f.count == 3, f[0] == "some" || f[0] == "full", let stall = Int(f[1]), let window = Int(f[2]),
              (500_000...10_000_000).contains(window), (1...window).contains(stall) else { return nil }
        self = .trigger(full: f[0] == "full", stallMicros: stall, windowMicros: window)
    }

    /// As the kernel reads a trigger, or "off".
    package var description: String {
        switch self {
        case .off: "off"
        case let .trigger(full, stall, window): "\(full ? "full" : "some") \(stall) \(window)"
        }
    }
}
