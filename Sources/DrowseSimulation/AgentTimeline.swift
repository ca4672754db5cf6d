import DrowseCore

/// What a real agent recorded (`AgentHistory`) as a `TimelineSVG.Drawing`, on the same axes as
/// a simulated day: the radio-on periods the model assigns to its handler runs, notifications
/// and transfers; the scheduler's windows; the conditions it saw (from a trace); and a lane per
/// app with its fetches, notifications and transfers.
package enum AgentTimeline {
    /// The activity intervals the radio model is given: every handler run but a resident app's
    /// process, the moment each notification arrived, and each transfer that ran from its
    /// creation to its end (or `to`).
    package static func activities(_ h: AgentHistory, to: Double) -> [(start: Double, end: Double)] {
        var out: [(start: Double, end: Double)] = h.runs.filter { $0.event != "resident" }.map { ($0.start, $0.end) }
        out += h.notifications.map { ($0.receivedAt, $0.receivedAt) }
        for t in h.transfers where t.state != "waiting" && t.state != "paused" {
            out.append((t.createdAt, t.finishedAt ?? to))
        }
        return out
    }

    /// Windows: from the trace, or else the scheduled fetches that started together (within 1 s).
    package static func windows(_ h: AgentHistory) -> [AgentHistory.Window] {
        if h.traced { return h.windows }
        var out: [AgentHistory.Window] = []
        for r in h.runs where r.event == "fetch" && r.trigger == "scheduled" {
            if let last = out.last, r.start - last.at < 1 { out[out.count - 1].apps.append(r.app) } else { out.append(.init(at: r.start, apps: [r.app])) }
        }
        return out
    }

    /// How a stretch of conditions reads: power and network as drowsed kept them, or what the
    /// scheduler saw (online, low battery) from a trace.
    static func conditionsText(_ c: AgentHistory.ConditionsChange) -> String {
        if let power = c.power, let network = c.network {
            let battery = c.battery.map { " \($0) %" } ?? ""
            return "\(power) power\(battery), network \(network)"
        }
        return (c.online ? "online" : "offline") + (c.lowBattery ? ", low battery" : "")
    }

    static func kind(_ r: AgentHistory.Run) -> String {
        switch r.result {
        case FetchResult.newData.rawValue: "new"
        case FetchResult.noData.rawValue: "no"
        default: r.ending.contains("deadline") ? "timeout" : "failed"
        }
    }

    package static func drawing(_ h: AgentHistory, from: Double, to: Double, radio: RadioModel, device: String) -> TimelineSVG.Drawing {
        let periods = radio.periods(of: activities(h, to: to)).filter { $0.end >= from && $0.start <= to }
        let on = periods.reduce(0) { $0 + min($1.end, to) - max($1.start, from) }
        let joules = periods.reduce(0) { $0 + $1.joules }
        let handlerRuns = h.runs.filter { $0.event != "resident" }
        let figures = [
            TimelineSVG.Figure(key: "radio-on-seconds", value: on, text: "radio on \(TimelineSVG.n(on, 0)) s (\(radio.name) model)"),
            TimelineSVG.Figure(key: "energy-joules", value: joules, text: "\(TimelineSVG.n(joules, 0)) J"),
            TimelineSVG.Figure(key: "promotions", value: Double(periods.count), text: "\(periods.count) wakes"),
            TimelineSVG.Figure(key: "runs", value: Double(handlerRuns.count), text: "\(handlerRuns.count) handler runs"),
            TimelineSVG.Figure(key: "notifications", value: Double(h.notifications.count), text: "\(h.notifications.count) notifications"),
            TimelineSVG.Figure(key: "transfers", value: Double(h.transfers.count), text: "\(h.transfers.count) transfers"),
        ]
        let radioLane = TimelineSVG.RadioLane(id: "agent", name: "radio", periods: periods, figures: figures)

        var lanes: [TimelineSVG.Lane] = []
        let windowMarks = windows(h).map { w in
            TimelineSVG.Mark(start: w.at, end: w.at, kind: "window", title: "\(TimelineSVG.clock(w.at)) window: \(w.apps.joined(separator: ", "))", role: "window")
        }
        lanes.append(TimelineSVG.Lane(id: "windows", name: h.traced ? "windows" : "windows (from runs)", rows: [TimelineSVG.Row(id: "windows", name: "", marks: windowMarks)]))
        if !h.conditions.isEmpty {
            let marks = h.conditions.enumerated().map { k, c in
                let until = k + 1 < h.conditions.count ? h.conditions[k + 1].at : to
                return TimelineSVG.Mark(start: c.at, end: until, kind: "state", title: conditionsText(c), role: "state")
            }
            lanes.append(TimelineSVG.Lane(id: "conditions", name: "conditions", rows: [TimelineSVG.Row(id: "conditions", name: "", marks: marks)]))
        }

        var apps = Set(h.runs.filter { $0.event != "resident" }.map(\.app))
        apps.formUnion(h.notifications.map(\.app))
        apps.formUnion(h.transfers.map(\.app))
        apps.formUnion(h.uses.map(\.app))
        for app in apps.sorted() {
            func runs(_ event: String) -> [TimelineSVG.Mark] {
                h.runs.filter { $0.app == app && $0.event == event }.map { r in
                    TimelineSVG.Mark(start: r.start, end: r.end, kind: kind(r),
                                     title: "\(TimelineSVG.clock(r.start)) \(event) \(TimelineSVG.n(r.end - r.start, 1)) s \(r.result) (\(r.ending))" + (r.trigger.map { ", \($0)" } ?? ""))
                }
            }
            let notes = h.notifications.filter { $0.app == app }.map { n in
                TimelineSVG.Mark(start: n.receivedAt, end: n.handledAt ?? n.receivedAt, kind: "notification",
                                 title: "\(TimelineSVG.clock(n.receivedAt)) notification, \(n.state)", role: "notification")
            }
            let transfers = h.transfers.filter { $0.app == app }.map { t in
                TimelineSVG.Mark(start: t.createdAt, end: t.finishedAt ?? to, kind: "transfer",
                                 title: "\(TimelineSVG.clock(t.createdAt)) \(t.kind) \(t.id): \(t.state), \(t.bytes) bytes, \(t.retries) retries", role: "transfer")
            }
            lanes.append(TimelineSVG.Lane(id: app, name: app, rows: [
                TimelineSVG.Row(id: "fetch", name: "fetch", marks: runs("fetch")),
                TimelineSVG.Row(id: "notification", name: "notif", marks: notes + runs("notification")),
                TimelineSVG.Row(id: "transfer", name: "xfer", marks: transfers + runs("transfers")),
            ], uses: h.uses.filter { $0.app == app }.map(\.at)))
        }
        return TimelineSVG.Drawing(
            title: "\(device): radio timeline, \(TimelineSVG.clock(from)) to \(TimelineSVG.clock(to)) UTC (recorded)",
            subtitle: "What drowsed recorded: handler runs, notifications, transfers and uses from its store"
                + (h.traced ? ", windows and conditions from its scheduler trace" : "; windows are the scheduled fetches that started together"),
            from: from, to: to, radioLanes: [radioLane], lanes: lanes,
            notes: [
                "Radio: the \(radio.name) model (promotion \(TimelineSVG.n(radio.promotionSeconds, 3)) s, tail \(TimelineSVG.n(radio.tailSeconds, 3)) s) over every handler run, "
                    + "each notification's arrival and each transfer from creation to end; radio-on counts the part inside the picture.",
                "Rows per app: fetch runs; notif (arrival to handled, and the handler's run); xfer (transfers, and the events handler's runs).",
            ])
    }
}
