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
        /// A dup of the part file's descriptor, closed after the sync; -1 for a barrier.
        var fd: Int32
        var event: TransferEvent?
        /// Signalled when the job is done (barriers).
        var done: EventFD?
    }

    private let queue = Mutex<[Job]>([])
    /// The sync thread waits on nothing else: it sleeps in a blocking read until work arrives.
    private let wake = EventFD(blocking: true)
    private let onEvent: @Sendable (TransferEvent) -> Void

    init(onEvent: @escaping @Sendable (TransferEvent) -> Void) {
        self.onEvent = onEvent
        let me = Unmanaged.passRetained(self)
        OSThread.detach(name: "sync") { me.takeUnretainedValue().run() }
    }

    func submit(fd: Int32, event: TransferEvent) {
        let copy = dup(fd)
        guard copy >= 0 else { return }
        queue.withLock { $0.append(Job(fd: copy, event: event, done: nil)) }
        wake.signal()
    }

    /// Blocks until every job submitted so far is done (used before finishing a file): a barrier
    /// job that the sync thread signals when it reaches it.
    func drain() {
        let done = EventFD(blocking: true)
        queue.withLock { $0.append(Job(fd: -1, event: nil, done: done)) }
        wake.signal()
        done.wait()
    }

    private func run() {
        while true {
            wake.wait()  // sleeps until work is submitted: no timer
            while true {
                let job: Job? = queue.withLock { q in q.isEmpty ? nil : q.removeFirst() }
                guard let job else { break }
                if let done = job.done { done.signal(); continue }
                let ok = fdatasync(job.fd) == 0
                Sys.close(job.fd, ignoringErrors: .beyondCommit)
                // A failed sync commits nothing: the next one, or a restart, covers those bytes.
                if ok, let event = job.event { onEvent(event) }
            }
        }
    }
}
