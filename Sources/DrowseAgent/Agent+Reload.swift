import DrowseCore
import DrowseSystem

/// `systemctl reload drowsed` (SIGHUP): the app files are read again and applied without
/// dropping work. Running handlers, transfers, queued notifications and resident processes of
/// apps that stay are untouched; a new app is scheduled, subscribed and (if resident) started;
/// a removed app is unscheduled and unsubscribed, and its resident process is stopped.
///
/// drowse.toml is read again too, and a bad one refuses the whole reload (the daemon goes on
/// with what it has). Its other keys (socket, state folder, broker, limits, …) are held by
/// services built at start-up, so a change to them is reported as waiting for a restart
/// rather than half applied.
extension Agent {
    /// What a reload did, for the log and for tests.
    package struct ReloadReport: Sendable, Equatable {
        package var added: [String] = []
        package var removed: [String] = []
        package var changed: [String] = []
        package var invalid: Int = 0
        /// drowse.toml keys that changed and take effect at the next restart.
        package var needRestart: [String] = []
        /// Why nothing was reloaded (drowse.toml could not be read or is invalid).
        package var refused: String?
    }

    @discardableResult
    package func reload() async -> ReloadReport {
        var report = ReloadReport()
        guard !stopping else {
            report.refused = "drowsed is stopping"
            return report
        }
        do {
            let bytes = try FileSystem.readRegularFile(config.file, limit: ConfigFile.maxSize)
            // Checked as at start-up: invalid UTF-8 is refused, not replaced.
            let fresh = try MainConfig.parse(ConfigFile.text(bytes, file: config.file), file: config.file, machineID: FileSystem.machineID())
            report.needRestart = Self.changedKeys(config, fresh)
        } catch let e as ConfigError {
            report.refused = e.description
        } catch let e as RefusedFile {
            report.refused = "\(config.file): \(e.reason)"
        } catch {
            report.refused = "\(config.file): \(error)"
        }
        if let why = report.refused {
            logger.error("reload refused, going on with the configuration in use: \(why)")
            return report
        }

        let before = parts.registry.apps
        loadApps()
        let apps = parts.registry.apps
        report.added = apps.keys.filter { before[$0] == nil }.sorted()
        report.removed = before.keys.filter { apps[$0] == nil }.sorted()
        report.changed = apps.keys.filter { id in before[id].map { $0 != apps[id] } ?? false }.sorted()
        report.invalid = parts.registry.invalid.count

        // Resident processes of removed apps, or of apps no longer resident, stop.
        parts.processes.appsReloaded()
        parts.fetch.appsChanged(parts.registry.fetchIntervals)
        // An added app's finished downloads reach its events handler without a restart.
        parts.transfers.appsChanged(apps)
        // Subscriptions and the fleet status follow.
        parts.events.post(.appsReloaded)
        if !report.needRestart.isEmpty {
            logger.warning("drowse.toml changed: \(report.needRestart.joined(separator: ", ")) take effect at the next restart")
        }
        logger.notice("reloaded: \(parts.registry.apps.count) app(s), \(report.invalid) invalid",
                      metadata: ["added": "\(report.added)", "removed": "\(report.removed)", "changed": "\(report.changed)"])
        return report
    }

    /// The top-level keys and tables of drowse.toml whose values differ, as drowse.toml names them.
    static func changedKeys(_ old: MainConfig, _ new: MainConfig) -> [String] {
        let names = ["deviceID": "device_id", "stateDir": "state_dir", "appsDir": "apps_dir", "socket": "socket", "radioModel": "[radio]", "radioTail": "[radio]"]
        let a = Mirror(reflecting: old).children, b = Mirror(reflecting: new).children
        return zip(a, b).compactMap { x, y in
            guard let label = x.label, label != "file", String(describing: x.value) != String(describing: y.value) else { return nil }
            return names[label] ?? "[\(label)]"
        }
    }
}
