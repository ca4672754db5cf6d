#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// Log lines for the systemd journal: when drowsed's standard error is the journal (systemd sets
/// `JOURNAL_STREAM` to the stream's `device:inode`), each line starts with its syslog priority
/// (`<3>` error, `<4>` warning, `<5>` notice, `<6>` info, `<7>` debug; sd-daemon(3)), so that
/// `journalctl -p warning -u drowsed` filters by level. The journal stamps the time and the
/// program itself, so the line carries neither: `<6>app.id=weather [DrowseAgent] launched …`.
package struct JournalLogHandler: LogHandler {
    package var logLevel: Logger.Level = .info
    package var metadata: Logger.Metadata = [:]
    let fd: Int32
    /// One line per write(2), never two writers interleaving inside a line.
    private static let lock = Mutex<Void>(())

    package init(fd: Int32 = 2) { self.fd = fd }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(level: Logger.Level, message: Logger.Message, metadata extra: Logger.Metadata?, source: String,
                     file: String, function: String, line: UInt) {
        var all = metadata
        if let extra { all.merge(extra) { $1 } }
        let text = Self.format(level: level, message: message.description, metadata: all, source: source)
        Self.lock.withLock { _ in
            try? FileSystem.writeAll(fd, Array(text.utf8), what: "a log line")  // nowhere left to report a failed log write
        }
    }

    /// The line for `level`, newline included; metadata sorted by key, before the source and the message.
    package static func format(level: Logger.Level, message: String, metadata: Logger.Metadata, source: String) -> String {
        var out = "<\(priority(level))>"
        for key in metadata.keys.sorted() { out += "\(key)=\(metadata[key]!) " }
        if !source.isEmpty { out += "[\(source)] " }
        out += message
        out += "\n"
        return out
    }

    /// syslog(3) priorities.
    package static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// Whether `fd` is the journal stream named by `JOURNAL_STREAM` ("device:inode" of the
    /// stream systemd connected; sd-daemon(3) asks to compare it, since a child that inherited
    /// the variable may have had its standard error redirected).
    package static func isJournal(fd: Int32 = 2, journalStream: String?) -> Bool {
        guard let value = journalStream else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let dev = UInt64(parts[0]), let ino = UInt64(parts[1]) else { return false }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        return UInt64(st.st_dev) == dev && UInt64(st.st_ino) == ino
    }
}
