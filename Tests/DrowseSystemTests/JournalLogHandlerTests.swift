#if canImport(Glibc)
import Glibc
#endif
import DrowseSystem
import Logging
import Testing
import DrowseTestSupport

@Suite struct JournalLogHandlerTests {
    @Test func linesStartWithTheSyslogPriority() {
        let line = JournalLogHandler.format(level: .warning, message: "fetch handler finished: failed",
                                            metadata: ["trigger": "manual", "app.id": "weather"], source: "DrowseAgent")
        #expect(line == "<4>app.id=weather trigger=manual [DrowseAgent] fetch handler finished: failed\n")
        #expect(JournalLogHandler.format(level: .info, message: "up", metadata: [:], source: "") == "<6>up\n")
        #expect([Logger.Level.trace, .debug, .info, .notice, .warning, .error, .critical].map(JournalLogHandler.priority)
                == [7, 7, 6, 5, 4, 3, 2])
    }

    @Test func theJournalIsRecognisedByDeviceAndInode() throws {
        try withTempDirSync(in: "/tmp") { dir in
            let fd = open("\(dir)/stream", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            defer { close(fd) }
            var st = stat()
            #expect(fstat(fd, &st) == 0)
            #expect(JournalLogHandler.isJournal(fd: fd, journalStream: "\(st.st_dev):\(st.st_ino)"))
            #expect(!JournalLogHandler.isJournal(fd: fd, journalStream: "\(st.st_dev):\(st.st_ino + 1)"))
            #expect(!JournalLogHandler.isJournal(fd: fd, journalStream: nil))
            #expect(!JournalLogHandler.isJournal(fd: fd, journalStream: "garbage"))
        }
    }
}
