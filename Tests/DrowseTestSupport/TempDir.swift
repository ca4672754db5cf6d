import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A fresh temporary folder (mkdtemp) under `base`; its path is resolved, so it compares equal to
/// what `pwd -P` prints inside it. The caller removes it (`withTempDir` does).
package func makeTempDir(in base: String = NSTemporaryDirectory(), prefix: String = "drowse-test") throws -> String {
    var template = Array((base + "/\(prefix)-XXXXXX").utf8CString)
    guard let p = mkdtemp(&template) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    guard let real = realpath(p, nil) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    defer { free(real) }
    return String(cString: real)
}

/// A fresh temporary folder for one test, removed (with everything in it) afterwards.
package func withTempDir<T>(in base: String = NSTemporaryDirectory(), _ body: (String) async throws -> T) async throws -> T {
    let path = try makeTempDir(in: base)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

/// `withTempDir` for synchronous tests.
package func withTempDirSync<T>(in base: String = NSTemporaryDirectory(), _ body: (String) throws -> T) throws -> T {
    let path = try makeTempDir(in: base)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// Writes `text` at `path`, creating the folders on the way (test fixtures only).
package func put(_ text: String, at path: String) throws {
    let dir = (path as NSString).deletingLastPathComponent
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    try text.write(toFile: path, atomically: false, encoding: .utf8)
}

/// The text of the file at `path`, nil when it cannot be read.
package func contents(_ path: String) -> String? {
    try? String(contentsOfFile: path, encoding: .utf8)
}
