import DrowseCore
import Testing

@Suite("AppLimits")
struct AppLimitsTests {
    @Test("memory sizes: bytes, K/M/G (with i and B), unlimited; anything else is refused")
    func parseMemory() {
        #expect(AppLimits.parseMemory("256M") == .some(256 << 20))
        #expect(AppLimits.parseMemory("1GiB") == .some(1 << 30))
        #expect(AppLimits.parseMemory("512KB") == .some(512 << 10))
        #expect(AppLimits.parseMemory("123456") == .some(123_456))
        #expect(AppLimits.parseMemory("unlimited") == .some(nil))
        for bad in ["", "M", "12X", "-5M", "1.5G", "99999999999999999999G", " 5M", "5 M"] {
            #expect(AppLimits.parseMemory(bad) == nil, "\(bad)")
        }
        #expect(AppLimits.formatMemory(256 << 20) == "256M" && AppLimits.formatMemory(nil) == "unlimited")
    }

    @Test("an app's [limits] override drowse.toml's, key by key; \"unlimited\" is an override too")
    func appOverrides() throws {
        let app = try AppDefinition.parse("id = \"a\"\n[limits]\nmemory = \"64M\"\n", file: "/x/a.toml")
        #expect(app.limits.resolved(defaults: AppLimits(processes: 50, memory: nil)) == AppLimits(processes: 50, memory: 64 << 20))
        let open = try AppDefinition.parse("id = \"a\"\n[limits]\nprocesses = \"unlimited\"\n", file: "/x/a.toml")
        #expect(open.limits.resolved(defaults: .defaults).processes == nil)
        let plain = try AppDefinition.parse("id = \"a\"\n", file: "/x/a.toml")
        #expect(plain.limits.resolved(defaults: .defaults) == AppLimits(processes: 256, memory: nil))
    }

    @Test("bad limits name the key", arguments: [
        ("processes = 1", "limits.processes"), ("processes = \"lots\"", "limits.processes"), ("memory = \"1K\"", "limits.memory"),
        ("memory = 100", "limits.memory"), ("memory = true", "limits.memory"), ("cpu = 3", "limits.cpu"),
    ])
    func badLimits(_ line: String, _ key: String) {
        #expect {
            _ = try AppDefinition.parse("id = \"a\"\n[limits]\n\(line)\n", file: "/x/a.toml")
        } throws: { ($0 as? ConfigError)?.description.contains(key) == true }
    }

    @Test("drowse.toml's [limits] sets the defaults")
    func mainDefaults() throws {
        let c = try MainConfig.parse("device_id = \"d\"\n[limits]\nprocesses = 100\nmemory = \"1G\"\n", file: "/etc/drowse/drowse.toml", machineID: "m")
        #expect(c.limits == AppLimits(processes: 100, memory: 1 << 30))
        #expect(try MainConfig.parse("device_id = \"d\"\n", file: "/etc/drowse/drowse.toml", machineID: "m").limits == .defaults)
    }
}
