import DrowseCore
import DrowseStore
import DrowseSystem

extension Agent {
    package func status(caller: Caller) -> JSON {
        let session = parts.mqtt.session
        return APIWire.Status(
            version: Agent.version, deviceID: config.deviceID,
            mqtt: APIWire.Status.MQTT(
                configured: config.mqtt != nil, connected: session?.connected ?? false,
                url: config.mqtt.map { URLParts.redacting($0.url) }, broker: session?.broker,
                // Up only once the broker confirmed the subscriptions; otherwise why not, and how
                // many attempts in a row have failed (the reconnect backoff grows with them).
                subscribed: session?.subscribed ?? false, failedAttempts: session?.failedAttempts ?? 0,
                lastError: session.flatMap { LogText.clip($0.lastLoss ?? "", limit: 300) }.flatMap { $0.isEmpty ? nil : $0 },
                refusedNotifications: parts.notifications.refusedNotifications,
                unexpectedMessages: parts.notifications.unexpectedMessages,
                // Every packet from the broker is bounded before it is read (docs/architecture.md).
                inboundGate: session?.inboundGate ?? false,
                // "5" (the bound announced as the Maximum Packet Size too) or "3.1.1".
                protocolVersion: session?.protocolVersion,
                // The adaptive keepalive: how long the connection may stay silent before a ping
                // now, and the network path (interface) that was learned on (docs/design.md).
                pingInterval: session.map { Int($0.pingInterval.rounded()) }, pingLearnedOn: session?.pingPath,
                maxKeepalive: config.mqtt.map { Int($0.maxKeepalive.seconds) }),
            conditions: parts.conditions.current.wire,
            nextWindow: wall(parts.fetch.plannedWindow?.at),
            // Which apps run when is the admins' to know; anyone else learns only about their own.
            nextWindowApps: (parts.fetch.plannedWindow?.apps ?? []).filter { id in
                caller.isAdmin || parts.registry[id].map { parts.registry.visible($0, to: caller) } == true
            },
            apps: parts.registry.apps.count, invalidApps: parts.registry.invalid.count,
            lifecycle: parts.processes.statusWire(),
            // How long records and run ends waited from their write to the disk (the journal's
            // group commit): the bound of docs/design.md, "A finished run stays finished".
            journal: Self.journalWire(store.journal.stats),
            // Every handler running now (fetch, notification, transfers), as drowse_running_handlers.
            runningHandlers: parts.handlers.running, queuedHandlers: parts.handlers.waiting
        ).json
    }

    package func conditions(refresh: Bool) -> JSON {
        if refresh { parts.conditions.refresh() }
        return parts.conditions.current.json
    }

    func appWire(_ app: AppDefinition, plan: FetchPlanner.AppPlan?, history: Bool) -> APIWire.App {
        let rec = try? store.app(app.id, now: now())
        let fetching = parts.fetch.running.contains(app.id)
        let runs = history ? ((try? store.runs(app: app.id)) ?? []) : nil
        return .valid(APIWire.ValidApp(
            id: app.id, file: app.file, lastResult: rec?.lastResult?.rawValue, lastFetch: wall(rec?.lastFetch),
            nextFetch: fetching ? nil : wall(plan?.plannedAt), nextFetchReason: fetching ? "fetching now" : plan?.reason ?? "",
            // The stated rule: eligible from, and run by (offline time not counted).
            eligibleAt: fetching ? nil : wall(plan?.eligibleAt), dueBy: fetching ? nil : wall(plan?.dueBy),
            toleranceSeconds: plan?.tolerance, minimumInterval: app.fetchInterval.description,
            consecutiveFailures: rec?.consecutiveFailures, lastUsed: wall(rec?.lastUsed), user: app.user, running: fetching,
            resident: app.isResident, limits: parts.processes.limitsWire(app),
            report: APIWire.Report(parts.mqtt.report(of: app.id)), state: stateWire(app.id),
            history: runs?.map { r in
                APIWire.Run(
                    event: r.event.rawValue, trigger: r.trigger?.rawValue,
                    end: APIWire.RunEnd(result: r.result.rawValue, ending: r.ending, startedAt: wall(r.startedAt), endedAt: wall(r.endedAt)))
            }))
    }

    func invalidWire(_ e: (file: String, id: String, error: String)) -> APIWire.App {
        .invalid(APIWire.InvalidApp(id: e.id, error: e.error, file: e.file))
    }

    package func appsList(caller: Caller) -> JSON {
        let plans = Dictionary(uniqueKeysWithValues: parts.fetch.plans().map { ($0.id, $0) })
        var out = parts.registry.apps.values.filter { parts.registry.visible($0, to: caller) }.sorted { $0.id < $1.id }.map {
            appWire($0, plan: plans[$0.id], history: false)
        }
        if caller.isAdmin { out += parts.registry.invalid.map(invalidWire) }
        return .array(out.map(\.json))
    }

    package func appDetail(_ id: String, caller: Caller) throws(APIError) -> JSON {
        if parts.registry[id] == nil, caller.isAdmin, let bad = parts.registry.invalid.first(where: { $0.id == id }) { return invalidWire(bad).json }
        let app = try app(id, for: caller)
        let plan = parts.fetch.plans().first { $0.id == id }
        return appWire(app, plan: plan, history: true).json
    }

    /// `POST /v1/updates/refresh`: read the updates' steps again (the installer asks at each).
    package func refreshUpdates() -> JSON { APIWire.Updates(parts.mqtt.refreshUpdates()).json }

    static func journalWire(_ s: (syncs: Int, maxWait: Double, lastWait: Double)) -> APIWire.Status.Journal {
        func ms(_ t: Double) -> Double { (t * 1000 * 10).rounded() / 10 }
        return APIWire.Status.Journal(syncs: s.syncs, maxWaitMS: ms(s.maxWait), lastWaitMS: ms(s.lastWait))
    }
}
