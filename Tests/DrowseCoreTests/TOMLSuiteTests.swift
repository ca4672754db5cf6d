@testable import DrowseCore
import Testing

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The TOML 1.0.0 cases of toml-test (vendored under `toml-test/`, see its README and
/// LICENSE): every `valid/X.toml` must parse to the tagged JSON in `valid/X.json`, every
/// `invalid/X.toml` must be refused.
///
/// Dates and times: no Drowse setting takes one, so the parser refuses them with a message
/// saying so rather than parsing them. A valid case whose JSON holds a datetime, date-local or
/// time-local value therefore passes when the parser refuses it with that message (and only
/// then); the invalid date cases pass because they are refused as well.
@Suite("toml-test suite (TOML 1.0.0)")
struct TOMLSuiteTests {
    static let root: String = {
        let file = "\(#filePath)"
        let dir = file[..<(file.lastIndex(of: "/") ?? file.startIndex)]
        return dir + "/toml-test/tests"
    }()

    static let cases: [String] = {
        guard let data = FileManager.default.contents(atPath: root + "/files-toml-1.0.0") else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
            .filter { $0.hasSuffix(".toml") }
    }()

    static func bytes(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: root + "/" + path).map { Array($0) }
    }

    static let dateMessage = "no setting takes a date"

    /// Whether the tagged JSON holds a date or time anywhere.
    static func hasDate(_ j: JSON) -> Bool {
        switch j {
        case .object(let members):
            if let type = j["type"]?.stringValue, members.count == 2, j["value"]?.stringValue != nil {
                return type.hasPrefix("date") || type.hasPrefix("time")
            }
            return members.contains { hasDate($0.1) }
        case .array(let items): return items.contains(where: hasDate)
        default: return false
        }
    }

    /// Why `v` is not the tagged JSON `j`, or nil when it is.
    static func mismatch(_ v: TOMLValue, _ j: JSON, at path: String) -> String? {
        if case .object(let members) = j, members.count == 2, let type = j["type"]?.stringValue,
            let value = j["value"]?.stringValue
        {
            switch (type, v) {
            case ("string", .string(let s)): return s == value ? nil : "\(path): \(s.debugDescription) != \(value.debugDescription)"
            case ("integer", .integer(let n)): return Int(value) == n ? nil : "\(path): \(n) != \(value)"
            case ("bool", .bool(let b)): return String(b) == value ? nil : "\(path): \(b) != \(value)"
            case ("float", .float(let d)):
                let ok: Bool
                switch value {
                case "nan", "+nan", "-nan": ok = d.isNaN
                case "inf", "+inf": ok = d == .infinity
                case "-inf": ok = d == -.infinity
                default: ok = Double(value) == d
                }
                return ok ? nil : "\(path): \(d) != \(value)"
            default: return "\(path): \(v) is not a \(type) \(value)"
            }
        }
        switch (j, v) {
        case (.array(let items), .array(let values)):
            guard items.count == values.count else { return "\(path): \(values.count) items, expected \(items.count)" }
            for (n, (a, b)) in zip(values, items).enumerated() {
                if let m = mismatch(a, b, at: "\(path)[\(n)]") { return m }
            }
            return nil
        case (.object, .table(let t)): return mismatch(t, j, at: path)
        default: return "\(path): \(v) does not match \(j)"
        }
    }

    static func mismatch(_ t: TOMLTable, _ j: JSON, at path: String) -> String? {
        guard case .object(let members) = j else { return "\(path): a table, expected \(j)" }
        guard Set(t.keys) == Set(members.map(\.0)), t.keys.count == members.count else {
            return "\(path): keys \(t.keys.sorted()), expected \(members.map(\.0).sorted())"
        }
        for (key, expected) in members {
            if let m = mismatch(t[key]!, expected, at: path + "." + key) { return m }
        }
        return nil
    }

    /// Why the case fails, or nil when it passes.
    static func failure(_ name: String) -> String? {
        guard let toml = bytes(name) else { return "missing file" }
        if name.hasPrefix("invalid/") {
            do {
                let t = try TOMLParser.parse(bytes: toml)
                return "accepted: \(t)"
            } catch {
                return nil
            }
        }
        guard let jsonBytes = bytes(String(name.dropLast(5)) + ".json") else { return "missing JSON" }
        let expected: JSON
        do { expected = try JSON.parse(bytes: jsonBytes) } catch { return "bad JSON: \(error)" }
        do {
            let t = try TOMLParser.parse(bytes: toml)
            if hasDate(expected) { return "parsed a date, but dates are refused" }
            return mismatch(t, expected, at: "")
        } catch {
            if hasDate(expected), error.reason.contains(dateMessage) { return nil }
            return "refused: \(error)"
        }
    }

    @Test func everyCasePasses() {
        #expect(Self.cases.count == 919 - 210)  // 499 invalid + 210 valid .toml files
        var failed: [String] = []
        for name in Self.cases {
            if let why = Self.failure(name) { failed.append("\(name): \(why)") }
        }
        for f in failed { Issue.record(Comment(rawValue: f)) }
        #expect(failed.isEmpty, "\(failed.count) of \(Self.cases.count) cases failed")
    }
}

extension TOMLSuiteTests {
    /// The comparison above must not pass everything: a wrong type, value or key is a mismatch.
    @Test func theComparisonCatchesMismatches() throws {
        func tagged(_ type: String, _ value: String) -> JSON { .object([("type", .string(type)), ("value", .string(value))]) }
        #expect(Self.mismatch(.integer(1), tagged("integer", "1"), at: "") == nil)
        #expect(Self.mismatch(.integer(1), tagged("integer", "2"), at: "") != nil)
        #expect(Self.mismatch(.integer(1), tagged("float", "1"), at: "") != nil)
        #expect(Self.mismatch(.string("a"), tagged("string", "b"), at: "") != nil)
        #expect(Self.mismatch(.float(.nan), tagged("float", "nan"), at: "") == nil)
        let t = try TOMLParser.parse("a = 1\nb = 'x'")
        #expect(Self.mismatch(t, .object([("a", tagged("integer", "1"))]), at: "") != nil)
        #expect(Self.mismatch(t, .object([("a", tagged("integer", "1")), ("b", tagged("string", "x"))]), at: "") == nil)
        #expect(Self.hasDate(.object([("d", tagged("date-local", "1979-05-27"))])))
        // A BOM, and a date refused with the message the suite accepts.
        #expect(try TOMLParser.parse(bytes: [0xEF, 0xBB, 0xBF] + Array("a = 1".utf8))["a"] == .integer(1))
        #expect(throws: TOMLParseError(line: 1, reason: "'1979-05-27' is a date or time, and no setting takes a date or time")) {
            try TOMLParser.parse("d = 1979-05-27")
        }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse("# a\u{7F} comment") }
        #expect(throws: TOMLParseError.self) { try TOMLParser.parse(bytes: Array("a = '".utf8) + [0xFF, 0x27]) }
    }
}
