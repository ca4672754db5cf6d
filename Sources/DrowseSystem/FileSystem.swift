#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Small file-system helpers without Foundation.
package enum FileSystem {
    package static func readFile(_ path: String, limit: Int = 1 << 20) throws(SystemError) -> [UInt8] {
        let fd = try Sys.open(path, O_RDONLY | O_CLOEXEC)
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16384)
        while out.count < limit {
            let n = try Sys.read(fd, into: &buf, limit: limit - out.count, "read \(path)") ?? 0
            if n == 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return out
    }

    package static func readText(_ path: String, limit: Int = 1 << 20) throws(SystemError) -> String {
        String(decoding: try readFile(path, limit: limit), as: UTF8.self)
    }

    /// A short sysfs attribute, trimmed; nil when missing or unreadable.
    package static func attribute(_ path: String) -> String? {
        guard let bytes = try? readFile(path, limit: 4096) else { return nil }
        var s = String(decoding: bytes, as: UTF8.self)
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return s
    }

    package static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    package static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    package static func fileSize(_ path: String) -> Int64? {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_size) : nil
    }

    package static func listDirectory(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        // A folder read, nothing written: its close has nothing to report but a bug (EBADF).
        defer { let rc = closedir(dir); let saved = errno; assert(rc == 0, "closedir \(path): errno \(saved)") }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    package static func makeDirectories(_ path: String, mode: mode_t = 0o755) throws(SystemError) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            prefix += "/" + part
            if try !Sys.mkdir(prefix, mode), !isDirectory(prefix) { throw SystemError("mkdir \(prefix)", errno: ENOTDIR) }
        }
    }

    /// unlink(2); false when there was nothing to remove.
    @discardableResult
    package static func remove(_ path: String) throws(SystemError) -> Bool { try Sys.unlink(path) }

    /// Writes all of `bytes` to `fd` (short writes continued, EINTR retried).
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], what: @autoclosure () -> String) throws(SystemError) {
        var off = 0
        while off < bytes.count {
            // A descriptor that would block has no room now: wait until it has.
            guard let n = try Sys.write(fd, bytes, from: off, what()) else {
                try Sys.poll(fd, events: Int16(POLLOUT), timeoutMs: -1)
                continue
            }
            off += n
        }
    }

    /// Writes `bytes` to a fresh temporary file beside `path` (never through a planted name:
    /// see `ReplacedFile`), fsyncs it and renames it over `path`, then fsyncs the folder.
    /// `durable: false` skips both fsyncs: readers still never see half a file, but a power cut
    /// may lose the new content. The file gets `mode` whatever the umask.
    package static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644, durable: Bool = true) throws(SystemError) {
        try ReplacedFile(path: path, mode: mode).write(bytes, durable: durable)
    }

    /// rename(2) then fsync of the destination folder, so the new name survives a power cut.
    package static func rename(_ from: String, to: String) throws(SystemError) {
        try Sys.rename(from, to: to)
        try syncDirectory(ConfigPathDir.of(to))
    }

    package static func syncDirectory(_ dir: String) throws(SystemError) {
        let fd = try Sys.open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, "open folder \(dir)")
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        try Sys.fsync(fd, "fsync folder \(dir)")
    }

    /// The /etc/machine-id, for a default device id.
    package static func machineID() -> String? { attribute("/etc/machine-id") }
}

enum ConfigPathDir {
    static func of(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let d = String(path[..<slash])
        return d.isEmpty ? "/" : d
    }
}

/// Writes to the standard streams with write(2): no shared C `FILE*` across threads.
package enum StandardStream {
    package static func error(_ s: String) { put(2, s) }
    package static func output(_ s: String) { put(1, s) }

    private static func put(_ fd: Int32, _ s: String) {
        // A closed or full stream loses the message; there is nowhere else to say so.
        try? FileSystem.writeAll(fd, Array(s.utf8), what: "write")
    }
}
