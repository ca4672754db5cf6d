#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Files of this checkout, found from this source file's path.
enum RepoFile {
    static func path(_ relative: String, from file: String = #filePath) -> String {
        // .../Tests/DrowseCoreTests/X.swift → the checkout's root.
        var parts = file.split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)
        return parts.joined(separator: "/") + "/" + relative
    }

    static func read(_ relative: String) throws -> String {
        let p = path(relative)
        guard let f = fopen(p, "r") else { throw ReadError(path: p) }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = fread(&buf, 1, buf.count, f)
            if n == 0 { break }
            bytes += buf[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    struct ReadError: Error { var path: String }
}
