/// Why a TOML text was refused.
package struct TOMLParseError: Error, Equatable, CustomStringConvertible {
    package var line: Int
    package var reason: String
    package var description: String { "line \(line): \(reason)" }
}

/// A small strict TOML 1.0 parser: all of TOML but dates and times, which are refused with a
/// message saying no setting takes one.
package struct TOMLParser {
    /// How deep a value may sit: every key of a header or dotted key, every array and every
    /// inline table on the way counts one level. Drowse's files use 3; the limit is there because
    /// the parser recurses once per level, and 100k nested `[` would overflow the stack.
    package static let maxDepth = 64

    private var bytes: [UInt8]
    private var i = 0
    private var line = 1

    package static func parse(_ text: String) throws(TOMLParseError) -> TOMLTable {
        var p = TOMLParser(bytes: Array(text.utf8))
        return try p.document()
    }

    /// Parses the bytes of a file, which must be UTF-8.
    package static func parse(bytes: [UInt8]) throws(TOMLParseError) -> TOMLTable {
        _ = try text(bytes)
        var p = TOMLParser(bytes: bytes)
        return try p.document()
    }

    /// The bytes of a file as text, refused unless they are valid UTF-8 (TOML 1.0): no stray
    /// continuation byte, no overlong form, no surrogate, nothing past U+10FFFF. Decoding
    /// with replacement instead would let a file that is not TOML pass with U+FFFD in it.
    package static func text(_ bytes: [UInt8]) throws(TOMLParseError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            var line = 1
            var valid = 0
            // The line of the first bad byte: the longest valid prefix ends on it.
            for (n, b) in bytes.enumerated() where b == 0x0A {
                if String(validating: bytes[valid..<n], as: UTF8.self) == nil { break }
                valid = n
                line += 1
            }
            throw TOMLParseError(line: line, reason: "the file is not valid UTF-8")
        }
        return text
    }

    /// Said when a value is a date or time.
    static let noDates = "no setting takes a date or time"

    private init(bytes: [UInt8]) {
        self.bytes = bytes
        // A UTF-8 byte-order mark at the start is no part of the text.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { i = 3 }
    }

    private func fail(_ reason: String) -> TOMLParseError { TOMLParseError(line: line, reason: reason) }
    private func tooDeep() -> TOMLParseError { fail("nested deeper than \(Self.maxDepth) levels") }
    private var atEnd: Bool { i >= bytes.count }
    private var peek: UInt8 { bytes[i] }

    private mutating func skipSpaces() {
        while !atEnd, peek == 0x20 || peek == 0x09 { i += 1 }
    }

    /// Skips a comment up to its newline. A comment may hold no control character but tab
    /// (and the CR of a CRLF).
    private mutating func skipComment() throws(TOMLParseError) {
        guard !atEnd, peek == UInt8(ascii: "#") else { return }
        while !atEnd, peek != 0x0A {
            if Self.isControl(peek), !isCRLF { throw fail("control character U+\(Self.hex(peek)) in a comment") }
            i += 1
        }
    }

    /// Control characters no comment or string may hold: all but tab.
    private static func isControl(_ c: UInt8) -> Bool { (c < 0x20 && c != 0x09) || c == 0x7F }
    private static func hex(_ c: UInt8) -> String {
        let h = String(c, radix: 16, uppercase: true)
        return String(repeating: "0", count: 4 - h.count) + h
    }
    /// Whether a CR at `i` starts a CRLF (a CR alone is not a newline in TOML).
    private var isCRLF: Bool { peek == 0x0D && i + 1 < bytes.count && bytes[i + 1] == 0x0A }

    /// Skips blank space, newlines and comments (inside arrays).
    private mutating func skipAll() throws(TOMLParseError) {
        while !atEnd {
            if peek == 0x20 || peek == 0x09 || isCRLF { i += 1 }
            else if peek == 0x0A { i += 1; line += 1 }
            else if peek == UInt8(ascii: "#") { try skipComment() }
            else { break }
        }
    }

    private mutating func endOfLine() throws(TOMLParseError) {
        skipSpaces()
        try skipComment()
        if !atEnd, isCRLF { i += 1 }
        if atEnd { return }
        guard peek == 0x0A else { throw fail("unexpected text after value") }
        i += 1
        line += 1
    }

    private mutating func document() throws(TOMLParseError) -> TOMLTable {
        var root = TOMLTable()
        var current: [String] = []
        var definedTables = TOMLPathIndex<Int>()
        // Paths made by `[[...]]` headers: keys and headers below them go into the last element.
        var arrayTables = TOMLPathIndex<Int>()
        // Tables made by dotted keys and by inline tables, with the line that made them. TOML
        // closes both to a later `[header]`, and an inline table to dotted keys as well.
        var dottedTables = TOMLPathIndex<Int>()
        var inlineTables = TOMLPathIndex<Int>()
        while true {
            try skipAll()
            if atEnd { break }
            if peek == UInt8(ascii: "[") {
                i += 1
                let isArray = !atEnd && peek == UInt8(ascii: "[")
                if isArray { i += 1 }
                skipSpaces()
                let path = try keyPath(depth: 0)
                skipSpaces()
                guard !atEnd, peek == UInt8(ascii: "]") else { throw fail(isArray ? "expected ']]'" : "expected ']'") }
                i += 1
                let name = path.joined(separator: ".")
                if let closed = Self.firstClosed(path, in: inlineTables, includingLast: true) {
                    throw inlineClosed(closed.path, line: closed.line)
                }
                if isArray {
                    guard !atEnd, peek == UInt8(ascii: "]") else { throw fail("expected ']]'") }
                    i += 1
                    guard !definedTables.contains(path) else { throw fail("[[\(name)]] names the table [\(name)] defined before") }
                    try Self.appendTable(&root, path, arrays: arrayTables, line: line)
                    // A new element starts empty: its sub-tables may be defined again.
                    definedTables.removeAll(below: path)
                    arrayTables.removeAll(below: path)
                    dottedTables.removeAll(below: path)
                    inlineTables.removeAll(below: path)
                    arrayTables.insert(path, line)
                } else {
                    guard !arrayTables.contains(path) else { throw fail("[\(name)] is an array of tables; add an element with [[\(name)]]") }
                    if let dotted = dottedTables[path] {
                        throw fail("table [\(name)] was already made by the dotted key on line \(dotted); it cannot also have a header")
                    }
                    guard definedTables.insert(path, line) else { throw fail("table [\(name)] defined twice") }
                    try Self.withTable(&root, path[...], above: [], arrays: arrayTables, line: line) { (_: inout TOMLTable) throws(TOMLParseError) in }
                }
                current = path
                try endOfLine()
                continue
            }
            let keyLine = line
            let path = try keyPath(depth: current.count)
            skipSpaces()
            guard !atEnd, peek == UInt8(ascii: "=") else { throw fail("expected '=' after key") }
            i += 1
            skipSpaces()
            // A dotted key may only make or extend tables of its own section: not one with its
            // own header, an array of tables, or an inline table.
            let prefixes = (1..<path.count).map { current + path[..<$0] }
            for table in prefixes {
                let name = table.joined(separator: ".")
                if definedTables.contains(table) {
                    throw fail("key '\(path.joined(separator: "."))' reaches into [\(name)], which has its own header; put '\(path.last!)' under it")
                }
                if arrayTables.contains(table) {
                    throw fail("key '\(path.joined(separator: "."))' reaches into the array of tables [[\(name)]]; put '\(path.last!)' under a [[\(name)]] header")
                }
            }
            if let closed = Self.firstClosed(current + path, in: inlineTables, includingLast: false) {
                throw inlineClosed(closed.path, line: closed.line)
            }
            let value = try value(depth: current.count + path.count)
            try Self.insert(&root, current + path, value, arrays: arrayTables, line: keyLine)
            for table in prefixes { dottedTables.insert(table, keyLine) }
            if case .table = value { inlineTables.insert(current + path, keyLine) }
            try endOfLine()
        }
        return root
    }

    /// The first table on the way to `path` (and `path` itself when `includingLast`) that
    /// `closed` holds, with the line that made it.
    private static func firstClosed(_ path: [String], in closed: TOMLPathIndex<Int>, includingLast: Bool) -> (path: [String], line: Int)? {
        guard !closed.isEmpty else { return nil }
        for n in 1...path.count where n < path.count || includingLast {
            if let line = closed[Array(path.prefix(n))] { return (Array(path.prefix(n)), line) }
        }
        return nil
    }

    private func inlineClosed(_ path: [String], line: Int) -> TOMLParseError {
        fail("'\(path.joined(separator: "."))' is an inline table (line \(line)), which cannot be extended; put all its keys inside its braces")
    }

    /// Runs `body` on the table at `path` below `t`, creating tables on the way; an array of
    /// tables on the way (one in `arrays`) stands for its last element.
    private static func withTable(
        _ t: inout TOMLTable, _ path: ArraySlice<String>, above: [String], arrays: TOMLPathIndex<Int>, line: Int,
        _ body: (inout TOMLTable) throws(TOMLParseError) -> Void
    ) throws(TOMLParseError) {
        guard let first = path.first else { return try body(&t) }
        let here = above + [first]
        let rest = path.dropFirst()
        guard t[first] != nil else {
            var sub = TOMLTable()
            try withTable(&sub, rest, above: here, arrays: arrays, line: line, body)
            t.set(first, .table(sub), line: line)
            return
        }
        // Changed in place (see `modify`); on a throw the whole document is dropped, so what is
        // left behind does not matter.
        try t.modify(first) { (value: inout TOMLValue) throws(TOMLParseError) in
            if var sub = value.takeTable() {
                try withTable(&sub, rest, above: here, arrays: arrays, line: line, body)
                value = .table(sub)
            } else if case .array = value, arrays.contains(here), var items = value.takeArray() {
                guard !items.isEmpty, var last = items[items.count - 1].takeTable() else {
                    throw TOMLParseError(line: line, reason: "'\(first)' is not a table")
                }
                try withTable(&last, rest, above: here, arrays: arrays, line: line, body)
                items[items.count - 1] = .table(last)
                value = .array(items)
            } else {
                throw TOMLParseError(line: line, reason: "'\(first)' is \(value.typeName), not a table")
            }
        }
    }

    private static func insert(_ t: inout TOMLTable, _ path: [String], _ v: TOMLValue, arrays: TOMLPathIndex<Int> = TOMLPathIndex(), line: Int) throws(TOMLParseError) {
        let key = path[path.count - 1]
        try withTable(&t, path.dropLast(), above: [], arrays: arrays, line: line) { (table: inout TOMLTable) throws(TOMLParseError) in
            guard table[key] == nil else { throw TOMLParseError(line: line, reason: "key '\(key)' defined twice") }
            table.set(key, v, line: line)
        }
    }

    /// `[[path]]`: appends an empty table to the array at `path`, creating the array if needed.
    private static func appendTable(_ t: inout TOMLTable, _ path: [String], arrays: TOMLPathIndex<Int>, line: Int) throws(TOMLParseError) {
        let key = path[path.count - 1]
        let isArrayOfTables = arrays.contains(path)
        try withTable(&t, path.dropLast(), above: [], arrays: arrays, line: line) { (table: inout TOMLTable) throws(TOMLParseError) in
            var element = TOMLTable()
            element.headerLine = line
            guard table[key] != nil else {
                table.set(key, .array([.table(element)]), line: line)
                return
            }
            try table.modify(key) { (value: inout TOMLValue) throws(TOMLParseError) in
                guard case .array = value else {
                    throw TOMLParseError(line: line, reason: "'\(key)' is \(value.typeName), not an array of tables")
                }
                guard isArrayOfTables, var items = value.takeArray() else {
                    throw TOMLParseError(line: line, reason: "'\(key)' is an array value, not an array of tables")
                }
                items.append(.table(element))
                value = .array(items)
            }
        }
    }

    /// A dotted key that starts `depth` levels down. Refused as soon as it reaches too deep: a
    /// 100k-part key would cost 100k² in the checks that follow.
    private mutating func keyPath(depth: Int) throws(TOMLParseError) -> [String] {
        var parts = [try simpleKey()]
        while true {
            guard depth + parts.count <= Self.maxDepth else { throw tooDeep() }
            skipSpaces()
            guard !atEnd, peek == UInt8(ascii: ".") else { return parts }
            i += 1
            skipSpaces()
            parts.append(try simpleKey())
        }
    }

    private mutating func simpleKey() throws(TOMLParseError) -> String {
        guard !atEnd else { throw fail("expected a key") }
        if peek == UInt8(ascii: "\"") { return try basicString() }
        if peek == UInt8(ascii: "'") { return try literalString() }
        let start = i
        while !atEnd, Self.isBareKeyByte(peek) { i += 1 }
        guard i > start else { throw fail("expected a key") }
        return String(decoding: bytes[start..<i], as: UTF8.self)
    }

    private static func isBareKeyByte(_ c: UInt8) -> Bool {
        (0x30...0x39).contains(c) || (0x41...0x5A).contains(c) || (0x61...0x7A).contains(c)
            || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
    }

    /// The value at `depth` (1 for `a = ...` at the top): arrays and inline tables recurse, so
    /// the depth is checked before they do.
    private mutating func value(depth: Int) throws(TOMLParseError) -> TOMLValue {
        guard !atEnd else { throw fail("expected a value") }
        guard depth <= Self.maxDepth else { throw tooDeep() }
        switch peek {
        case UInt8(ascii: "\""):
            if startsTriple(0x22) { return .string(try multiLineString(basic: true)) }
            return .string(try basicString())
        case UInt8(ascii: "'"):
            if startsTriple(0x27) { return .string(try multiLineString(basic: false)) }
            return .string(try literalString())
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "{"): return try inlineTable(depth: depth)
        default: return try scalar()
        }
    }

    private mutating func array(depth: Int) throws(TOMLParseError) -> TOMLValue {
        i += 1
        var items: [TOMLValue] = []
        while true {
            try skipAll()
            guard !atEnd else { throw fail("unterminated array") }
            if peek == UInt8(ascii: "]") { i += 1; return .array(items) }
            items.append(try value(depth: depth + 1))
            try skipAll()
            guard !atEnd else { throw fail("unterminated array") }
            if peek == UInt8(ascii: ",") { i += 1; continue }
            if peek == UInt8(ascii: "]") { i += 1; return .array(items) }
            throw fail("expected ',' or ']' in array")
        }
    }

    private mutating func inlineTable(depth: Int) throws(TOMLParseError) -> TOMLValue {
        i += 1
        var t = TOMLTable()
        // Inline tables nested in this one: they are complete too.
        var inlineTables = TOMLPathIndex<Int>()
        skipSpaces()
        if !atEnd, peek == UInt8(ascii: "}") { i += 1; return .table(t) }
        while true {
            skipSpaces()
            let path = try keyPath(depth: depth)
            skipSpaces()
            guard !atEnd, peek == UInt8(ascii: "=") else { throw fail("expected '=' in inline table") }
            i += 1
            skipSpaces()
            if let closed = Self.firstClosed(path, in: inlineTables, includingLast: false) {
                throw inlineClosed(closed.path, line: closed.line)
            }
            let keyLine = line
            let value = try value(depth: depth + path.count)
            try Self.insert(&t, path, value, line: keyLine)
            if case .table = value { inlineTables.insert(path, keyLine) }
            skipSpaces()
            guard !atEnd else { throw fail("unterminated inline table") }
            if peek == UInt8(ascii: ",") { i += 1; continue }
            if peek == UInt8(ascii: "}") { i += 1; return .table(t) }
            throw fail("expected ',' or '}' in inline table")
        }
    }

    private mutating func scalar() throws(TOMLParseError) -> TOMLValue {
        let start = i
        while !atEnd, !(peek == 0x20 || peek == 0x09 || peek == 0x0A || peek == 0x0D || peek == UInt8(ascii: ",")
            || peek == UInt8(ascii: "]") || peek == UInt8(ascii: "}") || peek == UInt8(ascii: "#")) { i += 1 }
        let word = Array(bytes[start..<i])
        let text = String(decoding: word, as: UTF8.self)
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        if word.isEmpty { throw fail("expected a value") }
        if Self.looksLikeDateOrTime(word) { throw fail("'\(text)' is a date or time, and \(Self.noDates)") }
        return try number(word, text)
    }

    /// A TOML 1.0 number: a decimal integer (optional sign, no leading zeros), a `0x`, `0o` or
    /// `0b` integer (no sign), or a float, which needs digits on both sides of its '.', or
    /// `inf` or `nan` with an optional sign. A '_' may only stand between two digits.
    private func number(_ w: [UInt8], _ text: String) throws(TOMLParseError) -> TOMLValue {
        func bad(_ why: String) -> TOMLParseError { fail("'\(text)' is not a valid number: \(why)") }
        let notAValue = fail("'\(text)' is not a valid value (strings need quotes)")
        var j = 0
        let sign = w[0] == UInt8(ascii: "+") || w[0] == UInt8(ascii: "-") ? w[0] : nil
        if sign != nil { j += 1 }
        switch String(decoding: w[j...], as: UTF8.self) {
        case "inf": return .float(sign == UInt8(ascii: "-") ? -.infinity : .infinity)
        case "nan": return .float(sign == UInt8(ascii: "-") ? -.nan : .nan)
        default: break
        }
        let radixes: [UInt8: (radix: Int, name: String)] = [
            UInt8(ascii: "x"): (16, "hexadecimal"), UInt8(ascii: "o"): (8, "octal"), UInt8(ascii: "b"): (2, "binary"),
        ]
        if j + 1 < w.count, w[j] == UInt8(ascii: "0"), let (radix, name) = radixes[w[j + 1]] {
            let prefix = String(decoding: w[j..<j + 2], as: UTF8.self)
            guard sign == nil else { throw bad("\(name) numbers take no sign") }
            j += 2
            let digits = try digitRun(w, &j, radix: radix, text)
            if j < w.count, w[j] == UInt8(ascii: "_") { throw bad(Self.underscoreRule) }
            guard j == w.count, !digits.isEmpty else { throw bad("only \(name) digits may follow '\(prefix)'") }
            guard let n = Int(digits, radix: radix) else { throw bad("too large for a 64-bit integer") }
            return .integer(n)
        }
        let whole = try digitRun(w, &j, radix: 10, text)
        var fraction = ""
        if j < w.count, w[j] == UInt8(ascii: ".") {
            j += 1
            fraction = try digitRun(w, &j, radix: 10, text)
            guard !whole.isEmpty, !fraction.isEmpty else { throw bad("a '.' needs a digit on each side (0.5, 1.0)") }
        }
        var exponent = ""
        if !whole.isEmpty, j < w.count, w[j] == UInt8(ascii: "e") || w[j] == UInt8(ascii: "E") {
            j += 1
            if j < w.count, w[j] == UInt8(ascii: "+") || w[j] == UInt8(ascii: "-") {
                if w[j] == UInt8(ascii: "-") { exponent = "-" }
                j += 1
            }
            let digits = try digitRun(w, &j, radix: 10, text)
            guard !digits.isEmpty else { throw bad("an exponent needs digits after the 'e' (1e6, 2.5e-3)") }
            exponent = "e" + exponent + digits
        }
        guard j == w.count, !whole.isEmpty else { throw notAValue }
        let isFloat = !fraction.isEmpty || !exponent.isEmpty
        if whole.count > 1, whole.first == "0" {
            throw bad("leading zeros are not allowed" + (isFloat ? "" : " (an octal number is written 0o…)"))
        }
        let signed = (sign == UInt8(ascii: "-") ? "-" : "") + whole
        guard isFloat else {
            guard let n = Int(signed) else { throw bad("outside the 64-bit integer range") }
            return .integer(n)
        }
        guard let d = Double(signed + (fraction.isEmpty ? "" : "." + fraction) + exponent), d.isFinite else {
            throw bad("outside the range of a 64-bit float")
        }
        return .float(d)
    }

    private static let underscoreRule = "'_' may only stand between two digits"

    /// The digits of `radix` at `w[j...]`, without the '_'s between them; stops at anything else.
    private func digitRun(_ w: [UInt8], _ j: inout Int, radix: Int, _ text: String) throws(TOMLParseError) -> String {
        func isDigit(_ k: Int) -> Bool {
            guard k < w.count else { return false }
            let c = w[k] | 0x20  // ASCII lower case
            let v = (0x30...0x39).contains(w[k]) ? Int(w[k] - 0x30) : (0x61...0x66).contains(c) ? Int(c - 0x61) + 10 : radix
            return v < radix
        }
        var digits = ""
        while j < w.count {
            if isDigit(j) {
                digits.append(Character(Unicode.Scalar(w[j])))
                j += 1
            } else if w[j] == UInt8(ascii: "_"), !digits.isEmpty || isDigit(j + 1) {
                guard !digits.isEmpty, isDigit(j + 1) else { throw fail("'\(text)' is not a valid number: \(Self.underscoreRule)") }
                j += 1
            } else {
                break
            }
        }
        return digits
    }

    private mutating func literalString() throws(TOMLParseError) -> String {
        i += 1
        let start = i
        while !atEnd, peek != UInt8(ascii: "'") {
            if peek == 0x0A { throw fail("unterminated string") }
            if Self.isControl(peek) { throw fail("control character U+\(Self.hex(peek)) in a string") }
            i += 1
        }
        guard !atEnd else { throw fail("unterminated string") }
        let s = String(decoding: bytes[start..<i], as: UTF8.self)
        i += 1
        return s
    }

    private mutating func basicString() throws(TOMLParseError) -> String {
        i += 1
        var out: [UInt8] = []
        while true {
            guard !atEnd, peek != 0x0A else { throw fail("unterminated string") }
            let c = peek
            i += 1
            if c == 0x22 { break }
            if Self.isControl(c) { throw fail("control character U+\(Self.hex(c)) in a string") }
            if c != UInt8(ascii: "\\") { out.append(c); continue }
            try escape(into: &out)
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8") }
        return s
    }

    /// Whether `"""` (or `'''`) starts at `i`.
    private func startsTriple(_ q: UInt8) -> Bool {
        i + 2 < bytes.count && bytes[i] == q && bytes[i + 1] == q && bytes[i + 2] == q
    }

    /// A multi-line basic (`"""`) or literal (`'''`) string. A newline right after the opening
    /// delimiter is dropped; up to two quotes may stand before the closing one. In a basic one,
    /// a backslash at the end of a line drops it and the blank space and newlines after it.
    private mutating func multiLineString(basic: Bool) throws(TOMLParseError) -> String {
        let q: UInt8 = basic ? 0x22 : 0x27
        i += 3
        if !atEnd, isCRLF { i += 1 }
        if !atEnd, peek == 0x0A { i += 1; line += 1 }
        var out: [UInt8] = []
        while true {
            guard !atEnd else { throw fail("unterminated multi-line string") }
            let c = peek
            if c == q, startsTriple(q) {
                var n = 3
                while i + n < bytes.count, bytes[i + n] == q { n += 1 }
                guard n <= 5 else { throw fail("too many quotes at the end of a multi-line string") }
                out.append(contentsOf: repeatElement(q, count: n - 3))
                i += n
                break
            }
            if c == 0x0A { out.append(c); i += 1; line += 1; continue }
            if isCRLF { out.append(0x0A); i += 2; line += 1; continue }
            if Self.isControl(c) { throw fail("control character U+\(Self.hex(c)) in a string") }
            i += 1
            guard basic, c == UInt8(ascii: "\\") else { out.append(c); continue }
            // A line-ending backslash: blank space, then a newline.
            var k = i
            while k < bytes.count, bytes[k] == 0x20 || bytes[k] == 0x09 { k += 1 }
            if k < bytes.count, bytes[k] == 0x0A || (bytes[k] == 0x0D && k + 1 < bytes.count && bytes[k + 1] == 0x0A) {
                i = k
                while !atEnd {
                    if peek == 0x20 || peek == 0x09 || isCRLF { i += 1 }
                    else if peek == 0x0A { i += 1; line += 1 }
                    else { break }
                }
                continue
            }
            try escape(into: &out)
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8") }
        return s
    }

    /// The escape after a backslash, at `i`.
    private mutating func escape(into out: inout [UInt8]) throws(TOMLParseError) {
            guard !atEnd else { throw fail("unterminated string") }
            let e = peek
            i += 1
            switch e {
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "u"), UInt8(ascii: "U"):
                let n = e == UInt8(ascii: "u") ? 4 : 8
                guard i + n <= bytes.count, bytes[i..<i + n].allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
                    let v = UInt32(String(decoding: bytes[i..<i + n], as: UTF8.self), radix: 16),
                    let u = Unicode.Scalar(v)
                else { throw fail("bad unicode escape") }
                i += n
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default: throw fail("bad escape in string")
            }
    }

    /// `1979-05-27…` or `07:32:00…`: a date or time, which no setting takes. (`07:30` is
    /// neither, a TOML time has seconds: it is told to be quoted like any bare word.)
    private static func looksLikeDateOrTime(_ w: [UInt8]) -> Bool {
        func digits(_ r: Range<Int>) -> Bool { r.upperBound <= w.count && w[r].allSatisfy { (0x30...0x39).contains($0) } }
        func at(_ k: Int, _ c: Character) -> Bool { k < w.count && w[k] == c.asciiValue! }
        return (digits(0..<4) && at(4, "-") && digits(5..<7) && at(7, "-") && digits(8..<10))
            || (digits(0..<2) && at(2, ":") && digits(3..<5) && at(5, ":") && digits(6..<8))
    }
}
