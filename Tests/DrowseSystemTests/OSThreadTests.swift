import DrowseSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
import DrowseTestSupport
#endif

@Suite("OSThread, EventFD, WallClock")
struct OSThreadTests {
    @Test("a detached thread runs its body under its (15-character) name")
    func detachNamesThread() async {
        let name = await withCheckedContinuation { (cont: CheckedContinuation<String, Never>) in
            OSThread.detach(name: "drowse-test-thread-long-name") {
                let comm = contents("/proc/thread-self/comm") ?? ""
                cont.resume(returning: comm.trimmingCharacters(in: .newlines))
            }
        }
        #expect(name == "drowse-test-thr")
    }

    @Test("an EventFD is readable after signal() and quiet after drain()")
    func eventFD() {
        let e = EventFD()
        func readable() -> Bool {
            var p = pollfd(fd: e.fd, events: Int16(POLLIN), revents: 0)
            return poll(&p, 1, 0) == 1
        }
        #expect(!readable())
        e.signal()
        e.signal()
        #expect(readable())
        e.drain()  // one read clears every pending signal
        #expect(!readable())
        e.drain()  // draining an empty eventfd does not block
    }

    @Test("an EventFD wakes a thread blocked in poll")
    func eventFDWakesThread() async {
        let e = EventFD()
        let woke = await withCheckedContinuation { (cont: CheckedContinuation<Bool, Never>) in
            OSThread.detach(name: "poller") {
                var p = pollfd(fd: e.fd, events: Int16(POLLIN), revents: 0)
                cont.resume(returning: poll(&p, 1, 5000) == 1)
            }
            e.signal()
        }
        #expect(woke)
    }

    @Test("WallClock.now is Unix time; monotonic never goes back")
    func clocks() {
        let now = WallClock.now()
        #expect(abs(now - Double(time(nil))) < 2)
        let a = WallClock.monotonic()
        let b = WallClock.monotonic()
        #expect(b >= a)
    }
}
