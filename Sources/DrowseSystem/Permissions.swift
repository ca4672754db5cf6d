#if canImport(Glibc)
import Glibc
#endif

/// Checks what a local user could do to a path, so that drowsed (running as root) never
/// reads or writes a file for an API caller that the caller could not read or write itself.
package enum Permissions {
    /// The caller's identity as the kernel would judge it.
    package struct Subject: Sendable {
        package var uid: uid_t
        package var gids: [gid_t]
        package init(uid: uid_t, gids: [gid_t]) {
            self.uid = uid
            self.gids = gids
        }
    }

    private static func allows(_ st: stat, _ who: Subject, read: Bool, write: Bool, exec: Bool) -> Bool {
        if who.uid == 0 { return true }
        let mode = st.st_mode
        let shift: mode_t
        if st.st_uid == who.uid { shift = 6 } else if who.gids.contains(st.st_gid) { shift = 3 } else { shift = 0 }
        let bits = (mode >> shift) & 7
        return (!read || bits & 4 != 0) && (!write || bits & 2 != 0) && (!exec || bits & 1 != 0)
    }

    /// Every folder from `/` down to `dir` can be searched (x) by `who`.
    private static func canTraverse(_ dir: String, _ who: Subject) -> Bool {
        var path = ""
        let parts = dir.split(separator: "/")
        var st = stat()
        guard stat("/", &st) == 0, allows(st, who, read: false, write: false, exec: true) else { return false }
        for p in parts {
            path += "/" + p
            guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, allows(st, who, read: false, write: false, exec: true) else { return false }
        }
        return true
    }

    private static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let d = String(path[..<slash])
        return d.isEmpty ? "/" : d
    }

    /// `who` could make `dir` its working directory (search every folder down to it and it).
    package static func canEnter(_ dir: String, by who: Subject) -> Bool {
        dir.hasPrefix("/") && canTraverse(dir, who)
    }

    /// `who` could execute the regular file at `path` (root too needs an execute bit).
    package static func canExecute(_ path: String, by who: Subject) -> Bool {
        guard path.hasPrefix("/") else { return false }
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_mode & 0o111 != 0 else { return false }
        return canTraverse(parent(path), who) && allows(st, who, read: false, write: false, exec: true)
    }

    /// `who` could learn by itself whether `path` exists: it may search every folder above it.
    package static func canLookUp(_ path: String, by who: Subject) -> Bool {
        path.hasPrefix("/") && canTraverse(parent(path), who)
    }

    /// `who` could open this regular file for reading.
    package static func canRead(_ path: String, by who: Subject) -> Bool {
        guard path.hasPrefix("/") else { return false }
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return false }  // no symlinks, no devices
        return canTraverse(parent(path), who) && allows(st, who, read: true, write: false, exec: false)
    }

    /// `who` could create or replace a file at this path.
    package static func canWrite(_ path: String, by who: Subject) -> Bool {
        guard path.hasPrefix("/") else { return false }
        let dir = parent(path)
        var st = stat()
        guard canTraverse(dir, who), stat(dir, &st) == 0, allows(st, who, read: false, write: true, exec: true) else { return false }
        if lstat(path, &st) == 0 {
            if (st.st_mode & S_IFMT) == S_IFLNK || (st.st_mode & S_IFMT) == S_IFDIR { return false }
            // A sticky folder (/tmp) protects other users' files.
            var dst = stat()
            if stat(dir, &dst) == 0, dst.st_mode & S_ISVTX != 0, who.uid != 0, st.st_uid != who.uid { return false }
        }
        return true
    }

    /// Hands a file drowsed made (as root) to a user; the error, if it could not.
    package static func giveTo(_ path: String, uid: uid_t, gid: gid_t) -> SystemError? {
        guard geteuid() == 0 else { return nil }
        return Sys.noted("chown \(path)") { Int(chown(path, uid, gid)) }
    }
}
