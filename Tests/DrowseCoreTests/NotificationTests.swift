import DrowseCore
import Testing

@Suite("Notification")
struct NotificationTests {
    func parse(_ text: String) throws(Notification.Refusal) -> Notification {
        try Notification.parse(Array(text.utf8))
    }

    func refusal(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> Notification.Refusal? {
        refusal(bytes: Array(text.utf8), sourceLocation: sourceLocation)
    }

    func refusal(bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> Notification.Refusal? {
        do {
            _ = try Notification.parse(bytes)
            Issue.record("expected a refusal", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    /// An object of exactly `size` bytes: `{"pad":"xxx…"}`.
    static func payload(ofSize size: Int) -> [UInt8] {
        let overhead = #"{"pad":""}"#.utf8.count
        return Array(("{\"pad\":\"" + String(repeating: "x", count: size - overhead) + "\"}").utf8)
    }

    // MARK: - The contract's payload

    @Test("the contract's silent notification parses, keeping the app's own keys")
    func specPayload() throws {
        let text = #"{"aps": {"content-available": 1}, "id": "7c0e", "content-id": 42}"#
        let n = try parse(text)
        #expect(n.contentAvailable)
        #expect(n.id == "7c0e")
        #expect(n.collapseID == nil)
        #expect(n.expiration == nil)
        #expect(n.priority == 5)
        #expect(n.payload["content-id"] == 42)
        #expect(n.raw == Array(text.utf8))
    }

    @Test("an empty object is a valid, non-silent notification with defaults")
    func emptyObject() throws {
        let n = try parse("{}")
        #expect(!n.contentAvailable)
        #expect(n.id == nil)
        #expect(n.priority == 5)
        #expect(n.payload == .object([]))
    }

    // MARK: - Size

    @Test("accepts exactly 4096 bytes and refuses 4097")
    func sizeLimit() throws {
        #expect(Notification.maxBytes == 4096)
        let atLimit = Self.payload(ofSize: 4096)
        #expect(atLimit.count == 4096)
        #expect(try Notification.parse(atLimit).raw.count == 4096)
        let over = Self.payload(ofSize: 4097)
        #expect(refusal(bytes: over) == .tooLarge(4097, limit: 4096))
    }

    @Test("the size is checked before parsing, so huge junk is refused as too large")
    func sizeBeforeParsing() {
        let junk = [UInt8](repeating: 0xFF, count: 1 << 20)
        #expect(refusal(bytes: junk) == .tooLarge(1 << 20, limit: 4096))
    }

    @Test("the limit counts bytes, not characters")
    func sizeInBytes() {
        // 1400 three-byte characters: 1400 characters, but 4200 + 10 bytes.
        let text = "{\"pad\":\"" + String(repeating: "€", count: 1400) + "\"}"
        #expect(refusal(text) == .tooLarge(text.utf8.count, limit: 4096))
    }

    // MARK: - Not JSON / not an object

    @Test("refuses payloads that are not strict JSON", arguments: [
        "", "   ", "not json", "{", "{\"a\":1,}", "{'aps':{}}", "{\"a\":1} trailing", "{\"a\":NaN}", "{\"a\":\"\\x\"}",
        "{\"a\":\"\\uD800\"}", "\u{FEFF}{}",
    ])
    func notJSON(text: String) {
        guard case .notJSON(let why)? = refusal(text) else {
            Issue.record("not refused as notJSON")
            return
        }
        #expect(why.hasPrefix("invalid JSON at byte"))
    }

    @Test("refuses invalid UTF-8 as not JSON")
    func invalidUTF8() {
        guard case .notJSON? = refusal(bytes: [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xFF, 0x22, 0x7D]) else {
            Issue.record("not refused as notJSON")
            return
        }
    }

    @Test("refuses nesting deeper than 32")
    func depth() throws {
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        guard case .notJSON? = refusal("{\"x\":\(deep)}") else {
            Issue.record("deep payload accepted")
            return
        }
        let ok = String(repeating: "[", count: 20) + String(repeating: "]", count: 20)
        #expect(try parse("{\"x\":\(ok)}").payload["x"] != nil)
    }

    @Test("refuses JSON that is not an object", arguments: ["[]", "[{\"aps\":{}}]", "null", "1", "\"aps\"", "true"])
    func notAnObject(text: String) {
        #expect(refusal(text) == .notAnObject)
    }

    // MARK: - content-available

    @Test("content-available 1 marks a silent notification; 0 or absent does not", arguments: [
        (#"{"aps":{"content-available":1}}"#, true), (#"{"aps":{"content-available":1.0}}"#, true),
        (#"{"aps":{"content-available":0}}"#, false), (#"{"aps":{}}"#, false), (#"{"aps":{"alert":"hi"}}"#, false),
        (#"{"content-available":1}"#, false),
    ])
    func contentAvailable(text: String, silent: Bool) throws {
        #expect(try parse(text).contentAvailable == silent)
    }

    @Test("refuses a content-available that is not an integer", arguments: [
        #"{"aps":{"content-available":"1"}}"#, #"{"aps":{"content-available":true}}"#,
        #"{"aps":{"content-available":0.5}}"#, #"{"aps":{"content-available":null}}"#, #"{"aps":{"content-available":[1]}}"#,
    ])
    func badContentAvailable(text: String) {
        #expect(refusal(text) == .badKey("aps.content-available", "must be 0 or 1"))
    }

    @Test("refuses content-available other than 0 or 1, as its message says")
    func contentAvailableOutOfRange() {
        #expect(refusal(#"{"aps":{"content-available":2}}"#) == .badKey("aps.content-available", "must be 0 or 1"))
    }

    @Test("refuses an aps that is not an object", arguments: [#"{"aps":1}"#, #"{"aps":[]}"#, #"{"aps":"x"}"#, #"{"aps":null}"#])
    func badAps(text: String) {
        #expect(refusal(text) == .badKey("aps", "must be an object"))
    }

    @Test("the last of repeated keys wins")
    func repeatedKeys() throws {
        let n = try parse(#"{"aps":{"content-available":0},"aps":{"content-available":1},"priority":5,"priority":10}"#)
        #expect(n.contentAvailable)
        #expect(n.priority == 10)
    }

    // MARK: - priority

    @Test("priority is 10 or 5, default 5", arguments: [
        (#"{}"#, 5), (#"{"priority":10}"#, 10), (#"{"priority":5}"#, 5), (#"{"priority":null}"#, 5), (#"{"priority":10.0}"#, 10),
    ])
    func priority(text: String, expected: Int) throws {
        #expect(try parse(text).priority == expected)
    }

    @Test("refuses any other priority", arguments: ["0", "1", "6", "9", "11", "-5", "\"10\"", "true", "5.5", "[10]"])
    func badPriority(value: String) {
        #expect(refusal("{\"priority\":\(value)}") == .badKey("priority", "must be 5 or 10"))
    }

    // MARK: - id, collapse-id, expiration

    @Test("id and collapse-id are strings, and integers are taken as their decimal text")
    func ids() throws {
        let n = try parse(#"{"id":"abc","collapse-id":"scores"}"#)
        #expect(n.id == "abc")
        #expect(n.collapseID == "scores")
        let m = try parse(#"{"id":42,"collapse-id":-7}"#)
        #expect(m.id == "42")
        #expect(m.collapseID == "-7")
        let o = try parse(#"{"id":null,"collapse-id":null}"#)
        #expect(o.id == nil)
        #expect(o.collapseID == nil)
        #expect(try parse(#"{"id":""}"#).id == "")
    }

    @Test("refuses ids that are neither strings nor integers", arguments: [
        ("id", "1.5"), ("id", "true"), ("id", "[]"), ("id", "{}"), ("collapse-id", "false"), ("collapse-id", "0.1"),
    ])
    func badIDs(key: String, value: String) {
        #expect(refusal("{\"\(key)\":\(value)}") == .badKey(key, "must be a string"))
    }

    @Test("expiration is a Unix time, fractions allowed")
    func expiration() throws {
        #expect(try parse(#"{"expiration":1700000000}"#).expiration == 1_700_000_000)
        #expect(try parse(#"{"expiration":1700000000.25}"#).expiration == 1_700_000_000.25)
        #expect(try parse(#"{"expiration":null}"#).expiration == nil)
        #expect(try parse(#"{"expiration":0}"#).expiration == 0)
    }

    @Test("refuses an expiration that is not a number", arguments: ["\"1700000000\"", "true", "[]", "{}"])
    func badExpiration(value: String) {
        #expect(refusal("{\"expiration\":\(value)}") == .badKey("expiration", "must be a Unix time"))
    }

    @Test("every key Drowse does not read is the app's and is kept")
    func appKeysKept() throws {
        let n = try parse(#"{"aps":{"content-available":1,"x":true},"content-id":42,"nested":{"deep":[1,2]},"id":"i"}"#)
        #expect(n.payload["nested"] == ["deep": [1, 2]])
        #expect(n.payload["aps"]?["x"] == true)
        #expect(try JSON.parse(n.payload.serialized) == n.payload)
    }

    // MARK: - Descriptions

    @Test("refusals read as one line")
    func descriptions() {
        #expect(Notification.Refusal.tooLarge(5000, limit: 4096).description == "payload of 5000 bytes is over the 4096-byte limit")
        #expect(Notification.Refusal.notJSON("x").description == "payload is not JSON (x)")
        #expect(Notification.Refusal.notAnObject.description == "payload is not a JSON object")
        #expect(Notification.Refusal.badKey("priority", "must be 5 or 10").description == "key 'priority' must be 5 or 10")
    }
}

@Suite("Notification spread")
struct NotificationSpreadTests {
    @Test("spread: a number of seconds from 0 to a day", arguments: ["0", "6", "20.5", "86400"])
    func accepted(text: String) throws {
        let n = try Notification.parse(Array(#"{"aps":{"content-available":1},"spread":\#(text)}"#.utf8))
        #expect(n.spread == Double(text))
    }

    @Test("absent or null: no spread")
    func absent() throws {
        #expect(try Notification.parse(Array(#"{"aps":{"content-available":1}}"#.utf8)).spread == nil)
        #expect(try Notification.parse(Array(#"{"spread":null}"#.utf8)).spread == nil)
    }

    @Test("refused: negative, over a day, not a number, out of range",
          arguments: ["-1", "-0.001", "86400.5", "1e9", "1e999", "\"20\"", "true", "[1]", "{}", "NaN", "Infinity"])
    func refused(text: String) {
        #expect(throws: Notification.Refusal.self) {
            try Notification.parse(Array(#"{"aps":{"content-available":1},"spread":\#(text)}"#.utf8))
        }
    }
}
