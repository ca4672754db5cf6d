import DrowseCore
import Testing

@Suite("FleetStatus")
struct FleetStatusTests {
    static let full = FleetStatus(
        online: true, apps: ["news", "weather"], version: "0.1.0", lastWindow: 1_700_000_000, appCount: 2,
        failedApps: ["weather", "broken"], groups: ["eu", "beta"], time: 1_700_000_100)

    @Test("the online status keeps online and apps first and adds the fleet keys")
    func json() throws {
        let text = Self.full.json.serialized
        #expect(text == #"{"online":true,"apps":["news","weather"],"version":"0.1.0","last_window":1700000000,"app_count":2,"failed_apps":["weather","broken"],"groups":["eu","beta"],"time":1700000100,"reports":{},"updates":{}}"#)
        var none = Self.full
        none.lastWindow = nil
        #expect(try JSON.parse(none.json.serialized)["last_window"]?.isNull == true)
    }

    @Test("the last will stays {\"online\": false}")
    func offline() {
        #expect(FleetStatus.offlineJSON.serialized == #"{"online":false}"#)
        // A device's will: what a listing by group needs of a dead device.
        let will = FleetStatus.offlineJSON(apps: ["b", "a"], version: "1.2", groups: ["eu"])
        #expect(will.serialized == #"{"online":false,"apps":["b","a"],"version":"1.2","app_count":2,"groups":["eu"]}"#)
        var listing = FleetListing()
        listing.received(topic: "drowse/dead/status", payload: Array(will.serialized.utf8), prefix: "drowse")
        let dead = listing.list(group: "eu")
        #expect(dead.map(\.id) == ["dead"] && dead[0].status.online == false && dead[0].status.version == "1.2")
        #expect(listing.list(group: "us").isEmpty)
    }

    @Test("what is published parses back to the same status")
    func roundTrip() {
        #expect(FleetStatus.parse(Array(Self.full.json.serialized.utf8)) == Self.full)
        #expect(FleetStatus.parse(Array(#"{"online": false}"#.utf8)) == FleetStatus(online: false))
        // An old drowsed's status: only online and apps.
        let old = FleetStatus.parse(Array(#"{"online": true, "apps": ["a"]}"#.utf8))
        #expect(old == FleetStatus(online: true, apps: ["a"], appCount: 1))
    }

    @Test("a package's update rides the status and parses back; a report without id or known state is dropped")
    func updates() throws {
        var s = Self.full
        s.updates["drowse"] = UpdateReport(
            id: "u1", from: "1.0", to: "1.1", state: .rolledBack, reason: "drowsed.service not active",
            times: [.downloading: 10, .installing: 20, .rolledBack: 30])
        let text = s.json.serialized
        #expect(text.hasSuffix(#""updates":{"drowse":{"id":"u1","from":"1.0","to":"1.1","state":"rolled-back","reason":"drowsed.service not active","times":{"downloading":10,"installing":20,"rolled-back":30}}}}"#))
        #expect(FleetStatus.parse(Array(text.utf8)) == s)
        let odd = #"{"online":true,"updates":{"a":{"id":"x","state":"exploded"},"b":{"state":"failed"},"c":{"id":"y","state":"waiting"}}}"#
        #expect(FleetStatus.parse(Array(odd.utf8))?.updates == ["c": UpdateReport(id: "y", state: .waiting)])
        #expect(UpdateState.allCases.filter(\.isFailure) == [.rolledBack, .failed])
    }

    @Test("what is not a status is refused", arguments: ["", "[]", "{}", #"{"online": "yes"}"#, "not json"])
    func notStatus(text: String) {
        #expect(FleetStatus.parse(Array(text.utf8)) == nil)
    }

    @Test("only a change of content is a reason to republish: time alone is not")
    func differs() {
        #expect(Self.full.differs(from: nil))
        var later = Self.full
        later.time = 1_800_000_000
        #expect(!later.differs(from: Self.full))
        var window = later
        window.lastWindow = 1_700_000_500
        #expect(window.differs(from: Self.full))
        var healed = later
        healed.failedApps = []
        #expect(healed.differs(from: Self.full))
    }

    @Test("the listing: devices by id, an offline will keeps what the device said before, --group filters")
    func listing() {
        var l = FleetListing()
        let took1 = l.received(topic: "drowse/b/status", payload: Array(Self.full.json.serialized.utf8), prefix: "drowse")
        #expect(took1)
        var a = Self.full
        a.groups = ["us"]
        a.failedApps = []
        let took2 = l.received(topic: "drowse/a/status", payload: Array(a.json.serialized.utf8), prefix: "drowse")
        #expect(took2)
        let took3 = l.received(topic: "drowse/b/status", payload: Array(#"{"online":false}"#.utf8), prefix: "drowse")
        #expect(took3)
        let took4 = l.received(topic: "drowse/c/status", payload: Array(#"{"online":false}"#.utf8), prefix: "drowse")
        #expect(took4)
        let took5 = l.received(topic: "drowse/d/status", payload: Array("garbage".utf8), prefix: "drowse")
        #expect(!took5)
        let took6 = l.received(topic: "drowse/x/apps/y/notify", payload: Array(Self.full.json.serialized.utf8), prefix: "drowse")
        #expect(!took6)
        #expect(l.list(group: nil).map(\.id) == ["a", "b", "c"])
        let b = l.list(group: nil)[1]
        #expect(!b.status.online && b.status.version == "0.1.0" && b.status.groups == ["eu", "beta"])
        #expect(l.list(group: "eu").map(\.id) == ["b"])
        #expect(l.list(group: "us").map(\.id) == ["a"])
        #expect(l.list(group: "none").isEmpty)
        let obj = b.json
        for key in ["device_id", "online", "version", "last_seen", "last_window", "failed_apps", "groups", "app_count"] {
            #expect(obj[key] != nil, "\(key)")
        }
        #expect(obj["last_seen"]?.doubleValue == 1_700_000_100)
        let lines = FleetListing.lines(l.list(group: nil), now: 1_700_000_160)
        #expect(lines.count == 4)
        #expect(lines[2].hasPrefix("b ") && lines[2].contains("offline") && lines[2].contains("1m ago") && lines[2].hasSuffix("weather,broken"))
        #expect(lines[3].hasPrefix("c ") && lines[3].contains("offline"))
    }
}

@Suite("FleetListing newest wins")
struct FleetListingFreshnessTests {
    static func status(_ online: Bool, started: Double?, time: Double?, version: String = "1") -> [UInt8] {
        var s = FleetStatus(online: online, apps: ["a"], version: version, failedApps: online ? ["a"] : [], groups: ["eu"], time: time)
        s.started = started
        return Array((online ? s.json : FleetStatus.offlineJSON(apps: ["a"], version: version, groups: ["eu"], started: started)).serialized.utf8)
    }

    static func newest(_ copies: [(payload: [UInt8], retained: Bool)]) -> FleetStatus? {
        var l = FleetListing()
        for c in copies { l.received(topic: "drowse/d/status", payload: c.payload, prefix: "drowse", retained: c.retained) }
        return l.devices["d"]?.status
    }

    @Test("started rides the status and the will and parses back; old payloads still parse")
    func started() throws {
        let will = FleetStatus.offlineJSON(apps: ["a"], version: "1", groups: [], started: 1_700_000_000)
        #expect(will["started"]?.doubleValue == 1_700_000_000)
        #expect(FleetStatus.parse(Self.status(true, started: 5, time: 6))?.started == 5)
        #expect(FleetStatus.parse(Array(#"{"online":false}"#.utf8))?.started == nil)
    }

    @Test("kept copies in any order: a later run wins, the will is last in its run, then the later time")
    func order() {
        let earlyRun = Self.status(true, started: 100, time: 900, version: "old")
        let willOfEarly = Self.status(false, started: 100, time: nil, version: "old")
        let lateRun1 = Self.status(true, started: 200, time: 210, version: "new")
        let lateRun2 = Self.status(true, started: 200, time: 220, version: "new")
        let all = [earlyRun, willOfEarly, lateRun1, lateRun2]
        for perm in [all, all.reversed(), [lateRun2, earlyRun, lateRun1, willOfEarly]] {
            let s = Self.newest(perm.map { ($0, true) })
            #expect(s?.online == true && s?.time == 220 && s?.version == "new")
        }
        // The dead device: its will beats the statuses of its run, whichever node kept which.
        for perm in [[earlyRun, willOfEarly], [willOfEarly, earlyRun]] {
            let s = Self.newest(perm.map { ($0, true) })
            // What the will lacks comes from the last online status of the same run.
            #expect(s?.online == false && s?.time == 900 && s?.failedApps == ["a"])
        }
        // An old drowsed's payload (no started) is older than one that has it.
        let s = Self.newest([(Self.status(true, started: 100, time: 1), true), (Array(#"{"online":false}"#.utf8), true)])
        #expect(s?.online == true)
    }

    @Test("a live message (a roll call's answer, a will published now) beats every kept copy")
    func live() {
        let kept = Self.status(false, started: 300, time: nil)
        let answer = Self.status(true, started: 100, time: 50)
        #expect(Self.newest([(answer, false), (kept, true)])?.online == true)
        #expect(Self.newest([(kept, true), (answer, false)])?.online == true)
        // Among live ones, the later arrival.
        #expect(Self.newest([(answer, false), (Self.status(false, started: 100, time: nil), false)])?.online == false)
    }

    @Test("a session's memory: read back, it lists the same devices, and what arrives later beats it")
    func memory() throws {
        var first = FleetListing()
        let online = Self.status(true, started: 100, time: 150, version: "2")
        first.received(topic: "drowse/a/status", payload: online, prefix: "drowse", retained: false)
        first.received(topic: "drowse/a/status", payload: Self.status(false, started: 100, time: nil, version: "2"), prefix: "drowse", retained: false)
        first.received(topic: "drowse/b/status", payload: Self.status(true, started: 100, time: 160), prefix: "drowse")
        first.received(topic: "drowse/c/status", payload: Array("not a status".utf8), prefix: "drowse")
        let text = first.memory.serialized
        var again = FleetListing()
        again.remember(try JSON.parse(bytes: Array(text.utf8), maxDepth: 16), prefix: "drowse")
        #expect(again == first)
        // The dead device still shows what it said online (the memory keeps both of its statuses).
        #expect(again.devices["a"]?.status.online == false && again.devices["a"]?.status.time == 150)
        #expect(again.devices["a"]?.status.failedApps == ["a"] && again.devices["c"] == nil)
        // A kept copy older than the memory does not win; anything live does.
        again.received(topic: "drowse/b/status", payload: Self.status(true, started: 50, time: 999), prefix: "drowse")
        #expect(again.devices["b"]?.status.time == 160)
        again.received(topic: "drowse/a/status", payload: Self.status(true, started: 90, time: 10, version: "3"), prefix: "drowse", retained: false)
        #expect(again.devices["a"]?.status.online == true && again.devices["a"]?.status.version == "3")
        // Forgotten: out of the listing and its memory, until heard from again.
        again.forget("b")
        #expect(again.devices["b"] == nil && again.memory["devices"]?["b"] == nil)
        // A memory that is not one is no device at all.
        var none = FleetListing()
        none.remember(.object([("devices", .array([]))]), prefix: "drowse")
        none.remember(.object([("devices", .object([("x", .string("{}"))]))]), prefix: "drowse")
        #expect(none.devices.isEmpty)
    }
}
