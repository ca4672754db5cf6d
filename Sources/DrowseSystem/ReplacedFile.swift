#if canImport(Glibc)
import Glibc
#endif

/// A file that is only ever replaced whole, in a folder opened once.
///
/// Whoever may write the folder (the node-exporter textfile folder often belongs to the
/// prometheus user) can plant names in it, so nothing here follows one: the new content goes
/// to a fresh random name created with `O_CREAT|O_EXCL|O_NOFOLLOW` (a planted file or symlink
/// makes that name fail, never root write through it), then `renameat` puts it in place (which
/// replaces a planted symlink at the final name instead of following it). Both calls are
/// relative to the folder's descriptor, so a folder swapped after the start is not followed
/// either. The mode is set with `fchmod`, whatever the daemon's umask.
package final class ReplacedFile {
    let folderFD: Int32
    package let path: String
    let name: String
    let mode: mode_t

    package init(path: String, mode: mode_t = 0o644) throws(SystemError) {
        let folder = ConfigPathDir.of(path)
        folderFD = try Sys.open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC, "open folder \(folder)")
        self.path = path
        name = path.split(separator: "/").last.map(String.init) ?? path
        self.mode = mode
    }

    deinit { Sys.close(folderFD, ignoringErrors: .nothingToFlush) }

    /// Replaces the file's content. `durable` fsyncs the file before the rename and the folder
    /// after it; without it readers still never see half a file, but a power cut may keep the
    /// old content.
    package func write(_ bytes: [UInt8], durable: Bool = true) throws(SystemError) {
        var tmp = ""
        var fd: Int32 = -1
        for _ in 0..<8 {
            tmp = ".\(name).\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp"
            fd = openat(folderFD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            if fd >= 0 || errno != EEXIST { break }
        }
        guard fd >= 0 else { throw SystemError.last("create a temporary file beside \(path)") }
        func fail(_ what: String, _ e: Int32) -> SystemError {
            Sys.close(fd, ignoringErrors: .afterError)
            removeAfterError(tmp)
            return SystemError(what, errno: e)
        }
        guard fchmod(fd, mode) == 0 else { let saved = errno; throw fail("chmod \(path)", saved) }
        do { try FileSystem.writeAll(fd, bytes, what: "write \(path)") } catch { throw fail(error.what, error.errno) }
        if durable, fsync(fd) != 0 { let saved = errno; throw fail("fsync \(path)", saved) }
        do { try Sys.close(fd, "close \(path)") } catch {
            removeAfterError(tmp)
            throw error
        }
        guard renameat(folderFD, tmp, folderFD, name) == 0 else {
            let e = errno
            removeAfterError(tmp)
            throw SystemError("rename into \(path)", errno: e)
        }
        if durable { try Sys.fsync(folderFD, "fsync the folder of \(path)") }
    }

    /// Removes the temporary file of a write that failed. The write's error is what the caller
    /// hears; a temporary that cannot be removed is a stray dot-file, replaced by nothing.
    private func removeAfterError(_ tmp: String) {
        if let e = Sys.noted("unlink \(tmp)", { Int(unlinkat(folderFD, tmp, 0)) }) { assert(e.errno != EBADF, "\(e)") }
    }
}
