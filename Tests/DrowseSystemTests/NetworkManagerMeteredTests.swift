#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
@testable import DrowseSystem
import Testing
import DrowseTestSupport

/// NetworkManager's metered flag, read through nmcli (here a fake nmcli script).
@Suite("ConditionsProbe and NetworkManager")
struct NetworkManagerMeteredTests {
    /// A sysfs tree with eth0 and a /proc with a default route through it, plus a fake nmcli.
    static func probe(in dir: String, nmcliSays: String?, metered: [String]? = nil) throws -> ConditionsProbe {
        try FileSystem.makeDirectories(dir + "/sys/class/net/eth0")
        try FileSystem.makeDirectories(dir + "/proc/net")
        try FileSystem.writeAtomically(dir + "/sys/class/net/eth0/type", Array("1\n".utf8))
        try FileSystem.writeAtomically(dir + "/proc/net/route", Array(
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\neth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n".utf8))
        var nmcli: String?
        if let answer = nmcliSays {
            nmcli = dir + "/nmcli"
            // Answers only for the device it is asked about, like the real one.
            try FileSystem.writeAtomically(nmcli!, Array("#!/bin/sh\n[ \"$6\" = eth0 ] || exit 10\necho '\(answer)'\n".utf8), mode: 0o755)
        }
        return ConditionsProbe(sysfsRoot: dir + "/sys", procRoot: dir + "/proc", meteredInterfaces: metered, nmcli: nmcli)
    }

    @Test("NetworkManager's flag decides whether a link is metered", arguments: [
        ("yes", true), ("yes (guessed)", true), ("no", false), ("no (guessed)", false),
    ])
    func flag(answer: String, metered: Bool) async throws {
        try await withTempDir { dir in
            let c = try Self.probe(in: dir, nmcliSays: answer).read(now: 0)
            #expect(c.network == .ethernet && c.interface == "eth0")
            #expect(c.metered == metered)
        }
    }

    @Test("unknown, missing or failing nmcli falls back to the link's kind; metered_interfaces wins over it")
    func fallbacks() async throws {
        try await withTempDir { dir in
            let unknown = try Self.probe(in: dir, nmcliSays: "unknown").read(now: 0)
            let missing = try Self.probe(in: dir, nmcliSays: nil).read(now: 0)
            let overridden = try Self.probe(in: dir, nmcliSays: "yes", metered: []).read(now: 0)
            let listed = try Self.probe(in: dir, nmcliSays: "no", metered: ["eth0"]).read(now: 0)
            #expect(unknown.metered == false)
            #expect(missing.metered == false)
            #expect(overridden.metered == false)
            #expect(listed.metered == true)
        }
    }
}
