import DrowseCore
import DrowseStore
import DrowseSystem

extension Agent {
    package func status(caller: Caller) -> JSON {
        .object([
            ("version", .string(Agent.version)), ("device_id", .string(config.deviceID)),
            ("mqtt", .object([
                ("configured", .bool(config.mqtt != nil)), ("connected", .bool(mqtt?.connected ?? false)),
                ("url", JSON(config.mqtt.map { URLParts.redacting($0.url) })), ("broker", JSON(mqtt?.broker)),
                ("refused_notifications", JSON(notifications.refusedNotifications)),
                ("unexpected_messages", JSON(notifications.unexpectedMessages)),
            ])),
            ("conditions", conditions.json),
            ("next_window", JSON(wall(fetch.plannedWindow?.at))),
            // Which apps run when is the admins' to know; anyone else learns only about their own.
            ("next_window_apps", .array((fetch.plannedWindow?.apps ?? []).filter { id in
                caller.isAdmin || apps[id].map { visible($0, to: caller) } == true
            }.map { .string($0) })),
            ("apps", JSON(apps.count)), ("invalid_apps", JSON(invalidApps.count)),
            ("lifecycle", lifecycleStatus()),
            // Every handler running now (fetch, notification, transfers), as drowse_running_handlers.
            ("running_handlers", JSON(runningHandlers)),
            ("queued_handlers", JSON(handlerQueue.waitingCount)),
        ])
    }

    package func conditions(refresh: Bool) -> JSON {
        if refresh { refreshConditions() }
        return conditions.json
    }

    func conditionsChanged(_ change: ConditionsMonitor.Change) {
        if case .clock = change { return clockStepped() }
        logger.debug("conditions: the kernel reports a \(change) change")
        refreshConditions()
    }

    /// Re-reads power and network; lets waiting work start and pauses work that may not go on.
    func refreshConditions() {
        conditionsService.read(now: now())
        applyConditions()
        fetch.conditionsChanged(schedulerConditions)
    }

    func appJSON(_ app: AppDefinition, plan: FetchPlanner.AppPlan?, history: Bool) -> JSON {
        let rec = try? store.app(app.id, now: now())
        let fetching = fetch.running.contains(app.id)
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
            ("resident", .bool(app.isResident)), ("limits", limitsJSON(app)),
            ("report", AppReport.json(fleet.reports[app.id] ?? [:])),
        ] + stateMembers(app.id)
        if history {
            let runs = (try? store.runs(app: app.id)) ?? []
            members.append(("history", .array(runs.map { r in
                .object([
                    ("event", .string(r.event.rawValue)), ("trigger", JSON(r.trigger)), ("result", .string(r.result.rawValue)),
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
        let plans = Dictionary(uniqueKeysWithValues: fetch.plans().map { ($0.id, $0) })
        var out = apps.values.filter { visible($0, to: caller) }.sorted { $0.id < $1.id }.map {
            appJSON($0, plan: plans[$0.id], history: false)
        }
        if caller.isAdmin { out += invalidApps.map(invalidJSON) }
        return .array(out)
    }

    package func appDetail(_ id: String, caller: Caller) throws(APIError) -> JSON {
        if apps[id] == nil, caller.isAdmin, let bad = invalidApps.first(where: { $0.id == id }) { return invalidJSON(bad) }
        let app = try app(id, for: caller)
        let plan = fetch.plans().first { $0.id == id }
        return appJSON(app, plan: plan, history: true)
    }
}
