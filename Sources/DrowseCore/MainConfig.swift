/// `drowse.toml`: the daemon's configuration (docs/contract.md, "Main config").
package struct MainConfig: Sendable, Equatable {
    package var file: String
    package var deviceID: String
    package var stateDir: String
    package var appsDir: String
    package var socket: String
    package var mqtt: MQTTConfig?
    package var conditions: ConditionsConfig
    package var radioModel: RadioModelSetting
    /// `[radio] tail`: the radio's tail the planner reckons with, in place of the model's (a
    /// modem whose network sets another inactivity timer); nil: the model's.
    package var radioTail: Duration? = nil
    package var scheduler: SchedulerConfig
    package var transfers: TransfersConfig
    package var notifications = NotificationsConfig()
    package var lifecycle = LifecycleConfig()
    package var metrics = MetricsConfig()
    package var api = APIConfig()

    /// `[api]`: how much of the local API one local user may hold.
    package struct APIConfig: Sendable, Equatable {
        /// Connections one uid may have open at once; root and the drowse group are not counted
        /// against it. More are answered 429 and closed at once, so one user's idle or slow
        /// connections never keep another user waiting.
        package var maxConnectionsPerUID: Int = 8

        package init() {}
    }
    /// `[limits]`: every app's limits unless its app file sets its own (`AppLimits`).
    package var limits = AppLimits.defaults
    package var updates = UpdatesConfig()

    /// `[updates]`: when `drowse update` may install (docs/updates.md).
    package struct UpdatesConfig: Sendable, Equatable {
        /// The local times of day at which installs may start; empty: any time.
        package var window = MaintenanceWindow.always
        /// The health check's defaults, when an update names none.
        package var healthFor: Duration = .seconds(30)
        package var checkWithin: Duration = .seconds(300)

        package init() {}
    }

    /// `[metrics]`: where node_exporter's textfile collector reads drowsed's counters.
    package struct MetricsConfig: Sendable, Equatable {
        /// An absolute path ending in `.prom`, rewritten atomically when something happens; nil: none.
        package var textfile: String?
    }

    /// `[lifecycle]`: suspension, background tasks, memory pressure (see `AppLifecycle`).
    package struct LifecycleConfig: Sendable, Equatable {
        /// How long an app with no reason to run stays thawed before it is frozen.
        package var suspendAfter: Duration = .seconds(10)
        /// The allowance an app's open background tasks share (iOS 13 and later: 30 s).
        package var backgroundTaskTime: Duration = .seconds(30)
        /// The `task-expiring` event comes this long before the allowance ends.
        package var taskExpiryWarning: Duration = .seconds(5)
        /// "auto", "off", an absolute path or a path relative to the cgroup2 mount.
        package var cgroup: CgroupSetting = .auto
        /// A PSI trigger for /proc/pressure/memory ("some|full STALL_US WINDOW_US"), or "off".
        /// The window is a multiple of 2 s, which the kernel requires without CAP_SYS_RESOURCE.
        package var memoryPressure: MemoryPressureSetting = .trigger(full: false, stallMicros: 200_000, windowMicros: 2_000_000)
        /// Handlers start through the spawn helper `drowse-spawner` (with cgroups); false: from
        /// drowsed itself.
        package var spawnHelper = true
        /// After this long with nothing to do, drowsed gives back the resident pages of its own
        /// code and constants and the libraries' (`CodeRelease`).
        package var releaseCodeAfter: Duration = .seconds(30)
    }

    package struct NotificationsConfig: Sendable, Equatable {
        /// Silent notifications (priority 5) that may wake an app per hour; more wait for a window.
        package var maxPerHour: Int = 12
        /// Notifications one app may have waiting (deferred, or waiting for their rollout delay);
        /// past it the oldest lowest-priority one is dropped, as APNs keeps only the latest.
        package var maxDeferred: Int = 64
        /// The largest notification payload (bytes, as published: a signed one whole). It also
        /// bounds every MQTT packet before it is read (`MQTTSessionOptions.packetBound`).
        package var maxPayload: Int = Notification.maxBytes
    }

    package struct MQTTConfig: Sendable, Equatable {
        /// The first (preferred) broker's URL; `brokers` has them all.
        package var url: String
        package var host: String
        package var port: Int
        package var tls: Bool
        /// Every broker of `url` (a string or a list), the preferred one first. They share one
        /// scheme: the TLS settings (`ca_file`, `cert_file`, `key_file`) are the session's, not a broker's.
        package var brokers: [BrokerAddress] = []
        /// `groups`: the device also gets its apps' notifications sent to these groups.
        package var groups: [String] = []
        package var topicPrefix: String
        package var keepalive: Duration
        /// `max_keepalive`: the longest interval the keepalive adapts to on a path that holds it
        /// (docs/design.md, "The adaptive keepalive"); default 7 × `keepalive` (28 min for 4 min).
        package var maxKeepalive: Duration = .seconds(1680)
        /// `roll_call`: subscribe to `<prefix>/rollcall` and publish the status again on each
        /// message there (`drowse fleet` on a broker that keeps retained messages per node;
        /// docs/brokers.md). Off by default: the broker must let the device read that topic.
        package var rollCall = false
        package var clientID: String
        package var username: String?
        package var passwordFile: String?
        package var caFile: String?
        package var certFile: String?
        package var keyFile: String?
    }

    /// One broker of `[mqtt] url`.
    package struct BrokerAddress: Sendable, Equatable {
        package var url: String
        package var host: String
        package var port: Int
        package var tls: Bool

        package init(url: String, host: String, port: Int, tls: Bool) {
            self.url = url
            self.host = host
            self.port = port
            self.tls = tls
        }

        /// An mqtt:// or mqtts:// URL (the port defaults to 1883 or 8883), or nil.
        package static func parse(_ url: String) -> BrokerAddress? {
            guard let p = URLParts.parse(url), p.scheme == "mqtt" || p.scheme == "mqtts" else { return nil }
            return BrokerAddress(url: url, host: p.host, port: p.port ?? (p.scheme == "mqtts" ? 8883 : 1883), tls: p.scheme == "mqtts")
        }
    }

    /// Whether `name` can be a group: it becomes one topic level, so no '/', no wildcard, no NUL.
    package static func isValidGroup(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 128 && !name.contains { $0 == "/" || $0 == "+" || $0 == "#" || $0 == "\u{0}" }
    }

    package struct ConditionsConfig: Sendable, Equatable {
        package var batteryLowPercent: Int = 20
        package var sysfsRoot: String = "/sys"
        package var meteredInterfaces: [String]? = nil
    }

    /// Knobs beyond the contract's defaults, mainly so tests can run at seconds scale.
    package struct SchedulerConfig: Sendable, Equatable {
        /// How long a handler may run (the contract's 30 s).
        package var handlerDeadline: Duration = .seconds(30)
        /// What `minimum_interval = "minimum"` means.
        package var minimumInterval: Duration = .seconds(600)
        /// Handler run time per app per day before its fetches only join others' windows.
        package var dailyBudget: Duration = .seconds(600)
        /// Handlers (notification and fetch) running at once; more wait their turn, none is dropped.
        package var maxConcurrentHandlers: Int = 8
        /// How long past eligibility a fetch may wait, as a share of its interval (capped at 30 min).
        package var tolerance: Double = FetchPlanner().toleranceFraction
    }

    package struct TransfersConfig: Sendable, Equatable {
        package var maxConnectionsPerHost: Int = 6
        package var commitInterval: Duration = .seconds(2)
        package var commitBytes: Int = 8 << 20
        /// A transfer that moves no byte for this long is dropped and retried (stall detection).
        package var stallTimeout: Duration = .seconds(60)
        /// Unfinished transfers one app may have; more are refused (429) until some finish.
        package var maxPerApp: Int = 256
        /// Bytes a download whose length the server did not announce may grow to before it fails.
        package var maxUnknownSize: Int64 = 2 << 30
        /// An attempt slower than this (bytes/s) for all of `minSpeedWindow` ends as a transient
        /// failure, so a trickling server cannot hold a connection slot for days. 0: off (only
        /// `stallTimeout`, no byte at all, ends one).
        package var minSpeed: Int = 0
        package var minSpeedWindow: Duration = .seconds(60)
        /// After this long without a transfer, drowsed gives back the resident pages of the shared
        /// libraries' code (libcurl's, what it loaded, libcrypto's): once per quiet spell after
        /// a transfer, never periodically.
        package var releaseCodeAfter: Duration = .seconds(30)

        /// libcurl's one speed check (LOW_SPEED_LIMIT bytes/s for LOW_SPEED_TIME seconds). Off:
        /// 1 byte/s for `stallTimeout`, the stall check. On: `minSpeed` for `minSpeedWindow`, which
        /// then also catches stalls (a stall is a speed of 0), so it replaces `stallTimeout`.
        package var lowSpeed: (limit: Int, seconds: Int) {
            let window = minSpeed > 0 ? minSpeedWindow : stallTimeout
            return (max(1, minSpeed), max(1, Int(saturating: window.seconds, rounding: .toNearestOrAwayFromZero)))
        }
    }

    package static let defaultPath = "/etc/drowse/drowse.toml"
    /// The longest path a unix socket may have (`sockaddr_un.sun_path` less its NUL).
    package static let socketPathLimit = 107

    /// Parses `text` read from `file`. `machineID` supplies the default device id.
    package static func parse(_ text: String, file: String, machineID: String?) throws(ConfigError) -> MainConfig {
        let table: TOMLTable
        do { table = try TOMLParser.parse(text) } catch {
            throw ConfigError(file: file, line: error.line, problem: error.reason)
        }
        let dir = ConfigPath.directory(of: file)
        var r = TableReader(table, file: file)
        let deviceID: String
        if let d = try r.string("device_id") {
            guard Identifier.isValid(d) else { throw r.error("device_id", "'\(d)' may hold only letters, digits, '-', '_' and '.'") }
            deviceID = d
        } else if let m = machineID, !m.isEmpty {
            deviceID = "drowse-" + String(m.prefix(12))
        } else {
            throw r.error("device_id", "not set, and /etc/machine-id could not be read")
        }
        let stateDir = ConfigPath.resolve(try r.string("state_dir") ?? "/var/lib/drowse", relativeTo: dir)
        let appsDir = ConfigPath.resolve(try r.string("apps_dir") ?? "/etc/drowse/apps.d", relativeTo: dir)
        let socket = ConfigPath.resolve(try r.string("socket") ?? "/run/drowse/drowse.sock", relativeTo: dir)
        // A unix socket's address holds at most 107 bytes of path (sun_path, with its NUL): a
        // longer one (a relative path below a deep folder) is refused here, by name, rather than
        // by the bind at start-up.
        guard socket.utf8.count <= Self.socketPathLimit else {
            throw r.error("socket", """
                '\(socket)' is \(socket.utf8.count) bytes long; a unix socket's path may be at most \(Self.socketPathLimit): \
                choose a shorter path (a relative one resolves against the config file's folder)
                """)
        }

        var mqtt: MQTTConfig?
        if var m = try r.table("mqtt") {
            let urls: [String]
            if let list = m.table["url"], case .array = list {
                urls = try m.stringArray("url") ?? []
                guard !urls.isEmpty else { throw m.error("url", "the list of broker URLs is empty") }
            } else {
                urls = [try m.string("url") ?? "mqtt://127.0.0.1:1883"]
            }
            var brokers: [BrokerAddress] = []
            for url in urls {
                // libmosquitto takes the login apart from the address, so a password in the URL
                // would go unused, and the URL is shown to every local user by `GET /v1/status`.
                if URLParts.parse(url)?.hasUserInfo == true {
                    throw m.error("url", "'\(URLParts.redacting(url))' carries a user name or password, which is not used and would be shown to every local user: put them in [mqtt] username and password_file")
                }
                guard let b = BrokerAddress.parse(url) else { throw m.error("url", "'\(URLParts.redacting(url))' is not an mqtt:// or mqtts:// URL") }
                guard brokers.isEmpty || brokers[0].tls == b.tls else {
                    throw m.error("url", "'\(URLParts.redacting(url))' mixes mqtt:// and mqtts://: every broker of the list uses the same scheme")
                }
                guard !brokers.contains(where: { $0.host == b.host && $0.port == b.port }) else {
                    throw m.error("url", "'\(URLParts.redacting(url))' is in the list twice")
                }
                brokers.append(b)
            }
            let groups = try m.stringArray("groups") ?? []
            for g in groups where !isValidGroup(g) {
                throw m.error("groups", "'\(LogText.escape(g))' is not a group name: it must be non-empty and hold no '/', '+', '#' or NUL")
            }
            guard Set(groups).count == groups.count else { throw m.error("groups", "names a group twice") }
            let prefix = try m.string("topic_prefix") ?? "drowse"
            guard !prefix.isEmpty, !prefix.contains(where: { $0 == "+" || $0 == "#" }) else {
                throw m.error("topic_prefix", "must be non-empty and hold no MQTT wildcards")
            }
            let file = { (key: String, reader: inout TableReader) throws(ConfigError) -> String? in
                try reader.string(key).map { ConfigPath.resolve($0, relativeTo: dir) }
            }
            mqtt = MQTTConfig(
                url: brokers[0].url, host: brokers[0].host, port: brokers[0].port, tls: brokers[0].tls,
                brokers: brokers, groups: groups, topicPrefix: prefix,
                keepalive: try m.duration("keepalive", minimum: .seconds(1)) ?? .seconds(240),
                clientID: try m.string("client_id") ?? "drowse-\(deviceID)",
                username: try m.string("username"),
                passwordFile: try file("password_file", &m), caFile: try file("ca_file", &m),
                certFile: try file("cert_file", &m), keyFile: try file("key_file", &m))
            if mqtt!.keepalive > .seconds(65535) { throw m.error("keepalive", "must be at most 65535s") }
            // libmosquitto takes whole seconds of at least 5 for the keepalive in CONNECT.
            let maxKeepalive = try m.duration("max_keepalive", minimum: .seconds(5))
                ?? max(.seconds(5), min(.seconds(Int64((mqtt!.keepalive * 7).seconds.rounded(.up))), .seconds(65535)))
            if maxKeepalive > .seconds(65535) { throw m.error("max_keepalive", "must be at most 65535s") }
            if maxKeepalive < mqtt!.keepalive { throw m.error("max_keepalive", "must be at least keepalive (\(Int(mqtt!.keepalive.seconds))s)") }
            mqtt!.maxKeepalive = maxKeepalive
            mqtt!.rollCall = try m.bool("roll_call") ?? false
            try m.rejectUnknown()
        }

        var conditions = ConditionsConfig()
        if var c = try r.table("conditions") {
            conditions.batteryLowPercent = try c.integer("battery_low_percent", in: 0...100) ?? 20
            conditions.sysfsRoot = ConfigPath.resolve(try c.string("sysfs_root") ?? "/sys", relativeTo: dir)
            conditions.meteredInterfaces = try c.stringArray("metered_interfaces")
            try c.rejectUnknown()
        }

        var radioModel = RadioModelSetting.auto
        var radioTail: Duration?
        if var rr = try r.table("radio") {
            let text = try rr.string("model") ?? "auto"
            guard let model = RadioModelSetting(text) else {
                throw rr.error("model", "'\(text)' is not one of auto, lte, 3g, wifi, ethernet")
            }
            radioModel = model
            radioTail = try rr.duration("tail")
            if let t = radioTail, t > .seconds(300) { throw rr.error("tail", "must be at most 300s") }
            try rr.rejectUnknown()
        }

        var scheduler = SchedulerConfig()
        if var s = try r.table("scheduler") {
            scheduler.handlerDeadline = try s.duration("handler_deadline", minimum: .seconds(1)) ?? .seconds(30)
            scheduler.minimumInterval = try s.duration("minimum_interval", minimum: .seconds(1)) ?? .seconds(600)
            scheduler.dailyBudget = try s.duration("daily_budget", minimum: .seconds(1)) ?? .seconds(600)
            scheduler.maxConcurrentHandlers = try s.integer("max_concurrent_handlers", in: 1...256) ?? 8
            scheduler.tolerance = try s.percent("tolerance", in: 0...100) ?? scheduler.tolerance
            try s.rejectUnknown()
        }

        var transfers = TransfersConfig()
        if var t = try r.table("transfers") {
            transfers.maxConnectionsPerHost = try t.integer("max_connections_per_host", in: 1...64) ?? 6
            transfers.commitInterval = try t.duration("commit_interval", minimum: .milliseconds(100)) ?? .seconds(2)
            transfers.commitBytes = try t.integer("commit_bytes", in: 65536...(1 << 30)) ?? (8 << 20)
            transfers.stallTimeout = try t.duration("stall_timeout", minimum: .seconds(1)) ?? .seconds(60)
            transfers.maxPerApp = try t.integer("max_per_app", in: 1...100_000) ?? 256
            transfers.maxUnknownSize = Int64(try t.integer("max_unknown_size", in: 1...(1 << 50)) ?? (2 << 30))
            transfers.minSpeed = try t.integer("min_speed", in: 0...(1 << 40)) ?? 0
            transfers.minSpeedWindow = try t.duration("min_speed_window", minimum: .seconds(1)) ?? .seconds(60)
            transfers.releaseCodeAfter = try t.duration("release_code_after", minimum: .milliseconds(100)) ?? .seconds(30)
            try t.rejectUnknown()
        }
        var notifications = NotificationsConfig()
        if var n = try r.table("notifications") {
            notifications.maxPerHour = try n.integer("max_per_hour", in: 1...10000) ?? 12
            notifications.maxDeferred = try n.integer("max_deferred", in: 1...10000) ?? 64
            notifications.maxPayload = try n.integer("max_payload", in: 256...65536) ?? Notification.maxBytes
            try n.rejectUnknown()
        }
        var lifecycle = LifecycleConfig()
        if var l = try r.table("lifecycle") {
            lifecycle.suspendAfter = try l.duration("suspend_after", minimum: .zero) ?? lifecycle.suspendAfter
            lifecycle.backgroundTaskTime = try l.duration("background_task_time", minimum: .seconds(1)) ?? lifecycle.backgroundTaskTime
            lifecycle.taskExpiryWarning = try l.duration("task_expiry_warning", minimum: .zero) ?? lifecycle.taskExpiryWarning
            if lifecycle.taskExpiryWarning >= lifecycle.backgroundTaskTime {
                throw l.error("task_expiry_warning", "must be shorter than background_task_time")
            }
            if let text = try l.string("cgroup") {
                guard let cgroup = CgroupSetting(text) else {
                    throw l.error("cgroup", "is \"auto\", \"off\", or a cgroup path without '..'")
                }
                lifecycle.cgroup = cgroup
            }
            if let text = try l.string("memory_pressure") {
                guard let trigger = MemoryPressureSetting(text) else {
                    throw l.error("memory_pressure", "'\(text)' is not \"off\" or \"some|full STALL_US WINDOW_US\" (window 500000 to 10000000 µs)")
                }
                lifecycle.memoryPressure = trigger
            }
            lifecycle.spawnHelper = try l.bool("spawn_helper") ?? lifecycle.spawnHelper
            lifecycle.releaseCodeAfter = try l.duration("release_code_after", minimum: .milliseconds(100)) ?? lifecycle.releaseCodeAfter
            try l.rejectUnknown()
        }
        var metrics = MetricsConfig()
        if var m = try r.table("metrics") {
            if let path = try m.string("textfile") {
                guard path.hasPrefix("/"), path.hasSuffix(".prom"), !path.hasSuffix("/.prom"), !path.contains("\u{0}") else {
                    throw m.error("textfile", "is an absolute path ending in .prom (node_exporter's textfile collector reads only those)")
                }
                metrics.textfile = path
            }
            try m.rejectUnknown()
        }
        var api = APIConfig()
        if var a = try r.table("api") {
            api.maxConnectionsPerUID = try a.integer("max_connections_per_uid", in: 1...1024) ?? api.maxConnectionsPerUID
            try a.rejectUnknown()
        }
        var limits = AppLimits.defaults
        if var l = try r.table("limits") {
            limits = try l.limits().resolved(defaults: limits)
            try l.rejectUnknown()
        }
        var updates = UpdatesConfig()
        if var u = try r.table("updates") {
            if let texts = try u.stringArray("window") {
                switch MaintenanceWindow.parse(texts) {
                case .success(let w): updates.window = w
                case .failure(let e): throw u.error("window", e.description)
                }
            }
            updates.healthFor = try u.duration("health_for") ?? updates.healthFor
            updates.checkWithin = try u.duration("check_within", minimum: .seconds(1)) ?? updates.checkWithin
            guard updates.checkWithin > updates.healthFor else {
                throw u.error("check_within", "must be longer than health_for (\(DurationText.format(updates.healthFor)))")
            }
            try u.rejectUnknown()
        }
        try r.rejectUnknown()
        var config = MainConfig(
            file: file, deviceID: deviceID, stateDir: stateDir, appsDir: appsDir, socket: socket, mqtt: mqtt,
            conditions: conditions, radioModel: radioModel, radioTail: radioTail, scheduler: scheduler, transfers: transfers,
            notifications: notifications, lifecycle: lifecycle, metrics: metrics, api: api, limits: limits)
        config.updates = updates
        return config
    }
}

/// Names that end up in MQTT topics, file names and URLs.
package enum Identifier {
    package static func isValid(_ s: String) -> Bool {
        !s.isEmpty && s.count <= 64 && s.first != "." && s.allSatisfy { c in
            c.isASCII && (c.isLetter || c.isNumber || c == "-" || c == "_" || c == ".")
        }
    }
}
