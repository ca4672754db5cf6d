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
private let memoryV1 = "/sys/fs/cgroup/memory"
private let canStall = psiAvailable && FileSystem.exists(memoryV1 + "/cgroup.procs") && access(memoryV1, W_OK) == 0

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

    /// Real stall: a process in a cgroup v1 memory cgroup limited to 16 MiB reads a 64 MiB file
    /// over and over, so that each read reclaims the page cache of the one before (direct
    /// reclaim counts as memory stall). The file is evicted first: pages cached by another
    /// cgroup would be read without a charge.
    @Test("real memory stall fires the callback", .enabled(if: canStall, "no writable cgroup v1 memory hierarchy"))
    func realStall() async throws {
        let fired = Atomic<Int>(0)
        let monitor = try MemoryPressureMonitor.start(trigger: "some 1000 2000000") { fired.add(1, ordering: .relaxed) }.get()
        defer { monitor.stop() }
        let cg = memoryV1 + "/drowse-test-psi-\(getpid())"
        try FileSystem.makeDirectories(cg)
        defer { rmdir(cg) }
        try AppCgroups.writeFile(cg + "/memory.limit_in_bytes", "\(16 << 20)")
        let file = "/var/tmp/drowse-test-psi-\(getpid()).bin"
        defer { unlink(file) }
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        for i in 0..<64 {
            for j in stride(from: 0, to: chunk.count, by: 4096) { chunk[j] = UInt8(truncatingIfNeeded: i &+ j) }
            try FileSystem.writeAll(fd, chunk, what: "write \(file)")
        }
        fsync(fd)
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
        close(fd)
        let thrash = ProcessLauncher().start(
            LaunchRequest(app: "psi", event: .fetch, argv: ["/bin/sh", "-c", "echo 0 > \(cg)/cgroup.procs; while :; do cat \(file) > /dev/null; done"],
                          user: nil, workingDirectory: nil, environment: ["PATH": "/usr/bin:/bin"], stdin: [],
                          deadline: .infinity, killGrace: 0.5),
            output: { _, _ in })
        let end = WallClock.monotonic() + 20
        while fired.load(ordering: .relaxed) == 0 && WallClock.monotonic() < end {
            try await Task.sleep(for: .milliseconds(50))
        }
        thrash.terminate()
        _ = await thrash.outcome()
        #expect(fired.load(ordering: .relaxed) > 0, "no PSI event within 20 s of a stalling process")
    }
}
