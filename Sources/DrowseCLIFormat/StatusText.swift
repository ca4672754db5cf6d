import DrowseCore

/// The lines `drowse status`, `drowse conditions`, `drowse apps` and `drowse transfers` print for
/// drowsed's JSON answers. The lines are as made here, not yet escaped: `printable` (what the
/// CLI's `say` applies to every line) makes each one safe for a terminal. Missing keys and values
/// of the wrong type show as "?", "—" or nothing, never as a crash.
package enum StatusText {
    /// One line as the terminal gets it: control characters, line separators and bidi overrides
    /// escaped (see the CLI's `say`).
    package static func printable(_ line: String) -> String { LogText.escape(line) }

    /// `drowse status`, from `GET /v1/status`.
    package static func status(_ json: JSON, now: Double) -> [String] {
        let s = APIWire.Status(json: json)
        var out: [String] = []
        out.append("drowsed \(s.version ?? "?") on device \(s.deviceID ?? "?")")
        if let m = s.mqtt, m.configured == true {
            out.append("mqtt:        \(m.connected == true ? "connected" : "not connected") (\(m.url ?? ""))")
        } else {
            out.append("mqtt:        not configured")
        }
        if let c = s.conditions { out.append("conditions:  \(conditions(c))") }
        let apps = s.nextWindowApps ?? []
        out.append("next window: \(Human.when(s.nextWindow, now: now))\(apps.isEmpty ? "" : " (" + apps.joined(separator: ", ") + ")")")
        out.append("apps:        \(s.apps ?? 0) valid, \(s.invalidApps ?? 0) invalid")
        if let l = s.lifecycle {
            let where_ = l.cgroup.map { " (\($0))" } ?? ""
            out.append("suspension:  \(l.suspension ?? "?")\(where_)")
            out.append("memory:      pressure \(l.memoryPressure ?? "?")")
        }
        return out
    }

    /// `drowse conditions` (and the status line), from `GET /v1/conditions`.
    package static func conditions(_ json: JSON) -> String { conditions(APIWire.Conditions(json: json)) }

    static func conditions(_ c: APIWire.Conditions) -> String {
        var power = c.powerSource ?? "unknown"
        if let b = c.batteryPercent { power += ", battery \(b)%" + (c.charging == true ? " charging" : "") }
        var net = c.network ?? "none"
        if let i = c.interface { net += " (\(i)" + (c.ssid.map { ", ssid \($0)" } ?? "") + ")" }
        if c.metered == true { net += ", metered" }
        return "power \(power); network \(net)"
    }

    /// `drowse apps`, from `GET /v1/apps`: a header and one row per app.
    package static func apps(_ apps: JSON, now: Double) -> [String] {
        var out = ["APP".padded(16) + "STATE".padded(24) + "RESULT".padded(10) + "LAST FETCH".padded(14) + "NEXT FETCH".padded(14) + "WHY"]
        for item in apps.arrayValue ?? [] {
            switch APIWire.App(json: item) {
            case .invalid(let a):
                out.append((a.id ?? "?").padded(16) + "INVALID: " + (a.error ?? ""))
            case .valid(let a):
                out.append((a.id ?? "?").padded(16) + appState(a.state).padded(24) + (a.lastResult ?? "—").padded(10)
                           + Human.when(a.lastFetch, now: now).padded(14)
                           + Human.when(a.nextFetch, now: now).padded(14) + (a.nextFetchReason ?? ""))
            }
        }
        return out
    }

    /// "suspended (idle)", "background (event)", "—".
    package static func appState(_ a: APIWire.AppState) -> String {
        guard let s = a.state else { return "—" }
        guard let r = a.reason, !r.isEmpty else { return s }
        return "\(s) (\(r))"
    }

    /// `drowse apps show ID`, from `GET /v1/apps/ID`.
    package static func app(_ json: JSON, id: String, now: Double) -> [String] {
        let a: APIWire.ValidApp
        switch APIWire.App(json: json) {
        case .invalid(let bad):
            return ["app \(bad.id ?? id)  (\(bad.file ?? ""))", "INVALID: \(bad.error ?? "")"]
        case .valid(let valid): a = valid
        }
        var out = ["app \(a.id ?? id)  (\(a.file ?? ""))"]
        out.append("state:            \(appState(a.state)) since \(Human.when(a.state.since, now: now))"
                   + (a.resident == true ? ", resident" : ""))
        out.append("minimum interval: \(a.minimumInterval ?? "?")")
        out.append("last result:      \(a.lastResult ?? "—") (\(Human.when(a.lastFetch, now: now)))")
        out.append("next fetch:       \(Human.when(a.nextFetch, now: now)) — \(a.nextFetchReason ?? "")")
        if let l = a.limits, let processesBy = l.processesEnforcedBy {
            let procs = l.processes.map { String($0) } ?? "unlimited"
            out.append("limits:           processes \(procs) (\(processesBy)), "
                       + "memory \(l.memoryText ?? "?") (\(l.memoryEnforcedBy ?? "?"))")
        }
        let history = a.history ?? []
        if !history.isEmpty {
            out.append("recent runs:")
            for r in history.prefix(10) {
                out.append("  \(Human.when(r.end.startedAt, now: now).padded(12))\((r.event ?? "").padded(14))\((r.end.result ?? "").padded(10))\(r.end.ending ?? "")")
            }
        }
        return out
    }

    /// `drowse transfers`, from the pages of `GET /v1/transfers`: a header and one row each.
    package static func transfers(_ all: [JSON]) -> [String] {
        var out = ["ID".padded(18) + "APP".padded(12) + "STATE".padded(11) + "BYTES".padded(22) + "URL / REASON"]
        for t in all.map(APIWire.Transfer.init(json:)) {
            let bytes = "\(Human.bytes(t.bytesDone))/\(Human.bytes(t.bytesTotal))"
            out.append((t.id ?? "").padded(18) + (t.app ?? "").padded(12) + (t.state ?? "").padded(11)
                       + bytes.padded(22) + (t.reason ?? t.url ?? ""))
        }
        return out
    }
}
