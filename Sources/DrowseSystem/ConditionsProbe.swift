import CDrowseSys
import DrowseCore

/// Reads power and network facts from sysfs and procfs. Reading is cheap and happens on
/// demand (start, `conditions --refresh`, window boundaries), never on a timer.
package struct ConditionsProbe: Sendable {
    package var sysfsRoot: String
    package var procRoot: String
    package var meteredInterfaces: [String]?
    /// NetworkManager's command-line client; its per-device metered flag is used when present.
    package var nmcli: String?

    package init(sysfsRoot: String, procRoot: String = "/proc", meteredInterfaces: [String]?, nmcli: String? = "/usr/bin/nmcli") {
        self.sysfsRoot = sysfsRoot
        self.procRoot = procRoot
        self.meteredInterfaces = meteredInterfaces
        self.nmcli = nmcli
    }

    package func read(now: Double) -> Conditions {
        var c = Conditions()
        c.readAt = now
        PowerSupplyReading.combine(powerSupplies(), into: &c)
        if let iface = defaultRouteInterface() {
            c.interface = iface
            c.network = kind(of: iface)
            if c.network == .wifi { c.ssid = wifiSSID(iface).flatMap(Conditions.ssidText) }
            if let metered = meteredInterfaces {
                c.metered = metered.contains(iface)
            } else if let nm = networkManagerMetered(iface) {
                c.metered = nm
            } else {
                c.metered = c.network == .cellular
            }
        }
        return c
    }

    package func powerSupplies() -> [PowerSupplyReading] {
        let base = sysfsRoot + "/class/power_supply"
        return FileSystem.listDirectory(base).compactMap { name in
            let dir = base + "/" + name
            // A Bluetooth mouse's battery is not the board's power.
            if FileSystem.attribute(dir + "/scope")?.lowercased() == "device" { return nil }
            return PowerSupplyReading(
                name: name, type: FileSystem.attribute(dir + "/type"),
                online: FileSystem.attribute(dir + "/online").flatMap(Int.init).map { $0 != 0 },
                capacity: FileSystem.attribute(dir + "/capacity").flatMap(Int.init),
                status: FileSystem.attribute(dir + "/status"))
        }
    }

    /// NetworkManager's metered flag for a device ("yes", "no", "yes (guessed)", ...), when
    /// NetworkManager manages it; nil when unknown or not installed.
    package func networkManagerMetered(_ iface: String) -> Bool? {
        guard let nmcli, let out = commandOutput([nmcli, "-t", "-g", "GENERAL.METERED", "device", "show", iface]) else { return nil }
        let value = out.trimmingSpaces().lowercased()
        if value.hasPrefix("yes") { return true }
        if value.hasPrefix("no") { return false }
        return nil
    }

    /// The SSID `iface` is associated with, from the kernel's nl80211 (`drowse_wifi_ssid`); nil when
    /// not associated or not readable (no Wi-Fi driver, not a station, no answer in 500 ms).
    package func wifiSSID(_ iface: String) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: 32)
        let n = drowse_wifi_ssid(iface, &buf, buf.count)
        return n > 0 ? Array(buf[0..<Int(n)]) : nil
    }

    /// The interface behind the IPv4 (else IPv6) default route with the lowest metric.
    package func defaultRouteInterface() -> String? {
        var best: (String, Int)?
        if let text = try? FileSystem.readText(procRoot + "/net/route") {
            for line in text.split(separator: "\n").dropFirst() {
                let f = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard f.count >= 8, f[1] == "00000000", f[7] == "00000000", let flags = Int(f[3], radix: 16), flags & 1 == 1,
                    let metric = Int(f[6]) else { continue }
                if best == nil || metric < best!.1 { best = (String(f[0]), metric) }
            }
        }
        if best == nil, let text = try? FileSystem.readText(procRoot + "/net/ipv6_route") {
            for line in text.split(separator: "\n") {
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                guard f.count >= 10, f[0] == String(repeating: "0", count: 32), f[1] == "00",
                    let metric = Int(f[5], radix: 16), f[9] != "lo" else { continue }
                if best == nil || metric < best!.1 { best = (String(f[9]), metric) }
            }
        }
        return best?.0
    }

    /// The kind of an interface from its sysfs facts, never from its name.
    package func kind(of iface: String) -> Conditions.Network {
        let dir = sysfsRoot + "/class/net/" + iface
        if FileSystem.exists(dir + "/wireless") || FileSystem.exists(dir + "/phy80211") { return .wifi }
        if let uevent = try? FileSystem.readText(dir + "/uevent", limit: 8192) {
            for line in uevent.split(separator: "\n") {
                if line == "DEVTYPE=wlan" { return .wifi }
                if line == "DEVTYPE=wwan" { return .cellular }
            }
        }
        // ARPHRD_PPP (512) and ARPHRD_RAWIP (519) are modem links. ARPHRD_NONE (65534) is not
        // counted: WireGuard and tun VPNs use it too.
        if let type = FileSystem.attribute(dir + "/type").flatMap(Int.init), [512, 519].contains(type) { return .cellular }
        if FileSystem.exists(dir + "/device/driver/module/drivers/usb:cdc_mbim") || FileSystem.exists(dir + "/device/driver/module/drivers/usb:qmi_wwan") {
            return .cellular
        }
        return .ethernet
    }
}
