// An example resident app built on DrowseKit. drowsed starts it (deploy/apps.d/resident.toml)
// and keeps it running; it sleeps in its event stream until drowsed has something for it.
//
//   - every event is printed (drowsed logs it, tagged with the app) and appended to events.log
//     in the output folder: `<kind> <id> <payload JSON>`;
//   - a fetch writes the time into last-fetch and completes with new-data;
//   - a notification is completed with new-data; when its payload has "task": N, the app begins
//     a background task and works N seconds, then ends it; when drowsed
//     warns that the background time runs out, the work stops and the task is ended
//     (tasks.log says which);
//   - finished transfers are logged and completed with new-data.
//
// Usage: drowse-resident-example [--dir FOLDER]   (default: the working directory)
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import DrowseKit
import Synchronization

/// The output folder, from `--dir` (default: the working directory).
enum Options {
    static let folder: String = {
        var folder = "."
        var args = CommandLine.arguments.dropFirst()
        while let a = args.popFirst() {
            switch a {
            case "--dir":
                guard let d = args.popFirst() else { fatal("--dir needs a folder") }
                folder = d
            case "-h", "--help":
                say("usage: drowse-resident-example [--dir FOLDER]")
                exit(0)
            default: fatal("unknown argument '\(a)'")
            }
        }
        return folder
    }()
}

/// A line on standard output (drowsed logs it), written at once: a pipe would otherwise buffer it.
func say(_ line: String, fd: Int32 = 1) {
    writeAll(fd, Array((line + "\n").utf8))
}

func fatal(_ message: String) -> Never {
    say("drowse-resident-example: \(message)", fd: 2)
    exit(1)
}

func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
    var off = 0
    while off < bytes.count {
        let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
        if n < 0 { if errno == EINTR { continue }; return }
        off += n
    }
}

func now() -> Double {
    var ts = timespec()
    let rc = clock_gettime(CLOCK_REALTIME, &ts)
    let saved = errno
    precondition(rc == 0, "clock_gettime: \(String(cString: strerror(saved)))")  // only for a clock the kernel lacks
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func stamp() -> String {
    let t = now()
    return String(Int64(t)) + "." + String(Int64((t - Double(Int64(t))) * 1000) + 1000).dropFirst()
}

/// Appends a line (or, with `replace`, makes it the whole file).
func write(_ line: String, to name: String, replace: Bool = false) {
    let path = Options.folder + "/" + name
    let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (replace ? O_TRUNC : O_APPEND), 0o644)
    guard fd >= 0 else {
        let saved = errno
        say("drowse-resident-example: cannot write \(path): \(String(cString: strerror(saved)))", fd: 2)
        return
    }
    writeAll(fd, Array((line + "\n").utf8))
    if close(fd) != 0 { let saved = errno; say("drowse-resident-example: cannot write \(path): \(String(cString: strerror(saved)))", fd: 2) }
}

/// What an event carries, for the log.
func payloadText(_ e: DrowseEvent) -> String {
    switch e.kind {
    case .fetch: return e.json["reason"].map(\.description) ?? "null"
    case .notification: return e.payload?.description ?? "null"
    case .transfers: return e.json["transfers"]?.description ?? "[]"
    case .taskExpiring: return DrowseJSON.object([("task", .string(e.task?.rawValue ?? "")), ("time_remaining", e.json["time_remaining"] ?? .null)]).description
    }
}

/// A background task and the work done in it. The work stands for N seconds of real work (an
/// upload, a sync): one wait, cut short when drowsed warns that the background time runs out.
final class Work: Sendable {
    let app: DrowseApp
    let task: BackgroundTaskID
    let seconds: Int
    let end: End

    /// How the work ends, whichever comes first: done, or expired (the task's expiration handler).
    final class End: Sendable {
        private let state = Mutex<(expired: Bool?, waiter: CheckedContinuation<Bool, Never>?)>((nil, nil))

        func finish(expired: Bool) {
            let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard s.expired == nil else { return nil }
                s.expired = expired
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume(returning: expired)
        }

        /// True when it ended by expiring.
        func wait() async -> Bool {
            await withCheckedContinuation { c in
                let now = state.withLock { s -> Bool? in
                    if let e = s.expired { return e }
                    s.waiter = c
                    return nil
                }
                if let now { c.resume(returning: now) }
            }
        }
    }

    /// Begins the task; nil when drowsed refuses (no background time left).
    init?(_ app: DrowseApp, seconds: Int, for event: String) async {
        let end = End()
        do {
            task = try await app.beginBackgroundTask(name: "work-\(event)") {
                // Runs when drowsed warns that the background time runs out: stop the work.
                end.finish(expired: true)
            }
        } catch {
            say("resident: no background task for \(event): \(error)")
            write("\(stamp()) refused \(event) \(error)", to: "tasks.log")
            return nil
        }
        self.app = app
        self.seconds = seconds
        self.end = end
        say("resident: task \(task) begun for \(seconds)s of work")
        write("\(stamp()) begun \(task) \(seconds)", to: "tasks.log")
    }

    /// Does the work until it is done or the task expires, then ends the task.
    func run() async {
        let clock = ContinuousClock()
        let start = clock.now
        let left = (try? await app.backgroundTimeRemaining) ?? 0
        say("resident: task \(task): \(seconds)s of work, \(Int(left))s of background time left")
        let end = self.end, seconds = self.seconds
        let work = Task {
            try? await Task.sleep(for: .seconds(seconds))  // the work itself, not a poll
            end.finish(expired: false)
        }
        let expired = await end.wait()
        work.cancel()
        let took = Int((clock.now - start).components.seconds)
        let how = expired ? "expired" : "done"
        do { try await app.endBackgroundTask(task) } catch { say("resident: ending \(task): \(error)") }
        say("resident: task \(task) \(how) after \(took)s")
        write("\(stamp()) \(how) \(task) \(took)", to: "tasks.log")
    }
}

let folder = Options.folder
if mkdir(folder, 0o755) != 0 && errno != EEXIST { let saved = errno; fatal("cannot create \(folder): \(String(cString: strerror(saved)))") }
let app = DrowseApp()
say("resident: app '\(app.app)' on \(app.socket), writing to \(folder)")
do {
    for try await event in app.events {
        let line = "\(event.kind.rawValue) \(event.id) \(payloadText(event))"
        say("resident: \(line)")
        write(line, to: "events.log")
        switch event.kind {
        case .fetch:
            write(stamp(), to: "last-fetch", replace: true)
        case .notification:
            if let seconds = event.payload?["task"]?.intValue, seconds > 0 {
                // Begun before the notification is completed, so the app keeps a reason to run.
                if let work = await Work(app, seconds: seconds, for: event.id) {
                    Task { await work.run() }
                }
            }
        case .transfers, .taskExpiring:
            break
        }
        guard event.needsCompletion else { continue }
        do {
            try await app.complete(event, result: .newData)
        } catch {
            say("resident: completing \(event.id): \(error)")
        }
    }
    say("resident: the event stream ended")
} catch {
    fatal("event stream: \(error)")
}
