import DrowseCore
import Testing

@Suite("MainConfig [api] and broker credentials")
struct MainConfigAPITests {
    func parse(_ text: String) throws(ConfigError) -> MainConfig {
        try MainConfig.parse(text, file: "/etc/drowse/drowse.toml", machineID: "abc")
    }

    @Test("max_connections_per_uid defaults to 8 and is bounded")
    func perUID() throws {
        #expect(try parse("").api.maxConnectionsPerUID == 8)
        #expect(try parse("[api]\nmax_connections_per_uid = 3").api.maxConnectionsPerUID == 3)
        #expect(throws: ConfigError.self) { try parse("[api]\nmax_connections_per_uid = 0") }
        #expect(throws: ConfigError.self) { try parse("[api]\nmax_connection_per_uid = 3") }
    }

    @Test("a broker URL with user:password@ is refused, and the error does not repeat the password")
    func credentialsInURL() {
        for text in ["[mqtt]\nurl = \"mqtt://alice:s3cret@127.0.0.1:1883\"",
                     "[mqtt]\nurl = [\"mqtt://a:1883\", \"mqtt://alice:s3cret@b:1883\"]",
                     "[mqtt]\nurl = \"mqtts://alice@broker\""] {
            do {
                _ = try parse(text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.key == "mqtt.url" || error.key == "url")
                #expect(error.description.contains("username"))
                #expect(error.description.contains("password_file"))
                #expect(!error.description.contains("s3cret"))
                #expect(!error.description.contains("alice"))
            }
        }
    }
}
