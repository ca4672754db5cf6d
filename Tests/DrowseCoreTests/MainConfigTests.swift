import DrowseCore
import Testing

@Suite("MainConfig")
struct MainConfigTests {
    static let file = "/etc/drowse/drowse.toml"

    func parse(_ text: String, file: String = MainConfigTests.file, machineID: String? = "0123456789abcdef0123456789abcdef")
        throws(ConfigError) -> MainConfig
    {
        try MainConfig.parse(text, file: file, machineID: machineID)
    }

    /// The error `text` is refused with, or nil (and a recorded issue) when it parses.
    func refusal(_ text: String, file: String = MainConfigTests.file, machineID: String? = "abc",
        sourceLocation: SourceLocation = #_sourceLocation) -> ConfigError?
    {
        do {
            _ = try MainConfig.parse(text, file: file, machineID: machineID)
            Issue.record("expected a ConfigError", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Defaults

    @Test("an empty file gives the contract's defaults")
    func defaults() throws {
        let c = try parse("")
        #expect(c.file == Self.file)
        #expect(c.deviceID == "drowse-0123456789ab")
        #expect(c.stateDir == "/var/lib/drowse")
        #expect(c.appsDir == "/etc/drowse/apps.d")
        #expect(c.socket == "/run/drowse/drowse.sock")
        #expect(c.mqtt == nil)
        #expect(c.conditions.batteryLowPercent == 20)
        #expect(c.conditions.sysfsRoot == "/sys")
        #expect(c.conditions.meteredInterfaces == nil)
        #expect(c.radioModel == .auto)
        #expect(c.scheduler.handlerDeadline == .seconds(30))
        #expect(c.scheduler.minimumInterval == .seconds(600))
        #expect(c.transfers.maxConnectionsPerHost == 6)
        #expect(c.transfers.commitInterval == .seconds(2))
        #expect(c.transfers.commitBytes == 8 << 20)
        #expect(MainConfig.defaultPath == "/etc/drowse/drowse.toml")
    }

    @Test("the contract's example config parses")
    func specExample() throws {
        let c = try parse("""
            device_id = "pi-kitchen"            # default: derived from /etc/machine-id
            state_dir = "/var/lib/drowse"
            apps_dir  = "/etc/drowse/apps.d"
            socket    = "/run/drowse/drowse.sock"

            [mqtt]                              # optional
            url        = "mqtt://127.0.0.1:1883"   # mqtt:// or mqtts://
            topic_prefix = "drowse"
            keepalive  = "240s"

            [conditions]
            battery_low_percent = 20            # below this, discretionary work waits
            sysfs_root = "/sys"                 # tests point this at a fake tree
            # metered_interfaces = ["wwan0"]    # overrides detection

            [radio]
            model = "auto"
            """)
        #expect(c.deviceID == "pi-kitchen")
        let m = try #require(c.mqtt)
        #expect(m.url == "mqtt://127.0.0.1:1883")
        #expect(m.host == "127.0.0.1")
        #expect(m.port == 1883)
        #expect(!m.tls)
        #expect(m.topicPrefix == "drowse")
        #expect(m.keepalive == .seconds(240))
        #expect(m.clientID == "drowse-pi-kitchen")
        #expect(m.username == nil && m.passwordFile == nil && m.caFile == nil && m.certFile == nil && m.keyFile == nil)
    }

    // MARK: - Device id

    @Test("the device id defaults to the first 12 characters of the machine id")
    func deviceIDFromMachineID() throws {
        #expect(try parse("", machineID: "abcdef").deviceID == "drowse-abcdef")
        #expect(try parse("", machineID: "0123456789abcdefXYZ").deviceID == "drowse-0123456789ab")
        #expect(try parse("device_id = 'own'", machineID: nil).deviceID == "own")
    }

    @Test("no device id and no machine id is an error on device_id")
    func deviceIDMissing() {
        for machineID in [nil, ""] as [String?] {
            let e = refusal("", machineID: machineID)
            #expect(e?.key == "device_id")
            #expect(e?.file == Self.file)
            #expect(e?.problem.contains("machine-id") == true)
        }
    }

    @Test("refuses device ids that cannot go in a topic", arguments: [
        "", "pi kitchen", "pi/kitchen", "a+b", "a#b", ".hidden", "pï", String(repeating: "x", count: 65),
    ])
    func badDeviceID(id: String) {
        let e = refusal("\n\ndevice_id = \"\(id)\"")
        #expect(e?.key == "device_id")
        #expect(e?.line == 3)
    }

    @Test("accepts device ids of letters, digits, '-', '_' and '.'", arguments: [
        "pi-kitchen", "PI_2", "a.b", "x", String(repeating: "x", count: 64),
    ])
    func goodDeviceID(id: String) throws {
        #expect(try parse("device_id = \"\(id)\"").deviceID == id)
    }

    // MARK: - Paths

    @Test("a socket path longer than a unix socket's address holds is refused by name")
    func socketPathTooLong() throws {
        let deep = "/home/me/" + String(repeating: "a-rather-long-folder-name/", count: 4) + "deploy/drowse.toml"
        let longest = "/run/" + String(repeating: "s", count: MainConfig.socketPathLimit - 5)
        #expect(try parse("socket = '\(longest)'").socket == longest)
        let e = try #require(refusal("socket = '\(longest)x'"))
        #expect(e.key == "socket")
        #expect(e.problem.contains("\(MainConfig.socketPathLimit + 1) bytes long"))
        // A relative path resolves below the config's folder, and that is what counts.
        let rel = try #require(refusal("socket = 'run/drowse-agent.sock'", file: deep))
        #expect(rel.key == "socket")
        #expect(rel.problem.contains("/home/me/a-rather-long-folder-name/"))
    }

    @Test("relative paths resolve against the config file's folder")
    func relativePaths() throws {
        let c = try parse("""
            state_dir = "state"
            apps_dir = "./apps.d"
            socket = "../run/drowse.sock"
            [conditions]
            sysfs_root = "fake/sys"
            [mqtt]
            password_file = "secrets/pw"
            ca_file = "./ca.pem"
            cert_file = "/abs/cert.pem"
            key_file = "key.pem"
            """, file: "/home/me/drowse/deploy/drowse.toml")
        #expect(c.stateDir == "/home/me/drowse/deploy/state")
        #expect(c.appsDir == "/home/me/drowse/deploy/apps.d")
        #expect(c.socket == "/home/me/drowse/deploy/../run/drowse.sock")
        #expect(c.conditions.sysfsRoot == "/home/me/drowse/deploy/fake/sys")
        let m = try #require(c.mqtt)
        #expect(m.passwordFile == "/home/me/drowse/deploy/secrets/pw")
        #expect(m.caFile == "/home/me/drowse/deploy/ca.pem")
        #expect(m.certFile == "/abs/cert.pem")
        #expect(m.keyFile == "/home/me/drowse/deploy/key.pem")
    }

    @Test("a config given by a relative path resolves against its relative folder")
    func relativeConfigFile() throws {
        #expect(try parse("state_dir = 'state'", file: "deploy/drowse.toml").stateDir == "deploy/state")
        #expect(try parse("state_dir = 'state'", file: "drowse.toml").stateDir == "./state")
        #expect(try parse("state_dir = 'state'", file: "/drowse.toml").stateDir == "/state")
    }

    @Test("absolute paths are kept as written")
    func absolutePaths() throws {
        let c = try parse("state_dir = '/data/drowse'\nsocket = '/tmp/d.sock'", file: "deploy/drowse.toml")
        #expect(c.stateDir == "/data/drowse")
        #expect(c.socket == "/tmp/d.sock")
        #expect(c.appsDir == "/etc/drowse/apps.d")
    }

    // MARK: - Wrong types and unknown keys

    @Test("a wrong type names the file, key, line and what was found")
    func wrongType() throws {
        let e = try #require(refusal("device_id = 'pi'\nstate_dir = 42\n", file: "/x/drowse.toml"))
        #expect(e == ConfigError(file: "/x/drowse.toml", key: "state_dir", line: 2, problem: "expected a string, found an integer"))
        #expect(e.description == "/x/drowse.toml:2: key 'state_dir': expected a string, found an integer")
    }

    @Test("wrong types in tables name the dotted key", arguments: [
        ("[conditions]\nbattery_low_percent = '20'", "conditions.battery_low_percent", 2, "expected an integer, found a string"),
        ("[conditions]\nbattery_low_percent = 20.0", "conditions.battery_low_percent", 2, "expected an integer, found a number"),
        ("[conditions]\nmetered_interfaces = 'wwan0'", "conditions.metered_interfaces", 2, "expected an array of strings, found a string"),
        ("[conditions]\nmetered_interfaces = ['wwan0', 1]", "conditions.metered_interfaces", 2, "expected an array of strings, found an integer inside"),
        ("[mqtt]\nurl = true", "mqtt.url", 2, "expected a string, found a boolean"),
        ("[mqtt]\n\nusername = ['a']", "mqtt.username", 3, "expected a string, found an array"),
        ("mqtt = 'mqtt://h'", "mqtt", 1, "expected a table, found a string"),
        ("radio = { model = 1 }", "radio.model", 1, "expected a string, found an integer"),
    ])
    func wrongTypesInTables(text: String, key: String, line: Int, problem: String) throws {
        let e = try #require(refusal(text))
        #expect(e.key == key)
        #expect(e.line == line)
        #expect(e.problem == problem)
        #expect(e.file == Self.file)
    }

    @Test("refuses unknown keys at the top and in every table, with their line", arguments: [
        ("device_id = 'x'\nstatedir = '/tmp'", "statedir", 2),
        ("[mqtt]\nurl = 'mqtt://h'\nkeep_alive = '60s'", "mqtt.keep_alive", 3),
        ("[conditions]\nbattery_low = 10", "conditions.battery_low", 2),
        ("[radio]\nkind = 'lte'", "radio.kind", 2),
        ("[scheduler]\ndeadline = '5s'", "scheduler.deadline", 2),
        ("[transfers]\nmax_connections = 2", "transfers.max_connections", 2),
        ("[unknown_table]\nx = 1", "unknown_table", 1),
        ("[mqtt.tls]\nx = 1", "mqtt.tls", 1),
    ])
    func unknownKeys(text: String, key: String, line: Int) throws {
        let e = try #require(refusal(text))
        #expect(e.key == key)
        #expect(e.line == line)
        #expect(e.problem == "unknown key")
    }

    @Test("a TOML syntax error becomes a ConfigError with the file and line")
    func syntaxError() throws {
        let e = try #require(refusal("device_id = 'x'\n\nstate_dir = /var/lib\n", file: "/etc/drowse/drowse.toml"))
        #expect(e.file == "/etc/drowse/drowse.toml")
        #expect(e.line == 3)
        #expect(e.key == nil)
        #expect(e.description.hasPrefix("/etc/drowse/drowse.toml:3: "))
        let dup = try #require(refusal("socket = 'a'\nsocket = 'b'"))
        #expect(dup.line == 2)
        #expect(dup.problem == "key 'socket' defined twice")
    }

    // MARK: - MQTT

    @Test("an empty [mqtt] table turns MQTT on with defaults")
    func mqttDefaults() throws {
        let m = try #require(try parse("device_id = 'dev'\n[mqtt]").mqtt)
        #expect(m.url == "mqtt://127.0.0.1:1883")
        #expect(m.host == "127.0.0.1")
        #expect(m.port == 1883)
        #expect(!m.tls)
        #expect(m.topicPrefix == "drowse")
        #expect(m.keepalive == .seconds(240))
        #expect(m.clientID == "drowse-dev")
    }

    @Test("mqtts means TLS on 8883 unless a port is given", arguments: [
        ("mqtts://broker.example", "broker.example", 8883, true), ("mqtts://broker:9999", "broker", 9999, true),
        ("mqtt://broker", "broker", 1883, false), ("MQTT://[::1]:1884", "::1", 1884, false),
        ("mqtt://broker:1", "broker", 1, false),  // user:pw@ is refused: MainConfigAPITests
    ])
    func mqttURLs(url: String, host: String, port: Int, tls: Bool) throws {
        let m = try #require(try parse("[mqtt]\nurl = \"\(url)\"").mqtt)
        #expect(m.url == url)
        #expect(m.host == host)
        #expect(m.port == port)
        #expect(m.tls == tls)
    }

    @Test("refuses URLs that are not mqtt:// or mqtts://", arguments: [
        "http://broker:1883", "tcp://broker", "ws://broker", "broker:1883", "mqtt://", "mqtt://broker:0",
        "mqtt://broker:70000", "mqtt:/broker", "",
    ])
    func badMQTTURL(url: String) throws {
        let e = try #require(refusal("[mqtt]\n# comment\nurl = \"\(url)\""))
        #expect(e.key == "mqtt.url")
        #expect(e.line == 3)
        #expect(e.problem.contains("mqtt://"))
        #expect(e.problem.contains(url))
    }

    @Test("MQTT options are read")
    func mqttOptions() throws {
        let m = try #require(try parse("""
            [mqtt]
            url = "mqtts://b"
            topic_prefix = "home/drowse"
            keepalive = "1m30s"
            client_id = "fixed-id"
            username = "pi"
            """).mqtt)
        #expect(m.topicPrefix == "home/drowse")
        #expect(m.keepalive == .seconds(90))
        #expect(m.clientID == "fixed-id")
        #expect(m.username == "pi")
    }

    @Test("refuses an empty topic prefix or one with MQTT wildcards", arguments: ["", "a/+/b", "drowse/#", "+", "#"])
    func badTopicPrefix(prefix: String) throws {
        let e = try #require(refusal("[mqtt]\ntopic_prefix = \"\(prefix)\""))
        #expect(e.key == "mqtt.topic_prefix")
        #expect(e.line == 2)
    }

    @Test("refuses bad keepalive durations", arguments: [
        ("'soon'", "not a duration"), ("'240'", "not a duration"), ("'0.5s'", "at least 1s"), ("'0s'", "at least 1s"),
        ("'65536s'", "at most 65535s"), ("'1d'", "at most 65535s"), ("'-5s'", "not a duration"),
    ])
    func badKeepalive(value: String, problem: String) throws {
        let e = try #require(refusal("[mqtt]\nkeepalive = \(value)"))
        #expect(e.key == "mqtt.keepalive")
        #expect(e.line == 2)
        #expect(e.problem.contains(problem), "\(e.problem)")
    }

    @Test("keepalive limits are inclusive")
    func keepaliveBounds() throws {
        #expect(try parse("[mqtt]\nkeepalive = '1s'").mqtt?.keepalive == .seconds(1))
        #expect(try parse("[mqtt]\nkeepalive = '65535s'").mqtt?.keepalive == .seconds(65535))
    }

    @Test("max_keepalive: 7 × keepalive by default (whole seconds, 5 s to 65535 s), at least keepalive, at least 5 s")
    func maxKeepalive() throws {
        #expect(try parse("[mqtt]").mqtt?.maxKeepalive == .seconds(1680))
        #expect(try parse("[mqtt]\nkeepalive = '10s'").mqtt?.maxKeepalive == .seconds(70))
        #expect(try parse("[mqtt]\nkeepalive = '3.4s'").mqtt?.maxKeepalive == .seconds(24))
        #expect(refusal("[mqtt]\nkeepalive = '0.5s'\nmax_keepalive = '5s'")?.key == "mqtt.keepalive")
        #expect(try parse("[mqtt]\nkeepalive = '1s'").mqtt?.maxKeepalive == .seconds(7))
        #expect(try parse("[mqtt]\nkeepalive = '20000s'").mqtt?.maxKeepalive == .seconds(65535))
        #expect(try parse("[mqtt]\nkeepalive = '240s'\nmax_keepalive = '240s'").mqtt?.maxKeepalive == .seconds(240))
        let below = try #require(refusal("[mqtt]\nkeepalive = '240s'\nmax_keepalive = '120s'"))
        #expect(below.key == "mqtt.max_keepalive" && below.problem.contains("at least keepalive"))
        let short = try #require(refusal("[mqtt]\nkeepalive = '2s'\nmax_keepalive = '3s'"))
        #expect(short.key == "mqtt.max_keepalive" && short.problem.contains("at least 5s"))
    }

    @Test("a duration written as a bare number says durations need a unit")
    func durationAsInteger() throws {
        let e = try #require(refusal("[mqtt]\nkeepalive = 240"))
        #expect(e.key == "mqtt.keepalive")
        #expect(e.line == 2)
        #expect(e.problem.contains("unit"), "\(e.problem)")
    }

    @Test("the MQTT table may be written with dotted keys or inline")
    func mqttDottedAndInline() throws {
        #expect(try parse("mqtt.url = 'mqtts://b'").mqtt?.port == 8883)
        #expect(try parse("mqtt = { url = 'mqtt://b:1', keepalive = '10s' }").mqtt?.keepalive == .seconds(10))
        let e = try #require(refusal("device_id = 'x'\nmqtt.url = 'http://b'"))
        #expect(e.key == "mqtt.url")
        #expect(e.line == 2)
    }

    // MARK: - Conditions, radio, scheduler, transfers

    @Test("conditions are read and checked")
    func conditions() throws {
        let c = try parse("[conditions]\nbattery_low_percent = 0\nmetered_interfaces = ['wwan0', 'usb0']\n").conditions
        #expect(c.batteryLowPercent == 0)
        #expect(c.meteredInterfaces == ["wwan0", "usb0"])
        #expect(c.sysfsRoot == "/sys")
        #expect(try parse("[conditions]\nbattery_low_percent = 100").conditions.batteryLowPercent == 100)
        #expect(try parse("[conditions]\nmetered_interfaces = []").conditions.meteredInterfaces == [])
        for bad in [-1, 101] {
            let e = refusal("[conditions]\nbattery_low_percent = \(bad)")
            #expect(e?.key == "conditions.battery_low_percent")
            #expect(e?.problem == "must be between 0 and 100, found \(bad)")
        }
    }

    @Test("the radio model is one of the contract's names", arguments: ["auto", "lte", "3g", "wifi", "ethernet"])
    func radioModels(model: String) throws {
        #expect(try parse("[radio]\nmodel = '\(model)'").radioModel.description == model)
    }

    @Test("refuses other radio models", arguments: ["LTE", "5g", "", "wifi "])
    func badRadioModel(model: String) throws {
        let e = try #require(refusal("[radio]\nmodel = '\(model)'"))
        #expect(e.key == "radio.model")
        #expect(e.line == 2)
    }

    @Test("[radio] tail overrides the model's tail for planning; at most 300 s")
    func radioTail() throws {
        #expect(try parse("").radioTail == nil)
        #expect(try parse("[radio]\nmodel = 'lte'\ntail = '80ms'").radioTail == .milliseconds(80))
        #expect(try parse("[radio]\ntail = '0s'").radioTail == .zero)
        let long = try #require(refusal("[radio]\ntail = '301s'"))
        #expect(long.key == "radio.tail")
        #expect(try #require(refusal("[radio]\ntail = 5")).key == "radio.tail")
    }

    @Test("scheduler knobs accept durations of at least one second")
    func scheduler() throws {
        let s = try parse("[scheduler]\nhandler_deadline = '2s'\nminimum_interval = '1s'").scheduler
        #expect(s.handlerDeadline == .seconds(2))
        #expect(s.minimumInterval == .seconds(1))
        let e = try #require(refusal("[scheduler]\nhandler_deadline = '500ms'"))
        #expect(e.key == "scheduler.handler_deadline")
        #expect(e.problem == "must be at least 1s")
        #expect(refusal("[scheduler]\nminimum_interval = 'often'")?.key == "scheduler.minimum_interval")
    }

    @Test("transfer knobs are range-checked")
    func transfers() throws {
        let t = try parse("[transfers]\nmax_connections_per_host = 1\ncommit_interval = '100ms'\ncommit_bytes = 65536").transfers
        #expect(t.maxConnectionsPerHost == 1)
        #expect(t.commitInterval == .milliseconds(100))
        #expect(t.commitBytes == 65536)
        #expect(refusal("[transfers]\nmax_connections_per_host = 0")?.key == "transfers.max_connections_per_host")
        #expect(refusal("[transfers]\nmax_connections_per_host = 65")?.key == "transfers.max_connections_per_host")
        #expect(refusal("[transfers]\ncommit_interval = '99ms'")?.key == "transfers.commit_interval")
        #expect(refusal("[transfers]\ncommit_bytes = 65535")?.key == "transfers.commit_bytes")
        #expect(refusal("[transfers]\ncommit_bytes = 1073741825")?.key == "transfers.commit_bytes")
        #expect(try parse("[transfers]\ncommit_bytes = 1073741824").transfers.commitBytes == 1 << 30)
        #expect(try parse("").transfers.maxPerApp == 256)
        #expect(try parse("").transfers.maxUnknownSize == 2 << 30)
        #expect(try parse("[transfers]\nmax_per_app = 3\nmax_unknown_size = 1000").transfers.maxUnknownSize == 1000)
        #expect(refusal("[transfers]\nmax_per_app = 0")?.key == "transfers.max_per_app")
        #expect(refusal("[transfers]\nmax_unknown_size = -1")?.key == "transfers.max_unknown_size")
    }

    // MARK: - ConfigError and Identifier

    @Test("ConfigError reads as one line with whatever context it has")
    func configErrorDescription() {
        #expect(ConfigError(file: "f.toml", problem: "bad").description == "f.toml: bad")
        #expect(ConfigError(file: "f.toml", line: 3, problem: "bad").description == "f.toml:3: bad")
        #expect(ConfigError(file: "f.toml", key: "a.b", problem: "bad").description == "f.toml: key 'a.b': bad")
        #expect(ConfigError(file: "f.toml", key: "k", line: 9, problem: "bad").description == "f.toml:9: key 'k': bad")
        #expect(!ConfigError(file: "f", key: "k", line: 1, problem: "p").description.contains("\n"))
    }

    @Test("identifiers are 1–64 ASCII letters, digits, '-', '_', '.', not starting with '.'")
    func identifiers() {
        for ok in ["a", "weather", "pi-kitchen_2.v1", "A.", String(repeating: "z", count: 64)] {
            #expect(Identifier.isValid(ok), "\(ok)")
        }
        for bad in ["", ".a", "..", "a b", "a/b", "a+b", "a#b", "é", "٣", "a\n", String(repeating: "z", count: 65)] {
            #expect(!Identifier.isValid(bad), "\(bad)")
        }
    }

    @Test("ConfigPath resolves against a folder and finds a file's folder")
    func configPath() {
        #expect(ConfigPath.directory(of: "/etc/drowse/drowse.toml") == "/etc/drowse")
        #expect(ConfigPath.directory(of: "/drowse.toml") == "/")
        #expect(ConfigPath.directory(of: "drowse.toml") == ".")
        #expect(ConfigPath.directory(of: "deploy/drowse.toml") == "deploy")
        #expect(ConfigPath.resolve("/abs", relativeTo: "/etc") == "/abs")
        #expect(ConfigPath.resolve("rel", relativeTo: "/etc") == "/etc/rel")
        #expect(ConfigPath.resolve("./rel", relativeTo: "/etc") == "/etc/rel")
        #expect(ConfigPath.resolve("././rel", relativeTo: "/etc") == "/etc/rel")
        #expect(ConfigPath.resolve("rel", relativeTo: "/") == "/rel")
        #expect(ConfigPath.resolve("../up", relativeTo: "/etc/drowse") == "/etc/drowse/../up")
    }
}
