import DrowseCore
import Testing

/// `[mqtt] groups` and `[mqtt] url` as a list (docs/fleets.md).
@Suite("MainConfig: fleets")
struct MainConfigFleetTests {
    static let file = "/etc/drowse/drowse.toml"

    func parse(_ text: String) throws(ConfigError) -> MainConfig {
        try MainConfig.parse("device_id = 'pi'\n" + text, file: Self.file, machineID: nil)
    }

    func refusal(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> ConfigError? {
        do {
            _ = try parse(text)
            Issue.record("expected a ConfigError", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    @Test("groups are read in order; none by default")
    func groups() throws {
        #expect(try #require(try parse("[mqtt]").mqtt).groups == [])
        let m = try #require(try parse("[mqtt]\ngroups = ['eu', 'beta', 'Ünïcode ok', 'a.b-c']").mqtt)
        #expect(m.groups == ["eu", "beta", "Ünïcode ok", "a.b-c"])
    }

    @Test("roll_call: off by default, a boolean")
    func rollCall() throws {
        #expect(try #require(try parse("[mqtt]").mqtt).rollCall == false)
        #expect(try #require(try parse("[mqtt]\nroll_call = true").mqtt).rollCall == true)
        #expect(refusal("[mqtt]\nroll_call = 'yes'") != nil)
    }

    @Test("a group name that cannot be one topic level is refused, naming the file and key", arguments: [
        "''", "'eu/west'", "'+'", "'beta#'", "\"a\\u0000b\"",
    ])
    func badGroups(name: String) throws {
        let e = try #require(refusal("[mqtt]\ngroups = ['ok', \(name)]"))
        #expect(e.file == Self.file)
        #expect(e.key == "mqtt.groups")
        #expect(e.line == 3)
        #expect(e.description.contains("mqtt.groups"))
    }

    @Test("groups must be an array of strings, each named once")
    func groupsShape() throws {
        #expect(try #require(refusal("[mqtt]\ngroups = 'eu'")).key == "mqtt.groups")
        #expect(try #require(refusal("[mqtt]\ngroups = ['eu', 1]")).key == "mqtt.groups")
        #expect(try #require(refusal("[mqtt]\ngroups = ['eu', 'eu']")).problem == "names a group twice")
    }

    @Test("url as a string is one broker")
    func oneURL() throws {
        let m = try #require(try parse("[mqtt]\nurl = 'mqtt://a.example:1884'").mqtt)
        #expect(m.brokers == [.init(url: "mqtt://a.example:1884", host: "a.example", port: 1884, tls: false)])
        #expect(m.url == "mqtt://a.example:1884" && m.host == "a.example" && m.port == 1884)
    }

    @Test("url as a list: every broker, the preferred first, default ports per scheme")
    func urlList() throws {
        let m = try #require(try parse("[mqtt]\nurl = ['mqtts://a.example', 'mqtts://[::1]:9883', 'mqtts://c.example:8884']").mqtt)
        #expect(m.brokers.map(\.host) == ["a.example", "::1", "c.example"])
        #expect(m.brokers.map(\.port) == [8883, 9883, 8884])
        #expect(m.brokers.allSatisfy { $0.tls })
        #expect(m.url == "mqtts://a.example" && m.host == "a.example" && m.port == 8883 && m.tls)
    }

    @Test("every URL of the list is checked", arguments: [
        ("url = []", "the list of broker URLs is empty"),
        ("url = ['mqtt://a', 'http://b']", "'http://b' is not an mqtt:// or mqtts:// URL"),
        ("url = ['mqtt://a', 'mqtts://b']", "'mqtts://b' mixes mqtt:// and mqtts://: every broker of the list uses the same scheme"),
        ("url = ['mqtt://a:1883', 'mqtt://a']", "'mqtt://a' is in the list twice"),
    ])
    func badLists(line: String, problem: String) throws {
        let e = try #require(refusal("[mqtt]\n" + line))
        #expect(e.key == "mqtt.url")
        #expect(e.problem == problem)
        #expect(e.file == Self.file)
    }

    @Test("a list holding something else than strings is refused")
    func listOfNumbers() throws {
        let e = try #require(refusal("[mqtt]\nurl = ['mqtt://a', 1]"))
        #expect(e.key == "mqtt.url")
        #expect(e.problem == "expected an array of strings, found an integer inside")
    }
}
