import ArgumentParser
import DrowseCore
import DrowseSimulation
import DrowseSystem

/// `drowse simulate SCENARIO`: the real scheduler on a virtual clock, beside Android-style
/// batching and naive timers. Needs no daemon.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the real scheduler on a virtual clock and report radio time and energy, beside Android-style batching and naive per-app timers.",
        discussion: """
            SCENARIO is a TOML file: see deploy/scenarios/ for examples. The same scenario and seed always give the same report. \
            --seeds 1-8 runs the scenario once per seed and prints one line each. \
            --svg FILE draws the first day (or --day N) as a timeline: a lane per strategy with its radio-on periods \
            (promotion, data, tail), a lane per app with each strategy's runs coloured by result and the app's uses, \
            and the report's totals. \
            --replay TRACE feeds a trace written by `drowsed --scheduler-trace` through the simulator's driver and checks \
            that it gets the actions drowsed got (exit 1 if not). \
            --plan prints, as JSON, what deploy/bench-radio.sh replays on the wire: each app's handler runs (duration, result), \
            the scenario's notifications, and the run starts of the naive and Android-style baselines. \
            A scenario with [[notification]] or [mqtt] tables has its push channel simulated too: drowsed's MQTT connection \
            (the real connection machine: keepalive pings, pings riding fetch windows, reconnects), each notification \
            waking the radio and starting its handler, and the baselines' push connections. \
            --compress K predicts what `deploy/bench-radio.sh SCENARIO --compress K` measures on the wire: the settings \
            the bench gives drowsed at K, its handlers' traffic at their start, no uses, network or power changes.
            """)
    @Argument(help: "The scenario file.") var scenario: String?
    @Flag(help: "Print JSON.") var json = false
    @Option(help: "Override the scenario's seed.") var seed: Int?
    @Option(help: "Run each seed of a range, e.g. 1-8, and print one line per seed.") var seeds: String?
    @Option(help: "Replay a scheduler trace written by drowsed --scheduler-trace.") var replay: String?
    @Option(help: "Also draw the day as an SVG timeline into this file (- for standard output): radio-on periods per strategy, each app's runs and uses.")
    var svg: String?
    @Option(help: "With --svg: which day of a longer scenario to draw (1 is the first).") var day: Int = 1
    @Flag(help: "Print the wire benchmark's plan (JSON): handler runs, notifications, the baselines' run starts.") var plan = false
    @Option(help: "Predict deploy/bench-radio.sh --compress K: time K times faster on the wire (1-1000).") var compress: Double?

    func run() throws {
        if let replay { return try Self.replay(replay, json: json) }
        guard let scenario else { throw CLIError("name a scenario file (see deploy/scenarios/), or --replay TRACE") }
        if let compress {
            guard compress >= 1, compress <= 1000 else { throw CLIError("--compress must be a number from 1 to 1000") }
            if plan { throw CLIError("--plan is the scenario's own time (the bench divides it by K): leave out --compress") }
        }
        let text: String
        do { text = try FileSystem.readText(scenario, limit: 4 << 20) } catch { throw CLIError(error.description) }
        let parsed: Scenario
        do { parsed = try Scenario.parse(text, file: scenario) } catch { throw CLIError(error.description) }
        if let seeds {
            if svg != nil { throw CLIError("--svg draws one run: leave out --seeds (use --seed N)") }
            let parts = seeds.split(separator: "-").compactMap { Int($0) }
            guard parts.count == 2 || (parts.count == 1 && !seeds.contains("-")), let lo = parts.first, let hi = parts.last, lo <= hi, hi - lo < 1000 else {
                throw CLIError("--seeds takes a range such as 1-8")
            }
            let reports = (lo...hi).map { Simulator(parsed, seed: UInt64(bitPattern: Int64($0)), compress: compress).report() }
            if json { printJSON(.array(reports.map(\.json))); return }
            printLines(SimulateTable.seeds(reports, apps: parsed.apps.count))
            return
        }
        let simulator = Simulator(parsed, seed: seed.map { UInt64(bitPattern: Int64($0)) }, compress: compress)
        if plan {
            if svg != nil { throw CLIError("--plan prints JSON only: leave out --svg") }
            printJSON(WirePlan(simulator).json)
            return
        }
        let recording = simulator.record()
        let report = recording.report
        if let svg {
            let days = Int((parsed.duration / 86400).rounded(.up))
            guard day >= 1, day <= max(days, 1) else { throw CLIError("--day \(day): the scenario has \(max(days, 1)) day\(days == 1 ? "" : "s")") }
            let text = TimelineSVG.render(SimulationTimeline.drawing(simulator, recording, day: day))
            if svg == "-" { print(text, terminator: ""); return }
            do { try FileSystem.writeAtomically(svg, Array(text.utf8), durable: false) } catch { throw CLIError(error.description) }
        }
        if json { printJSON(report.json); return }
        printLines(SimulateTable.render(report, apps: parsed.apps.count))
    }

    static func replay(_ path: String, json: Bool) throws {
        let text: String
        do { text = try FileSystem.readText(path, limit: 256 << 20) } catch { throw CLIError(error.description) }
        let r: TraceReplay.Report
        do { r = try TraceReplay.run(text) } catch { throw CLIError("\(path): \(error)") }
        if json {
            printJSON(.object([
                ("identical", .bool(r.identical)), ("events", JSON(r.events)), ("actions", JSON(r.actions)),
                ("windows", JSON(r.windows)), ("window_fetches", JSON(r.windowFetches)), ("timer_firings", JSON(r.timerFirings)),
                ("max_timer_lateness_seconds", JSON(r.maxTimerLateness)), ("bad_firings", .array(r.badFirings.map { JSON($0) })),
                ("mismatches", .array(r.mismatches.map { m in
                    .object([("line", JSON(m.line)), ("event", .string(m.event)), ("recorded", .string(m.recorded)), ("replayed", .string(m.replayed))])
                })),
            ]))
        } else {
            say("\(path): \(r.events) events, \(r.actions) actions, \(r.windows) windows with \(r.windowFetches) fetches; "
                + "\(r.timerFirings) timer firings, the latest \(SimulateTable.number(r.maxTimerLateness * 1000, 1)) ms after its time")
            for line in r.badFirings { say("line \(line): the timer fired before its time, or none was set") }
            for m in r.mismatches.prefix(5) {
                say("line \(m.line): \(m.event)")
                say("  drowsed got: \(m.recorded)")
                say("  replay got:  \(m.replayed)")
            }
            say(r.identical ? "identical: the simulator's driver took every decision drowsed took, at the same times"
                : "DIFFERENT: \(r.mismatches.count) step(s) differ")
        }
        if !r.identical { throw ExitCode(1) }
    }
}

/// The side-by-side table people read.
enum SimulateTable {
    static func render(_ r: SimulationReport, apps: Int) -> String {
        var out: [String] = []
        let days = r.duration / 86400
        let span = days.rounded() == days ? "\(Int(days))d" : DurationText.format(.seconds(r.duration))
        out.append("\(r.scenario): \(span) on \(r.radio), seed \(r.seed), \(apps) app\(apps == 1 ? "" : "s") — "
            + "Drowse (the real scheduler) vs Android-style batching vs naive per-app timers")
        out.append("")
        let widths = [16, 8, 6, 6, 6, 6, 6, 6, 7, 7, 7, 11, 11, 11, 5, 5]
        // Each group title spans its three columns.
        var groups = String(repeating: " ", count: widths[0] + widths[1] + 2)
        for (k, title) in ["FETCHES", "RADIO WAKES", "RADIO-ON s", "STALENESS med/p90"].enumerated() {
            let span = widths[2 + 3 * k] + widths[3 + 3 * k] + widths[4 + 3 * k] + 2
            groups += String(repeating: " ", count: max(0, span - title.count)) + title + " "
        }
        out.append(groups + "  GAP  VIOL")
        out.append(line(["APP", "INTERVAL"] + Array(repeating: ["drowse", "andrd", "naive"], count: 4).flatMap { $0 } + ["drowse", "i/t"], widths))
        func row(_ id: String, _ interval: String, _ d: SimulationReport.Totals, _ a: SimulationReport.Totals, _ n: SimulationReport.Totals) -> String {
            line([
                id, interval, "\(d.fetches)", "\(a.fetches)", "\(n.fetches)",
                number(d.promotions, 1), number(a.promotions, 1), number(n.promotions, 1),
                number(d.radioOnSeconds, 0), number(a.radioOnSeconds, 0), number(n.radioOnSeconds, 0),
                staleness(d), staleness(a), staleness(n), d.maxGapRatio.map { number($0, 2) } ?? "—",
                "\(d.intervalViolations)/\(d.toleranceViolations ?? 0)",
            ], widths)
        }
        for x in r.apps {
            out.append(row(x.id, x.interval.map { DurationText.format(.milliseconds(Int64(($0 * 1000).rounded()))) } ?? "never", x.drowse, x.android, x.naive))
        }
        out.append(String(repeating: "-", count: widths.reduce(0, +) + widths.count - 1))
        out.append(row("TOTAL", "", r.drowse, r.android, r.naive))
        out.append("")
        let d = r.drowse, a = r.android, n = r.naive
        func times(_ other: Double, _ drowse: Double, _ word: String) -> String {
            guard let x = SimulationReport.ratio(other, drowse) else { return "n/a" }
            return number(x, 2) + "× " + word
        }
        out.append("Energy J: Drowse \(number(d.energyJoules, 0)), Android-style \(number(a.energyJoules, 0)), naive \(number(n.energyJoules, 0)).")
        out.append("Drowse vs naive: radio-on \(times(n.radioOnSeconds, d.radioOnSeconds, "lower")), radio wakes \(times(n.promotions, d.promotions, "fewer")), "
            + "energy \(times(n.energyJoules, d.energyJoules, "lower")), fetches \(n.fetches) → \(d.fetches).")
        out.append("Drowse vs Android-style batching: radio-on \(times(a.radioOnSeconds, d.radioOnSeconds, "lower")), "
            + "radio wakes \(times(a.promotions, d.promotions, "fewer")), energy \(times(a.energyJoules, d.energyJoules, "lower")), fetches \(a.fetches) → \(d.fetches).")
        out.append("Violations: fetches sooner than the interval: Drowse \(d.intervalViolations), Android-style \(a.intervalViolations), naive \(n.intervalViolations); "
            + "Drowse fetches later than the stated tolerance (i/t column): \(d.toleranceViolations ?? 0).")
        if let g = d.maxGapRatio {
            let worst = r.apps.max { ($0.drowse.maxGapRatio ?? 0) < ($1.drowse.maxGapRatio ?? 0) }
            var s = "Longest online wait between Drowse fetches: \(number(g, 2))× the interval"
            if let worst { s += " (\(worst.id))" }
            if let e = d.maxGapRatioEffective { s += "; \(number(e, 2))× the interval the scheduler chose after no-data/failures" }
            out.append(s + ".")
        }
        if let d = r.drowse.push, let a = r.android.push, let n = r.naive.push {
            func push(_ name: String, _ p: SimulationReport.PushTotals, _ t: SimulationReport.Totals) -> String {
                "\(name) \(p.handled)/\(p.published) handled\(p.deferred > 0 ? " (\(p.deferred) deferred)" : ""), \(p.pings) pings, "
                    + "\(p.keepaliveWakes) keepalive-only wakes (\(number(p.keepaliveRadioOnSeconds, 0)) s radio-on"
                    + (t.radioOnSeconds > 0 ? ", \(number(100 * p.keepaliveRadioOnSeconds / t.radioOnSeconds, 1)) %" : "") + ")"
                    + (p.sessions > 1 ? ", \(p.sessions - 1) reconnects" : "")
            }
            out.append("Push channel, notifications handled/published: "
                + [push("Drowse", d, r.drowse), push("Android-style", a, r.android), push("naive", n, r.naive)].joined(separator: "; ") + ".")
        }
        if let k = r.compress {
            out.append("Predicts deploy/bench-radio.sh --compress \(k.rounded() == k ? String(Int64(k)) : number(k, 2)): the bench's settings at K, handlers' traffic at their start; "
                + "figures at the scenario's scale.")
        }
        if r.warmup > 0 { out.append("Staleness is measured on uses after a \(DurationText.format(.seconds(r.warmup))) warm-up (usage learning).") }
        out.append("Per app: wakes are those its runs began; radio-on splits each wake's cost evenly among its runs.")
        return out.joined(separator: "\n")
    }

    /// One line per seed, and the worst ratio over them.
    static func seeds(_ reports: [SimulationReport], apps: Int) -> String {
        guard let first = reports.first else { return "" }
        var out = ["\(first.scenario): \(apps) apps on \(first.radio), seeds \(first.seed)-\(reports.last!.seed) — radio-on seconds and staleness at use (median/p90)", ""]
        let widths = [5, 8, 8, 8, 8, 8, 11, 11, 11, 5]
        out.append(line(["SEED", "drowse", "android", "naive", "÷andrd", "÷naive", "drowse", "android", "naive", "i/t"], widths))
        var worstA = Double.infinity, worstN = Double.infinity, violations = 0
        for r in reports {
            let ra = SimulationReport.ratio(r.android.radioOnSeconds, r.drowse.radioOnSeconds) ?? 0
            let rn = SimulationReport.ratio(r.naive.radioOnSeconds, r.drowse.radioOnSeconds) ?? 0
            worstA = min(worstA, ra)
            worstN = min(worstN, rn)
            violations += r.drowse.intervalViolations + (r.drowse.toleranceViolations ?? 0)
            out.append(line([
                "\(r.seed)", number(r.drowse.radioOnSeconds, 0), number(r.android.radioOnSeconds, 0), number(r.naive.radioOnSeconds, 0),
                number(ra, 2) + "×", number(rn, 2) + "×", staleness(r.drowse), staleness(r.android), staleness(r.naive),
                "\(r.drowse.intervalViolations)/\(r.drowse.toleranceViolations ?? 0)",
            ], widths))
        }
        out.append("")
        out.append("Over \(reports.count) seeds: Drowse's radio-on is at least \(number(worstA, 2))× lower than Android-style batching and "
            + "\(number(worstN, 2))× lower than naive timers; \(violations) violations.")
        return out.joined(separator: "\n")
    }

    static func line(_ cells: [String], _ widths: [Int]) -> String {
        var s = ""
        for (i, (c, w)) in zip(cells, widths).enumerated() {
            if i > 0 { s += " " }
            // Names left, numbers right.
            let pad = String(repeating: " ", count: max(0, w - c.count))
            s += i < 2 ? c + pad : pad + c
        }
        while s.last == " " { s.removeLast() }
        return s
    }

    static func number(_ x: Double, _ decimals: Int) -> String {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let v = (x * scale).rounded() / scale
        if v.rounded() == v, decimals <= 1 { return String(Int64(v)) }
        let whole = Int64(v.rounded(.towardZero))
        var frac = String(Int64((abs(v - Double(whole)) * scale).rounded()))
        while frac.count < decimals { frac = "0" + frac }
        return (v < 0 && whole == 0 ? "-" : "") + "\(whole).\(frac)"
    }

    static func staleness(_ t: SimulationReport.Totals) -> String {
        guard let m = t.stalenessMedian, let p = t.stalenessP90 else { return "—" }
        return short(m) + "/" + short(p)
    }

    /// "4m", "1h12m", "35s": two units at most.
    static func short(_ seconds: Double) -> String {
        let s = Int64(seconds.rounded())
        if s < 60 { return "\(s)s" }
        if s < 600 { return "\(s / 60)m" + (s % 60 > 0 ? "\(s % 60)s" : "") }
        if s < 3600 { return "\(s / 60)m" }
        if s < 86400 { return "\(s / 3600)h" + (s % 3600 / 60 > 0 ? "\(s % 3600 / 60)m" : "") }
        return "\(s / 86400)d" + (s % 86400 / 3600 > 0 ? "\(s % 86400 / 3600)h" : "")
    }
}
