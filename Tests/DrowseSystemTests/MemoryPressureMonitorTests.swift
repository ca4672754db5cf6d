@testable import DrowseSystem
import DrowseCore
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let psiAvailable = FileSystem.exists("/proc/pressure/memory")
/// A cgroup v1 memory hierarchy, where a small limit makes real memory stall.

@Suite("MemoryPressureMonitor", .enabled(if: psiAvailable, "no PSI on this kernel"))
struct MemoryPressureMonitorTests {
    @Test("a trigger the kernel refuses is an error that says how to write one")
    func badTrigger() {
        for trigger in ["some lots", "sometimes 1000 2000000", "some 3000000 2000000"] {
            guard case .failure(let e) = MemoryPressureMonitor.start(trigger: trigger, onPressure: {}) else {
                Issue.record("'\(trigger)' was accepted"); continue
            }
            #expect(e.errno == EINVAL)
            #expect(e.description.contains("PSI trigger \"\(trigger)\" on /proc/pressure/memory refused"))
            #expect(e.description.contains("window"))
        }
    }

    @Test("no PSI file: an error naming it")
    func missingFile() {
        guard case .failure(let e) = MemoryPressureMonitor.start(trigger: "some 150000 2000000", path: "/nonexistent/memory", onPressure: {}) else {
            Issue.record("started without a file"); return
        }
        #expect(e.description.contains("/nonexistent/memory"))
    }

    @Test("start then stop: the thread ends promptly, and stop() twice is fine")
    func startStop() throws {
        let monitor = try MemoryPressureMonitor.start(trigger: "some 150000 2000000", onPressure: {}).get()
        let t = WallClock.monotonic()
        monitor.stop()
        monitor.stop()
        #expect(WallClock.monotonic() - t < 1)
    }

    // A real stall is caused end to end instead (Tests/EndToEnd/test_lifecycle.py, memory
    // pressure through a real drowsed): thrashing the page cache here stalled the other unit
    // tests running beside it by ~20 s and failed their time bounds.
}
