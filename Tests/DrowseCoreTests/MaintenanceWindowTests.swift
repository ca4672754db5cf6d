import DrowseCore
import Testing

@Suite("Maintenance window")
struct MaintenanceWindowTests {
    func window(_ texts: [String]) throws -> MaintenanceWindow { try MaintenanceWindow.parse(texts).get() }

    @Test("a range holds its start, not its end; one over midnight wraps; none is any time")
    func open() throws {
        let w = try window(["02:00-04:00", "23:30-00:15"])
        #expect(!w.isOpen(atMinute: 119) && w.isOpen(atMinute: 120) && w.isOpen(atMinute: 239) && !w.isOpen(atMinute: 240))
        #expect(w.isOpen(atMinute: 23 * 60 + 30) && w.isOpen(atMinute: 0) && w.isOpen(atMinute: 14) && !w.isOpen(atMinute: 15))
        #expect(!w.isOpen(atMinute: 12 * 60))
        #expect(MaintenanceWindow.always.isOpen(atMinute: 777))
        #expect(try window(["22:00-24:00"]).isOpen(atMinute: 1439) && !(try window(["22:00-24:00"]).isOpen(atMinute: 0)))
        #expect(w.calendarEvents == ["*-*-* 02:00:00", "*-*-* 23:30:00"])
        #expect(w.description == "02:00-04:00, 23:30-00:15")
    }

    @Test("the deadline overrides a closed window once it has passed on the wall clock")
    func deadline() throws {
        let w = try window(["02:00-04:00"])
        #expect(!w.allowsInstall(atMinute: 600, now: 1000, installBy: nil))
        #expect(!w.allowsInstall(atMinute: 600, now: 1000, installBy: 1001))
        #expect(w.allowsInstall(atMinute: 600, now: 1001, installBy: 1001))
        #expect(w.allowsInstall(atMinute: 150, now: 1000, installBy: 5000))
    }

    @Test("what is not a range is refused with the text", arguments: [
        "2:00-04:00", "02:00", "02:00-04:00-05:00", "25:00-01:00", "02:60-03:00", "24:01-01:00", "02:00-02:00", "aa:bb-cc:dd", "٠٢:00-04:00",
    ])
    func refused(text: String) {
        guard case .failure(let e) = MaintenanceWindow.parse([text]) else {
            Issue.record("\(text) parsed")
            return
        }
        #expect(e.text == text)
    }

    @Test("[updates] in drowse.toml: the window and the check's defaults; a bad one names its key")
    func config() throws {
        let c = try MainConfig.parse("[updates]\nwindow = [\"02:00-04:00\"]\nhealth_for = \"10s\"\ncheck_within = \"2m\"\n", file: "/etc/drowse/drowse.toml", machineID: "m")
        #expect(c.updates.window == (try window(["02:00-04:00"])) && c.updates.healthFor == .seconds(10) && c.updates.checkWithin == .seconds(120))
        #expect(try MainConfig.parse("", file: "/x.toml", machineID: "m").updates == MainConfig.UpdatesConfig())
        for (text, key) in [("window = [\"2-4\"]", "window"), ("check_within = \"10s\"\nhealth_for = \"20s\"", "check_within"), ("when = 1", "when")] {
            #expect {
                _ = try MainConfig.parse("[updates]\n" + text + "\n", file: "/x.toml", machineID: "m")
            } throws: { e in "\(e)".contains(key) }
        }
    }
}
