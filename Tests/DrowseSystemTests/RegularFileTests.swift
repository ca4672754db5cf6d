import DrowseSystem
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

/// `readRegularFile` is how config files are read: whole or refused, never blocking.
@Suite("FileSystem.readRegularFile")
struct RegularFileTests {
    @Test("reads a regular file whole, also through a symlink")
    func regular() async throws {
        try await withTempDir { dir in
            try put("id = \"x\"\n", at: dir + "/a.toml")
            #expect(symlink(dir + "/a.toml", dir + "/link.toml") == 0)
            #expect(try FileSystem.readRegularFile(dir + "/a.toml", limit: 1 << 20) == Array("id = \"x\"\n".utf8))
            #expect(try FileSystem.readRegularFile(dir + "/link.toml", limit: 1 << 20) == Array("id = \"x\"\n".utf8))
        }
    }

    @Test("a file of exactly the limit is read; one byte more is refused, not cut")
    func limit() async throws {
        try await withTempDir { dir in
            try put(String(repeating: "#", count: 1 << 20), at: dir + "/max.toml")
            try put(String(repeating: "#", count: (1 << 20) + 1), at: dir + "/big.toml")
            #expect(try FileSystem.readRegularFile(dir + "/max.toml", limit: 1 << 20).count == 1 << 20)
            #expect(throws: RefusedFile("larger than 1 MiB (1048577 bytes); refused rather than read in part")) {
                try FileSystem.readRegularFile(dir + "/big.toml", limit: 1 << 20)
            }
        }
    }

    @Test("a FIFO is refused at once, even with no writer (reading it would block forever)")
    func fifo() async throws {
        try await withTempDir { dir in
            #expect(mkfifo(dir + "/p.toml", 0o644) == 0)
            #expect(symlink(dir + "/p.toml", dir + "/link.toml") == 0)
            let refusal = RefusedFile("not a regular file (a FIFO); only regular files are read")
            #expect(throws: refusal) { try FileSystem.readRegularFile(dir + "/p.toml", limit: 1 << 20) }
            #expect(throws: refusal) { try FileSystem.readRegularFile(dir + "/link.toml", limit: 1 << 20) }
        }
    }

    @Test("devices, directories and missing files are refused with what they are")
    func others() async throws {
        try await withTempDir { dir in
            #expect(throws: RefusedFile("not a regular file (a character device); only regular files are read")) {
                try FileSystem.readRegularFile("/dev/zero", limit: 1 << 20)
            }
            #expect(throws: RefusedFile("not a regular file (a directory); only regular files are read")) {
                try FileSystem.readRegularFile(dir, limit: 1 << 20)
            }
            #expect(throws: RefusedFile("cannot read: No such file or directory")) {
                try FileSystem.readRegularFile(dir + "/none.toml", limit: 1 << 20)
            }
        }
    }

    @Test("the size limit reads in KiB or bytes when it is not whole MiB")
    func limitNames() async throws {
        try await withTempDir { dir in
            try put("12345", at: dir + "/f")
            #expect(throws: RefusedFile("larger than 4 bytes (5 bytes); refused rather than read in part")) {
                try FileSystem.readRegularFile(dir + "/f", limit: 4)
            }
        }
    }
}
