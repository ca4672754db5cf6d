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
    package static func status(_ s: JSON, now: Double) -> [String] {
        var out: [String] = []
        out.append("drowsed \(s["version"]?.stringValue ?? "?") on device \(s["device_id"]?.stringValue ?? "?")")
        let m = s["mqtt"]
        if m?["configured"]?.boolValue == true {
            out.append("mqtt:        \(m?["connected"]?.boolValue == true ? "connected" : "not connected") (\(m?["url"]?.stringValue ?? ""))")
        } else {
            out.append("mqtt:        not configured")
        }
        if let c = s["conditions"] { out.append("conditions:  \(conditions(c))") }
        let apps = s["next_window_apps"]?.arrayValue?.compactMap(\.stringValue) ?? []
        out.append("next window: \(Human.when(s["next_window"]?.doubleValue, now: now))\(apps.isEmpty ? "" : " (" + apps.joined(separator: ", ") + ")")")
        out.append("apps:        \(s["apps"]?.intValue ?? 0) valid, \(s["invalid_apps"]?.intValue ?? 0) invalid")
        if let l = s["lifecycle"] {
            let where_ = l["cgroup"]?.stringValue.map { " (\($0))" } ?? ""
            out.append("suspension:  \(l["suspension"]?.stringValue ?? "?")\(where_)")
            out.append("memory:      pressure \(l["memory_pressure"]?.stringValue ?? "?")")
        }
        return out
    }

    /// `drowse conditions` (and the status line), from `GET /v1/conditions`.
    package static func conditions(_ c: JSON) -> String {
        var power = c["power_source"]?.stringValue ?? "unknown"
        if let b = c["battery_percent"]?.intValue { power += ", battery \(b)%" + (c["charging"]?.boolValue == true ? " charging" : "") }
        var net = c["network"]?.stringValue ?? "none"
        if let i = c["interface"]?.stringValue { net += " (\(i)" + (c["ssid"]?.stringValue.map { ", ssid \($0)" } ?? "") + ")" }
        if c["metered"]?.boolValue == true { net += ", metered" }
        return "power \(power); network \(net)"
    }

    /// `drowse apps`, from `GET /v1/apps`: a header and one row per app.
    package static func apps(_ apps: JSON, now: Double) -> [String] {
        var out = ["APP".padded(16) + "STATE".padded(24) + "RESULT".padded(10) + "LAST FETCH".padded(14) + "NEXT FETCH".padded(14) + "WHY"]
        for a in apps.arrayValue ?? [] {
            let id = a["id"]?.stringValue ?? "?"
            if a["valid"]?.boolValue == false {
                out.append(id.padded(16) + "INVALID: " + (a["error"]?.stringValue ?? ""))
                continue
            }
            out.append(id.padded(16) + appState(a).padded(24) + (a["last_result"]?.stringValue ?? "—").padded(10)
                       + Human.when(a["last_fetch"]?.doubleValue, now: now).padded(14)
                       + Human.when(a["next_fetch"]?.doubleValue, now: now).padded(14) + (a["next_fetch_reason"]?.stringValue ?? ""))
        }
        return out
    }

    /// "suspended (idle)", "background (event)", "—".
    package static func appState(_ a: JSON) -> String {
        guard let s = a["state"]?.stringValue else { return "—" }
        guard let r = a["state_reason"]?.stringValue, !r.isEmpty else { return s }
        return "\(s) (\(r))"
    }

    /// `drowse apps show ID`, from `GET /v1/apps/ID`.
    package static func app(_ a: JSON, id: String, now: Double) -> [String] {
        var out = ["app \(a["id"]?.stringValue ?? id)  (\(a["file"]?.stringValue ?? ""))"]
        if a["valid"]?.boolValue == false { out.append("INVALID: \(a["error"]?.stringValue ?? "")"); return out }
        out.append("state:            \(appState(a)) since \(Human.when(a["state_since"]?.doubleValue, now: now))"
                   + (a["resident"]?.boolValue == true ? ", resident" : ""))
        out.append("minimum interval: \(a["minimum_interval"]?.stringValue ?? "?")")
        out.append("last result:      \(a["last_result"]?.stringValue ?? "—") (\(Human.when(a["last_fetch"]?.doubleValue, now: now)))")
        out.append("next fetch:       \(Human.when(a["next_fetch"]?.doubleValue, now: now)) — \(a["next_fetch_reason"]?.stringValue ?? "")")
        if let l = a["limits"], l["processes_enforced_by"] != nil {
            let procs = l["processes"]?.doubleValue.map { String(Int(saturating: $0)) } ?? "unlimited"
            out.append("limits:           processes \(procs) (\(l["processes_enforced_by"]?.stringValue ?? "?")), "
                       + "memory \(l["memory_text"]?.stringValue ?? "?") (\(l["memory_enforced_by"]?.stringValue ?? "?"))")
        }
        let history = a["history"]?.arrayValue ?? []
        if !history.isEmpty {
            out.append("recent runs:")
            for r in history.prefix(10) {
                out.append("  \(Human.when(r["started_at"]?.doubleValue, now: now).padded(12))\((r["event"]?.stringValue ?? "").padded(14))\((r["result"]?.stringValue ?? "").padded(10))\(r["ending"]?.stringValue ?? "")")
            }
        }
        return out
    }

    /// `drowse transfers`, from the pages of `GET /v1/transfers`: a header and one row each.
    package static func transfers(_ all: [JSON]) -> [String] {
        var out = ["ID".padded(18) + "APP".padded(12) + "STATE".padded(11) + "BYTES".padded(22) + "URL / REASON"]
        for t in all {
            let bytes = "\(Human.bytes(t["bytes_done"]?.int64Value))/\(Human.bytes(t["bytes_total"]?.int64Value))"
            out.append((t["id"]?.stringValue ?? "").padded(18) + (t["app"]?.stringValue ?? "").padded(12) + (t["state"]?.stringValue ?? "").padded(11)
                       + bytes.padded(22) + (t["reason"]?.stringValue ?? t["url"]?.stringValue ?? ""))
        }
        return out
    }
}
