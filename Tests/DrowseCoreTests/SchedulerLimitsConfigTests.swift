import DrowseCore
import Testing

@Suite("[scheduler] max_concurrent_handlers")
struct SchedulerLimitsConfigTests {
    private func parse(_ text: String) throws -> MainConfig {
        try MainConfig.parse("device_id = \"d\"\n" + text, file: "/etc/drowse/drowse.toml", machineID: nil)
    }

    @Test("defaults to 8")
    func byDefault() throws {
        #expect(try parse("").scheduler.maxConcurrentHandlers == 8)
    }

    @Test("is read from [scheduler]")
    func read() throws {
        #expect(try parse("[scheduler]\nmax_concurrent_handlers = 2\n").scheduler.maxConcurrentHandlers == 2)
    }

    @Test("out of 1...256 is a config error", arguments: ["0", "257", "-1", "\"8\""])
    func outOfRange(value: String) {
        #expect(throws: ConfigError.self) { try parse("[scheduler]\nmax_concurrent_handlers = \(value)\n") }
    }
}
