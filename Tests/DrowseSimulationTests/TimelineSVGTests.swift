@testable import DrowseSimulation
import DrowseCore
import Testing

/// A minimal XML reader for the tests: checks well-formedness as far as an SVG needs (one root,
/// tags nest and match, attributes quoted and unique, only the five named entities or numeric
/// ones, no raw `<` or `&` in text or values) and returns the element tree.
struct XMLElement {
    var name: String
    var attributes: [String: String]
    var children: [XMLElement] = []
    var text = ""

    var classes: Set<String> { Set((attributes["class"] ?? "").split(separator: " ").map(String.init)) }

    /// Every element below (depth first), this one included.
    func all() -> [XMLElement] { [self] + children.flatMap { $0.all() } }
    func all(_ name: String, class cls: String? = nil) -> [XMLElement] {
        all().filter { $0.name == name && (cls == nil || $0.classes.contains(cls!)) }
    }
    func number(_ key: String) -> Double? { attributes[key].flatMap { Double($0) } }

    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    static func parse(_ text: String) throws -> XMLElement {
        let s = Array(text.unicodeScalars)
        var i = 0
        var stack: [XMLElement] = []
        var root: XMLElement?
        func fail(_ why: String) -> Malformed { Malformed(description: "at \(i): \(why)") }
        func checkEntities(_ v: String) throws {
            var rest = Substring(v)
            while let amp = rest.firstIndex(of: "&") {
                guard let semi = rest[amp...].firstIndex(of: ";") else { throw fail("bare & in \(v.prefix(40))") }
                let name = rest[rest.index(after: amp)..<semi]
                guard ["amp", "lt", "gt", "quot", "apos"].contains(name) || (name.hasPrefix("#") && name.count > 1) else { throw fail("entity &\(name);") }
                rest = rest[rest.index(after: semi)...]
            }
        }
        func isNameChar(_ c: Unicode.Scalar) -> Bool { c.properties.isAlphabetic || ("0"..."9").contains(c) || c == "-" || c == "_" || c == ":" || c == "." }
        func name() throws -> String {
            var n = ""
            while i < s.count, isNameChar(s[i]) { n.unicodeScalars.append(s[i]); i += 1 }
            guard !n.isEmpty else { throw fail("expected a name") }
            return n
        }
        func skipSpace() { while i < s.count, [" ", "\n", "\t", "\r"].contains(s[i]) { i += 1 } }
        func starts(_ p: String) -> Bool { Array(p.unicodeScalars).enumerated().allSatisfy { i + $0.offset < s.count && s[i + $0.offset] == $0.element } }
        func skip(past end: String) throws {
            while i < s.count, !starts(end) { i += 1 }
            guard i < s.count else { throw fail("unterminated \(end)") }
            i += end.unicodeScalars.count
        }
        while i < s.count {
            if starts("<?") { try skip(past: "?>"); continue }
            if starts("<!--") { try skip(past: "-->"); continue }
            if starts("</") {
                i += 2
                let n = try name()
                skipSpace()
                guard i < s.count, s[i] == ">" else { throw fail("expected > after </\(n)") }
                i += 1
                guard var e = stack.popLast(), e.name == n else { throw fail("</\(n)> does not close the open element") }
                try checkEntities(e.text)
                e.text = e.text.trimmingSpaces
                if stack.isEmpty { guard root == nil else { throw fail("two roots") }; root = e } else { stack[stack.count - 1].children.append(e) }
                continue
            }
            if s[i] == "<" {
                i += 1
                var e = XMLElement(name: try name(), attributes: [:])
                while true {
                    skipSpace()
                    guard i < s.count else { throw fail("unterminated tag") }
                    if s[i] == ">" { i += 1; stack.append(e); break }
                    if starts("/>") {
                        i += 2
                        if stack.isEmpty { guard root == nil else { throw fail("two roots") }; root = e } else { stack[stack.count - 1].children.append(e) }
                        break
                    }
                    let key = try name()
                    skipSpace()
                    guard i < s.count, s[i] == "=" else { throw fail("attribute \(key) without =") }
                    i += 1
                    skipSpace()
                    guard i < s.count, s[i] == "\"" || s[i] == "'" else { throw fail("attribute \(key) not quoted") }
                    let q = s[i]
                    i += 1
                    var v = ""
                    while i < s.count, s[i] != q {
                        guard s[i] != "<" else { throw fail("< in attribute \(key)") }
                        v.unicodeScalars.append(s[i]); i += 1
                    }
                    guard i < s.count else { throw fail("unterminated attribute \(key)") }
                    i += 1
                    try checkEntities(v)
                    guard e.attributes[key] == nil else { throw fail("attribute \(key) twice") }
                    e.attributes[key] = v
                }
                continue
            }
            if stack.isEmpty {
                guard [" ", "\n", "\t", "\r"].contains(s[i]) else { throw fail("text outside the root") }
            } else {
                stack[stack.count - 1].text.unicodeScalars.append(s[i])
            }
            i += 1
        }
        guard stack.isEmpty else { throw Malformed(description: "<\(stack.last!.name)> never closed") }
        guard let root else { throw Malformed(description: "no root element") }
        return root
    }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}

@Suite("Timeline SVG")
struct TimelineSVGTests {
    static func drawn(_ file: String, day: Int = 1, seed: UInt64? = nil) throws -> (Simulator, Simulator.Recording, XMLElement, String) {
        let s = try SimulatorTests.shipped(file)
        let sim = Simulator(s, seed: seed)
        let rec = sim.record()
        let svg = TimelineSVG.render(SimulationTimeline.drawing(sim, rec, day: day))
        return (sim, rec, try XMLElement.parse(svg), svg)
    }

    static func panel(_ root: XMLElement, _ id: String) -> XMLElement? {
        root.all("g", class: "panel").first { $0.attributes["data-panel"] == id }
    }

    @Test("the XML reader rejects what is not well-formed")
    func readerRejects() {
        for bad in ["<a><b></a></b>", "<a x=1/>", "<a>&nbsp;</a>", "<a>1 < 2</a>", "<a/><b/>", "<a x=\"1\" x=\"2\"/>", "<a>", "<a x=\"<\"/>", "<a>&</a>"] {
            #expect(throws: XMLElement.Malformed.self, "\(bad)") { try XMLElement.parse(bad) }
        }
        #expect((try? XMLElement.parse("<?xml version=\"1.0\"?><a k='v'><!-- c --><b>x &amp; y</b></a>"))?.children.first?.text == "x &amp; y")
    }

    @Test("radio periods: as many as the model's promotions, adding up to its radio-on time and energy")
    func periodsMatchUsage() {
        var g = SplitMix64(seed: 7)
        for model in [RadioModel.lte, .threeG, .wifi, .ethernet] {
            for _ in 0..<50 {
                var acts: [(start: Double, end: Double)] = []
                var t = 0.0
                for _ in 0..<Int(g.next() % 40) {
                    t += g.unit() * 30
                    acts.append((t, t + g.unit() * 8))
                }
                let u = model.usage(of: acts)
                let p = model.periods(of: acts)
                #expect(p.count == u.promotions)
                #expect(abs(p.reduce(0) { $0 + $1.radioOnSeconds } - u.radioOnSeconds) < 1e-6)
                #expect(abs(p.reduce(0) { $0 + $1.joules } - u.joules) < 1e-6)
                for q in p {
                    #expect(abs(q.promotionSeconds - model.promotionSeconds) < 1e-9)
                    #expect(q.tailSeconds >= model.tailSeconds - 1e-9)
                    #expect(q.active.allSatisfy { $0.start >= q.firstActivity && $0.end <= q.lastActivityEnd })
                }
                // Periods do not overlap in what they count: each starts after the previous tail ran out.
                for (a, b) in zip(p, p.dropFirst()) { #expect(b.firstActivity > a.end) }
            }
        }
    }

    @Test("twenty apps, one day: a radio bar per period, a mark per run and per use, the report's totals in the legend")
    func twentyApps() throws {
        let (sim, rec, root, _) = try Self.drawn("twenty-apps-lte.toml")
        #expect(root.name == "svg")
        let day = try #require(Self.panel(root, "day"))
        let from = try #require(day.number("data-from"))
        #expect(from == sim.scenario.start)
        let report = rec.report
        let strategies: [(String, [Simulator.Run], SimulationReport.Totals)] = [
            ("drowse", rec.drowse, report.drowse), ("android", rec.android, report.android), ("naive", rec.naive, report.naive),
        ]
        let lanes = day.all("g", class: "radio-lane")
        #expect(lanes.map { $0.attributes["data-lane"] } == ["drowse", "android", "naive"])
        for ((id, runs, totals), lane) in zip(strategies, lanes) {
            let bars = lane.all("rect", class: "radio")
            let periods = sim.radioPeriods(runs)
            #expect(bars.count == periods.count, "\(id)")
            #expect(Double(bars.count) == totals.promotions, "\(id)")
            // Each bar is its period: start, length, promotion and tail as the model counts them.
            for (bar, p) in zip(bars, periods) {
                #expect(abs(bar.number("data-start")! - (p.start - from)) < 0.0006)
                #expect(abs(bar.number("data-seconds")! - p.radioOnSeconds) < 0.0006)
                #expect(abs(bar.number("data-promotion-seconds")! - sim.scenario.radio.promotionSeconds) < 0.0006)
                #expect(abs(bar.number("data-tail-seconds")! - p.tailSeconds) < 0.0006)
            }
            let drawnSeconds = bars.reduce(0) { $0 + $1.number("data-seconds")! }
            #expect(abs(drawnSeconds - totals.radioOnSeconds) < 0.0005 * Double(bars.count) + 1e-6, "\(id): \(drawnSeconds) vs \(totals.radioOnSeconds)")
            let drawnJoules = bars.reduce(0) { $0 + $1.number("data-joules")! }
            #expect(abs(drawnJoules - totals.energyJoules) < 0.0005 * Double(bars.count) + 1e-6)
            // The legend's figures are the report's (as the JSON rounds them).
            #expect(lane.number("data-radio-on-seconds") == SimulationReport.Totals.round(totals.radioOnSeconds))
            #expect(lane.number("data-energy-joules") == SimulationReport.Totals.round(totals.energyJoules))
            #expect(lane.number("data-promotions") == totals.promotions)
            #expect(lane.number("data-fetches") == Double(totals.fetches))
            #expect(lane.number("data-staleness-median-seconds") == totals.stalenessMedian.map(SimulationReport.Totals.round))
            #expect(lane.number("data-staleness-p90-seconds") == totals.stalenessP90.map(SimulationReport.Totals.round))
            let legend = lane.all("text").map(\.text).joined()
            #expect(legend.contains("radio on \(TimelineSVG.n(totals.radioOnSeconds, 0)) s"), "\(legend)")
            #expect(legend.contains("\(TimelineSVG.n(totals.energyJoules, 0)) J"))
        }
        // One mark per run, in the app's lane and the strategy's row, coloured by its result.
        let appLanes = day.all("g", class: "lane")
        #expect(appLanes.map { $0.attributes["data-lane"]! } == sim.scenario.apps.map(\.id))
        for (i, lane) in appLanes.enumerated() {
            for (id, runs, _) in strategies {
                let row = try #require(lane.all("g", class: "row").first { $0.attributes["data-row"] == id })
                let marks = row.all("rect", class: "run")
                let mine = runs.filter { $0.app == i }
                #expect(marks.count == mine.count, "\(lane.attributes["data-lane"]!) \(id)")
                for (m, r) in zip(marks, mine) {
                    #expect(abs(m.number("data-start")! - (r.start - from)) < 0.0006)
                    #expect(m.classes.contains(r.offline ? "offline" : r.outcome.rawValue))
                }
            }
            #expect(lane.all("line", class: "use").count == rec.uses.filter { $0.app == i }.count)
        }
        let allRuns = day.all("rect", class: "run").count
        #expect(allRuns == rec.drowse.count + rec.android.count + rec.naive.count)
        #expect(day.all("rect", class: "failed").count == report.drowse.failed + report.android.failed + report.naive.failed)
        // The zoom draws the radio lanes again, and no runs.
        let zoom = try #require(Self.panel(root, "zoom"))
        #expect(zoom.all("g", class: "radio-lane").count == 3)
        #expect(zoom.all("rect", class: "run").isEmpty)
        #expect(!zoom.all("rect", class: "radio").isEmpty)
    }

    @Test("self-contained and printable: no scripts, links or external resources, generic fonts, a white background, dark text")
    func selfContained() throws {
        let (_, _, root, svg) = try Self.drawn("twenty-apps-lte.toml")
        for forbidden in ["<script", "href", "url(", "@import", "<image", "<foreignObject", "on" + "load="] {
            #expect(!svg.contains(forbidden), "\(forbidden)")
        }
        let style = root.all("style").map(\.text).joined()
        for family in style.split(separator: "font-family:").dropFirst() {
            let value = family.prefix { $0 != ";" && $0 != "}" }
            #expect(["sans-serif", "serif", "monospace"].contains(String(value)), "\(value)")
        }
        #expect(style.contains("text{font-family:sans-serif;fill:rgb(17,17,17)}"))
        let background = try #require(root.children.first { $0.name == "rect" })
        #expect(background.attributes["fill"] == "white" && background.attributes["width"] == root.attributes["width"])
        // The time axis is in hours: every two hours over a day.
        let ticks = try #require(Self.panel(root, "day")).all("text", class: "tick").map(\.text)
        #expect(ticks.contains("06:00") && ticks.contains("12:00") && ticks.contains("time (UTC, hours)"))
    }

    @Test("names are escaped: a scenario name with markup stays text")
    func escaping() throws {
        var s = try SimulatorTests.shipped("lunch-reader.toml")
        s.name = "a<b & \"c\" 'd'>\u{1}"
        let sim = Simulator(s)
        let svg = TimelineSVG.render(SimulationTimeline.drawing(sim, sim.record()))
        let root = try XMLElement.parse(svg)
        #expect(root.all("title").first?.text.hasPrefix("a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;: radio timeline") == true)
        #expect(!svg.contains("\u{1}"))
    }

    @Test("day N of a week: only that day's runs, and the day's own radio-on time beside the week's totals")
    func dayOfWeek() throws {
        let (sim, rec, root, _) = try Self.drawn("twenty-apps-lte-week.toml", day: 3)
        let day = try #require(Self.panel(root, "day"))
        let from = sim.scenario.start + 2 * 86400
        #expect(day.number("data-from") == from && day.number("data-to") == from + 86400)
        let inDay = rec.drowse.filter { $0.end >= from && $0.start <= from + 86400 }
        let drowseRow = day.all("g", class: "row").filter { $0.attributes["data-row"] == "drowse" }
        #expect(drowseRow.reduce(0) { $0 + $1.all("rect", class: "run").count } == inDay.count)
        let lane = try #require(day.all("g", class: "radio-lane").first)
        #expect(lane.number("data-radio-on-seconds") == SimulationReport.Totals.round(rec.report.drowse.radioOnSeconds))
        let dayOn = try #require(lane.number("data-day-radio-on-seconds"))
        let bars = lane.all("rect", class: "radio").reduce(0) { $0 + $1.number("data-seconds")! }
        // The bars at the day's edges may reach past it; the day's figure counts only what is inside.
        #expect(dayOn <= bars + 0.001 && dayOn > bars - 60)
        #expect(dayOn < rec.report.drowse.radioOnSeconds / 3)
    }
}

@Suite("Agent timeline")
struct AgentTimelineTests {
    static let t0 = 1_767_600_000.0

    static func history() -> AgentHistory {
        var h = AgentHistory()
        h.runs = [
            .init(app: "news", event: "fetch", trigger: "scheduled", result: "new-data", ending: "exit status 0", start: t0 + 10, end: t0 + 12),
            .init(app: "mail", event: "fetch", trigger: "scheduled", result: "failed", ending: "killed at its deadline", start: t0 + 10.2, end: t0 + 40),
            .init(app: "news", event: "notification", trigger: "notification", result: "no-data", ending: "exit status 100", start: t0 + 300, end: t0 + 301),
            .init(app: "news", event: "fetch", trigger: "manual", result: "failed", ending: "exit status 1", start: t0 + 900, end: t0 + 901),
            .init(app: "resident", event: "resident", trigger: nil, result: "failed", ending: "exit status 1", start: t0, end: t0 + 3000),
        ]
        h.notifications = [.init(app: "news", receivedAt: t0 + 299.5, handledAt: t0 + 301, state: "no-data")]
        h.transfers = [
            .init(id: "t1", app: "dl", kind: "download", state: "completed", createdAt: t0 + 2000, finishedAt: t0 + 2030, bytes: 1 << 20, retries: 1),
            .init(id: "t2", app: "dl", kind: "download", state: "waiting", createdAt: t0 + 2100, finishedAt: nil, bytes: 0, retries: 0),
        ]
        h.uses = [("news", t0 + 1000)]
        return h
    }

    @Test("the radio model gets every handler run but a resident process, each notification's arrival and each transfer that ran")
    func activities() {
        let a = AgentTimeline.activities(Self.history(), to: Self.t0 + 3600)
        #expect(a.count == 4 + 1 + 1)
        #expect(!a.contains { $0.end == Self.t0 + 3000 })
        let periods = RadioModel.lte.periods(of: a)
        // 10-40 (news and mail together), 299.5-301, 900-901, 2000-2030: four wakes.
        #expect(periods.count == 4)
    }

    @Test("a drawing of a recorded hour: a mark per run, notification and transfer, windows read off the runs, radio-on inside the picture")
    func drawing() throws {
        let h = Self.history()
        let from = Self.t0, to = Self.t0 + 3600
        let svg = TimelineSVG.render(AgentTimeline.drawing(h, from: from, to: to, radio: .lte, device: "board<1>"))
        let root = try XMLElement.parse(svg)
        let day = try #require(TimelineSVGTests.panel(root, "day"))
        let radio = try #require(day.all("g", class: "radio-lane").first)
        let bars = radio.all("rect", class: "radio")
        #expect(bars.count == 4 && radio.number("data-promotions") == 4)
        let on = bars.reduce(0) { $0 + $1.number("data-seconds")! }
        #expect(abs(radio.number("data-radio-on-seconds")! - on) < 0.01)
        #expect(abs(on - RadioModel.lte.usage(of: AgentTimeline.activities(h, to: to)).radioOnSeconds) < 0.002)
        #expect(day.all("rect", class: "run").count == 4)
        #expect(day.all("rect", class: "timeout").count == 1)
        #expect(day.all("rect", class: "notification").count == 1)
        #expect(day.all("rect", class: "transfer").count == 2)
        // The two scheduled fetches that started together are one window.
        let windows = day.all("rect", class: "window")
        #expect(windows.count == 1)
        #expect(windows.first?.children.first?.text.contains("news, mail") == true)
        #expect(day.all("line", class: "use").count == 1)
        #expect(root.all("title").first?.text.hasPrefix("board&lt;1&gt;") == true)
        let lanes = day.all("g", class: "lane").map { $0.attributes["data-lane"]! }
        #expect(lanes == ["windows", "dl", "mail", "news"])
    }

    @Test("a scheduler trace adds its windows and the conditions, those in force at the start included")
    func trace() throws {
        let t = Self.t0
        let lines = [
            #"{"config":{}}"#,
            #"{"event":{"type":"started","now":\#(t - 100),"conditions":{"online":true,"low_battery":false,"radio_tail":11.576},"apps":[]},"actions":[]}"#,
            #"{"event":{"type":"timer_fired","now":\#(t + 10)},"actions":[{"type":"start_fetch","apps":["news","mail"],"trigger":"scheduled"}]}"#,
            #"{"event":{"type":"conditions_changed","now":\#(t + 500),"conditions":{"online":false,"low_battery":true,"radio_tail":11.576}},"actions":[]}"#,
            #"{"event":{"type":"fetch_requested","app":"news","now":\#(t + 900)},"actions":[{"type":"start_fetch","apps":["news"],"trigger":"manual"}]}"#,
            #"{"event":{"type":"timer_fi"#,
        ]
        var h = AgentHistory()
        try h.addTrace(lines.joined(separator: "\n"), from: t)
        #expect(h.windows == [.init(at: t + 10, apps: ["news", "mail"])])
        #expect(h.conditions.map(\.at) == [t, t + 500])
        #expect(h.conditions.map(\.online) == [true, false])
        let svg = TimelineSVG.render(AgentTimeline.drawing(h, from: t, to: t + 3600, radio: .wifi, device: "b"))
        let states = try #require(TimelineSVGTests.panel(try XMLElement.parse(svg), "day")).all("rect", class: "state")
        #expect(states.map { $0.children.first?.text } == ["online", "offline, low battery"])
    }
}
