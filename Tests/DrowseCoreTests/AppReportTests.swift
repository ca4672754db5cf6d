@testable import DrowseCore
import Testing

@Suite("AppReport")
struct AppReportTests {
    @Test("a small object of strings is a report; sorted keys make one text for it")
    func valid() throws {
        let f = try AppReport.fields(try JSON.parse(#"{"version": "2.0-1", "package": "hello"}"#))
        #expect(f == ["version": "2.0-1", "package": "hello"])
        #expect(AppReport.json(f).serialized == #"{"package":"hello","version":"2.0-1"}"#)
        #expect(try AppReport.fields(.object([])) == [:])
    }

    @Test("refused: not an object, not strings, bad or long keys, long values, control characters, too many fields",
          arguments: [
            #"["a"]"#, #"{"version": 2}"#, #"{"Version": "1"}"#, #"{"a b": "1"}"#, #"{"": "1"}"#,
            "{\"\(String(repeating: "k", count: 33))\": \"1\"}", "{\"v\": \"\(String(repeating: "x", count: 129))\"}",
            #"{"v": "1\u001b[2J"}"#, #"{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1"}"#,
          ])
    func refused(_ text: String) throws {
        #expect(throws: ReportError.self) { try AppReport.fields(try JSON.parse(text)) }
    }

    @Test("the fleet status carries reports, and drowse fleet reads them back; a bad report is dropped")
    func inFleetStatus() throws {
        let s = FleetStatus(online: true, apps: ["u"], version: "0.1.0", reports: ["u": ["version": "2.0"]])
        let back = try #require(FleetStatus.parse(Array(s.json.serialized.utf8)))
        #expect(back.reports == ["u": ["version": "2.0"]])
        #expect(s.differs(from: FleetStatus(online: true, apps: ["u"], version: "0.1.0")))
        let bad = #"{"online": true, "reports": {"u": {"version": 3}, "w": {"version": "1"}}}"#
        #expect(FleetStatus.parse(Array(bad.utf8))?.reports == ["w": ["version": "1"]])
    }
}
