import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A fresh temporary folder for one test, removed (with everything in it) afterwards.
/// Its path is resolved, so it compares equal to what `pwd -P` prints inside it.
func withTempDir<T>(_ body: (String) async throws -> T) async throws -> T {
    let path = try makeTempDir()
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

private func makeTempDir() throws -> String {
    var template = Array((NSTemporaryDirectory() + "/drowse-test-XXXXXX").utf8CString)
    guard let p = mkdtemp(&template) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    guard let real = realpath(p, nil) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    defer { free(real) }
    return String(cString: real)
}

/// Writes `text` at `path`, creating the folders on the way (test fixtures only).
func put(_ text: String, at path: String) throws {
    let dir = (path as NSString).deletingLastPathComponent
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    try text.write(toFile: path, atomically: false, encoding: .utf8)
}

func contents(_ path: String) -> String? {
    try? String(contentsOfFile: path, encoding: .utf8)
}
