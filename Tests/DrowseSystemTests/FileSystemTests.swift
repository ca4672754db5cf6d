import DrowseSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

@Suite("FileSystem")
struct FileSystemTests {
    // MARK: writeAtomically

    @Test("writeAtomically creates the file with its bytes and mode, and leaves no temporary behind")
    func writeAtomicallyCreates() async throws {
        try await withTempDir { dir in
            let path = dir + "/state.json"
            try FileSystem.writeAtomically(path, Array("hello".utf8), mode: 0o600)
            #expect(try FileSystem.readText(path) == "hello")
            var st = stat()
            try #require(stat(path, &st) == 0)
            #expect(st.st_mode & 0o777 == 0o600)
            #expect(FileSystem.listDirectory(dir) == ["state.json"])
        }
    }

    @Test("writeAtomically without fsyncs still replaces the file whole and leaves no temporary")
    func writeAtomicallyNotDurable() async throws {
        try await withTempDir { dir in
            let path = dir + "/drowse.prom"
            try FileSystem.writeAtomically(path, Array("old".utf8), durable: false)
            try FileSystem.writeAtomically(path, Array("new contents".utf8), durable: false)
            #expect(try FileSystem.readText(path) == "new contents")
            #expect(FileSystem.listDirectory(dir) == ["drowse.prom"])
            #expect(throws: SystemError.self) { try FileSystem.writeAtomically(dir + "/missing/x.prom", [1], durable: false) }
        }
    }

    @Test("writeAtomically replaces an existing file whole")
    func writeAtomicallyReplaces() async throws {
        try await withTempDir { dir in
            let path = dir + "/f"
            try FileSystem.writeAtomically(path, Array(repeating: 0x41, count: 100_000))
            try FileSystem.writeAtomically(path, Array("short".utf8))
            #expect(try FileSystem.readText(path) == "short")
            try FileSystem.writeAtomically(path, [])
            #expect(FileSystem.fileSize(path) == 0)
            #expect(FileSystem.listDirectory(dir) == ["f"])
        }
    }

    @Test("writeAtomically into a missing folder throws and creates nothing")
    func writeAtomicallyMissingFolder() async throws {
        try await withTempDir { dir in
            let error = #expect(throws: SystemError.self) {
                try FileSystem.writeAtomically(dir + "/no/such/f", [1, 2, 3])
            }
            #expect(error?.errno == ENOENT)
            #expect(FileSystem.listDirectory(dir).isEmpty)
        }
    }

    @Test("a failed writeAtomically leaves no temporary file behind")
    func writeAtomicallyFailureCleansUp() async throws {
        try await withTempDir { dir in
            // rename(2) of a file over a non-empty folder fails after the temporary was written.
            try put("x", at: dir + "/target/inside")
            #expect(throws: SystemError.self) { try FileSystem.writeAtomically(dir + "/target", [1, 2, 3]) }
            // Bug: writeAtomically neither unlinks `path.tmp` when write(2) or rename(2) fails,
            // so failures (ENOSPC, EISDIR, ...) leave stray files in state_dir.
            #expect(!FileSystem.exists(dir + "/target.tmp"))
        }
    }

    // MARK: makeDirectories

    @Test("makeDirectories creates every missing level and is idempotent")
    func makeDirectoriesNested() async throws {
        try await withTempDir { dir in
            let deep = dir + "/a/b//c/d/"
            try FileSystem.makeDirectories(deep, mode: 0o750)
            #expect(FileSystem.isDirectory(dir + "/a/b/c/d"))
            var st = stat()
            try #require(stat(dir + "/a/b/c/d", &st) == 0)
            #expect(st.st_mode & 0o777 == 0o750)
            try FileSystem.makeDirectories(deep)
            try FileSystem.makeDirectories(dir)
            #expect(FileSystem.isDirectory(dir + "/a/b/c/d"))
        }
    }

    @Test("makeDirectories through a regular file throws")
    func makeDirectoriesThroughFile() async throws {
        try await withTempDir { dir in
            try put("x", at: dir + "/file")
            let error = #expect(throws: SystemError.self) { try FileSystem.makeDirectories(dir + "/file/sub") }
            #expect(error?.errno == ENOTDIR)
        }
    }

    @Test("makeDirectories on a path that is a regular file throws (like mkdir -p)")
    func makeDirectoriesOnFile() async throws {
        try await withTempDir { dir in
            try put("x", at: dir + "/state")
            // Bug: mkdir's EEXIST is taken as success for the last level too, so a file where
            // the folder should be passes silently and later writes fail with ENOTDIR.
            #expect(throws: SystemError.self) { try FileSystem.makeDirectories(dir + "/state") }
            #expect(!FileSystem.isDirectory(dir + "/state"))
        }
    }

    // MARK: Reading and listing

    @Test("listDirectory is sorted, without . and .., and empty for a missing folder")
    func listDirectory() async throws {
        try await withTempDir { dir in
            for name in ["zeta", "Alpha", "beta", ".hidden", "10", "9"] { try put("", at: dir + "/" + name) }
            try FileSystem.makeDirectories(dir + "/sub")
            #expect(FileSystem.listDirectory(dir) == [".hidden", "10", "9", "Alpha", "beta", "sub", "zeta"])
            #expect(FileSystem.listDirectory(dir + "/missing") == [])
            #expect(FileSystem.listDirectory(dir + "/zeta") == [])  // a file is not a folder
        }
    }

    @Test("readFile stops at its limit")
    func readFileLimit() async throws {
        try await withTempDir { dir in
            let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0) }
            try Data(bytes).write(to: URL(fileURLWithPath: dir + "/f"))
            #expect(try FileSystem.readFile(dir + "/f", limit: 10) == Array(bytes.prefix(10)))
            #expect(try FileSystem.readFile(dir + "/f", limit: 16384 + 1) == Array(bytes.prefix(16385)))
            #expect(try FileSystem.readFile(dir + "/f", limit: 0) == [])
            #expect(try FileSystem.readFile(dir + "/f") == bytes)
            #expect(try FileSystem.readFile(dir + "/f", limit: 1_000_000) == bytes)
        }
    }

    @Test("readFile of a missing file throws ENOENT")
    func readFileMissing() async throws {
        try await withTempDir { dir in
            let error = #expect(throws: SystemError.self) { _ = try FileSystem.readFile(dir + "/missing") }
            #expect(error?.errno == ENOENT)
            #expect(error?.description.contains(dir + "/missing") == true)
        }
    }

    @Test("attribute trims trailing whitespace and is nil when unreadable")
    func attribute() async throws {
        try await withTempDir { dir in
            try put("Discharging\n", at: dir + "/status")
            try put("  57 \n\n", at: dir + "/capacity")
            try put("", at: dir + "/empty")
            #expect(FileSystem.attribute(dir + "/status") == "Discharging")
            #expect(FileSystem.attribute(dir + "/capacity") == "  57")
            #expect(FileSystem.attribute(dir + "/empty") == "")
            #expect(FileSystem.attribute(dir + "/missing") == nil)
            #expect(FileSystem.attribute(dir) == nil)  // a folder
        }
    }

    @Test("exists, isDirectory, fileSize, rename and remove")
    func smallHelpers() async throws {
        try await withTempDir { dir in
            try FileSystem.writeAtomically(dir + "/a", Array("12345".utf8))
            #expect(FileSystem.exists(dir + "/a"))
            #expect(!FileSystem.isDirectory(dir + "/a"))
            #expect(FileSystem.isDirectory(dir))
            #expect(FileSystem.fileSize(dir + "/a") == 5)
            #expect(FileSystem.fileSize(dir + "/missing") == nil)
            try FileSystem.rename(dir + "/a", to: dir + "/b")
            #expect(!FileSystem.exists(dir + "/a"))
            #expect(try FileSystem.readText(dir + "/b") == "12345")
            #expect(throws: SystemError.self) { try FileSystem.rename(dir + "/a", to: dir + "/c") }
            #expect(try FileSystem.remove(dir + "/b"))
            #expect(try !FileSystem.remove(dir + "/b"))
            #expect(!FileSystem.exists(dir + "/b"))
        }
    }
}
