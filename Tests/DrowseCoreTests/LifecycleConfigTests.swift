import DrowseCore
import Testing

/// `[lifecycle]` in drowse.toml and `[process]` in app files.
@Suite struct LifecycleConfigTests {
    private func main(_ text: String) throws -> MainConfig {
        try MainConfig.parse("device_id = \"d\"\n" + text, file: "/etc/drowse/drowse.toml", machineID: nil)
    }

    @Test func defaults() throws {
        let l = try main("").lifecycle
        #expect(l.suspendAfter == .seconds(10))
        #expect(l.backgroundTaskTime == .seconds(30))
        #expect(l.taskExpiryWarning == .seconds(5))
        #expect(l.cgroup == .auto)
        #expect(l.memoryPressure == .trigger(full: false, stallMicros: 200_000, windowMicros: 2_000_000))
        #expect(l.memoryPressure.description == "some 200000 2000000", "as the kernel reads it")
    }

    @Test func read() throws {
        let l = try main("""
            [lifecycle]
            suspend_after = "0s"
            background_task_time = "3m"
            task_expiry_warning = "10s"
            cgroup = "drowse-test"
            memory_pressure = "full 500000 4000000"
            """).lifecycle
        #expect(l.suspendAfter == .zero && l.backgroundTaskTime == .seconds(180) && l.taskExpiryWarning == .seconds(10))
        #expect(l.cgroup == .path("drowse-test") && l.memoryPressure.description == "full 500000 4000000")
        #expect(try main("[lifecycle]\nmemory_pressure = \"off\"\n").lifecycle.memoryPressure == .off)
        #expect(try main("[lifecycle]\ncgroup = \"off\"\n").lifecycle.cgroup == .off)
    }

    @Test(arguments: [
        "background_task_time = \"0s\"", "task_expiry_warning = \"30s\"", "cgroup = \"../escape\"", "cgroup = \"\"",
        "memory_pressure = \"some 1 100\"", "memory_pressure = \"most 1 2000000\"", "memory_pressure = \"some 3000000 2000000\"",
        "suspend_after = 10", "frozen = true",
    ])
    func refused(line: String) {
        #expect(throws: ConfigError.self) { try main("[lifecycle]\n\(line)\n") }
    }

    @Test func residentApps() throws {
        let app = try AppDefinition.parse("""
            id = "logger"
            [process]
            command = ["./logger", "--rate", "10"]
            always_active = true
            [fetch]
            minimum_interval = "15m"
            """, file: "/etc/drowse/apps.d/logger.toml")
        #expect(app.isResident && app.alwaysActive)
        #expect(app.processCommand == ["/etc/drowse/apps.d/logger", "--rate", "10"])
        #expect(app.command(for: .resident) == app.processCommand)
        // Without [process], fetches still need a command.
        #expect(throws: ConfigError.self) {
            try AppDefinition.parse("id = \"x\"\n[fetch]\nminimum_interval = \"15m\"\n", file: "/a/x.toml")
        }
        #expect(throws: ConfigError.self) { try AppDefinition.parse("id = \"x\"\n[process]\nalways_active = true\n", file: "/a/x.toml") }
        #expect(throws: ConfigError.self) { try AppDefinition.parse("id = \"x\"\n[process]\ncommand = [\"a\"]\nrestart = 1\n", file: "/a/x.toml") }
    }
}

/// `[metrics]` in drowse.toml.
@Suite struct MetricsConfigTests {
    private func main(_ text: String) throws -> MainConfig {
        try MainConfig.parse("device_id = \"d\"\n" + text, file: "/etc/drowse/drowse.toml", machineID: nil)
    }

    @Test func textfile() throws {
        #expect(try main("").metrics.textfile == nil)
        #expect(try main("[metrics]\n").metrics.textfile == nil)
        let m = try main("[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/drowse.prom\"\n").metrics
        #expect(m.textfile == "/var/lib/prometheus/node-exporter/drowse.prom")
    }

    @Test(arguments: ["textfile = \"drowse.prom\"", "textfile = \"/tmp/drowse.txt\"", "textfile = \"/tmp/.prom\"", "textfile = 5", "port = 9100"])
    func refused(line: String) {
        #expect(throws: ConfigError.self) { try main("[metrics]\n\(line)\n") }
    }
}
