import DrowseSystem
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

@Suite("Sys, the checked calls")
struct SysTests {
    @Test("close reports EBADF (a second close); unlink and kill tell 'nothing there' from a failure")
    func outcomes() async throws {
        try await withTempDir { dir in
            let fd = open(dir + "/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            try #require(fd >= 0)
            try Sys.fsync(fd)
            try Sys.fchmod(fd, 0o640)
            try Sys.close(fd)
            let error = #expect(throws: SystemError.self) { try Sys.close(fd, "close f") }
            #expect(error?.errno == EBADF)
            #expect(error?.description.hasPrefix("close f: ") == true)

            try Sys.chmod(dir + "/f", 0o600)
            #expect(throws: SystemError.self) { try Sys.chmod(dir + "/missing", 0o600) }
            #expect(try Sys.unlink(dir + "/f"))
            #expect(try !Sys.unlink(dir + "/f"))  // ENOENT: nothing to remove, not an error
        }
        // A pid that cannot exist (above pid_max's ceiling): ESRCH is "gone", not a failure.
        #expect(try !Sys.kill(4_194_305, 0))
        #expect(try !Sys.killpg(4_194_305, 0))
        #expect(try Sys.kill(getpid(), 0))
    }

    @Test("an eventfd's signals add up until read, and a sleep on it wakes when signalled")
    func eventFD() throws {
        let e = EventFD()
        #expect(EventFD.read(e.fd) == 0)  // nothing pending: EAGAIN is an outcome
        e.signal()
        EventFD.signal(e.fd, adding: 2)
        #expect(try e.sleep(5))
        #expect(EventFD.read(e.fd) == 3)
        let start = WallClock.monotonic()
        #expect(try !e.sleep(0.05))
        #expect(WallClock.monotonic() - start >= 0.05)
    }

    @Test("a receive timeout on a socket makes recv fail with EAGAIN")
    func receiveTimeout() throws {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { for fd in fds { Sys.close(fd, ignoringErrors: .nothingToFlush) } }
        try Sys.setReceiveTimeout(fds[0], seconds: 0.05)
        var buf = [UInt8](repeating: 0, count: 4)
        let error = #expect(throws: SystemError.self) { try Sys.posix("recv") { recv(fds[0], &buf, 4, 0) } }
        #expect(error?.errno == EAGAIN)
        try Sys.shutdown(fds[1], Int32(SHUT_RDWR))
    }
}
