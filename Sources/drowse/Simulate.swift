import ArgumentParser
import DrowseCore
import DrowseSystem

/// `drowse simulate SCENARIO`: the real planner on a virtual clock, beside naive timers.
/// Needs no daemon.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the real scheduler on a virtual clock and report radio time and energy, beside naive per-app timers.",
        discussion: "SCENARIO is a TOML file: see deploy/scenarios/ for examples. The same scenario and seed always give the same report.")
    @Argument(help: "The scenario file.") var scenario: String
    @Flag(help: "Print JSON.") var json = false
    @Option(help: "Override the scenario's seed.") var seed: Int?

    func run() throws {
        let text: String
        do { text = try FileSystem.readText(scenario, limit: 4 << 20) } catch { throw CLIError(error.description) }
        let parsed: Scenario
        do { parsed = try Scenario.parse(text, file: scenario) } catch { throw CLIError(error.description) }
        let report = Simulator(parsed, seed: seed.map { UInt64(bitPattern: Int64($0)) }).report()
        if json { printJSON(report.json); return }
        print(SimulateTable.render(report, apps: parsed.apps.count))
    }
}

/// The side-by-side table people read.
enum SimulateTable {
    static func render(_ r: SimulationReport, apps: Int) -> String {
        var out: [String] = []
        let days = r.duration / 86400
        let span = days.rounded() == days ? "\(Int(days))d" : DurationText.format(.seconds(r.duration))
        out.append("\(r.scenario): \(span) on \(r.radio), seed \(r.seed), \(apps) app\(apps == 1 ? "" : "s") — Drowse (the real planner) vs naive per-app timers")
        out.append("")
        let widths = [16, 9, 7, 7, 7, 7, 9, 9, 9, 9, 15, 15, 6, 5]
        // Each group title spans its Drowse and naive columns.
        var groups = String(repeating: " ", count: widths[0] + widths[1] + 2)
        for (k, title) in ["FETCHES", "RADIO WAKES", "RADIO-ON s", "ENERGY J", "STALENESS med/p90"].enumerated() {
            let span = widths[2 + 2 * k] + widths[3 + 2 * k] + 1
            groups += String(repeating: " ", count: max(0, span - title.count)) + title + " "
        }
        out.append(groups + "   GAP  VIOL")
        out.append(line(["APP", "INTERVAL", "drowse", "naive", "drowse", "naive", "drowse", "naive", "drowse", "naive", "drowse", "naive", "drowse", "d/n"], widths))
        func row(_ id: String, _ interval: String, _ d: SimulationReport.Totals, _ n: SimulationReport.Totals) -> String {
            line([
                id, interval, "\(d.fetches)", "\(n.fetches)", number(d.promotions, 1), number(n.promotions, 1),
                number(d.radioOnSeconds, 1), number(n.radioOnSeconds, 1), number(d.energyJoules, 1), number(n.energyJoules, 1),
                staleness(d), staleness(n), d.maxGapRatio.map { number($0, 2) } ?? "—", "\(d.intervalViolations)/\(n.intervalViolations)",
            ], widths)
        }
        for a in r.apps {
            out.append(row(a.id, a.interval.map { DurationText.format(.milliseconds(Int64(($0 * 1000).rounded()))) } ?? "never", a.drowse, a.naive))
        }
        out.append(String(repeating: "-", count: widths.reduce(0, +) + widths.count - 1))
        out.append(row("TOTAL", "", r.drowse, r.naive))
        out.append("")
        let d = r.drowse, n = r.naive
        func times(_ naive: Double, _ drowse: Double, _ word: String) -> String {
            guard let x = SimulationReport.ratio(naive, drowse) else { return "n/a" }
            return number(x, 2) + "× " + word
        }
        out.append("Drowse vs naive: radio-on \(times(n.radioOnSeconds, d.radioOnSeconds, "lower")), radio wakes \(times(n.promotions, d.promotions, "fewer")), "
            + "energy \(times(n.energyJoules, d.energyJoules, "lower")), fetches \(n.fetches) → \(d.fetches).")
        out.append("Interval violations: Drowse \(d.intervalViolations), naive \(n.intervalViolations).")
        if let g = d.maxGapRatio {
            let worst = r.apps.max { ($0.drowse.maxGapRatio ?? 0) < ($1.drowse.maxGapRatio ?? 0) }
            var s = "Longest online wait between fetches: \(number(g, 2))× the interval"
            if let worst { s += " (\(worst.id))" }
            if let e = d.maxGapRatioEffective { s += "; \(number(e, 2))× the interval the planner chose after no-data/failures" }
            out.append(s + ".")
        }
        if r.warmup > 0 { out.append("Staleness is measured on uses after a \(DurationText.format(.seconds(r.warmup))) warm-up (usage learning).") }
        out.append("Per app: wakes are those its runs began; radio-on and energy split each wake's cost evenly among its runs.")
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
