import DrowsePOSIX

/// A plain OS thread per blocking job, so Swift's cooperative pool never waits on a socket.
enum KitThread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        OSThread.detach(name: nil, body)
    }

    /// Runs `work` on a thread of its own and resumes with its result.
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws(DrowseError) -> T) async throws(DrowseError) -> T {
        let r: Result<T, DrowseError> = await withCheckedContinuation { (c: CheckedContinuation<Result<T, DrowseError>, Never>) in
            detach {
                do throws(DrowseError) { c.resume(returning: .success(try work())) } catch { c.resume(returning: .failure(error)) }
            }
        }
        return try r.get()
    }
}
