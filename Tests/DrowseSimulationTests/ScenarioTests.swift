@testable import DrowseSimulation
import DrowseCore
import DrowseSystem
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Files of this checkout, found from this source file's path.
enum RepoFile {
    static func read(_ relative: String, from file: String = #filePath) throws -> String {
        // .../Tests/DrowseSimulationTests/X.swift → the checkout's root.
        var parts = file.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)
        return try FileSystem.readText(parts.joined(separator: "/") + "/" + relative, limit: 4 << 20)
    }
}

@Suite("Scenario")
struct ScenarioTests {
    func parseError(_ text: String, file: String = "s.toml") -> ConfigError? {
        do {
            _ = try Scenario.parse(text, file: file)
            return nil
        } catch {
            return error
        }
    }

    @Test("parses every key, with the app file's interval words")
    func everyKey() throws {
        let s = try Scenario.parse("""
            name = "full"
            duration = "2d"
            seed = 99
            radio = "3g"
            start = 1767657600
            warmup = "1d"

            [scheduler]
            minimum_interval = "20m"
            handler_deadline = "10s"
            daily_budget = "5m"
            tolerance = "20%"

            [conditions]
            battery_low_percent = 30

            [[app]]
            id = "weather"
            interval = "15m"
            duration = "1s-4s"
            results = ["new", "no", "failed", "timeout"]
            updates = "30m"
            uses = ["07:30", "18:00:30"]
            jitter = "5m"
            use_days = ["weekdays", "sun"]

            [[app]]
            id = "eager"
            interval = "minimum"

            [[app]]
            id = "quiet"
            interval = "never"
            uses = ["12:00"]
            use_days = ["saturday"]

            [[network]]
            at = "6h"
            kind = "none"

            [[network]]
            at = "8h"
            kind = "cellular"

            [[power]]
            at = "12h"
            source = "battery"
            battery = 15
            """, file: "full.toml")
        #expect(s.name == "full")
        #expect(s.duration == 2 * 86400)
        #expect(s.seed == 99)
        #expect(s.radio == .threeG)
        #expect(s.start == 1_767_657_600)
        #expect(s.warmup == 86400)
        #expect(s.minimumInterval == 1200)
        #expect(s.handlerDeadline == 10)
        #expect(s.dailyBudget == 300)
        #expect(s.tolerance == 0.2)
        #expect(Simulator(s).policy.toleranceFraction == 0.2 && Simulator(s).policy.dailyBudget == 300)
        #expect(s.batteryLowPercent == 30)
        #expect(s.apps.map(\.id) == ["weather", "eager", "quiet"])
        let w = s.apps[0]
        #expect(w.interval == .every(.seconds(900)))
        #expect(w.duration == 1...4)
        #expect(w.results == [.new, .no, .failed, .timeout])
        let expectedUses: [Double] = [27000, 64830]
        #expect(w.uses == expectedUses)
        #expect(w.jitter == 300)
        #expect(w.updates == 1800)
        #expect(s.apps[1].updates == nil)
        #expect(w.useDays == [0, 1, 2, 3, 4, 6])
        #expect(s.apps[1].interval == .minimum)
        #expect(s.intervalSeconds(s.apps[1]) == 1200)
        #expect(s.apps[2].interval == .never)
        #expect(s.intervalSeconds(s.apps[2]) == nil)
        #expect(s.apps[2].useDays == [5])
        let expectedNetwork: [Scenario.NetworkChange] = [.init(at: 21600, kind: .none), .init(at: 28800, kind: .cellular)]
        #expect(s.network == expectedNetwork)
        #expect(s.power == [Scenario.PowerChange(at: 43200, source: .battery, battery: 15)])
    }

    @Test("defaults: seed 1, LTE, a Monday start, 2 s handlers with new data, every day, named after the file")
    func defaults() throws {
        let s = try Scenario.parse("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"1h\"\n", file: "/x/y/my-case.toml")
        #expect(s.name == "my-case")
        #expect(s.seed == 1)
        #expect(s.radio == .lte)
        #expect(s.start == Scenario.defaultStart)
        // 2026-01-05 was a Monday: 1970-01-01 (day 0) was a Thursday.
        #expect((Int(s.start / 86400) + 3) % 7 == 0)
        #expect(s.warmup == 0)
        #expect(s.minimumInterval == 600)
        #expect(s.handlerDeadline == 30)
        #expect(s.dailyBudget == 600)
        #expect(s.tolerance == nil)
        #expect(Simulator(s).policy.toleranceFraction == FetchPlanner().toleranceFraction)
        #expect(s.batteryLowPercent == 20)
        #expect(s.apps[0].duration == 2...2)
        #expect(s.apps[0].results == [.new])
        #expect(s.apps[0].uses.isEmpty)
        #expect(s.apps[0].useDays == Set(0..<7))
        #expect(s.network.isEmpty && s.power.isEmpty)
        #expect(s.initialNetwork == .cellular)
    }

    @Test("the radio decides the network before the first change")
    func initialNetwork() throws {
        for (radio, kind) in [("lte", Conditions.Network.cellular), ("3g", .cellular), ("wifi", .wifi), ("ethernet", .ethernet)] {
            let s = try Scenario.parse("duration = \"1h\"\nradio = \"\(radio)\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"", file: "s.toml")
            #expect(s.initialNetwork == kind)
        }
    }

    @Test("timeline entries may come in any order; they are kept sorted")
    func timelineSorted() throws {
        let s = try Scenario.parse("""
            duration = "1d"
            [[app]]
            id = "a"
            interval = "5m"
            [[network]]
            at = "8h"
            kind = "wifi"
            [[network]]
            at = "2h"
            kind = "none"
            [[power]]
            at = "3h"
            source = "ac"
            [[power]]
            at = "1h"
            source = "battery"
            battery = 50
            """, file: "s.toml")
        #expect(s.network.map(\.at) == [7200, 28800])
        #expect(s.power.map(\.at) == [3600, 10800])
    }

    @Test("errors name the file, the key inside its [[app]] and the line", arguments: [
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[app]]\nid = \"b\"\ninterval = \"often\"",
         "s.toml:7: key 'app[2].interval': 'often' is not \"minimum\", \"never\" or a duration like \"15m\""),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n\n[[app]]\ninterval = \"5m\"",
         "s.toml:6: key 'app[2].id': missing"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\n",
         "s.toml:2: key 'app[1].interval': missing (a duration like \"15m\", \"minimum\" or \"never\")"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nintervall = \"6m\"",
         "s.toml:5: key 'app[1].intervall': unknown key"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nduration = \"4s-1s\"",
         "s.toml:5: key 'app[1].duration': the range '4s-1s' runs backwards"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nduration = \"1s-2s-3s\"",
         "s.toml:5: key 'app[1].duration': '1s-2s-3s' is not a duration (\"2s\") or a range (\"1s-4s\")"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nresults = [\"new\", \"yes\"]",
         "s.toml:5: key 'app[1].results': 'yes' is not one of new, no, failed, timeout"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nresults = []",
         "s.toml:5: key 'app[1].results': empty: give at least one of new, no, failed, timeout"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nuses = [\"24:00\"]",
         "s.toml:5: key 'app[1].uses': '24:00' is not a time of day like \"07:30\""),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\nuse_days = [\"someday\"]",
         "s.toml:5: key 'app[1].use_days': 'someday' is not a day (mon … sun, weekdays, weekend)"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[app]]\nid = \"a\"\ninterval = \"1h\"",
         "s.toml:6: key 'app[2].id': 'a' is used by an earlier app"),
        ("duration = \"1d\"\n[[app]]\nid = \"a b\"\ninterval = \"5m\"",
         "s.toml:3: key 'app[1].id': 'a b' may hold only letters, digits, '-', '_' and '.'"),
        ("duration = \"1d\"\n[app]\nid = \"a\"\ninterval = \"5m\"",
         "s.toml:2: key 'app': expected [[app]] tables, found a table (write [[app]], with double brackets, once per entry)"),
        ("duration = \"1d\"\n", "s.toml: key 'app': no [[app]] tables: a scenario needs at least one app"),
        ("[[app]]\nid = \"a\"\ninterval = \"5m\"", "s.toml: key 'duration': missing (how much time to simulate, e.g. \"1d\")"),
        ("duration = 86400\n[[app]]\nid = \"a\"\ninterval = \"5m\"", "s.toml:1: key 'duration': expected a string, found an integer"),
        ("duration = \"1d\"\nradio = \"5g\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"",
         "s.toml:2: key 'radio': '5g' is not one of lte, 3g, wifi, ethernet"),
        ("duration = \"1d\"\nseeds = 4\n[[app]]\nid = \"a\"\ninterval = \"5m\"", "s.toml:2: key 'seeds': unknown key"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[network]]\nat = \"2d\"\nkind = \"none\"",
         "s.toml:6: key 'network[1].at': 2d is past the end of the scenario"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[network]]\nat = \"2h\"\nkind = \"lte\"",
         "s.toml:7: key 'network[1].kind': 'lte' is not one of none, ethernet, wifi, cellular"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[network]]\nkind = \"none\"",
         "s.toml:5: key 'network[1].at': missing (an offset from the start, e.g. \"6h\")"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[power]]\nat = \"1h\"\nsource = \"battery\"",
         "s.toml:5: key 'power[1].battery': missing: on battery power, say how full it is (0-100)"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[power]]\nat = \"1h\"\nsource = \"solar\"",
         "s.toml:7: key 'power[1].source': 'solar' is not one of ac, battery"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[power]]\nat = \"1h\"\nsource = \"battery\"\nbattery = 150",
         "s.toml:8: key 'power[1].battery': must be between 0 and 100, found 150"),
        ("duration = \"1d\"\n[scheduler]\nhandler_deadline = \"0s\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"",
         "s.toml:3: key 'scheduler.handler_deadline': must be at least 1s"),
        ("duration = \"1d\"\n[scheduler]\ntolerance = \"150%\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"",
         "s.toml:3: key 'scheduler.tolerance': '150%' is not a percentage from 0% to 100% (e.g. \"50%\")"),
        ("duration = \"1d\"\n[[app]]\nid = \"a\"\ninterval = \"5m\"\n[[app]]\nid = 'x\n",
         "s.toml:6: unterminated string"),
    ])
    func errors(text: String, message: String) {
        #expect(parseError(text)?.description == message)
    }

    @Test("times of day: HH:MM and HH:MM:SS, nothing else")
    func timesOfDay() {
        #expect(Scenario.timeOfDay("00:00") == 0.0)
        #expect(Scenario.timeOfDay("7:05") == 25500.0)
        #expect(Scenario.timeOfDay("23:59:59") == 86399.0)
        for bad in ["24:00", "12:60", "12", "12:00:60", "+1:00", "12:0a", "", ":", "12:00:00:00", "-1:30"] {
            #expect(Scenario.timeOfDay(bad) == nil, "\(bad)")
        }
    }

    @Test("the shipped scenarios parse", arguments: ["twenty-apps-lte.toml", "lunch-reader.toml", "offline-battery.toml"])
    func shipped(name: String) throws {
        let path = "deploy/scenarios/" + name
        let s = try Scenario.parse(try RepoFile.read(path), file: path)
        #expect(!s.apps.isEmpty)
    }

    @Test("the goal (a) scenario has 20 apps with intervals from 5 min to 24 h and 1-4 s handlers")
    func twentyAppsShape() throws {
        let s = try Scenario.parse(try RepoFile.read("deploy/scenarios/twenty-apps-lte.toml"), file: "twenty-apps-lte.toml")
        let intervals = s.apps.compactMap { s.intervalSeconds($0) }
        #expect(s.apps.count == 20 && intervals.count == 20)
        #expect(intervals.min() == 300 && intervals.max() == 86400)
        #expect(s.apps.allSatisfy { $0.duration.lowerBound >= 1 && $0.duration.upperBound <= 4 })
        #expect(s.radio == .lte && s.duration == 86400)
        #expect(Set(s.apps.flatMap(\.results)).count > 1)
    }
}
