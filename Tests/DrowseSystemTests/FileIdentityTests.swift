import DrowseSystem
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

/// FileIdentity switches one thread's file-system identity for one call. These run as root
/// (as CI does); as another user there is nothing to switch and they are skipped.
@Suite("FileIdentity", .enabled(if: geteuid() == 0, "needs root to act as another user"))
struct FileIdentityTests {
    let nobody = FileIdentity(uid: 65534, gid: 65534, groups: [65534])

    /// A folder of nobody's holding a root-only file and a symlink to it.
    func withLayout(_ body: (String) throws -> Void) async throws {
        try await withTempDir { dir in
            chmod(dir, 0o755)
            let home = dir + "/home"
            try #require(mkdir(home, 0o755) == 0)
            try #require(chown(home, 65534, 65534) == 0)
            try FileSystem.writeAtomically(dir + "/secret", Array("root only".utf8), mode: 0o600)
            try #require(symlink(dir + "/secret", home + "/link") == 0)
            try body(dir)
        }
    }

    @Test("as nobody, a root-only file cannot be opened, also not through a symlink; root can again after")
    func refusesWhatTheUserCannotRead() async throws {
        try await withLayout { dir in
            #expect(throws: SystemError.self) { try FileIdentity.open(dir + "/secret", O_RDONLY, as: nobody) }
            #expect(throws: SystemError.self) { try FileIdentity.open(dir + "/home/link", O_RDONLY, as: nobody) }
            #expect(throws: SystemError.self) { try FileIdentity.open(dir + "/home/link", O_WRONLY | O_CREAT, mode: 0o600, as: nobody) }
            #expect(FileIdentity.regularFileSize(dir + "/home/link", as: nobody) == nil)
            // The thread is root again: the same open works without an identity.
            let fd = try FileIdentity.open(dir + "/home/link", O_RDONLY, as: nil)
            close(fd)
            #expect(geteuid() == 0)
        }
    }

    @Test("a file made as nobody belongs to nobody; renames and removes are judged as nobody")
    func createsAsTheUser() async throws {
        try await withLayout { dir in
            let fd = try FileIdentity.open(dir + "/home/part", O_WRONLY | O_CREAT | O_EXCL, mode: 0o600, as: nobody)
            var st = stat()
            #expect(fstat(fd, &st) == 0)
            close(fd)
            #expect(st.st_uid == 65534 && st.st_gid == 65534)
            try FileIdentity.rename(dir + "/home/part", to: dir + "/home/final", as: nobody)
            #expect(FileIdentity.exists(dir + "/home/final", as: nobody))
            // Renaming into a folder only root may write is refused.
            #expect(throws: SystemError.self) { try FileIdentity.rename(dir + "/home/final", to: dir + "/stolen", as: nobody) }
            #expect(throws: SystemError.self) { try FileIdentity.remove(dir + "/secret", as: nobody) }
            #expect(FileSystem.exists(dir + "/secret"), "nobody removed root's file")
        }
    }

    @Test("root too never reads through a symlink at a path's last component (sizes and digests)")
    func rootDoesNotFollowLinks() async throws {
        try await withLayout { dir in
            #expect(FileIdentity.regularFileSize(dir + "/home/link", as: nil) == nil)
            #expect(FileIdentity.regularFileSize(dir + "/secret", as: nil) == 9)
            #expect(throws: SystemError.self) { try SHA256Hasher.hexDigest(ofFile: dir + "/home/link", as: nil) }
            #expect(throws: SystemError.self) { try SHA256Hasher.hexDigest(ofFile: dir + "/home/link", as: nobody) }
        }
    }

    @Test("a FIFO is refused without blocking")
    func fifoIsRefused() async throws {
        try await withTempDir { dir in
            try #require(mkfifo(dir + "/fifo", 0o644) == 0)
            #expect(throws: SystemError.self) { try FileIdentity.openRegularForReading(dir + "/fifo", as: nil) }
        }
    }
}
