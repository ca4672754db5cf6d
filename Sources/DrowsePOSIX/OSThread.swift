#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CDrowseSys

/// A plain OS thread for work that blocks in poll(2): the C libraries' loops and handler
/// supervision. Blocking there keeps Swift's cooperative pool free and the process asleep.
package enum OSThread {
    private final class Box {
        let body: () -> Void
        let name: String?
        init(_ name: String?, _ body: @escaping () -> Void) {
            self.body = body
            self.name = name.map { String($0.prefix(15)) }
        }
    }

    /// Starts `body` on a detached thread named `name` (the kernel keeps 15 bytes; nil: the
    /// name the process has).
    package static func detach(name: String?, _ body: @escaping @Sendable () -> Void) {
        let arg = Unmanaged.passRetained(Box(name, body)).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            if let name = box.name { drowse_set_thread_name(name) }
            box.body()
            return nil
        }, arg)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        // Only ESRCH or EINVAL (not a joinable thread), impossible for one just created.
        let detached = pthread_detach(tid)
        precondition(detached == 0, "pthread_detach failed: \(detached)")
    }
}
