import DrowseCore
import Testing

@Suite("Conditions: the network a keepalive is learned for")
struct ConditionsNetworkKeyTests {
    @Test("the key is the interface, and on Wi-Fi the interface and its SSID")
    func networkKey() {
        var c = Conditions()
        #expect(c.networkKey == nil)
        c.interface = "eth0"
        #expect(c.networkKey == "eth0")
        c.interface = "wlan0"
        c.ssid = "home"
        #expect(c.networkKey == "wlan0/home")
        // Two access points on one interface are two networks; the same SSID on another interface too.
        var other = c
        other.ssid = "cafe"
        #expect(other.networkKey != c.networkKey)
        other.ssid = "home"
        other.interface = "wlan1"
        #expect(other.networkKey != c.networkKey)
        #expect(c.json["ssid"]?.stringValue == "home")
    }

    @Test("an SSID's bytes: printable UTF-8 as is, anything else in hex, none as nil")
    func ssidText() {
        #expect(Conditions.ssidText(Array("drowse-board".utf8)) == "drowse-board")
        #expect(Conditions.ssidText(Array("café ☕".utf8)) == "café ☕")
        #expect(Conditions.ssidText([]) == nil)
        // Invalid UTF-8, and a control character (a newline must not reach a log line or a key).
        #expect(Conditions.ssidText([0x68, 0xFF, 0x69]) == "0x68ff69")
        #expect(Conditions.ssidText(Array("a\nb".utf8)) == "0x610a62")
        #expect(Conditions.ssidText([0x00]) == "0x00")
    }
}
