#if canImport(Glibc)
import Glibc
#endif
import DrowseSystem
import Synchronization

/// Makes downloaded bytes durable off the transfer thread: fdatasync can take hundreds of
/// milliseconds on an SD card, and the transfer thread must keep reading sockets meanwhile.
/// Jobs run in order; each reports its offset as committed only after its sync returned.
final class Syncer: Sendable {
    struct Job: Sendable {
        /// A dup of the part file's descriptor, closed after the sync.
        var fd: Int32
        var event: TransferEvent
    }

    private let queue = Mutex<[Job]>([])
    private let wake = EventFD()
    private let onEvent: @Sendable (TransferEvent) -> Void

    init(onEvent: @escaping @Sendable (TransferEvent) -> Void) {
        self.onEvent = onEvent
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "sync") { me.takeUnretainedValue().run() }
    }

    func submit(fd: Int32, event: TransferEvent) {
        let copy = dup(fd)
        guard copy >= 0 else { return }
        queue.withLock { $0.append(Job(fd: copy, event: event)) }
        wake.signal()
    }

    /// Blocks until every job submitted so far is done (used before finishing a file).
    func drain() {
        while !queue.withLock({ $0.isEmpty }) || busy.load(ordering: .acquiring) {
            var ts = timespec(tv_sec: 0, tv_nsec: 1_000_000)
            nanosleep(&ts, nil)
        }
    }

    private let busy = Atomic<Bool>(false)

    private func run() {
        while true {
            var p = pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, -1)
            wake.drain()
            while true {
                let job: Job? = queue.withLock { q in
                    guard !q.isEmpty else { return nil }
                    busy.store(true, ordering: .releasing)
                    return q.removeFirst()
                }
                guard let job else { break }
                let ok = fdatasync(job.fd) == 0
                close(job.fd)
                // A failed sync commits nothing: the next one, or a restart, covers those bytes.
                if ok { onEvent(job.event) }
                busy.store(false, ordering: .releasing)
            }
        }
    }
}
