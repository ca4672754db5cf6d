import ArgumentParser
import DrowseCore
import DrowseSystem

/// `drowse radio CAPTURE`: radio wakes, radio-on time and energy of a real packet capture, by
/// the same radio model `drowse simulate` uses (deploy/bench-radio.sh measures with it).
struct RadioCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "radio",
        abstract: "Radio wakes, radio-on seconds and joules of a packet capture, by the radio model drowse simulate uses.",
        discussion: """
            CAPTURE is a classic pcap file (tcpdump -w; Ethernet, Linux cooked or raw IP; IPv4 and IPv6). \
            Each IP packet is an instant of radio activity; packets within the model's tail of each other share one wake \
            (one promotion). Wakes whose packets are only MQTT keepalive traffic (PINGREQ/PINGRESP on the broker port and \
            the data-less TCP segments of that connection) are counted apart. \
            --compress K: the capture was made with time running K times faster; the model's promotion and tail are \
            divided by K for grouping, and seconds and joules are given back at the uncompressed scale.
            """)
    @Argument(help: "The capture file (pcap).") var capture: String
    @Option(help: "The radio model: lte, 3g or wifi.") var model: String = "lte"
    @Option(help: "The capture ran K times faster than the time it stands for.") var compress: Double = 1
    @Option(name: .customLong("broker-port"), help: "The MQTT broker's TCP port.") var brokerPort: Int = 1883
    @Flag(help: "Print JSON.") var json = false
    @Flag(help: "Also list every wake (first and last packet, packets, keepalive-only, radio-on, joules).") var wakes = false

    /// Larger captures are refused rather than read in part.
    static let maxCapture = 2 << 30

    func run() throws {
        guard let m = RadioModel.named(model), model != "ethernet" else { throw CLIError("--model \(model): use lte, 3g or wifi") }
        guard compress.isFinite, compress > 0, compress <= 1_000_000 else { throw CLIError("--compress must be a number above 0") }
        guard (1...65535).contains(brokerPort) else { throw CLIError("--broker-port must be from 1 to 65535") }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(capture, limit: Self.maxCapture + 1) } catch { throw CLIError(error.description) }
        guard bytes.count <= Self.maxCapture else { throw CLIError("\(capture): larger than 2 GiB") }
        let parsed: Pcap.Capture
        do { parsed = try Pcap.parse(bytes) } catch { throw CLIError("\(capture): \(error.description)") }
        let r = WireRadio.analyze(parsed.packets, model: m, compress: compress, brokerPort: UInt16(brokerPort))
        if json {
            var members: [(String, JSON)] = [("capture", .string(capture)), ("link_type", .string(parsed.linkType.name))]
            if case .object(let rest) = r.json(wakes: wakes) { members += rest }
            printJSON(.object(members))
            return
        }
        printLines(Self.text(r, capture: capture, capturedOn: parsed.linkType, listed: wakes))
    }

    static func text(_ r: WireRadio.Report, capture: String, capturedOn link: Pcap.LinkType, listed: Bool) -> String {
        let n = SimulateTable.number
        var out: [String] = []
        var head = "\(capture): \(r.packets) packets (\(link.name))"
        if r.skipped > 0 { head += ", \(r.skipped) not IP (skipped)" }
        head += ", \(n(r.spanSeconds, 1)) s from the first IP packet to the last"
        if r.compress != 1 { head += " (captured in \(n(r.spanSeconds / r.compress, 1)) s, time compressed \(n(r.compress, 2))×)" }
        out.append(head)
        out.append("model \(r.model.name): promotion \(n(r.model.promotionSeconds, 3)) s, tail \(n(r.model.tailSeconds, 3)) s"
            + (r.compress != 1 ? " (grouped at \(n(r.model.promotionSeconds / r.compress, 4)) s and \(n(r.model.tailSeconds / r.compress, 4)) s)" : ""))
        func share(_ part: Double, _ whole: Double) -> String { whole > 0 ? n(100 * part / whole, 1) + " %" : "—" }
        out.append("radio wakes            \(r.wakes)")
        out.append("radio-on s             \(n(r.radioOnSeconds, 1))")
        out.append("energy J               \(n(r.joules, 1))")
        out.append("keepalive-only wakes   \(r.keepaliveWakes) (radio-on \(n(r.keepaliveRadioOnSeconds, 1)) s, \(share(r.keepaliveRadioOnSeconds, r.radioOnSeconds)); "
            + "\(n(r.keepaliveJoules, 1)) J, \(share(r.keepaliveJoules, r.joules)); MQTT on port \(r.brokerPort), \(r.keepalivePackets) PINGREQ/PINGRESP packets)")
        if listed {
            // Times from the first IP packet, at the uncompressed scale like every other figure.
            out.append("")
            out.append(SimulateTable.line(["WAKE", "", "FROM s", "TO s", "PACKETS", "RADIO-ON s", "J", "KEEPALIVE-ONLY"], [5, 0, 10, 10, 8, 10, 8, 14]))
            let origin = r.first ?? 0
            for (i, w) in r.wakeList.enumerated() {
                out.append(SimulateTable.line([
                    "\(i + 1)", "", n((w.first - origin) * r.compress, 1), n((w.last - origin) * r.compress, 1), "\(w.packets)",
                    n(w.radioOnSeconds, 1), n(w.joules, 1), w.keepaliveOnly ? "yes" : "no",
                ], [5, 0, 10, 10, 8, 10, 8, 14]))
            }
        }
        return out.joined(separator: "\n")
    }
}
