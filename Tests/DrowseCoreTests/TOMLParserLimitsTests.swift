@testable import DrowseCore
import Testing

/// Hostile config files: deep nesting must be refused with a message before the parser's
/// recursion overflows the stack, and big files must not take quadratic time.
@Suite("TOMLParser limits")
struct TOMLParserLimitsTests {
    static let deep = 100_000
    static let tooDeep = "nested deeper than 64 levels"

    func reason(_ text: String) -> String? {
        do {
            _ = try TOMLParser.parse(text)
            return nil
        } catch {
            return error.reason
        }
    }

    static func chain(_ key: String, _ n: Int) -> String { Array(repeating: key, count: n).joined(separator: ".") }

    /// By name, so that the test log shows the name and not 100k brackets.
    static let deepInputs: [String: String] = [
        "arrays": "a = " + String(repeating: "[", count: deep),
        "inline tables": "a = " + String(repeating: "{a=", count: deep),
        "arrays of inline tables": "a = " + String(repeating: "[{a=", count: deep),
        "a dotted key": chain("a", deep) + " = 1",
        "a table header": "[" + chain("a", deep) + "]",
        "an array-of-tables header": "[[" + chain("a", deep) + "]]",
        "a dotted key in an inline table": "a = {" + chain("b", deep) + " = 1}",
        "closed brackets": "a = " + String(repeating: "[", count: deep) + String(repeating: "]", count: deep),
    ]

    @Test("100k-deep nesting is refused with a message, not a crash", arguments: deepInputs.keys.sorted())
    func deepInput(_ name: String) {
        #expect(reason(Self.deepInputs[name]!) == Self.tooDeep)
    }

    @Test("64 levels are fine and 65 are refused, whatever makes them")
    func boundary() throws {
        func arrays(_ n: Int) -> String { "a = " + String(repeating: "[", count: n) + String(repeating: "]", count: n) }
        #expect(reason(arrays(64)) == nil)
        #expect(reason(arrays(65)) == Self.tooDeep)

        // `a = {a = {...}}`: every key is one level.
        func inline(_ n: Int) -> String { "a = " + String(repeating: "{a = ", count: n - 1) + "1" + String(repeating: "}", count: n - 1) }
        #expect(reason(inline(64)) == nil)
        #expect(reason(inline(65)) == Self.tooDeep)

        func dotted(_ n: Int) -> String { (1...n).map { "k\($0)" }.joined(separator: ".") + " = 1" }
        #expect(reason(dotted(64)) == nil)
        #expect(reason(dotted(65)) == Self.tooDeep)

        // A header's keys count too: the value of a 30-part key under a 30-part header is at 60,
        // so four arrays put the 1 at 64 and five at 65.
        let header = "[" + (1...30).map { "h\($0)" }.joined(separator: ".") + "]\n"
        let key = (1...30).map { "k\($0)" }.joined(separator: ".")
        #expect(reason(header + key + " = [[[[1]]]]") == nil)
        #expect(reason(header + key + " = [[[[[1]]]]]") == Self.tooDeep)
    }

    @Test("the error names the line where the nesting got too deep")
    func line() {
        #expect(throws: TOMLParseError(line: 3, reason: Self.tooDeep)) {
            try TOMLParser.parse("a = 1\n\nb = " + String(repeating: "[", count: 1000))
        }
    }

    /// Before, every key under a header copied the whole table, and every `[[header]]` scanned
    /// every table seen so far: either took minutes for a file well under 1 MiB.
    static let bigInputs: [String: String] = [
        "100k keys under one header": "[s]\n" + (0..<100_000).map { "k\($0) = 1" }.joined(separator: "\n"),
        "50k elements of an array of tables": (0..<50_000).map { "[[a]]\nx = \($0)" }.joined(separator: "\n"),
        "50k headers, then 50k elements": (0..<50_000).map { "[a.t\($0)]" }.joined(separator: "\n") + "\n" + String(repeating: "[[x]]\n", count: 50_000),
    ]

    @Test("big files take linear time", arguments: bigInputs.keys.sorted())
    func linear(_ name: String) throws {
        let text = Self.bigInputs[name]!
        let clock = ContinuousClock()
        let start = clock.now
        _ = try TOMLParser.parse(text)
        #expect(clock.now - start < .seconds(15))
    }

    @Test("a table changed in place keeps its keys and lines")
    func inPlace() throws {
        let t = try TOMLParser.parse("[a]\nx = 1\n[[b]]\ny = 2\n[a.c]\nz = 3\n[[b]]\ny = 4\n[b.d]\nw = 5\n")
        guard case .table(let a)? = t["a"], case .array(let b)? = t["b"] else { Issue.record("shape: \(t)"); return }
        #expect(a.keys == ["x", "c"])
        #expect(a.line(of: "x") == 2)
        #expect(t.keys == ["a", "b"])
        #expect(b.count == 2)
        guard case .table(let second)? = b.last else { Issue.record("no element"); return }
        #expect(second["y"] == .integer(4))
        #expect(second.headerLine == 7)
        guard case .table(let d)? = second["d"] else { Issue.record("no b.d"); return }
        #expect(d["w"] == .integer(5))
    }
}
