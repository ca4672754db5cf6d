/// What the board has right now: power and network (docs/contract.md, `drowse conditions`).
package struct Conditions: Sendable, Equatable {
    package enum PowerSource: String, Sendable { case ac, battery, unknown }
    package enum Network: String, Sendable { case none, ethernet, wifi, cellular }

    package var powerSource: PowerSource = .unknown
    package var batteryPercent: Int?
    package var charging: Bool?
    package var network: Network = .none
    package var interface: String?
    /// The SSID of the Wi-Fi network `interface` is associated with; nil for other networks, or
    /// when it cannot be read. Printable UTF-8 as is, other bytes as `0x` and hex.
    package var ssid: String?
    package var metered: Bool = false
    package var readAt: Double = 0

    package init() {}

    /// The same facts, stamped with another read time (for comparing two readings).
    package func withReadAt(_ t: Double) -> Conditions {
        var c = self
        c.readAt = t
        return c
    }

    /// The network the board is on, as the adaptive keepalive tells networks apart
    /// (docs/design.md, "The adaptive keepalive"): the default route's interface, and on Wi-Fi its
    /// SSID (`wlan0/home`). nil without a default route.
    package var networkKey: String? {
        guard let interface else { return nil }
        return ssid.map { "\(interface)/\($0)" } ?? interface
    }

    /// An SSID's bytes as text: printable UTF-8 as is, else `0x` and the bytes in hex. nil for none.
    package static func ssidText(_ bytes: [UInt8]) -> String? {
        guard !bytes.isEmpty else { return nil }
        if let s = String(validating: bytes, as: UTF8.self), !s.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return s
        }
        return "0x" + Pcap.hex(bytes)
    }

    /// `Conditions` of the API (and of the scheduler trace).
    package var wire: APIWire.Conditions {
        APIWire.Conditions(
            powerSource: powerSource.rawValue, batteryPercent: batteryPercent, charging: charging, network: network.rawValue,
            interface: interface, ssid: ssid, metered: metered)
    }

    package var json: JSON { wire.json }
}

/// One entry of /sys/class/power_supply, as read.
package struct PowerSupplyReading: Sendable, Equatable {
    package var name: String
    package var type: String?
    package var online: Bool?
    package var capacity: Int?
    package var status: String?

    package init(name: String, type: String?, online: Bool?, capacity: Int?, status: String?) {
        self.name = name
        self.type = type
        self.online = online
        self.capacity = capacity
        self.status = status
    }

    /// Combines every supply into one power picture. No supply at all: external power.
    package static func combine(_ supplies: [PowerSupplyReading], into c: inout Conditions) {
        let batteries = supplies.filter { ($0.type ?? "").lowercased() == "battery" || ($0.type ?? "").lowercased() == "ups" }
        let external = supplies.filter { ["mains", "usb", "usb_c", "usb_pd", "usb_dcp", "usb_cdp", "wireless"].contains(($0.type ?? "").lowercased()) }
        let externalOnline = external.contains { $0.online == true }
        let charging = batteries.contains { ["charging", "full"].contains(($0.status ?? "").lowercased()) }
        let discharging = batteries.contains { ($0.status ?? "").lowercased() == "discharging" }
        let capacities = batteries.compactMap(\.capacity).filter { (0...100).contains($0) }
        c.batteryPercent = capacities.isEmpty ? nil : capacities.min()
        c.charging = batteries.isEmpty ? nil : charging
        if supplies.isEmpty {
            c.powerSource = .ac
        } else if externalOnline || (charging && !discharging) {
            c.powerSource = .ac
        } else if !batteries.isEmpty && (discharging || !external.isEmpty) {
            c.powerSource = .battery
        } else if batteries.isEmpty {
            c.powerSource = external.isEmpty ? .ac : (externalOnline ? .ac : .unknown)
        } else {
            c.powerSource = .unknown
        }
    }
}
