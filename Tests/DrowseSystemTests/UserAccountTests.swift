import DrowseSystem
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("UserAccount")
struct UserAccountTests {
    @Test("root is found by name and by uid, with its primary group among its groups")
    func root() throws {
        let byName = try #require(UserAccount.lookup(name: "root"))
        #expect(byName.uid == 0)
        #expect(byName.gid == 0)
        #expect(byName.groups.contains(0))
        #expect(UserAccount.lookup(uid: 0) == byName)
        #expect(UserAccount.groupID("root") == 0)
    }

    @Test("unknown users and groups are nil")
    func unknown() {
        #expect(UserAccount.lookup(name: "drowse-no-such-user-xyz") == nil)
        #expect(UserAccount.lookup(uid: 4_000_000_123) == nil)
        #expect(UserAccount.groupID("drowse-no-such-group-xyz") == nil)
    }

    @Test("membership: primary group, supplementary groups, and not others")
    func membership() throws {
        let me = try #require(UserAccount.lookup(uid: geteuid()))
        #expect(UserAccount.isMember(uid: me.uid, primaryGID: me.gid, of: me.gid))
        for g in me.groups { #expect(UserAccount.isMember(uid: me.uid, primaryGID: me.gid, of: g)) }
        let stranger: gid_t = 3_999_999_999
        #expect(!me.groups.contains(stranger))
        #expect(!UserAccount.isMember(uid: me.uid, primaryGID: me.gid, of: stranger))
    }
}
