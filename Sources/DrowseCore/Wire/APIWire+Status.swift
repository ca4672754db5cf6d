extension APIWire {
    /// `Conditions`: `GET /v1/conditions`, and a member of `Status`.
    package struct Conditions: WireBody, Sendable, Equatable {
        /// ac, battery or unknown (kept as text).
        package var powerSource: String?
        package var batteryPercent: Int?
        package var charging: Bool?
        /// none, ethernet, wifi or cellular (kept as text).
        package var network: String?
        package var interface: String?
        package var ssid: String?
        package var metered: Bool?

        package init(powerSource: String, batteryPercent: Int?, charging: Bool?, network: String, interface: String?, ssid: String?, metered: Bool) {
            self.powerSource = powerSource
            self.batteryPercent = batteryPercent
            self.charging = charging
            self.network = network
            self.interface = interface
            self.ssid = ssid
            self.metered = metered
        }

        package var json: JSON {
            .object([
                ("power_source", JSON(powerSource)), ("battery_percent", JSON(batteryPercent)),
                ("charging", JSON(charging)), ("network", JSON(network)), ("interface", JSON(interface)),
                ("ssid", JSON(ssid)), ("metered", JSON(metered)),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            powerSource = r.string("power_source")
            batteryPercent = r.int("battery_percent")
            charging = r.bool("charging")
            network = r.string("network")
            interface = r.string("interface")
            ssid = r.string("ssid")
            metered = r.bool("metered")
        }
    }

    /// `Status`: `GET /v1/status`.
    package struct Status: WireBody, Sendable, Equatable {
        /// `mqtt` of `Status`: the broker connection.
        package struct MQTT: WireBody, Sendable, Equatable {
            package var configured: Bool?
            package var connected: Bool?
            /// The broker's URL, its password left out.
            package var url: String?
            package var broker: String?
            package var subscribed: Bool?
            package var failedAttempts: Int?
            package var lastError: String?
            package var refusedNotifications: Int?
            package var unexpectedMessages: Int?
            package var inboundGate: Bool?
            /// "5" or "3.1.1".
            package var protocolVersion: String?
            package var pingInterval: Int?
            package var pingLearnedOn: String?
            package var maxKeepalive: Int?

            package init(
                configured: Bool, connected: Bool, url: String?, broker: String?, subscribed: Bool, failedAttempts: Int,
                lastError: String?, refusedNotifications: Int, unexpectedMessages: Int, inboundGate: Bool,
                protocolVersion: String?, pingInterval: Int?, pingLearnedOn: String?, maxKeepalive: Int?
            ) {
                self.configured = configured
                self.connected = connected
                self.url = url
                self.broker = broker
                self.subscribed = subscribed
                self.failedAttempts = failedAttempts
                self.lastError = lastError
                self.refusedNotifications = refusedNotifications
                self.unexpectedMessages = unexpectedMessages
                self.inboundGate = inboundGate
                self.protocolVersion = protocolVersion
                self.pingInterval = pingInterval
                self.pingLearnedOn = pingLearnedOn
                self.maxKeepalive = maxKeepalive
            }

            package var json: JSON {
                .object([
                    ("configured", JSON(configured)), ("connected", JSON(connected)), ("url", JSON(url)), ("broker", JSON(broker)),
                    ("subscribed", JSON(subscribed)), ("failed_attempts", JSON(failedAttempts)), ("last_error", JSON(lastError)),
                    ("refused_notifications", JSON(refusedNotifications)), ("unexpected_messages", JSON(unexpectedMessages)),
                    ("inbound_gate", JSON(inboundGate)), ("protocol", JSON(protocolVersion)), ("ping_interval", JSON(pingInterval)),
                    ("ping_learned_on", JSON(pingLearnedOn)), ("max_keepalive", JSON(maxKeepalive)),
                ])
            }

            package init(json: JSON) {
                let r = Reader(json)
                configured = r.bool("configured")
                connected = r.bool("connected")
                url = r.string("url")
                broker = r.string("broker")
                subscribed = r.bool("subscribed")
                failedAttempts = r.int("failed_attempts")
                lastError = r.string("last_error")
                refusedNotifications = r.int("refused_notifications")
                unexpectedMessages = r.int("unexpected_messages")
                inboundGate = r.bool("inbound_gate")
                protocolVersion = r.string("protocol")
                pingInterval = r.int("ping_interval")
                pingLearnedOn = r.string("ping_learned_on")
                maxKeepalive = r.int("max_keepalive")
            }
        }

        /// `lifecycle` of `Status`: how apps are suspended and started.
        package struct Lifecycle: WireBody, Sendable, Equatable {
            /// cgroup-v2 or sigstop (kept as text).
            package var suspension: String?
            package var cgroup: String?
            package var memoryPressure: String?
            /// The spawn helper's pid while it runs (nil: handlers start in-process).
            package var spawnerPID: Int?
            package var spawnerRefused: Int?
            package var spawnerFallbacks: Int?

            package init(suspension: String, cgroup: String?, memoryPressure: String, spawnerPID: Int?, spawnerRefused: Int, spawnerFallbacks: Int) {
                self.suspension = suspension
                self.cgroup = cgroup
                self.memoryPressure = memoryPressure
                self.spawnerPID = spawnerPID
                self.spawnerRefused = spawnerRefused
                self.spawnerFallbacks = spawnerFallbacks
            }

            package var json: JSON {
                .object([
                    ("suspension", JSON(suspension)), ("cgroup", JSON(cgroup)), ("memory_pressure", JSON(memoryPressure)),
                    ("spawner_pid", JSON(spawnerPID)), ("spawner_refused", JSON(spawnerRefused)), ("spawner_fallbacks", JSON(spawnerFallbacks)),
                ])
            }

            package init(json: JSON) {
                let r = Reader(json)
                suspension = r.string("suspension")
                cgroup = r.string("cgroup")
                memoryPressure = r.string("memory_pressure")
                spawnerPID = r.int("spawner_pid")
                spawnerRefused = r.int("spawner_refused")
                spawnerFallbacks = r.int("spawner_fallbacks")
            }
        }

        /// `journal` of `Status`: how long records waited for the disk, in milliseconds.
        package struct Journal: WireBody, Sendable, Equatable {
            package var syncs: Int?
            package var maxWaitMS: Double?
            package var lastWaitMS: Double?

            package init(syncs: Int, maxWaitMS: Double, lastWaitMS: Double) {
                self.syncs = syncs
                self.maxWaitMS = maxWaitMS
                self.lastWaitMS = lastWaitMS
            }

            package var json: JSON { .object([("syncs", JSON(syncs)), ("max_wait_ms", JSON(maxWaitMS)), ("last_wait_ms", JSON(lastWaitMS))]) }

            package init(json: JSON) {
                let r = Reader(json)
                syncs = r.int("syncs")
                maxWaitMS = r.double("max_wait_ms")
                lastWaitMS = r.double("last_wait_ms")
            }
        }

        package var version: String?
        package var deviceID: String?
        package var mqtt: MQTT?
        package var conditions: Conditions?
        package var nextWindow: Double?
        package var nextWindowApps: [String]?
        package var apps: Int?
        package var invalidApps: Int?
        package var lifecycle: Lifecycle?
        package var journal: Journal?
        package var runningHandlers: Int?
        package var queuedHandlers: Int?

        package init(
            version: String, deviceID: String, mqtt: MQTT, conditions: Conditions, nextWindow: Double?, nextWindowApps: [String],
            apps: Int, invalidApps: Int, lifecycle: Lifecycle, journal: Journal, runningHandlers: Int, queuedHandlers: Int
        ) {
            self.version = version
            self.deviceID = deviceID
            self.mqtt = mqtt
            self.conditions = conditions
            self.nextWindow = nextWindow
            self.nextWindowApps = nextWindowApps
            self.apps = apps
            self.invalidApps = invalidApps
            self.lifecycle = lifecycle
            self.journal = journal
            self.runningHandlers = runningHandlers
            self.queuedHandlers = queuedHandlers
        }

        package var json: JSON {
            let windowApps: JSON = nextWindowApps.map { .array($0.map(JSON.string)) } ?? .null
            return .object([
                ("version", JSON(version)), ("device_id", JSON(deviceID)), ("mqtt", mqtt.json), ("conditions", conditions.json),
                ("next_window", JSON(nextWindow)), ("next_window_apps", windowApps),
                ("apps", JSON(apps)), ("invalid_apps", JSON(invalidApps)), ("lifecycle", lifecycle.json), ("journal", journal.json),
                ("running_handlers", JSON(runningHandlers)), ("queued_handlers", JSON(queuedHandlers)),
            ])
        }

        package init(json: JSON) {
            let r = Reader(json)
            version = r.string("version")
            deviceID = r.string("device_id")
            mqtt = r.object("mqtt", MQTT.init(json:))
            conditions = r.object("conditions", Conditions.init(json:))
            nextWindow = r.double("next_window")
            nextWindowApps = r.strings("next_window_apps")
            apps = r.int("apps")
            invalidApps = r.int("invalid_apps")
            lifecycle = r.object("lifecycle", Lifecycle.init(json:))
            journal = r.object("journal", Journal.init(json:))
            runningHandlers = r.int("running_handlers")
            queuedHandlers = r.int("queued_handlers")
        }
    }
}
