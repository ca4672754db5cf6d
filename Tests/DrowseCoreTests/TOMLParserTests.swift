@testable import DrowseCore
import Testing

struct MissingTable: Error {}

@Suite("TOMLParser")
struct TOMLParserTests {
    /// The table under a dotted path, failing the test when it is missing.
    func table(_ root: TOMLTable, _ path: String..., sourceLocation: SourceLocation = #_sourceLocation) throws -> TOMLTable {
        var t = root
        for key in path {
            guard case .table(let sub)? = t[key] else {
                Issue.record("no table at '\(key)'", sourceLocation: sourceLocation)
                throw MissingTable()
            }
            t = sub
        }
        return t
    }

    func parseError(_ text: String) -> TOMLParseError? {
        do {
            _ = try TOMLParser.parse(text)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Values

    @Test("parses strings, integers, floats and booleans")
    func scalars() throws {
        let t = try TOMLParser.parse("""
            s = "text"
            l = 'C:\\path\\n'
            i = 42
            neg = -17
            plus = +5
            under = 1_000_000
            f = 3.5
            e = 1e3
            fe = -2.5E-2
            yes = true
            no = false
            """)
        #expect(t["s"] == .string("text"))
        #expect(t["l"] == .string("C:\\path\\n"))
        #expect(t["i"] == .integer(42))
        #expect(t["neg"] == .integer(-17))
        #expect(t["plus"] == .integer(5))
        #expect(t["under"] == .integer(1_000_000))
        #expect(t["f"] == .float(3.5))
        #expect(t["e"] == .float(1000))
        #expect(t["fe"] == .float(-0.025))
        #expect(t["yes"] == .bool(true))
        #expect(t["no"] == .bool(false))
        #expect(t["missing"] == nil)
    }

    @Test("basic strings decode escapes; literal strings do not")
    func stringEscapes() throws {
        let t = try TOMLParser.parse(#"""
            a = "q\"b\\s\tt\nn\rr"
            u = "\u00e9\U0001F600"
            lit = 'no \n escape "here"'
            hash = "not # a comment"
            empty = ""
            emptylit = ''
            """#)
        #expect(t["a"] == .string("q\"b\\s\tt\nn\rr"))
        #expect(t["u"] == .string("é😀"))
        #expect(t["lit"] == .string(#"no \n escape "here""#))
        #expect(t["hash"] == .string("not # a comment"))
        #expect(t["empty"] == .string(""))
        #expect(t["emptylit"] == .string(""))
    }

    @Test("refuses bad escapes and surrogate code points in strings", arguments: [
        #"a = "\q""#, #"a = "\x41""#, #"a = "\u12""#, #"a = "\uD800""#, #"a = "\U00110000""#, #"a = "\uZZZZ""#,
    ])
    func badEscapes(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("TOML's \\b and \\f escapes are understood")
    func backspaceAndFormFeedEscapes() throws {
        let t = try TOMLParser.parse(#"a = "x\by\fz""#)
        #expect(t["a"] == .string("x\u{08}y\u{0C}z"))
    }

    @Test("refuses unterminated strings, including ones that run past the line")
    func unterminatedStrings() {
        #expect(throws: TOMLParseError(line: 1, reason: "unterminated string")) { try TOMLParser.parse(#"a = "abc"#) }
        #expect(throws: TOMLParseError(line: 1, reason: "unterminated string")) { try TOMLParser.parse("a = \"abc\nb = 1\"") }
        #expect(throws: TOMLParseError(line: 2, reason: "unterminated string")) { try TOMLParser.parse("x = 1\na = 'abc\n'") }
    }

    @Test("reads multi-line strings (TOML 1.0; the toml-test suite covers them in depth)")
    func multiLineStrings() throws {
        #expect(try TOMLParser.parse("a = \"\"\"x\"\"\"")["a"] == .string("x"))
        #expect(try TOMLParser.parse("a = '''x'''")["a"] == .string("x"))
        #expect(try TOMLParser.parse("a = \"\"\"\nx \\\n  y\\t\"\"\"\"\"\nb = 1")["a"] == .string("x y\t\"\""))
        #expect(throws: TOMLParseError(line: 2, reason: "unterminated multi-line string")) { try TOMLParser.parse("a = '''x\n''") }
    }

    @Test("refuses bare words and malformed numbers", arguments: [
        "a = hello", "a = 1.2.3", "a = 0x1G", "a = 99999999999999999999", "a = True", "a = 12abc", "a = infinity", "a = NaN",
    ])
    func badScalars(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("refuses number forms TOML 1.0 does not allow", arguments: [
        "a = 1.", "a = .5", "a = -.5", "a = 3.e+20", "a = 07", "a = -01", "a = 0_1", "a = 00.5", "a = 1_e2", "a = 1_",
        "a = 1__0", "a = _1", "a = 1_.5", "a = 1._5", "a = 1e", "a = 1e+", "a = 1e_5", "a = 0x", "a = 0x_", "a = 0x_1",
        "a = 0xdead__beef", "a = 0xbeef_", "a = +0x1", "a = -0b1", "a = 0X1F", "a = 0o8", "a = 0b102", "a = 0x1.5",
        "a = 0x8000000000000000", "a = 1e400",
    ])
    func laxNumbers(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("a refused number says why, on its line")
    func numberMessages() {
        func reason(_ word: String) -> String? { parseError("x = 1\na = \(word)").map { "\($0.line): \($0.reason)" } }
        #expect(reason("07") == "2: '07' is not a valid number: leading zeros are not allowed (an octal number is written 0o…)")
        #expect(reason("00.5") == "2: '00.5' is not a valid number: leading zeros are not allowed")
        #expect(reason("1.") == "2: '1.' is not a valid number: a '.' needs a digit on each side (0.5, 1.0)")
        #expect(reason(".5") == "2: '.5' is not a valid number: a '.' needs a digit on each side (0.5, 1.0)")
        #expect(reason("1_e2") == "2: '1_e2' is not a valid number: '_' may only stand between two digits")
        #expect(reason("0x_1") == "2: '0x_1' is not a valid number: '_' may only stand between two digits")
        #expect(reason("0x_") == "2: '0x_' is not a valid number: '_' may only stand between two digits")
        #expect(reason("1e+") == "2: '1e+' is not a valid number: an exponent needs digits after the 'e' (1e6, 2.5e-3)")
        #expect(reason("-0x1") == "2: '-0x1' is not a valid number: hexadecimal numbers take no sign")
        #expect(reason("0o8") == "2: '0o8' is not a valid number: only octal digits may follow '0o'")
        #expect(reason("99999999999999999999") == "2: '99999999999999999999' is not a valid number: outside the 64-bit integer range")
        #expect(reason("0x1_0000_0000_0000_0000") == "2: '0x1_0000_0000_0000_0000' is not a valid number: too large for a 64-bit integer")
        // What is no number at all (a time, a version) is told to be quoted.
        #expect(reason("07:30") == "2: '07:30' is not a valid value (strings need quotes)")
        #expect(reason("1.2.3") == "2: '1.2.3' is not a valid value (strings need quotes)")
        #expect(reason("_x") == "2: '_x' is not a valid value (strings need quotes)")
    }

    @Test("parses the number forms TOML 1.0 allows")
    func validNumbers() throws {
        let t = try TOMLParser.parse("""
            i1 = 1_000
            i2 = 5_349_221
            i3 = 1_2_3_4_5
            zero = 0
            negzero = -0
            poszero = +0
            max = 9223372036854775807
            min = -9223372036854775808
            hex = 0xdead_beef
            hexup = 0xDEADBEEF
            hexe = 0xE
            hexmax = 0x7fff_ffff_ffff_ffff
            oct = 0o17
            perm = 0o755
            octzeros = 0o0017
            bin = 0b101
            binzeros = 0b0000_0101
            f1 = 1e6
            f2 = -0.5
            f3 = +1.5
            f4 = 6.02e+23
            f5 = 1e06
            f6 = -2E-2
            f7 = 6.626e-34
            f8 = 224_617.445_991_228
            f9 = 0.0
            f10 = -0.0
            f11 = 0e0
            f12 = 1.05
            f13 = 1e1_0
            """)
        #expect(t["i1"] == .integer(1000))
        #expect(t["i2"] == .integer(5_349_221))
        #expect(t["i3"] == .integer(12345))
        #expect(t["zero"] == .integer(0) && t["negzero"] == .integer(0) && t["poszero"] == .integer(0))
        #expect(t["max"] == .integer(Int.max))
        #expect(t["min"] == .integer(Int.min))
        #expect(t["hex"] == .integer(0xdead_beef))
        #expect(t["hexup"] == .integer(0xdead_beef))
        // TOML 1.0 hex integer, not a hex float (Double("0xE") would give 14.0).
        #expect(t["hexe"] == .integer(14))
        #expect(t["hexmax"] == .integer(Int.max))
        #expect(t["oct"] == .integer(15))
        #expect(t["perm"] == .integer(0o755))
        #expect(t["octzeros"] == .integer(15))
        #expect(t["bin"] == .integer(5))
        #expect(t["binzeros"] == .integer(5))
        #expect(t["f1"] == .float(1_000_000))
        #expect(t["f2"] == .float(-0.5))
        #expect(t["f3"] == .float(1.5))
        #expect(t["f4"] == .float(6.02e23))
        #expect(t["f5"] == .float(1_000_000))
        #expect(t["f6"] == .float(-0.02))
        #expect(t["f7"] == .float(6.626e-34))
        #expect(t["f8"] == .float(224_617.445_991_228))
        #expect(t["f9"] == .float(0))
        #expect(t["f10"] == .float(-0.0))
        #expect(t["f11"] == .float(0))
        #expect(t["f12"] == .float(1.05))
        #expect(t["f13"] == .float(1e10))
        #expect(try TOMLParser.parse("a = [0x1,0o1 , 1.5]# c")["a"] == .array([.integer(1), .integer(1), .float(1.5)]))
        #expect(try table(try TOMLParser.parse("m = { x = 0b1, y = -1e-1 }"), "m")["y"] == .float(-0.1))
    }

    @Test("refuses redefining a table TOML 1.0 considers closed", arguments: [
        "a = { b = 1 }\na.c = 2",   // inline tables are complete
        "a = { b = 1 }\n[a]",       // same, via a header
        "a.b = 1\n[a]",             // a table made by dotted keys cannot get a header later
        "a = { b = { c = 1 } }\n[a.b]",
        "a = { b = { c = 1 } }\na.b.d = 2",
        "a = {}\n[[a.b]]",
        "[t]\na = { b = 1 }\n[t.a]",
        "[t]\na = { b = 1 }\na.c = 1",
        "m = { a = { b = 1 }, a.c = 2 }",
        "[fruit]\napple.color = 'red'\n[fruit.apple]",
        "[fruit]\napple.taste.sweet = true\n[fruit.apple.taste]",
        "[a.b]\nx = 1\n[a]\nb.y = 2",     // dotted keys cannot reach into a table with its own header
        "[a.b.c]\n[a]\nb.c.d = 2",
        "[[tab.arr]]\n[tab]\narr.val1 = 1", // nor into an array of tables
    ])
    func closedTables(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("a closed table's error names the table and the line that closed it")
    func closedTableMessages() {
        #expect(throws: TOMLParseError(line: 2, reason: "'a' is an inline table (line 1), which cannot be extended; put all its keys inside its braces")) {
            try TOMLParser.parse("a = { b = 1 }\na.c = 2")
        }
        #expect(throws: TOMLParseError(line: 3, reason: "'a' is an inline table (line 1), which cannot be extended; put all its keys inside its braces")) {
            try TOMLParser.parse("a = { b = 1 }\n\n[a]")
        }
        #expect(throws: TOMLParseError(line: 3, reason: "'t.a' is an inline table (line 2), which cannot be extended; put all its keys inside its braces")) {
            try TOMLParser.parse("[t]\na = { b = {} }\n[t.a.b]")
        }
        #expect(throws: TOMLParseError(line: 3, reason: "table [a] was already made by the dotted key on line 1; it cannot also have a header")) {
            try TOMLParser.parse("a.b = 1\na.c = 2\n[a]")
        }
        #expect(throws: TOMLParseError(line: 4, reason: "key 'b.y' reaches into [a.b], which has its own header; put 'y' under it")) {
            try TOMLParser.parse("[a.b]\nx = 1\n[a]\nb.y = 2")
        }
        #expect(throws: TOMLParseError(line: 3, reason: "key 'arr.val1' reaches into the array of tables [[tab.arr]]; put 'val1' under a [[tab.arr]] header")) {
            try TOMLParser.parse("[[tab.arr]]\n[tab]\narr.val1 = 1")
        }
    }

    @Test("dotted keys, headers and inline tables combine where TOML 1.0 allows it")
    func openTables() throws {
        // Dotted keys extend the tables they made, in the same section.
        let t = try TOMLParser.parse("""
            fruit.apple.smooth = true
            fruit.orange = 2
            [owner]
            name.first = "Tom"
            name.last = "P"
            [dog]
            a = 1
            [dog.tater]
            type.name = "pug"
            """)
        #expect(try table(t, "fruit", "apple")["smooth"] == .bool(true))
        #expect(try table(t, "fruit")["orange"] == .integer(2))
        #expect(try table(t, "owner", "name").keys == ["first", "last"])
        #expect(try table(t, "dog", "tater", "type")["name"] == .string("pug"))
        // A header may define a sub-table of a table made by dotted keys (the spec's example).
        let f = try TOMLParser.parse("""
            [fruit]
            apple.color = "red"
            apple.taste.sweet = true
            [fruit.apple.texture]
            smooth = true
            """)
        #expect(try table(f, "fruit", "apple")["color"] == .string("red"))
        #expect(try table(f, "fruit", "apple", "taste")["sweet"] == .bool(true))
        #expect(try table(f, "fruit", "apple", "texture")["smooth"] == .bool(true))
        #expect(try table(try TOMLParser.parse("a.b = 1\n[a.c]\nd = 2"), "a", "c")["d"] == .integer(2))
        // A super-table made only by a sub-table's header may still get its own header.
        #expect(try table(try TOMLParser.parse("[x.y.z.w]\n[x]\nk = 1"), "x")["k"] == .integer(1))
        // Inline tables may hold dotted keys, and each element of an array of tables starts afresh.
        #expect(try table(try TOMLParser.parse("m = { a.b = 1, a.c = 2 }"), "m", "a").keys == ["b", "c"])
        let apps = try elements(try TOMLParser.parse("""
            [[app]]
            env.A = "1"
            opts = { x = 1 }
            [app.limits]
            cpu = 1
            [[app]]
            env.A = "2"
            opts = { x = 2 }
            [app.limits]
            cpu = 2
            """), "app")
        #expect(try apps.map { try table($0, "env")["A"] } == [.string("1"), .string("2")])
        #expect(try apps.map { try table($0, "opts")["x"] } == [.integer(1), .integer(2)])
        #expect(try apps.map { try table($0, "limits")["cpu"] } == [.integer(1), .integer(2)])
    }

    @Test("the shipped config files parse", arguments: [
        "deploy/drowse.toml", "deploy/local.toml", "deploy/apps.d/news.toml", "deploy/apps.d/updater.toml", "deploy/apps.d/weather.toml",
        "deploy/scenarios/twenty-apps-lte.toml", "deploy/scenarios/lunch-reader.toml", "deploy/scenarios/offline-battery.toml",
    ])
    func shippedFiles(path: String) throws {
        #expect(try !TOMLParser.parse(try RepoFile.read(path)).keys.isEmpty)
    }

    @Test("refuses a sign inside a \\u escape")
    func signInUnicodeEscape() {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(#"a = "\u+041""#) }
    }

    @Test("a bare word error says strings need quotes")
    func bareWordMessage() throws {
        let e = try #require(parseError("x = 1\nurl = mqtt://host"))
        #expect(e.line == 2)
        #expect(e.reason.contains("strings need quotes"))
        #expect(e.description == "line 2: \(e.reason)")
    }

    @Test("refuses a key with no value")
    func missingValue() {
        #expect(throws: TOMLParseError(line: 1, reason: "expected a value")) { try TOMLParser.parse("a =") }
        #expect(throws: TOMLParseError(line: 2, reason: "expected a value")) { try TOMLParser.parse("b = 1\na =\nc = 2") }
        #expect(throws: TOMLParseError(line: 1, reason: "expected '=' after key")) { try TOMLParser.parse("a 1") }
        #expect(throws: TOMLParseError(line: 1, reason: "expected a key")) { try TOMLParser.parse("= 1") }
    }

    @Test("refuses text after a value on the same line")
    func trailingText() {
        #expect(throws: TOMLParseError(line: 3, reason: "unexpected text after value")) {
            try TOMLParser.parse("a = 1\nb = 2\nc = \"x\" d = 4")
        }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("a = true false") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("a = 1,") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("[t] x = 1") }
    }

    // MARK: - Comments and layout

    @Test("comments, blank lines, indentation and CRLF are ignored")
    func commentsAndLayout() throws {
        let t = try TOMLParser.parse("# head\r\n\r\n   a = 1   # trailing\r\n\t\tb = \"x\"# tight\r\n[t] # on a header\r\n  c = 2\r\n# end")
        #expect(t["a"] == .integer(1))
        #expect(t["b"] == .string("x"))
        #expect(try table(t, "t")["c"] == .integer(2))
        #expect(t.keys == ["a", "b", "t"])
    }

    @Test("an empty or comment-only document is an empty table")
    func emptyDocument() throws {
        #expect(try TOMLParser.parse("").keys.isEmpty)
        #expect(try TOMLParser.parse("\n\n# nothing\n   \n").keys.isEmpty)
    }

    @Test("keys keep file order")
    func keyOrder() throws {
        let t = try TOMLParser.parse("zeta = 1\nalpha = 2\n[mid]\nx = 1\n[beta]\n")
        #expect(t.keys == ["zeta", "alpha", "mid", "beta"])
    }

    // MARK: - Keys and tables

    @Test("bare keys allow letters, digits, '-' and '_'; quoted keys allow anything")
    func keyKinds() throws {
        let t = try TOMLParser.parse("""
            bare-key_1 = 1
            "quoted.key with space" = 2
            'literal.key' = 3
            1234 = 4
            "" = 5
            """)
        #expect(t["bare-key_1"] == .integer(1))
        #expect(t["quoted.key with space"] == .integer(2))
        #expect(t["literal.key"] == .integer(3))
        #expect(t["1234"] == .integer(4))
        #expect(t[""] == .integer(5))
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("a$b = 1") }
    }

    @Test("table headers create nested tables, and keys go to the current table")
    func tables() throws {
        let t = try TOMLParser.parse("""
            top = 1
            [mqtt]
            url = "mqtt://h"
            [a.b.c]
            deep = true
            [ spaced . name ]
            k = 'v'
            """)
        #expect(t["top"] == .integer(1))
        #expect(try table(t, "mqtt")["url"] == .string("mqtt://h"))
        #expect(try table(t, "a", "b", "c")["deep"] == .bool(true))
        #expect(try table(t, "spaced", "name")["k"] == .string("v"))
        #expect(try table(t, "mqtt")["top"] == nil)
    }

    @Test("an empty table header still defines the table")
    func emptyTable() throws {
        let t = try TOMLParser.parse("[empty]\n")
        #expect(try table(t, "empty").keys.isEmpty)
    }

    @Test("a sub-table may follow its parent and a parent may follow its sub-table")
    func subTablesInEitherOrder() throws {
        let t = try TOMLParser.parse("[a]\nx = 1\n[a.b]\ny = 2\n[c.d]\nz = 3\n[c]\nw = 4\n")
        #expect(try table(t, "a")["x"] == .integer(1))
        #expect(try table(t, "a", "b")["y"] == .integer(2))
        #expect(try table(t, "c", "d")["z"] == .integer(3))
        #expect(try table(t, "c")["w"] == .integer(4))
    }

    @Test("dotted keys build nested tables, at the top and inside a table")
    func dottedKeys() throws {
        let t = try TOMLParser.parse("""
            mqtt.url = "mqtt://h"
            mqtt.keepalive = "60s"
            a . "b.c" . d = 1
            [fetch]
            x.y = 2
            """)
        let mqtt = try table(t, "mqtt")
        #expect(mqtt["url"] == .string("mqtt://h"))
        #expect(mqtt["keepalive"] == .string("60s"))
        #expect(mqtt.keys == ["url", "keepalive"])
        #expect(try table(t, "a", "b.c")["d"] == .integer(1))
        #expect(try table(t, "fetch", "x")["y"] == .integer(2))
    }

    // MARK: - Arrays of tables

    /// The tables of an array of tables, failing the test when it is something else.
    func elements(_ t: TOMLTable, _ key: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [TOMLTable] {
        guard case .array(let items)? = t[key] else {
            Issue.record("no array at '\(key)'", sourceLocation: sourceLocation)
            throw MissingTable()
        }
        return try items.map { item in
            guard case .table(let sub) = item else {
                Issue.record("'\(key)' holds \(item.typeName)", sourceLocation: sourceLocation)
                throw MissingTable()
            }
            return sub
        }
    }

    @Test("[[name]] appends a table, and later keys go into the last one")
    func arraysOfTables() throws {
        let t = try TOMLParser.parse("""
            name = "s"
            [[app]]
            id = "a"
            interval = "5m"

            [[app]]   # a comment
            id = "b"
            uses = ["07:30", "13:00"]
            [[ network ]]
            at = "6h"
            [other]
            x = 1
            """)
        #expect(t.keys == ["name", "app", "network", "other"])
        let apps = try elements(t, "app")
        #expect(apps.count == 2)
        #expect(apps[0]["id"] == .string("a"))
        #expect(apps[0]["interval"] == .string("5m"))
        #expect(apps[0]["uses"] == nil)
        #expect(apps[1]["id"] == .string("b"))
        #expect(apps[1]["uses"] == .array([.string("07:30"), .string("13:00")]))
        #expect(try elements(t, "network")[0]["at"] == .string("6h"))
        #expect(try table(t, "other")["x"] == .integer(1))
        #expect(try table(t, "other")["id"] == nil)
    }

    @Test("each element remembers its header line, and its keys their own lines")
    func arrayOfTablesLines() throws {
        let t = try TOMLParser.parse("a = 1\n[[app]]\nid = 'x'\n\n[[app]]\n\nid = 'y'\n")
        let apps = try elements(t, "app")
        #expect(t.line(of: "app") == 2)
        #expect(apps.map(\.headerLine) == [2, 5])
        #expect(apps[0].line(of: "id") == 3)
        #expect(apps[1].line(of: "id") == 7)
        #expect(try table(t).headerLine == nil)
    }

    @Test("an empty element still counts")
    func emptyElements() throws {
        let apps = try elements(try TOMLParser.parse("[[app]]\n[[app]]\n[[app]]\nid = 'c'"), "app")
        #expect(apps.count == 3)
        #expect(apps[0].keys.isEmpty)
        #expect(apps[2]["id"] == .string("c"))
    }

    @Test("sub-tables, dotted keys and nested arrays of tables go into the current element")
    func nestedArraysOfTables() throws {
        let t = try TOMLParser.parse("""
            [[fruit]]
            name = "apple"
            info.color = "red"
            [fruit.physical]
            shape = "round"
            [[fruit.variety]]
            name = "red delicious"
            [[fruit.variety]]
            name = "granny smith"

            [[fruit]]
            name = "banana"
            [fruit.physical]
            shape = "long"
            [[fruit.variety]]
            name = "plantain"
            [a.b]
            [[a.b.list]]
            k = 1
            """)
        let fruit = try elements(t, "fruit")
        #expect(fruit.count == 2)
        #expect(fruit[0]["name"] == .string("apple"))
        #expect(try table(fruit[0], "info")["color"] == .string("red"))
        #expect(try table(fruit[0], "physical")["shape"] == .string("round"))
        #expect(try elements(fruit[0], "variety").map { $0["name"] } == [.string("red delicious"), .string("granny smith")])
        #expect(fruit[1]["name"] == .string("banana"))
        #expect(try table(fruit[1], "physical")["shape"] == .string("long"))
        #expect(try elements(fruit[1], "variety").map { $0["name"] } == [.string("plantain")])
        #expect(try elements(try table(t, "a", "b"), "list")[0]["k"] == .integer(1))
    }

    @Test("a key defined twice in one element is refused; the same key in two elements is fine")
    func arrayOfTablesDuplicates() throws {
        #expect(throws: TOMLParseError(line: 3, reason: "key 'id' defined twice")) {
            try TOMLParser.parse("[[app]]\nid = 'a'\nid = 'b'")
        }
        #expect(try elements(try TOMLParser.parse("[[app]]\nid = 'a'\n[[app]]\nid = 'a'"), "app").count == 2)
        #expect(throws: TOMLParseError(line: 4, reason: "table [fruit.physical] defined twice")) {
            try TOMLParser.parse("[[fruit]]\n[fruit.physical]\nx = 1\n[fruit.physical]")
        }
    }

    @Test("refuses mixing an array of tables with a table or a value of the same name")
    func arrayOfTablesConflicts() {
        #expect(throws: TOMLParseError(line: 2, reason: "[app] is an array of tables; add an element with [[app]]")) {
            try TOMLParser.parse("[[app]]\n[app]")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "[[app]] names the table [app] defined before")) {
            try TOMLParser.parse("[app]\n[[app]]")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "'app' is an integer, not an array of tables")) {
            try TOMLParser.parse("app = 1\n[[app]]")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "'app' is an array value, not an array of tables")) {
            try TOMLParser.parse("app = [{ id = 'a' }]\n[[app]]")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "'app' is a table, not an array of tables")) {
            try TOMLParser.parse("app.id = 'a'\n[[app]]")
        }
        // A static array is closed: a header cannot reach into it.
        #expect(throws: TOMLParseError(line: 2, reason: "'app' is an array, not a table")) {
            try TOMLParser.parse("app = [{ id = 'a' }]\n[app.x]")
        }
    }

    @Test("refuses malformed array-of-tables headers", arguments: ["[[]]", "[[a]", "[[a] ]", "[[a.]]", "[[a]] x = 1", "[[a b]]"])
    func malformedArrayHeaders(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("refuses malformed headers", arguments: ["[]", "[a", "[a.]", "[.a]", "[a b]"])
    func malformedHeaders(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    // MARK: - Duplicates and conflicts

    @Test("refuses a key defined twice, naming the second line")
    func duplicateKeys() {
        #expect(throws: TOMLParseError(line: 3, reason: "key 'a' defined twice")) {
            try TOMLParser.parse("a = 1\nb = 2\na = 3")
        }
        #expect(throws: TOMLParseError(line: 3, reason: "key 'url' defined twice")) {
            try TOMLParser.parse("[mqtt]\nurl = 'a'\nurl = 'b'")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "key 'x' defined twice")) {
            try TOMLParser.parse("t.x = 1\nt.x = 2")
        }
    }

    @Test("the same key in two different tables is fine")
    func sameKeyDifferentTables() throws {
        let t = try TOMLParser.parse("command = 1\n[fetch]\ncommand = 2\n[notification]\ncommand = 3")
        #expect(t["command"] == .integer(1))
        #expect(try table(t, "fetch")["command"] == .integer(2))
        #expect(try table(t, "notification")["command"] == .integer(3))
    }

    @Test("refuses a table header defined twice")
    func duplicateTables() {
        #expect(throws: TOMLParseError(line: 4, reason: "table [mqtt] defined twice")) {
            try TOMLParser.parse("[mqtt]\nurl = 'a'\n\n[mqtt]\nkeepalive = '1s'")
        }
        #expect(throws: TOMLParseError(line: 2, reason: "table [a.b] defined twice")) { try TOMLParser.parse("[a.b]\n[a.b]") }
    }

    @Test("refuses treating a value as a table")
    func valueIsNotATable() throws {
        #expect(throws: TOMLParseError(line: 2, reason: "'a' is an integer, not a table")) { try TOMLParser.parse("a = 1\n[a]") }
        #expect(throws: TOMLParseError(line: 2, reason: "'a' is a string, not a table")) { try TOMLParser.parse("a = 'x'\na.b = 1") }
        #expect(throws: TOMLParseError(line: 3, reason: "'b' is a boolean, not a table")) { try TOMLParser.parse("[a]\nb = true\n[a.b]") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("a = [1]\na.b = 1") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("a = 1.5\na.b = 1") }
        // A table can't then be overwritten by a plain value either.
        #expect(throws: TOMLParseError(line: 3, reason: "key 't' defined twice")) { try TOMLParser.parse("t.x = 1\nu = 2\nt = 3") }
    }

    // MARK: - Arrays

    @Test("arrays hold any values and may nest")
    func arrays() throws {
        let t = try TOMLParser.parse(#"a = [1, "two", 3.0, true, [4, [5]], { k = "v" }]"#)
        guard case .array(let items)? = t["a"] else {
            Issue.record("not an array")
            return
        }
        #expect(items.count == 6)
        #expect(items[0] == .integer(1))
        #expect(items[1] == .string("two"))
        #expect(items[2] == .float(3))
        #expect(items[3] == .bool(true))
        #expect(items[4] == .array([.integer(4), .array([.integer(5)])]))
        guard case .table(let inline) = items[5] else {
            Issue.record("not a table")
            return
        }
        #expect(inline["k"] == .string("v"))
        #expect(try TOMLParser.parse("e = []")["e"] == .array([]))
        #expect(try TOMLParser.parse("e = [ ]")["e"] == .array([]))
    }

    @Test("arrays may span lines with comments and a trailing comma, and line counting continues after them")
    func multiLineArrays() throws {
        let text = """
            command = [
              "/opt/app/fetch.sh",   # the program
              # a whole-line comment
              "--verbose",
            ]
            after = 1
            bad = oops
            """
        #expect(throws: TOMLParseError(line: 7, reason: "'oops' is not a valid value (strings need quotes)")) {
            try TOMLParser.parse(text)
        }
        let t = try TOMLParser.parse(text.replacingOccurrences("bad = oops", with: ""))
        #expect(t["command"] == .array([.string("/opt/app/fetch.sh"), .string("--verbose")]))
        #expect(t.line(of: "command") == 1)
        #expect(t.line(of: "after") == 6)
    }

    @Test("an error inside a multi-line array names the line of the bad element")
    func errorInsideArray() {
        #expect(throws: TOMLParseError(line: 3, reason: "'x' is not a valid value (strings need quotes)")) {
            try TOMLParser.parse("a = [\n  1,\n  x\n]")
        }
    }

    @Test("refuses malformed arrays", arguments: ["a = [1, 2", "a = [1 2]", "a = [,]", "a = [1,,2]", "a = [\n1,\n"])
    func malformedArrays(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    @Test("an unterminated array is reported")
    func unterminatedArray() {
        #expect(throws: TOMLParseError(line: 3, reason: "unterminated array")) { try TOMLParser.parse("a = [\n1,\n") }
    }

    // MARK: - Inline tables

    @Test("inline tables hold keys, dotted keys and nested inline tables")
    func inlineTables() throws {
        let t = try TOMLParser.parse(#"m = { url = "mqtt://h", port = 1883, tls.on = true, sub = { x = 1 } }"#)
        let m = try table(t, "m")
        #expect(m.keys == ["url", "port", "tls", "sub"])
        #expect(m["url"] == .string("mqtt://h"))
        #expect(m["port"] == .integer(1883))
        #expect(try table(m, "tls")["on"] == .bool(true))
        #expect(try table(m, "sub")["x"] == .integer(1))
        #expect(try table(try TOMLParser.parse("e = {}"), "e").keys.isEmpty)
    }

    @Test("refuses malformed inline tables", arguments: [
        "m = { a = 1, }", "m = { a = 1", "m = { a 1 }", "m = { a = 1 b = 2 }", "m = {\n a = 1 }", "m = { a = 1, a = 2 }",
    ])
    func malformedInlineTables(text: String) {
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(text) }
    }

    // MARK: - Lines

    @Test("each key remembers the line it was written on")
    func keyLines() throws {
        let t = try TOMLParser.parse("\n# c\na = 1\n\n[mqtt]\n\nurl = 'x'\nk.v = 2\n")
        #expect(t.line(of: "a") == 3)
        #expect(t.line(of: "mqtt") == 5)
        let mqtt = try table(t, "mqtt")
        #expect(mqtt.line(of: "url") == 7)
        #expect(mqtt.line(of: "k") == 8)
        #expect(t.line(of: "nope") == nil)
    }

    @Test("errors count lines across CRLF text")
    func crlfLines() {
        #expect(throws: TOMLParseError(line: 3, reason: "key 'a' defined twice")) { try TOMLParser.parse("a = 1\r\n\r\na = 2\r\n") }
    }

    // MARK: - String helper

    @Test("replacingOccurrences replaces every occurrence, without Foundation")
    func replacingOccurrences() {
        #expect("1_000_000".replacingOccurrences("_", with: "") == "1000000")
        #expect("aaa".replacingOccurrences("aa", with: "b") == "ba")
        #expect("abc".replacingOccurrences("", with: "x") == "abc")
        #expect("abc".replacingOccurrences("z", with: "x") == "abc")
        #expect("".replacingOccurrences("a", with: "b") == "")
        #expect("héllo wörld".replacingOccurrences("ö", with: "o") == "héllo world")
    }
}
