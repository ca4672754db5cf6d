import DrowseCore
import Testing

@Suite("AppDefinition")
struct AppDefinitionTests {
    static let file = "/etc/drowse/apps.d/weather.toml"
    static let key32 = Base64.encode([UInt8](repeating: 7, count: 32))

    func refusal(_ text: String, file: String = AppDefinitionTests.file, sourceLocation: SourceLocation = #_sourceLocation) -> ConfigError? {
        do {
            _ = try AppDefinition.parse(text, file: file)
            Issue.record("expected a ConfigError", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Whole files

    @Test("the contract's example app parses")
    func specExample() throws {
        let app = try AppDefinition.parse("""
            id   = "weather"
            user = "weather"                    # handlers run as this user
            working_directory = "/opt/weather"

            [fetch]
            command = ["/opt/weather/fetch.sh"]
            minimum_interval = "15m"            # "minimum" | "never" | a duration.

            [notification]
            command = ["/opt/weather/on-notify.sh"]   # default: the fetch command
            # public_key = "..."
            # allow_download = false

            [transfers]
            events_command = ["/opt/weather/on-transfers.sh"]
            sends_launch_events = true
            """, file: Self.file)
        #expect(app.id == "weather")
        #expect(app.file == Self.file)
        #expect(app.user == "weather")
        #expect(app.workingDirectory == "/opt/weather")
        #expect(app.fetchCommand == ["/opt/weather/fetch.sh"])
        #expect(app.fetchInterval == .every(.seconds(900)))
        #expect(app.notificationCommand == ["/opt/weather/on-notify.sh"])
        #expect(app.notificationPublicKey == nil)
        #expect(!app.allowDownload)
        #expect(app.eventsCommand == ["/opt/weather/on-transfers.sh"])
        #expect(app.sendsLaunchEvents)
    }

    @Test("a file with only an id gets the defaults: no fetches, no commands")
    func minimal() throws {
        let app = try AppDefinition.parse("id = 'quiet'", file: Self.file)
        #expect(app.id == "quiet")
        #expect(app.user == nil)
        #expect(app.workingDirectory == nil)
        #expect(app.fetchInterval == .never)
        #expect(app.fetchCommand == nil)
        #expect(app.notificationCommand == nil)
        #expect(app.eventsCommand == nil)
        #expect(!app.allowDownload)
        #expect(app.sendsLaunchEvents)
        for event in HandlerEvent.allCases { #expect(app.command(for: event) == nil) }
    }

    // MARK: - id

    @Test("a missing id is reported on the key 'id'")
    func missingID() throws {
        let e = try #require(refusal("user = 'x'\n[fetch]\ncommand = ['a']"))
        #expect(e.file == Self.file)
        #expect(e.key == "id")
        #expect(e.problem == "missing")
        #expect(e.description == "\(Self.file): key 'id': missing")
    }

    @Test("refuses ids that cannot name a topic or a file", arguments: ["", "my app", "a/b", "../etc", ".x", "w+", "ü"])
    func badID(id: String) throws {
        let e = try #require(refusal("# x\nid = \"\(id)\""))
        #expect(e.key == "id")
        #expect(e.line == 2)
    }

    @Test("refuses an id that is not a string")
    func idWrongType() throws {
        let e = try #require(refusal("id = 7"))
        #expect(e.key == "id")
        #expect(e.problem == "expected a string, found an integer")
    }

    // MARK: - minimum_interval

    @Test("minimum_interval accepts never, minimum or a positive duration", arguments: [
        ("never", FetchInterval.never), ("minimum", .minimum), ("15m", .every(.seconds(900))), ("30s", .every(.seconds(30))),
        ("1h30m", .every(.seconds(5400))), ("1ms", .every(.milliseconds(1))),
    ])
    func intervals(text: String, interval: FetchInterval) throws {
        let app = try AppDefinition.parse("id = 'a'\n[fetch]\ncommand = ['/bin/true']\nminimum_interval = '\(text)'", file: Self.file)
        #expect(app.fetchInterval == interval)
    }

    @Test("minimum_interval defaults to never, even with a fetch command")
    func intervalDefault() throws {
        let app = try AppDefinition.parse("id = 'a'\n[fetch]\ncommand = ['/bin/true']", file: Self.file)
        #expect(app.fetchInterval == .never)
        #expect(app.fetchCommand == ["/bin/true"])
    }

    @Test("refuses intervals that are not never, minimum or a positive duration", arguments: [
        "'0s'", "'0.0001s'", "'soon'", "'Never'", "'MINIMUM'", "'15'", "'-5m'", "''", "'15 m'",
    ])
    func badIntervals(value: String) throws {
        let e = try #require(refusal("id = 'a'\n[fetch]\ncommand = ['/bin/true']\nminimum_interval = \(value)"))
        #expect(e.key == "fetch.minimum_interval")
        #expect(e.line == 4)
        #expect(e.problem.contains("\"minimum\", \"never\" or a duration"))
    }

    @Test("refuses an interval written as a number")
    func intervalAsNumber() throws {
        let e = try #require(refusal("id = 'a'\n[fetch]\ncommand = ['/bin/true']\nminimum_interval = 900"))
        #expect(e.key == "fetch.minimum_interval")
        #expect(e.line == 4)
    }

    @Test("asking for fetches without a command is an error on fetch.command")
    func intervalWithoutCommand() throws {
        for interval in ["minimum", "15m"] {
            let e = try #require(refusal("id = 'a'\n[fetch]\nminimum_interval = '\(interval)'"))
            #expect(e.key == "fetch.command")
            #expect(e.problem.contains("missing"))
        }
        #expect(try AppDefinition.parse("id = 'a'\n[fetch]\nminimum_interval = 'never'", file: Self.file).fetchCommand == nil)
    }

    @Test("FetchInterval describes itself as it is written")
    func intervalDescription() {
        #expect(FetchInterval.never.description == "never")
        #expect(FetchInterval.minimum.description == "minimum")
        #expect(FetchInterval.every(.seconds(900)).description == "15m")
    }

    // MARK: - Commands

    @Test("refuses commands that name no program", arguments: ["[]", "['']", "['', 'x']"])
    func emptyCommands(value: String) throws {
        let e = try #require(refusal("id = 'a'\n[fetch]\ncommand = \(value)"))
        #expect(e.key == "fetch.command")
        #expect(e.problem == "the command must name a program")
    }

    @Test("refuses commands that are not arrays of strings", arguments: [
        ("[fetch]\ncommand = '/bin/fetch --all'", "fetch.command"),
        ("[fetch]\ncommand = ['/bin/x', 1]", "fetch.command"),
        ("[notification]\ncommand = true", "notification.command"),
        ("[transfers]\nevents_command = '/bin/x'", "transfers.events_command"),
    ])
    func commandTypes(text: String, key: String) throws {
        let e = try #require(refusal("id = 'a'\n" + text))
        #expect(e.key == key)
        #expect(e.line == 3)
        #expect(e.problem.hasPrefix("expected an array of strings"))
    }

    @Test("a program path with a slash resolves against the app file's folder; arguments are left alone")
    func relativeCommands() throws {
        let app = try AppDefinition.parse("""
            id = "a"
            [fetch]
            command = ["./bin/fetch.sh", "./arg", "rel/arg"]
            minimum_interval = "minimum"
            [notification]
            command = ["bin/notify"]
            [transfers]
            events_command = ["././events"]
            """, file: "/srv/deploy/apps.d/a.toml")
        #expect(app.fetchCommand == ["/srv/deploy/apps.d/bin/fetch.sh", "./arg", "rel/arg"])
        #expect(app.notificationCommand == ["/srv/deploy/apps.d/bin/notify"])
        #expect(app.eventsCommand == ["/srv/deploy/apps.d/events"])
    }

    @Test("a bare program name is left for PATH lookup, an absolute path as written")
    func bareAndAbsoluteCommands() throws {
        let app = try AppDefinition.parse("id = 'a'\n[fetch]\ncommand = ['python3', 'x.py']\n[notification]\ncommand = ['/usr/bin/env', 'sh']",
            file: "/srv/apps.d/a.toml")
        #expect(app.fetchCommand == ["python3", "x.py"])
        #expect(app.notificationCommand == ["/usr/bin/env", "sh"])
    }

    @Test("with a working directory, relative programs resolve against it")
    func commandsRelativeToWorkingDirectory() throws {
        let app = try AppDefinition.parse("id = 'a'\nworking_directory = '/opt/a'\n[fetch]\ncommand = ['./fetch.sh']",
            file: "/etc/drowse/apps.d/a.toml")
        #expect(app.workingDirectory == "/opt/a")
        #expect(app.fetchCommand == ["/opt/a/fetch.sh"])
    }

    @Test("a relative working directory resolves against the app file's folder, and commands follow it")
    func relativeWorkingDirectory() throws {
        let app = try AppDefinition.parse("id = 'a'\nworking_directory = 'weather'\n[fetch]\ncommand = ['./fetch.sh']",
            file: "deploy/apps.d/a.toml")
        #expect(app.workingDirectory == "deploy/apps.d/weather")
        #expect(app.fetchCommand == ["deploy/apps.d/weather/fetch.sh"])
    }

    @Test("each event finds its command, the notification falling back to the fetch command")
    func commandForEvent() throws {
        let fetchOnly = try AppDefinition.parse("id = 'a'\n[fetch]\ncommand = ['/f']", file: Self.file)
        #expect(fetchOnly.command(for: .fetch) == ["/f"])
        #expect(fetchOnly.command(for: .notification) == ["/f"])
        #expect(fetchOnly.command(for: .transfers) == nil)

        let all = try AppDefinition.parse(
            "id = 'a'\n[fetch]\ncommand = ['/f']\n[notification]\ncommand = ['/n']\n[transfers]\nevents_command = ['/t']", file: Self.file)
        #expect(all.command(for: .fetch) == ["/f"])
        #expect(all.command(for: .notification) == ["/n"])
        #expect(all.command(for: .transfers) == ["/t"])

        let notifyOnly = try AppDefinition.parse("id = 'a'\n[notification]\ncommand = ['/n']", file: Self.file)
        #expect(notifyOnly.command(for: .fetch) == nil)
        #expect(notifyOnly.command(for: .notification) == ["/n"])
        // Transfers never fall back: an app without events_command gets no transfer events.
        #expect(notifyOnly.command(for: .transfers) == nil)
    }

    @Test("handler events are named as DROWSE_EVENT spells them")
    func handlerEventNames() {
        #expect(HandlerEvent.allCases.map(\.rawValue) == ["fetch", "notification", "transfers", "resident"])
        #expect(HandlerEvent(rawValue: "fetch") == .fetch)
        #expect(HandlerEvent(rawValue: "push") == nil)
    }

    // MARK: - Notification and transfers tables

    @Test("accepts a 32-byte public key in either base64 alphabet, and allow_download")
    func publicKey() throws {
        let app = try AppDefinition.parse("id = 'a'\n[notification]\npublic_key = '\(Self.key32)'\nallow_download = true", file: Self.file)
        #expect(app.notificationPublicKey == Self.key32)
        #expect(app.allowDownload)
        let urlSafe = Base64.encode([UInt8](repeating: 0xFF, count: 32), urlSafe: true, padding: false)
        #expect(try AppDefinition.parse("id = 'a'\n[notification]\npublic_key = '\(urlSafe)'", file: Self.file).notificationPublicKey == urlSafe)
    }

    @Test("refuses a public key that is not 32 bytes of base64", arguments: [
        Base64.encode([UInt8](repeating: 1, count: 31)), Base64.encode([UInt8](repeating: 1, count: 33)), "", "not base64!",
        Base64.encode([UInt8](repeating: 1, count: 64)),
    ])
    func badPublicKey(key: String) throws {
        let e = try #require(refusal("id = 'a'\n[notification]\npublic_key = '\(key)'"))
        #expect(e.key == "notification.public_key")
        #expect(e.line == 3)
        #expect(e.problem.contains("32-byte"))
    }

    @Test("refuses allow_download and sends_launch_events that are not booleans")
    func booleanKeys() throws {
        let a = try #require(refusal("id = 'a'\n[notification]\nallow_download = 'yes'"))
        #expect(a.key == "notification.allow_download")
        #expect(a.problem == "expected true or false, found a string")
        let b = try #require(refusal("id = 'a'\n[transfers]\nsends_launch_events = 1"))
        #expect(b.key == "transfers.sends_launch_events")
        #expect(b.problem == "expected true or false, found an integer")
    }

    @Test("sends_launch_events can be turned off")
    func launchEventsOff() throws {
        let app = try AppDefinition.parse("id = 'a'\n[transfers]\nsends_launch_events = false", file: Self.file)
        #expect(!app.sendsLaunchEvents)
        #expect(app.eventsCommand == nil)
    }

    // MARK: - Unknown keys and syntax

    @Test("refuses unknown keys with the dotted name and line", arguments: [
        ("id = 'a'\nname = 'x'", "name", 2),
        ("id = 'a'\n[fetch]\ninterval = '15m'", "fetch.interval", 3),
        ("id = 'a'\n[notification]\npublickey = 'x'", "notification.publickey", 3),
        ("id = 'a'\n[transfers]\nevents = ['/x']", "transfers.events", 3),
        ("id = 'a'\n[background]\nx = 1", "background", 2),
    ])
    func unknownKeys(text: String, key: String, line: Int) throws {
        let e = try #require(refusal(text))
        #expect(e.key == key)
        #expect(e.line == line)
        #expect(e.problem == "unknown key")
    }

    @Test("refuses a table written as a plain value")
    func tableAsValue() throws {
        let e = try #require(refusal("id = 'a'\nfetch = ['/x']"))
        #expect(e.key == "fetch")
        #expect(e.problem == "expected a table, found an array")
    }

    @Test("a TOML error in an app file names the file and line")
    func syntaxError() throws {
        let e = try #require(refusal("id = 'a'\n[fetch]\ncommand = [\"/x\"\nminimum_interval = '1m'", file: "/apps.d/broken.toml"))
        #expect(e.file == "/apps.d/broken.toml")
        #expect(e.key == nil)
        #expect(e.line == 4)
        #expect(e.description.hasPrefix("/apps.d/broken.toml:4: "))
    }

    @Test("an absurdly long interval is refused rather than crashing the daemon")
    func hugeInterval() async {
        await #expect(processExitsWith: .success) {
            _ = try? AppDefinition.parse("id = 'a'\n[fetch]\ncommand = ['/x']\nminimum_interval = '999999999999d'", file: "/a.toml")
        }
    }
}
