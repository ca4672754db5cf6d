@testable import DrowseCore
import Testing

@Suite("JSON")
struct JSONTests {
    // MARK: - Parsing values

    @Test("parses every kind of value")
    func parsesAllKinds() throws {
        let v = try JSON.parse(#"{"n": null, "t": true, "f": false, "i": -12, "d": 1.5e2, "s": "x", "a": [1, [2]], "o": {"k": "v"}}"#)
        #expect(v["n"] == .null)
        #expect(v["t"] == .bool(true))
        #expect(v["f"] == .bool(false))
        #expect(v["i"] == .number(-12))
        #expect(v["d"] == .number(150))
        #expect(v["s"] == .string("x"))
        #expect(v["a"] == [1, [2]])
        #expect(v["o"] == ["k": "v"])
        #expect(v["missing"] == nil)
    }

    @Test("top-level scalars are JSON texts too", arguments: [
        ("null", JSON.null), ("true", .bool(true)), ("false", .bool(false)), ("0", .number(0)),
        (#""hi""#, .string("hi")), ("[]", .array([])), ("{}", .object([])),
    ])
    func topLevelScalars(text: String, expected: JSON) throws {
        #expect(try JSON.parse(text) == expected)
    }

    @Test("whitespace around and inside values is allowed (space, tab, LF, CR only)")
    func whitespace() throws {
        #expect(try JSON.parse(" \t\r\n[ 1 ,\n2 ]\n ") == [1, 2])
        #expect(try JSON.parse("{ \"a\" : 1 }") == ["a": 1])
        // Form feed and vertical tab are not JSON whitespace.
        #expect(throws: JSONParseError.self) { try JSON.parse("\u{0C}1") }
        #expect(throws: JSONParseError.self) { try JSON.parse("1\u{0B}") }
    }

    @Test("members keep file order and repeated keys; the subscript returns the last")
    func memberOrderAndDuplicates() throws {
        let v = try JSON.parse(#"{"b": 1, "a": 2, "b": 3}"#)
        guard case .object(let members) = v else {
            Issue.record("not an object")
            return
        }
        #expect(members.map(\.0) == ["b", "a", "b"])
        #expect(v["b"] == 3)
    }

    @Test("object equality is order-sensitive")
    func objectEqualityIsOrdered() {
        let ab: JSON = ["a": 1, "b": 2]
        let ba: JSON = ["b": 2, "a": 1]
        #expect(ab != ba)
        #expect(ab == ["a": 1, "b": 2])
        #expect(JSON.number(1) != .string("1"))
        #expect(JSON.array([]) != .object([]))
    }

    @Test("the subscript is nil on anything but an object")
    func subscriptOnNonObjects() {
        #expect(JSON.array([1])["0"] == nil)
        #expect(JSON.string("a")["a"] == nil)
        #expect(JSON.null["x"] == nil)
    }

    // MARK: - Strict refusals

    @Test("refuses trailing data after one value", arguments: [
        "1 2", "{} {}", "[1]]", "truex", "nullnull", "\"a\"\"b\"", "0 x", "01",
    ])
    func refusesTrailingData(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("trailing data error names the offset where the extra text starts")
    func trailingDataOffset() {
        #expect(throws: JSONParseError(offset: 4, reason: "trailing data")) { try JSON.parse("{}  x") }
    }

    @Test("refuses empty and whitespace-only text")
    func refusesEmpty() {
        #expect(throws: JSONParseError(offset: 0, reason: "unexpected end")) { try JSON.parse("") }
        #expect(throws: JSONParseError(offset: 3, reason: "unexpected end")) { try JSON.parse(" \n\t") }
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: []) }
    }

    @Test("refuses non-JSON syntax", arguments: [
        "[1,]", "[,1]", "{\"a\":1,}", "{,}", "{\"a\" 1}", "{\"a\":}", "{a:1}", "{'a':1}", "['a']",
        "[1 2]", "{\"a\":1 \"b\":2}", "[", "{", "{\"a\"", "{\"a\":", "[1", "tru", "nul", "True", "NULL",
        "// c\n1", "/* c */ 1", "1 // c", "#1", "undefined", "NaN", "Infinity", "-Infinity", "nan",
    ])
    func refusesSyntax(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("errors carry the byte offset and read as one line")
    func errorOffsets() {
        #expect(throws: JSONParseError(offset: 3, reason: "unexpected character")) { try JSON.parse("[1,]") }
        #expect(throws: JSONParseError(offset: 1, reason: "expected a key")) { try JSON.parse("{a:1}") }
        #expect(throws: JSONParseError(offset: 5, reason: "expected ':'")) { try JSON.parse(#"{"a" 1}"#) }
        let e = JSONParseError(offset: 7, reason: "bad escape")
        #expect(e.description == "invalid JSON at byte 7: bad escape")
    }

    // MARK: - Strings

    @Test("decodes every simple escape")
    func simpleEscapes() throws {
        #expect(try JSON.parse(#""\" \\ \/ \b \f \n \r \t""#) == .string("\" \\ / \u{08} \u{0C} \n \r \t"))
    }

    @Test("decodes \\u escapes, upper and lower case hex, including NUL")
    func unicodeEscapes() throws {
        #expect(try JSON.parse(#""\u0041\u00e9\u00E9\u20AC""#) == .string("Aéé€"))
        #expect(try JSON.parse(#""a\u0000b""#) == .string("a\u{0}b"))
    }

    @Test("joins a surrogate pair into one scalar")
    func surrogatePair() throws {
        let s = try #require(try JSON.parse(#""\uD83D\uDE00""#).stringValue)
        #expect(s == "😀")
        #expect(s.unicodeScalars.map(\.value) == [0x1F600])
        #expect(try JSON.parse(#""\udbff\udfff""#).stringValue?.unicodeScalars.first?.value == 0x10FFFF)
    }

    @Test("refuses lone and malformed surrogates", arguments: [
        #""\uD800""#,            // high surrogate at the end
        #""\uD800x""#,           // high surrogate followed by text
        #""\uD800\n""#,          // high surrogate followed by another escape
        #""\uD800\u0041""#,      // high surrogate followed by a non-surrogate
        #""\uD800\uD800""#,      // two high surrogates
        #""\uDC00""#,            // lone low surrogate
        #""\uDFFF\uD800""#,      // pair in the wrong order
    ])
    func refusesBadSurrogates(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("refuses bad escapes", arguments: [
        #""\x41""#, #""\a""#, #""\'""#, #""\u12""#, #""\u12G4""#, #""\u""#, #""\""#, #""\U0041""#, "\"\\ \"",
    ])
    func refusesBadEscapes(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("refuses raw control characters inside strings")
    func refusesControlCharacters() throws {
        for c in [0x00, 0x01, 0x09, 0x0A, 0x0D, 0x1F] as [UInt8] {
            let bytes: [UInt8] = [0x22, 0x61, c, 0x22]
            #expect(throws: JSONParseError.self) { try JSON.parse(bytes: bytes) }
        }
        // DEL is allowed raw.
        #expect(try JSON.parse(bytes: [0x22, 0x7F, 0x22]) == .string("\u{7F}"))
    }

    @Test("refuses unterminated strings")
    func refusesUnterminated() {
        #expect(throws: JSONParseError(offset: 4, reason: "unterminated string")) { try JSON.parse(#""abc"#) }
        #expect(throws: JSONParseError.self) { try JSON.parse(#"{"a"#) }
    }

    @Test("accepts raw UTF-8 and refuses invalid UTF-8 in strings")
    func utf8InStrings() throws {
        #expect(try JSON.parse("\"héllo ✓ 😀\"") == .string("héllo ✓ 😀"))
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0x22, 0xFF, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0x22, 0xC3, 0x22]) }        // truncated sequence
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0x22, 0xED, 0xA0, 0x80, 0x22]) } // encoded surrogate
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0x22, 0xC0, 0xAF, 0x22]) }  // overlong
    }

    @Test("refuses a byte-order mark and stray bytes outside strings")
    func refusesStrayBytes() {
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0xEF, 0xBB, 0xBF, 0x31]) }
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes: [0xFF]) }
    }

    // MARK: - Numbers

    @Test("parses valid numbers", arguments: [
        ("0", 0.0), ("-0", -0.0), ("7", 7), ("-12", -12), ("3.25", 3.25), ("-0.5", -0.5), ("1e3", 1000),
        ("1E3", 1000), ("1e+3", 1000), ("1e-3", 0.001), ("2.5E-1", 0.25), ("0e0", 0),
        ("123456789012", 123_456_789_012), ("1.7976931348623157e308", 1.7976931348623157e308), ("5e-324", 5e-324),
        ("1e-400", 0),
    ])
    func validNumbers(text: String, expected: Double) throws {
        let v = try #require(try JSON.parse(text).doubleValue)
        #expect(v == expected)
        #expect(v.sign == expected.sign)
    }

    @Test("refuses numbers JSON does not allow", arguments: [
        "01", "-01", "00", "+1", ".5", "1.", "-", "-.5", "1e", "1e+", "1E-", "0x10", "1.2.3", "--1", "1_000", "١",
    ])
    func invalidNumbers(text: String) {
        #expect(throws: JSONParseError.self) { try JSON.parse(text) }
    }

    @Test("refuses numbers that overflow to infinity")
    func refusesHugeNumbers() {
        #expect(throws: JSONParseError(offset: 5, reason: "number out of range")) { try JSON.parse("1e400") }
        #expect(throws: JSONParseError.self) { try JSON.parse("-1e309") }
        #expect(throws: JSONParseError.self) { try JSON.parse("[" + String(repeating: "9", count: 400) + "]") }
    }

    @Test("integer accessors refuse fractions and values beyond exact doubles")
    func integerAccessors() {
        #expect(JSON.number(42).intValue == 42)
        #expect(JSON.number(-42).int64Value == -42)
        #expect(JSON.number(1.0).intValue == 1)
        #expect(JSON.number(1.5).intValue == nil)
        #expect(JSON.number(8.9e15).intValue == 8_900_000_000_000_000)
        #expect(JSON.number(9.1e15).intValue == nil)
        #expect(JSON.number(.infinity).intValue == nil)
        #expect(JSON.number(.nan).intValue == nil)
        #expect(JSON.string("1").intValue == nil)
    }

    @Test("typed accessors return nil for other kinds")
    func typedAccessors() {
        let s: JSON = "x"
        #expect(s.stringValue == "x")
        #expect(s.doubleValue == nil)
        #expect(s.boolValue == nil)
        #expect(s.arrayValue == nil)
        #expect(!s.isNull)
        #expect(JSON.null.isNull)
        #expect(JSON.bool(false).boolValue == false)
        #expect(JSON.array([1]).arrayValue == [1])
    }

    @Test("optional initializers map nil to null")
    func optionalInitializers() {
        #expect(JSON(String?.none) == .null)
        #expect(JSON(Int?.none) == .null)
        #expect(JSON(Int64?.none) == .null)
        #expect(JSON(Double?.none) == .null)
        #expect(JSON(Bool?.none) == .null)
        #expect(JSON("a" as String?) == .string("a"))
        #expect(JSON(3 as Int?) == .number(3))
        #expect(JSON(Int64(1) << 40 as Int64?) == .number(1_099_511_627_776))
        #expect(JSON(2.5 as Double?) == .number(2.5))
        #expect(JSON(true as Bool?) == .bool(true))
    }

    // MARK: - Depth limit

    static func nestedArrays(_ n: Int, inner: String = "") -> String {
        String(repeating: "[", count: n) + inner + String(repeating: "]", count: n)
    }

    @Test("refuses nesting beyond maxDepth")
    func depthLimit() throws {
        // A value at depth d sits inside d containers; depth 0 is the top-level value.
        #expect(try JSON.parse(Self.nestedArrays(2, inner: "1"), maxDepth: 2) == [[1]])
        #expect(throws: JSONParseError.self) { try JSON.parse(Self.nestedArrays(3, inner: "1"), maxDepth: 2) }
        #expect(throws: JSONParseError.self) { try JSON.parse(#"{"a":{"b":{"c":1}}}"#, maxDepth: 2) }
        #expect(try JSON.parse(#"{"a":{"b":1}}"#, maxDepth: 2) == ["a": ["b": 1]])
        #expect(throws: JSONParseError.self) { try JSON.parse("1", maxDepth: -1) }
    }

    @Test("the default depth limit stops a hostile document without exhausting the stack")
    func defaultDepthLimit() throws {
        #expect(try JSON.parse(Self.nestedArrays(64, inner: "1")).arrayValue != nil)
        #expect(throws: JSONParseError.self) { try JSON.parse(Self.nestedArrays(65, inner: "1")) }
        // Far deeper than any stack could recurse: refused early and quickly.
        let hostile = String(repeating: "[", count: 1_000_000)
        #expect(throws: JSONParseError(offset: 65, reason: "nested deeper than 64 levels")) { try JSON.parse(hostile) }
        let hostileObjects = String(repeating: #"{"a":"#, count: 100_000)
        #expect(throws: JSONParseError(offset: 65 * 5, reason: "nested deeper than 64 levels")) { try JSON.parse(hostileObjects) }
        let mixed = String(repeating: #"[{"a":"#, count: 100_000)
        #expect(throws: JSONParseError(offset: 32 * 6 + 1, reason: "nested deeper than 64 levels")) { try JSON.parse(mixed) }
    }

    @Test("the message names the limit the caller chose")
    func depthMessage() {
        #expect(throws: JSONParseError(offset: 3, reason: "nested deeper than 2 levels")) { try JSON.parse("[[[1]]]", maxDepth: 2) }
        #expect(JSONParseError(offset: 3, reason: "nested deeper than 2 levels").description == "invalid JSON at byte 3: nested deeper than 2 levels")
    }

    // MARK: - Serialization

    @Test("serializes compactly in stored order")
    func compact() {
        let v: JSON = ["b": [1, true, nil], "a": ["x": "y"], "e": [], "o": [:]]
        #expect(v.serialized == #"{"b":[1,true,null],"a":{"x":"y"},"e":[],"o":{}}"#)
    }

    @Test("pretty output indents by two spaces and keeps empty containers short")
    func pretty() {
        let v: JSON = ["a": [1, 2], "b": [:], "c": ["d": nil]]
        #expect(v.pretty == """
            {
              "a": [
                1,
                2
              ],
              "b": {},
              "c": {
                "d": null
              }
            }
            """)
        #expect(JSON.array([]).pretty == "[]")
        #expect(JSON.string("x").pretty == "\"x\"")
    }

    @Test("integral numbers print without a fraction, others in shortest round-trip form", arguments: [
        (0.0, "0"), (-0.0, "0"), (42, "42"), (-7, "-7"), (1.5, "1.5"), (0.1, "0.1"), (-2.25, "-2.25"),
        (999_999_999_999_999, "999999999999999"),
    ])
    func numberFormat(n: Double, text: String) {
        #expect(JSON.number(n).serialized == text)
    }

    @Test("very large and very small numbers print as valid JSON that reads back the same", arguments: [
        1e15, -1e15, 1.2345678901234568e17, 1e300, 1.7976931348623157e308, 1e-7, 5e-324, 123.456e-20,
    ])
    func extremeNumbersRoundTrip(n: Double) throws {
        let text = JSON.number(n).serialized
        #expect(try JSON.parse(text) == .number(n), "\(text)")
    }

    @Test("non-finite numbers still serialize to valid JSON", arguments: [Double.infinity, -Double.infinity, Double.nan])
    func nonFiniteNumbers(n: Double) {
        let text = JSON.number(n).serialized
        #expect(throws: Never.self, "\(text)") { try JSON.parse(text) }
    }

    @Test("escapes quotes, backslashes and control characters")
    func stringEscaping() {
        #expect(JSON.string("a\"b\\c").serialized == #""a\"b\\c""#)
        #expect(JSON.string("\n\r\t").serialized == #""\n\r\t""#)
        #expect(JSON.string("\u{0}\u{1}\u{08}\u{0C}\u{1F}").serialized == #""\u0000\u0001\u0008\u000c\u001f""#)
        // Slash and non-ASCII pass through unescaped; DEL (like C1 and bidi controls) is escaped,
        // so JSON read on a terminal cannot drive it.
        #expect(JSON.string("/é😀").serialized == "\"/é😀\"")
        #expect(JSON.string("\u{7F}").serialized == #""\u007f""#)
        #expect(JSON.object([("k\"ey", .null)]).serialized == #"{"k\"ey":null}"#)
    }

    @Test("serialized text parses back to the same value", arguments: [
        JSON.null, true, false, 0, -1, 3.14159, 1e-9, "", "plain", "ctl \u{0}\u{1}\u{1F} \"q\" \\ / ☃ 😀",
        [], [:], [1, "two", [3, [4, [nil]]], ["k": false]],
        ["aps": ["content-available": 1], "id": "7c0e", "content-id": 42, "nested": ["a": [1.5, -2e-5]]],
        .object([("dup", 1), ("dup", 2)]),
    ] as [JSON])
    func roundTrip(value: JSON) throws {
        #expect(try JSON.parse(value.serialized) == value)
        #expect(try JSON.parse(value.pretty) == value)
    }

    @Test("parse → serialize is stable for canonical compact text")
    func canonicalTextIsStable() throws {
        let text = #"{"a":[1,2.5,"x",null,true,false],"b":{"c":{}},"d":[]}"#
        #expect(try JSON.parse(text).serialized == text)
    }

    @Test("every control character round-trips")
    func controlCharactersRoundTrip() throws {
        let s = String(String.UnicodeScalarView((0..<0x20).map { Unicode.Scalar(UInt8($0)) }))
        #expect(try JSON.parse(JSON.string(s).serialized) == .string(s))
    }
}
