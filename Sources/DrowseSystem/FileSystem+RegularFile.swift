#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why `FileSystem.readRegularFile` would not read a file; `reason` reads well after the file's name.
package struct RefusedFile: Error, Equatable, CustomStringConvertible, Sendable {
    package var reason: String
    package init(_ reason: String) { self.reason = reason }
    package var description: String { reason }
}

extension FileSystem {
    /// The whole of a regular file of at most `limit` bytes, or why not. Made for config files:
    /// a FIFO or a device (even through a symlink) is refused without being opened for long,
    /// since reading one could block forever, and a bigger file is refused rather than cut
    /// (`readFile` truncates at its limit, which would let half a file pass as a whole one).
    /// A symlink to a regular file is read: packages often link their app files into apps.d.
    package static func readRegularFile(_ path: String, limit: Int) throws(RefusedFile) -> [UInt8] {
        // stat first, so that a device is never even opened (opening one can have effects).
        var st = stat()
        guard stat(path, &st) == 0 else { let saved = errno; throw RefusedFile("cannot read: \(String(cString: strerror(saved)))") }
        try checkRegular(st, limit: limit)
        // O_NONBLOCK: should it have been swapped for a FIFO since the stat, open returns at once.
        let fd: Int32
        do { fd = try Sys.open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) } catch {
            throw RefusedFile("cannot read: \(String(cString: strerror(error.errno)))")
        }
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        guard fstat(fd, &st) == 0 else { let saved = errno; throw RefusedFile("cannot read: \(String(cString: strerror(saved)))") }
        try checkRegular(st, limit: limit)
        return try readWhole(fd, limit: limit)
    }

    /// The rest of `fd`, refused when it holds more than `limit` bytes: one byte more than the
    /// limit tells a file that grew since its fstat.
    static func readWhole(_ fd: Int32, limit: Int) throws(RefusedFile) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16384)
        while out.count <= limit {
            let n: Int
            do { n = try Sys.read(fd, into: &buf, limit: limit + 1 - out.count) ?? 0 } catch {
                throw RefusedFile("cannot read: \(String(cString: strerror(error.errno)))")
            }
            if n == 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        guard out.count <= limit else { throw RefusedFile("larger than \(byteCount(limit)); refused rather than read in part") }
        return out
    }

    static func checkRegular(_ st: stat, limit: Int) throws(RefusedFile) {
        let kind: String
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            guard st.st_size <= limit else {
                throw RefusedFile("larger than \(byteCount(limit)) (\(st.st_size) bytes); refused rather than read in part")
            }
            return
        case S_IFIFO: kind = "a FIFO"
        case S_IFCHR: kind = "a character device"
        case S_IFBLK: kind = "a block device"
        case S_IFSOCK: kind = "a socket"
        case S_IFDIR: kind = "a directory"
        default: kind = "of an unknown kind"
        }
        throw RefusedFile("not a regular file (\(kind)); only regular files are read")
    }

    /// "1 MiB", "64 KiB" or "100 bytes".
    static func byteCount(_ n: Int) -> String {
        if n >= 1 << 20, n % (1 << 20) == 0 { return "\(n >> 20) MiB" }
        if n >= 1 << 10, n % (1 << 10) == 0 { return "\(n >> 10) KiB" }
        return "\(n) bytes"
    }
}

extension FileSystem {
    /// A secret drowsed reads for itself (`[mqtt] password_file`), as sshd's StrictModes would
    /// have it: the name itself may not be a symlink (O_NOFOLLOW: root must not send
    /// /etc/shadow because a user linked it), it must be a regular file (opened non-blocking, so
    /// a FIFO cannot hold the daemon), owned by root or drowsed's own user, and writable by
    /// nobody else. Returns the bytes and whether others may read the file (worth a warning).
    package static func readSecretFile(_ path: String, limit: Int) throws(RefusedFile) -> (bytes: [UInt8], othersMayRead: Bool) {
        let fd: Int32
        do { fd = try Sys.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) } catch {
            if error.errno == ELOOP { throw RefusedFile("is a symbolic link; a secret must be the file itself") }
            throw RefusedFile("cannot read: \(String(cString: strerror(error.errno)))")
        }
        defer { Sys.close(fd, ignoringErrors: .nothingToFlush) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { let saved = errno; throw RefusedFile("cannot read: \(String(cString: strerror(saved)))") }
        try checkRegular(st, limit: limit)
        guard st.st_uid == 0 || st.st_uid == geteuid() else {
            throw RefusedFile("is owned by uid \(st.st_uid); a secret must belong to root or to drowsed's user (uid \(geteuid()))")
        }
        guard st.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            throw RefusedFile("may be written by others (mode \(String(st.st_mode & 0o7777, radix: 8))); chmod go-w it")
        }
        return (try readWhole(fd, limit: limit), st.st_mode & S_IROTH != 0)
    }
}
