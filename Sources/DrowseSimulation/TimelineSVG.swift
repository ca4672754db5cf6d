import DrowseCore

/// A timeline of radio use and what caused it, as a self-contained SVG (no scripts, no external
/// fonts or images, generic font families only; light background, dark text, so that it prints).
/// Pure: a `Drawing` in, SVG text out. `drowse simulate --svg` draws a simulated day with it
/// (`SimulationTimeline`), `drowse timeline --svg` what a real agent recorded.
///
/// Every drawn thing carries its data as `data-*` attributes (exact seconds, the totals), so a
/// test can check the picture against the figures it was drawn from: one `rect class="radio"`
/// per radio-on period, one `rect class="run …"` per handler run, one `line class="use"` per use.
package enum TimelineSVG {
    /// One lane of radio-on periods (a strategy, or the model's reading of a real agent).
    package struct RadioLane: Sendable {
        package var id: String
        package var name: String
        package var periods: [RadioModel.Period]
        /// The figures printed under the lane, each also a `data-KEY` attribute of the lane.
        package var figures: [Figure]
    }

    package struct Figure: Sendable {
        /// The attribute name after `data-`, e.g. `radio-on-seconds`.
        package var key: String
        /// Exact value (written with millisecond precision); nil: none (e.g. no uses).
        package var value: Double?
        /// What the legend prints.
        package var text: String
    }

    /// One thing that happened over a stretch of time: a run, a transfer, a window, a state.
    package struct Mark: Sendable {
        package var start: Double
        package var end: Double
        /// The CSS class, which picks the colour: `new`, `no`, `failed`, `timeout`, `offline`,
        /// `window`, `notification`, `transfer`, `state`.
        package var kind: String
        /// The tooltip, and for `state` marks the label drawn inside.
        package var title: String
        /// `run` for handler runs (what tests count), or another element class.
        package var role: String = "run"
    }

    /// A row of marks inside a lane (a strategy's runs of one app, an agent's notifications).
    package struct Row: Sendable {
        package var id: String
        package var name: String
        package var marks: [Mark]
    }

    /// A lane per app (or per kind of event): rows, and instants drawn across the whole lane
    /// (the app's data being used).
    package struct Lane: Sendable {
        package var id: String
        package var name: String
        package var rows: [Row]
        package var uses: [Double] = []
    }

    package struct Drawing: Sendable {
        package var title: String
        package var subtitle: String
        /// Unix seconds: the time axis.
        package var from: Double
        package var to: Double
        package var radioLanes: [RadioLane]
        package var lanes: [Lane]
        /// Lines of small print at the bottom.
        package var notes: [String] = []
        /// A stretch drawn again below, radio lanes only, wide enough to see promotions and tails.
        package var zoom: (from: Double, to: Double)? = nil
    }

    // MARK: - Layout

    static let width = 1200.0
    static let plotX = 200.0
    static let plotWidth = 980.0
    static let radioLaneHeight = 26.0
    static let figureLineHeight = 14.0
    static let rowHeight = 7.0
    /// A period or run narrower than this is drawn this wide, so that it shows (the `data-*`
    /// attributes keep the exact times).
    static let minimumWidth = 1.2

    static let style = """
        text{font-family:sans-serif;fill:rgb(17,17,17)}
        .title{font-size:16px;font-weight:bold}
        .sub,.fig,.note{font-size:11px;fill:rgb(51,51,51)}
        .lane{font-size:11px}
        .row{font-size:8px;fill:rgb(85,85,85)}
        .tick{font-size:10px;fill:rgb(51,51,51)}
        .grid{stroke:rgb(221,221,221);stroke-width:1}
        .axis{stroke:rgb(51,51,51);stroke-width:1}
        .band{fill:rgb(244,246,248)}
        .radio{fill:rgb(242,178,122)}
        .promotion{fill:rgb(123,45,142)}
        .active{fill:rgb(181,71,11)}
        .new{fill:rgb(46,125,50)}
        .no{fill:rgb(158,158,158)}
        .failed{fill:rgb(198,40,40)}
        .timeout{fill:rgb(106,27,154)}
        .offline{fill:none;stroke:rgb(198,40,40);stroke-width:0.8}
        .window{fill:rgb(21,101,192)}
        .notification{fill:rgb(239,108,0)}
        .transfer{fill:rgb(0,131,143)}
        .state{fill:rgb(232,234,246);stroke:rgb(159,168,218);stroke-width:0.5}
        .use{stroke:rgb(13,71,161);stroke-width:1.2}
        """

    /// The SVG text for a drawing.
    package static func render(_ d: Drawing) -> String {
        var body: [String] = []
        var y = 30.0
        body.append(#"<text class="title" x="12" y="\#(n(y))">\#(escape(d.title))</text>"#)
        y += 18
        body.append(#"<text class="sub" x="12" y="\#(n(y))">\#(escape(d.subtitle))</text>"#)
        y += 16
        let day = panel(d, id: "day", from: d.from, to: d.to, top: y, events: true)
        body += day.svg
        var bottom = day.bottom
        if let z = d.zoom {
            bottom += 22
            body.append(#"<text class="sub" x="12" y="\#(n(bottom))">Zoom on \#(clock(z.from))–\#(clock(z.to)): each radio-on period's promotion, data and tail</text>"#)
            let zoom = panel(d, id: "zoom", from: z.from, to: z.to, top: bottom + 10, events: false)
            body += zoom.svg
            bottom = zoom.bottom
        }
        var key: [String] = []
        var ky = bottom + 18
        let used = Set(d.lanes.flatMap { $0.rows.flatMap { $0.marks.map(\.kind) } })
        let swatches: [(String, String)] = [
            ("promotion", "radio promotion"), ("active", "radio moving data"), ("radio", "radio tail (on, idle)"),
            ("new", "run: new data"), ("no", "run: no new data"), ("failed", "run: failed"), ("timeout", "run: killed at deadline"),
            ("offline", "timer fired offline (no radio)"), ("window", "window"), ("notification", "notification"), ("transfer", "transfer"),
        ].filter { ["promotion", "active", "radio", "new", "no", "failed"].contains($0.0) || used.contains($0.0) }
        var kx = 12.0
        for (cls, label) in swatches {
            let w = Double(label.count) * 6.5 + 26
            if kx + w > width - 12 { kx = 12; ky += 16 }
            key.append(#"<rect class="\#(cls)" x="\#(n(kx))" y="\#(n(ky - 9))" width="12" height="10"/>"#)
            key.append(#"<text class="note" x="\#(n(kx + 16))" y="\#(n(ky))">\#(escape(label))</text>"#)
            kx += w
        }
        if kx + 100 > width - 12 { kx = 12; ky += 16 }
        key.append(#"<line class="use" x1="\#(n(kx + 6))" x2="\#(n(kx + 6))" y1="\#(n(ky - 10))" y2="\#(n(ky + 1))"/>"#)
        key.append(#"<text class="note" x="\#(n(kx + 16))" y="\#(n(ky))">data used</text>"#)
        ky += 6
        for note in d.notes {
            ky += 14
            key.append(#"<text class="note" x="12" y="\#(n(ky))">\#(escape(note))</text>"#)
        }
        let height = ky + 14

        var out = [
            #"<?xml version="1.0" encoding="UTF-8"?>"#,
            #"<svg xmlns="http://www.w3.org/2000/svg" width="\#(n(width))" height="\#(n(height))" viewBox="0 0 \#(n(width)) \#(n(height))" "#
                + #"data-from="\#(n(d.from, 3))" data-to="\#(n(d.to, 3))">"#,
            "<title>\(escape(d.title))</title>",
            "<style>\(style.split(separator: "\n").joined())</style>",
            #"<rect x="0" y="0" width="\#(n(width))" height="\#(n(height))" fill="white"/>"#,
        ]
        out += body + key
        out.append("</svg>")
        return out.joined(separator: "\n") + "\n"
    }

    /// One panel: a time axis from `from` to `to`, the radio lanes and (if `events`) the event
    /// lanes, every element inside `<g class="panel" data-panel="ID">`. Times in `data-*`
    /// attributes are seconds after the panel's `data-from` (Unix seconds).
    static func panel(_ d: Drawing, id: String, from: Double, to: Double, top y: Double, events: Bool) -> (svg: [String], bottom: Double) {
        let span = max(to - from, 1)
        func x(_ t: Double) -> Double { plotX + (min(max(t, from), to) - from) / span * plotWidth }
        func barWidth(_ a: Double, _ b: Double) -> Double { max(x(b) - x(a), minimumWidth) }
        func visible(_ a: Double, _ b: Double) -> Bool { b >= from && a <= to }
        func rel(_ t: Double) -> String { n(t - from, 3) }
        let axisTop = y + 14
        var lanesSVG: [String] = []
        var yy = axisTop + 6
        for lane in d.radioLanes {
            var attrs = #"class="radio-lane" data-lane="\#(escape(lane.id))" data-periods="\#(lane.periods.filter { visible($0.start, $0.end) }.count)""#
            for f in lane.figures { attrs += #" data-\#(f.key)="\#(f.value.map { n($0, 3) } ?? "")""# }
            lanesSVG.append("<g \(attrs)>")
            lanesSVG.append(#"<rect class="band" x="\#(n(plotX))" y="\#(n(yy))" width="\#(n(plotWidth))" height="\#(n(radioLaneHeight))"/>"#)
            lanesSVG.append(#"<text class="lane" x="12" y="\#(n(yy + radioLaneHeight / 2 + 4))">\#(escape(lane.name))</text>"#)
            for p in lane.periods where visible(p.start, p.end) {
                let tip = "\(clock(p.start)) on \(n(p.radioOnSeconds, 1)) s, data \(n(p.activeSeconds, 1)) s, \(n(p.joules, 1)) J"
                lanesSVG.append(#"<rect class="radio" x="\#(n(x(p.start), 1))" y="\#(n(yy + 2))" width="\#(n(barWidth(p.start, p.end), 1))" height="\#(n(radioLaneHeight - 4))" "#
                    + #"data-start="\#(rel(p.start))" data-seconds="\#(n(p.radioOnSeconds, 3))" "#
                    + #"data-promotion-seconds="\#(n(p.promotionSeconds, 3))" data-tail-seconds="\#(n(p.tailSeconds, 3))" data-joules="\#(n(p.joules, 3))"><title>\#(escape(tip))</title></rect>"#)
                for a in p.active where a.end > a.start && visible(a.start, a.end) {
                    lanesSVG.append(#"<rect class="active" x="\#(n(x(a.start), 1))" y="\#(n(yy + 6))" width="\#(n(max(x(a.end) - x(a.start), 0.4), 1))" height="\#(n(radioLaneHeight - 12))"/>"#)
                }
                lanesSVG.append(#"<rect class="promotion" x="\#(n(x(p.start), 1))" y="\#(n(yy + 2))" width="\#(n(max(x(p.firstActivity) - x(p.start), 0.4), 1))" height="\#(n(radioLaneHeight - 4))"/>"#)
            }
            yy += radioLaneHeight + 2
            if events {
                lanesSVG.append(#"<text class="fig" x="\#(n(plotX))" y="\#(n(yy + 9))">\#(escape(lane.figures.map(\.text).joined(separator: "  ·  ")))</text>"#)
                yy += figureLineHeight + 4
            }
            lanesSVG.append("</g>")
        }
        yy += 4
        for (k, lane) in d.lanes.enumerated() where events {
            let h = max(Double(lane.rows.count) * rowHeight + 4, 15)
            lanesSVG.append(#"<g class="lane" data-lane="\#(escape(lane.id))">"#)
            if k % 2 == 0 {
                lanesSVG.append(#"<rect class="band" x="\#(n(plotX))" y="\#(n(yy))" width="\#(n(plotWidth))" height="\#(n(h))"/>"#)
            }
            lanesSVG.append(#"<text class="lane" x="12" y="\#(n(yy + h / 2 + 4))">\#(escape(lane.name))</text>"#)
            for (r, row) in lane.rows.enumerated() {
                let ry = yy + 2 + Double(r) * rowHeight
                if lane.rows.count > 1 {
                    lanesSVG.append(#"<text class="row" x="\#(n(plotX - 3))" y="\#(n(ry + rowHeight - 1))" text-anchor="end">\#(escape(row.name))</text>"#)
                }
                lanesSVG.append(#"<g class="row" data-row="\#(escape(row.id))">"#)
                for m in row.marks where visible(m.start, m.end) {
                    lanesSVG.append(#"<rect class="\#(escape(m.role)) \#(escape(m.kind))" x="\#(n(x(m.start), 1))" y="\#(n(ry + 0.5))" width="\#(n(barWidth(m.start, m.end), 1))" "#
                        + #"height="\#(n(rowHeight - 1.5))" data-start="\#(rel(m.start))"><title>\#(escape(m.title))</title></rect>"#)
                    if m.kind == "state", x(m.end) - x(m.start) > 40 {
                        lanesSVG.append(#"<text class="row" x="\#(n(x(m.start) + 2))" y="\#(n(ry + rowHeight - 1.5))">\#(escape(m.title))</text>"#)
                    }
                }
                lanesSVG.append("</g>")
            }
            for u in lane.uses where visible(u, u) {
                lanesSVG.append(#"<line class="use" x1="\#(n(x(u), 1))" x2="\#(n(x(u), 1))" y1="\#(n(yy))" y2="\#(n(yy + h))" data-at="\#(rel(u))"><title>used at \#(clock(u))</title></line>"#)
            }
            lanesSVG.append("</g>")
            yy += h + 1
        }
        let axisBottom = yy + 4

        // The time axis: ticks at round steps, labels in hours (UTC).
        let steps: [Double] = [10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172_800, 604_800]
        let step = steps.first { span / $0 <= 24 } ?? 604_800
        let labelEvery = span / step > 12 ? 2 : 1
        var axis: [String] = []
        axis.append(#"<line class="axis" x1="\#(n(plotX))" x2="\#(n(plotX + plotWidth))" y1="\#(n(axisTop))" y2="\#(n(axisTop))"/>"#)
        var t = (from / step).rounded(.up) * step
        while t <= to + 0.001 {
            let tx = x(t)
            axis.append(#"<line class="grid" x1="\#(n(tx, 1))" x2="\#(n(tx, 1))" y1="\#(n(axisTop))" y2="\#(n(axisBottom))"/>"#)
            if Int((t / step).rounded()) % labelEvery == 0 {
                axis.append(#"<text class="tick" x="\#(n(tx, 1))" y="\#(n(axisTop - 4))" text-anchor="middle">\#(clock(t, seconds: step < 60))</text>"#)
            }
            t += step
        }
        axis.append(#"<text class="tick" x="12" y="\#(n(axisTop - 4))">time (UTC, hours)</text>"#)
        return ([#"<g class="panel" data-panel="\#(id)" data-from="\#(n(from, 3))" data-to="\#(n(to, 3))">"#] + axis + lanesSVG + ["</g>"], axisBottom)
    }

    // MARK: - Text

    /// Text and attribute values: the five XML specials escaped, control characters dropped.
    package static func escape(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n": out += " "
            default:
                if c.value < 0x20 || (0x7f..<0xa0).contains(c.value) || c.value == 0xfffe || c.value == 0xffff { continue }
                out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// A number with at most `decimals` decimals (trailing zeros dropped), no exponent.
    package static func n(_ x: Double, _ decimals: Int = 2) -> String {
        guard x.isFinite else { return "0" }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(x) * scale).rounded()
        guard scaled < 9e15 else { return String(Int64(x.rounded())) }
        let units = Int64(scaled)
        let whole = units / Int64(scale)
        var frac = decimals > 0 ? String(units % Int64(scale)) : ""
        while frac.count < decimals { frac = "0" + frac }
        while frac.last == "0" { frac.removeLast() }
        let sign = x < 0 && units != 0 ? "-" : ""
        return sign + String(whole) + (frac.isEmpty ? "" : "." + frac)
    }

    /// "HH:MM" (or "HH:MM:SS") of a Unix time, UTC.
    package static func clock(_ t: Double, seconds: Bool = true) -> String {
        let s = Int64(t.rounded(.down))
        let day = ((s % 86400) + 86400) % 86400
        func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
        let hm = two(day / 3600) + ":" + two(day % 3600 / 60)
        return seconds ? hm + ":" + two(day % 60) : hm
    }

    /// "4m", "1h12m", "35s".
    package static func short(_ seconds: Double) -> String {
        let s = Int64(seconds.rounded())
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m" + (s < 600 && s % 60 > 0 ? "\(s % 60)s" : "") }
        if s < 86400 { return "\(s / 3600)h" + (s % 3600 / 60 > 0 ? "\(s % 3600 / 60)m" : "") }
        return "\(s / 86400)d" + (s % 86400 / 3600 > 0 ? "\(s % 86400 / 3600)h" : "")
    }
}

/// A simulated day as a `TimelineSVG.Drawing`: the three strategies' radio-on periods, each
/// app's runs under each strategy and its uses, and the report's totals in the legend.
package enum SimulationTimeline {
    package static let strategies = [("drowse", "Drowse"), ("android", "Android-style"), ("naive", "naive timers")]

    /// `day`: 1 is the scenario's first 24 hours.
    package static func drawing(_ sim: Simulator, _ rec: Simulator.Recording, day: Int = 1) -> TimelineSVG.Drawing {
        let s = sim.scenario
        let from = s.start + Double(max(day, 1) - 1) * 86400
        let to = min(from + 86400, s.start + s.duration)
        let r = rec.report
        let runs = [rec.drowse, rec.android, rec.naive]
        let totals = [r.drowse, r.android, r.naive]
        let wholeScenario = from == s.start && to == s.start + s.duration
        var radioLanes: [TimelineSVG.RadioLane] = []
        for (k, (id, name)) in strategies.enumerated() {
            let t = totals[k]
            let periods = sim.radioPeriods(runs[k])
            var figures = [
                TimelineSVG.Figure(key: "radio-on-seconds", value: t.radioOnSeconds, text: "\(name): radio on \(TimelineSVG.n(t.radioOnSeconds, 0)) s"),
                TimelineSVG.Figure(key: "energy-joules", value: t.energyJoules, text: "\(TimelineSVG.n(t.energyJoules, 0)) J"),
                TimelineSVG.Figure(key: "promotions", value: t.promotions, text: "\(TimelineSVG.n(t.promotions, 0)) wakes"),
                TimelineSVG.Figure(key: "fetches", value: Double(t.fetches), text: "\(t.fetches) runs"),
                TimelineSVG.Figure(key: "staleness-median-seconds", value: t.stalenessMedian,
                                   text: "staleness at use " + (t.stalenessMedian.map { "median " + TimelineSVG.short($0) } ?? "—")),
                TimelineSVG.Figure(key: "staleness-p90-seconds", value: t.stalenessP90, text: t.stalenessP90.map { "p90 " + TimelineSVG.short($0) } ?? "—"),
            ]
            if !wholeScenario {
                let day = periods.filter { $0.end >= from && $0.start < to }
                let seconds = day.reduce(0) { $0 + min($1.end, to) - max($1.start, from) }
                figures.append(TimelineSVG.Figure(key: "day-radio-on-seconds", value: seconds, text: "this day \(TimelineSVG.n(seconds, 0)) s"))
            }
            radioLanes.append(TimelineSVG.RadioLane(id: id, name: name, periods: periods, figures: figures))
        }
        var lanes: [TimelineSVG.Lane] = []
        for (i, app) in s.apps.enumerated() {
            let interval = s.intervalSeconds(app).map { " every " + TimelineSVG.short($0) } ?? " (never)"
            let rows = strategies.enumerated().map { k, strategy in
                TimelineSVG.Row(id: strategy.0, name: strategy.0 == "android" ? "andr" : strategy.0, marks: runs[k].filter { $0.app == i }.map { run in
                    let kind = run.offline ? "offline" : run.outcome.rawValue
                    let what = run.offline ? "fired offline" : ["new": "new data", "no": "no new data", "failed": "failed", "timeout": "killed at deadline"][run.outcome.rawValue]!
                    return TimelineSVG.Mark(start: run.start, end: run.end, kind: kind,
                                            title: "\(TimelineSVG.clock(run.start)) \(TimelineSVG.n(run.end - run.start, 1)) s \(what)")
                })
            }
            lanes.append(TimelineSVG.Lane(id: app.id, name: app.id + interval, rows: rows, uses: rec.uses.filter { $0.app == i }.map(\.at)))
        }
        let days = s.duration / 86400
        let span = days > 1 ? "day \(max(day, 1)) of \(TimelineSVG.n(days, 1))" : "one day"
        var drawing = TimelineSVG.Drawing(
            title: "\(s.name): radio timeline, \(span) (simulated)",
            subtitle: "\(s.apps.count) apps on \(s.radio.name), seed \(r.seed) — Drowse (the real scheduler) vs Android-style batching vs naive per-app timers",
            from: from, to: to, radioLanes: radioLanes, lanes: lanes,
            notes: [
                "Radio: the \(s.radio.name) model (promotion \(TimelineSVG.n(s.radio.promotionSeconds, 3)) s, tail \(TimelineSVG.n(s.radio.tailSeconds, 3)) s); one bar per radio-on period, "
                    + "exactly as the report counts it. Bars and runs narrower than \(TimelineSVG.n(TimelineSVG.minimumWidth, 1)) px are widened to show.",
                "Totals are the report's (drowse simulate \(s.name)) over the whole scenario" + (wholeScenario ? "." : " (all its days); \"this day\" is the radio-on time drawn here.")
                    + " Staleness: age of the newest new data at each use" + (s.warmup > 0 ? " after the warm-up." : "."),
                "Rows per app: drowse, andr (Android-style), naive.",
            ])
        // Zoom on ten minutes from just before Drowse's first window after 07:00 (or its first).
        let drowsePeriods = radioLanes[0].periods.filter { $0.start >= from && $0.start < to }
        if let first = drowsePeriods.first(where: { $0.start >= from + 7 * 3600 }) ?? drowsePeriods.first {
            let z = max(from, first.start - 30)
            drawing.zoom = (z, min(to, z + 600))
        }
        return drawing
    }
}
