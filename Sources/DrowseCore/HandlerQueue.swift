/// Which waiting handler runs start, and when: at most `limit` at once, the rest wait in
/// arrival order, none is dropped.
///
/// The owner calls `next()` until it returns nil and starts what it gets; it reports each start
/// that failed for lack of resources (`failedToStart`, e.g. EMFILE) and each run's end (`ended`).
/// After a failed start nothing more starts until a run ends (which frees descriptors and memory)
/// or, with nothing running, until the retry delay it returns has passed (`retry()`). No timer is
/// asked for otherwise: the queue sleeps with the daemon.
package struct HandlerQueue<Item: Sendable>: Sendable {
    package let limit: Int
    package private(set) var running = 0
    private var waiting: [Item] = []
    private var head = 0
    /// A start failed: hold the rest until a run ends or the retry timer fires.
    package private(set) var blocked = false
    private var failures = 0

    package init(limit: Int) {
        precondition(limit >= 1)
        self.limit = limit
    }

    package var waitingCount: Int { waiting.count - head }

    /// An item submitted now is the one `next()` gives at once: nothing waits before it, a slot
    /// is free and no failed start holds the queue.
    package var startsAtOnce: Bool { !blocked && running < limit && head >= waiting.count }

    /// Queues `item` behind the others.
    package mutating func submit(_ item: Item) {
        waiting.append(item)
    }

    /// The next item to start now, counted as running; nil when none may start.
    package mutating func next() -> Item? {
        guard !blocked, running < limit, head < waiting.count else { return nil }
        let item = waiting[head]
        head += 1
        // Drop the consumed prefix now and then, so the array does not grow for ever.
        if head >= 64, head * 2 >= waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
        running += 1
        return item
    }

    /// The item `next()` gave was started.
    package mutating func didStart() {
        failures = 0
    }

    /// The item could not be started for lack of resources: it goes back to the front. Returns a
    /// delay after which to call `retry()` when no running handler will end to unblock the queue.
    package mutating func failedToStart(_ item: Item) -> Double? {
        running -= 1
        if head > 0 {
            head -= 1
            waiting[head] = item
        } else {
            waiting.insert(item, at: 0)
        }
        blocked = true
        failures += 1
        guard running == 0 else { return nil }
        return Self.retryDelay(failures: failures)
    }

    /// 0.5 s, doubling, at most 30 s.
    package static func retryDelay(failures: Int) -> Double {
        min(30, 0.5 * Double(1 << min(max(failures - 1, 0), 10)))
    }

    /// A started run ended: its descriptors and memory are free again, so a blocked queue tries
    /// again (the caller loops on `next()`).
    package mutating func ended() {
        running -= 1
        blocked = false
    }

    /// The retry delay after a failed start has passed.
    package mutating func retry() {
        blocked = false
    }

    /// Shutdown: everything still waiting, in order; the queue is empty afterwards.
    package mutating func removeAllWaiting() -> [Item] {
        defer { waiting.removeAll(); head = 0 }
        return Array(waiting[head...])
    }
}
