#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A local user account, for running handlers as the app's user.
package struct UserAccount: Sendable, Equatable {
    package var name: String
    package var uid: uid_t
    package var gid: gid_t
    package var home: String
    package var groups: [gid_t]

    package static func lookup(name: String) -> UserAccount? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buf = [CChar](repeating: 0, count: 16384)
        guard getpwnam_r(name, &pw, &buf, buf.count, &result) == 0, result != nil else { return nil }
        return account(pw)
    }

    package static func lookup(uid: uid_t) -> UserAccount? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buf = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &pw, &buf, buf.count, &result) == 0, result != nil else { return nil }
        return account(pw)
    }

    private static func account(_ pw: passwd) -> UserAccount {
        let name = String(cString: pw.pw_name)
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(pw.pw_name, pw.pw_gid, &groups, &count) < 0 {
            groups = [gid_t](repeating: 0, count: Int(count))
            // Still failing (the groups changed in between): the primary group alone, never garbage.
            if getgrouplist(pw.pw_name, pw.pw_gid, &groups, &count) < 0 { groups = [pw.pw_gid]; count = 1 }
        }
        return UserAccount(
            name: name, uid: pw.pw_uid, gid: pw.pw_gid, home: String(cString: pw.pw_dir),
            groups: Array(groups.prefix(Int(max(count, 0)))))
    }

    /// The gid of a group by name.
    package static func groupID(_ name: String) -> gid_t? {
        var gr = group()
        var result: UnsafeMutablePointer<group>?
        var buf = [CChar](repeating: 0, count: 16384)
        guard getgrnam_r(name, &gr, &buf, buf.count, &result) == 0, result != nil else { return nil }
        return gr.gr_gid
    }

    /// Whether `uid` is a member of group `gid` (primary or supplementary).
    package static func isMember(uid: uid_t, primaryGID: gid_t, of gid: gid_t) -> Bool {
        if primaryGID == gid { return true }
        return lookup(uid: uid)?.groups.contains(gid) ?? false
    }
}
