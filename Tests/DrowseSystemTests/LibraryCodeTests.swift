import DrowseSystem
import Foundation
import Testing

/// One mapping of /proc/self/smaps: its permissions, file, resident and anonymous (written,
/// private) kilobytes.
private struct Mapping {
    var range: String
    var perms: String
    var file: String
    var rss = 0
    var anonymous = 0
}

private func mappings() throws -> [Mapping] {
    let text = try FileSystem.readText("/proc/self/smaps", limit: 64 << 20)
    var result: [Mapping] = []
    for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = fields.first else { continue }
        if first.contains("-"), first.allSatisfy({ $0.isHexDigit || $0 == "-" }), fields.count >= 5 {
            result.append(Mapping(range: String(first), perms: String(fields[1]), file: fields.count >= 6 ? String(fields[5]) : ""))
        } else if first == "Rss:", let kb = Int(fields[1]) {
            result[result.count - 1].rss = kb
        } else if first == "Anonymous:", let kb = Int(fields[1]) {
            result[result.count - 1].anonymous = kb
        }
    }
    return result
}

@Suite("LibraryCode")
struct LibraryCodeTests {
    @Test("the libraries' code leaves the resident set, their written pages stay, and the code still runs")
    func release() throws {
        let isLibrary = { (m: Mapping) in m.file.contains(".so") }
        let before = try mappings()
        let codeBefore = before.filter { isLibrary($0) && $0.perms.hasPrefix("r-x") }.reduce(0) { $0 + $1.rss }
        let released = try #require(LibraryCode.release())
        let after = try mappings()
        let codeAfter = after.filter { isLibrary($0) && $0.perms.hasPrefix("r-x") }.reduce(0) { $0 + $1.rss }
        #expect(released > 0)
        // Other tests run meanwhile and fault some code back; most of it is gone.
        #expect(codeAfter < codeBefore / 2, "library code resident: \(codeBefore) kB before, \(codeAfter) kB after")
        // A private page a library's loader or code wrote (relocations, .data, .bss) is its only
        // copy: none may be dropped (MADV_DONTNEED would turn it back into the file's bytes).
        let anonymousBefore = Dictionary(before.filter(isLibrary).map { ($0.range, $0.anonymous) }, uniquingKeysWith: max)
        for m in after where isLibrary(m) {
            if let was = anonymousBefore[m.range] { #expect(m.anonymous >= was, "\(m.file) \(m.perms): \(was) → \(m.anonymous) kB written") }
        }
        // The released code faults back: libc and the runtime keep working.
        #expect(String(cString: strerror(ENOENT)).isEmpty == false)
        #expect(try mappings().count > 0)
    }
}
