import DrowseCore
import DrowseStore
import DrowseSystem

extension Agent {
    package func status(caller: Caller) -> JSON {
        .object([
            ("version", .string(Agent.version)), ("device_id", .string(config.deviceID)),
            ("mqtt", .object([
                ("configured", .bool(config.mqtt != nil)), ("connected", .bool(parts.mqtt.session?.connected ?? false)),
                ("url", JSON(config.mqtt.map { URLParts.redacting($0.url) })), ("broker", JSON(parts.mqtt.session?.broker)),
                // Up only once the broker confirmed the subscriptions; otherwise why not, and how
                // many attempts in a row have failed (the reconnect backoff grows with them).
                ("subscribed", .bool(parts.mqtt.session?.subscribed ?? false)),
                ("failed_attempts", JSON(parts.mqtt.session?.failedAttempts ?? 0)),
                ("last_error", JSON(parts.mqtt.session.flatMap { LogText.clip($0.lastLoss ?? "", limit: 300) }.flatMap { $0.isEmpty ? nil : $0 })),
                ("refused_notifications", JSON(parts.notifications.refusedNotifications)),
                ("unexpected_messages", JSON(parts.notifications.unexpectedMessages)),
                // Every packet from the broker is bounded before it is read (docs/architecture.md).
                ("inbound_gate", .bool(parts.mqtt.session?.inboundGate ?? false)),
                // "5" (the bound announced as the Maximum Packet Size too) or "3.1.1".
                ("protocol", JSON(parts.mqtt.session?.protocolVersion)),
                // The adaptive keepalive: how long the connection may stay silent before a ping
                // now, and the network path (interface) that was learned on (docs/design.md).
                ("ping_interval", JSON(parts.mqtt.session.map { Int($0.pingInterval.rounded()) })),
                ("ping_learned_on", JSON(parts.mqtt.session?.pingPath)),
                ("max_keepalive", JSON(config.mqtt.map { Int($0.maxKeepalive.seconds) })),
            ])),
            ("conditions", parts.conditions.current.json),
            ("next_window", JSON(wall(parts.fetch.plannedWindow?.at))),
            // Which apps run when is the admins' to know; anyone else learns only about their own.
            ("next_window_apps", .array((parts.fetch.plannedWindow?.apps ?? []).filter { id in
                caller.isAdmin || parts.registry[id].map { parts.registry.visible($0, to: caller) } == true
            }.map { .string($0) })),
            ("apps", JSON(parts.registry.apps.count)), ("invalid_apps", JSON(parts.registry.invalid.count)),
            ("lifecycle", parts.processes.statusJSON()),
            // How long records and run ends waited from their write to the disk (the journal's
            // group commit): the bound of docs/design.md, "A finished run stays finished".
            ("journal", Self.journalJSON(store.journal.stats)),
            // Every handler running now (fetch, notification, transfers), as drowse_running_handlers.
            ("running_handlers", JSON(parts.handlers.running)),
            ("queued_handlers", JSON(parts.handlers.waiting)),
        ])
    }

    package func conditions(refresh: Bool) -> JSON {
        if refresh { parts.conditions.refresh() }
        return parts.conditions.current.json
    }

    func appJSON(_ app: AppDefinition, plan: FetchPlanner.AppPlan?, history: Bool) -> JSON {
        let rec = try? store.app(app.id, now: now())
        let fetching = parts.fetch.running.contains(app.id)
        var members: [(String, JSON)] = [
            ("id", .string(app.id)), ("valid", true), ("error", nil), ("file", .string(app.file)),
            ("last_result", JSON(rec?.lastResult?.rawValue)), ("last_fetch", JSON(wall(rec?.lastFetch))),
            ("next_fetch", JSON(fetching ? nil : wall(plan?.plannedAt))),
            ("next_fetch_reason", .string(fetching ? "fetching now" : plan?.reason ?? "")),
            // The stated rule: eligible from, and run by (offline time not counted).
            ("eligible_at", JSON(fetching ? nil : wall(plan?.eligibleAt))),
            ("due_by", JSON(fetching ? nil : wall(plan?.dueBy))),
            ("tolerance_seconds", JSON(plan?.tolerance)),
            ("minimum_interval", .string(app.fetchInterval.description)),
            ("consecutive_failures", JSON(rec?.consecutiveFailures)), ("last_used", JSON(wall(rec?.lastUsed))),
            ("user", JSON(app.user)), ("running", .bool(fetching)),
            ("resident", .bool(app.isResident)), ("limits", parts.processes.limitsJSON(app)),
            ("report", AppReport.json(parts.mqtt.report(of: app.id))),
        ] + stateMembers(app.id)
        if history {
            let runs = (try? store.runs(app: app.id)) ?? []
            members.append(("history", .array(runs.map { r in
                .object([
                    ("event", .string(r.event.rawValue)), ("trigger", JSON(r.trigger?.rawValue)), ("result", .string(r.result.rawValue)),
                    ("ending", .string(r.ending)), ("started_at", .number(wall(r.startedAt))), ("ended_at", .number(wall(r.endedAt))),
                ])
            })))
        }
        return .object(members)
    }

    func invalidJSON(_ e: (file: String, id: String, error: String)) -> JSON {
        .object([
            ("id", .string(e.id)), ("valid", false), ("error", .string(e.error)), ("file", .string(e.file)),
            ("last_result", nil), ("last_fetch", nil), ("next_fetch", nil), ("next_fetch_reason", .string("invalid app definition")),
        ])
    }

    package func appsList(caller: Caller) -> JSON {
        let plans = Dictionary(uniqueKeysWithValues: parts.fetch.plans().map { ($0.id, $0) })
        var out = parts.registry.apps.values.filter { parts.registry.visible($0, to: caller) }.sorted { $0.id < $1.id }.map {
            appJSON($0, plan: plans[$0.id], history: false)
        }
        if caller.isAdmin { out += parts.registry.invalid.map(invalidJSON) }
        return .array(out)
    }

    package func appDetail(_ id: String, caller: Caller) throws(APIError) -> JSON {
        if parts.registry[id] == nil, caller.isAdmin, let bad = parts.registry.invalid.first(where: { $0.id == id }) { return invalidJSON(bad) }
        let app = try app(id, for: caller)
        let plan = parts.fetch.plans().first { $0.id == id }
        return appJSON(app, plan: plan, history: true)
    }

    static func journalJSON(_ s: (syncs: Int, maxWait: Double, lastWait: Double)) -> JSON {
        func ms(_ t: Double) -> JSON { JSON((t * 1000 * 10).rounded() / 10) }
        return .object([("syncs", JSON(s.syncs)), ("max_wait_ms", ms(s.maxWait)), ("last_wait_ms", ms(s.lastWait))])
    }
}
