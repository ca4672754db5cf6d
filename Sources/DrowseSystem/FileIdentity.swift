#if canImport(Glibc)
import Glibc
#endif
import CDrowseSys

/// The user on whose behalf drowsed (running as root) touches a path: an API caller's `--to`
/// folder and part file, an upload's source file. Every such path is resolved with this
/// thread's file-system identity switched to that user, so the kernel follows a symlink,
/// creates, opens or renames only as the user could: a folder swapped for a symlink to `/etc`,
/// or a part file swapped for a link to a root-only file, gets the EACCES the user would get.
/// The switch lasts for one system call and never spans a suspension point, so nothing else
/// runs on the thread meanwhile.
package struct FileIdentity: Sendable, Equatable {
    package var uid: uid_t
    package var gid: gid_t
    /// Supplementary groups (may include `gid`).
    package var groups: [gid_t]

    package init(uid: uid_t, gid: gid_t, groups: [gid_t]) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// The identity of a local user by uid: supplementary groups from the user database, or
    /// only `gid` for a uid with no account.
    package static func of(uid: uid_t, gid: gid_t) -> FileIdentity {
        FileIdentity(uid: uid, gid: gid, groups: UserAccount.lookup(uid: uid)?.groups ?? [gid])
    }

    /// Runs `call` (one or a few system calls, no suspension) as `who`; returns its result and
    /// the errno it left. Without an identity, as root for root, or when drowsed is not root
    /// (it cannot act beyond its own user anyway) the call runs as is.
    static func perform<T>(as who: FileIdentity?, _ call: () -> T) throws(SystemError) -> (T, Int32) {
        guard let who, who.uid != 0, geteuid() == 0 else {
            let r = call()
            return (r, errno)
        }
        let e = who.groups.withUnsafeBufferPointer { drowse_fs_become(who.uid, who.gid, $0.baseAddress, $0.count) }
        // Failing to switch never falls back to acting as root.
        guard e == 0 else { throw SystemError("take the file identity of uid \(who.uid)", errno: e) }
        let r = call()
        let saved = errno
        let back = drowse_fs_restore()
        // A thread left with a user's identity would act wrongly for everyone after it.
        precondition(back == 0, "cannot restore the daemon's file identity: errno \(back)")
        return (r, saved)
    }

    /// open(2) as `who`. Always O_CLOEXEC.
    package static func open(_ path: String, _ flags: Int32, mode: mode_t = 0, as who: FileIdentity?) throws(SystemError) -> Int32 {
        let (fd, e) = try perform(as: who) { Glibc.open(path, flags | O_CLOEXEC, mode) }
        guard fd >= 0 else { throw SystemError("open \(path)", errno: e) }
        return fd
    }

    /// Opens a regular file for reading as `who`: never through a symlink at the last component
    /// (folders on the way are resolved with `who`'s rights), never blocks on a FIFO, refuses
    /// anything that is not a regular file. Returns the descriptor and the file's size.
    package static func openRegularForReading(_ path: String, as who: FileIdentity?) throws(SystemError) -> (fd: Int32, size: Int64) {
        let fd: Int32
        do { fd = try open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, as: who) } catch {
            if error.errno == ELOOP { throw SystemError("open \(path): a symbolic link (give the file's own path)", errno: ELOOP) }
            throw error
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            Sys.close(fd, ignoringErrors: .afterError)
            throw SystemError("open \(path): not a regular file", errno: EINVAL)
        }
        return (fd, Int64(st.st_size))
    }

    /// rename(2) as `who`, then fsync of the destination folder (as `who` too).
    package static func rename(_ from: String, to: String, as who: FileIdentity?) throws(SystemError) {
        let (r, e) = try perform(as: who) { Glibc.rename(from, to) }
        guard r == 0 else { throw SystemError("rename \(from) to \(to)", errno: e) }
        // A folder `who` may write but not read cannot be opened to fsync: the rename stands,
        // as durable as the file system makes it. An fsync that fails (EIO) is reported: a
        // power cut may undo the rename.
        guard let dir = try? open(ConfigPathDir.of(to), O_RDONLY | O_DIRECTORY, as: who) else { return }
        defer { Sys.close(dir, ignoringErrors: .nothingToFlush) }
        try Sys.fsync(dir, "fsync the folder of \(to)")
    }

    /// unlink(2) as `who`; false when there was nothing to remove.
    @discardableResult
    package static func remove(_ path: String, as who: FileIdentity?) throws(SystemError) -> Bool {
        let (r, e) = try perform(as: who) { unlink(path) }
        guard r != 0 else { return true }
        if e == ENOENT { return false }
        throw SystemError("unlink \(path)", errno: e)
    }

    /// The size of a regular file as `who` sees it (no symlink at the last component).
    package static func regularFileSize(_ path: String, as who: FileIdentity?) -> Int64? {
        guard let (fd, size) = try? openRegularForReading(path, as: who) else { return nil }
        Sys.close(fd, ignoringErrors: .nothingToFlush)
        return size
    }

    /// Whether `who` sees anything at `path` (lstat: a dangling symlink counts).
    package static func exists(_ path: String, as who: FileIdentity?) -> Bool {
        var st = stat()
        guard let (r, _) = try? perform(as: who, { lstat(path, &st) }) else { return false }
        return r == 0
    }
}
