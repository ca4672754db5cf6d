import DrowseCore
import Testing

/// Frames for captures built in the tests.
enum Frames {
    static let deviceV4: [UInt8] = [10, 214, 0, 2]
    static let serverV4: [UInt8] = [10, 214, 0, 1]
    static let deviceV6: [UInt8] = [0xFD, 0] + Array(repeating: 0, count: 13) + [2]
    static let serverV6: [UInt8] = [0xFD, 0] + Array(repeating: 0, count: 13) + [1]

    static let ack: UInt8 = 0x10, psh: UInt8 = 0x08, syn: UInt8 = 0x02, fin: UInt8 = 0x01

    static func be16(_ v: Int) -> [UInt8] { [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

    static func tcp(_ from: Int, _ to: Int, flags: UInt8, payload: [UInt8]) -> [UInt8] {
        be16(from) + be16(to) + [0, 0, 0, 1, 0, 0, 0, 1, 0x50, flags] + be16(502) + [0, 0, 0, 0] + payload
    }

    static func udp(_ from: Int, _ to: Int, payload: [UInt8]) -> [UInt8] {
        be16(from) + be16(to) + be16(8 + payload.count) + [0, 0] + payload
    }

    static func ipv4(_ proto: UInt8, _ segment: [UInt8], up: Bool = true) -> [UInt8] {
        [0x45, 0] + be16(20 + segment.count) + [0, 0, 0x40, 0, 64, proto, 0, 0]
            + (up ? deviceV4 + serverV4 : serverV4 + deviceV4) + segment
    }

    /// With a hop-by-hop options header before the transport header when `hopByHop`.
    static func ipv6(_ proto: UInt8, _ segment: [UInt8], up: Bool = true, hopByHop: Bool = false) -> [UInt8] {
        let ext: [UInt8] = hopByHop ? [proto, 0, 1, 4, 0, 0, 0, 0] : []
        return [0x60, 0, 0, 0] + be16(ext.count + segment.count) + [hopByHop ? 0 : proto, 64]
            + (up ? deviceV6 + serverV6 : serverV6 + deviceV6) + ext + segment
    }

    static func ethernet(_ ip: [UInt8]) -> [UInt8] {
        [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2] + be16(ip.first! >> 4 == 6 ? 0x86DD : 0x0800) + ip
    }

    static func arp() -> [UInt8] {
        [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 2, 0, 0, 0, 0, 2, 0x08, 0x06] + Array(repeating: 0, count: 28)
    }

    static func cooked(_ ip: [UInt8]) -> [UInt8] {
        [0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 2, 0, 0] + be16(ip.first! >> 4 == 6 ? 0x86DD : 0x0800) + ip
    }

    static func cooked2(_ ip: [UInt8]) -> [UInt8] {
        be16(ip.first! >> 4 == 6 ? 0x86DD : 0x0800) + [0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 2, 0, 0, 0, 0, 2, 0, 0] + ip
    }

    // MQTT on port 1883, from the device's port 40000.
    static func pingreq(_ t: Double) -> (time: Double, bytes: [UInt8]) { (t, ethernet(ipv4(6, tcp(40000, 1883, flags: psh | ack, payload: [0xC0, 0])))) }
    static func pingresp(_ t: Double) -> (time: Double, bytes: [UInt8]) { (t, ethernet(ipv4(6, tcp(1883, 40000, flags: psh | ack, payload: [0xD0, 0]), up: false))) }
    static func mqttAck(_ t: Double) -> (time: Double, bytes: [UInt8]) { (t, ethernet(ipv4(6, tcp(40000, 1883, flags: ack, payload: [])))) }
    /// A notification arriving: PUBLISH QoS 1.
    static func publish(_ t: Double) -> (time: Double, bytes: [UInt8]) {
        (t, ethernet(ipv4(6, tcp(1883, 40000, flags: psh | ack, payload: [0x32, 8, 0, 3, 0x61, 0x2F, 0x62, 0, 1, 0x7B]), up: false)))
    }
    /// A fetch: SYN, the request, 1400 bytes back, FIN, over `seconds`.
    static func fetch(_ t: Double, seconds: Double = 0.05) -> [(time: Double, bytes: [UInt8])] {
        [
            (t, ethernet(ipv4(6, tcp(50000, 8080, flags: syn, payload: [])))),
            (t + seconds * 0.3, ethernet(ipv4(6, tcp(50000, 8080, flags: psh | ack, payload: Array("GET / HTTP/1.1\r\n\r\n".utf8))))),
            (t + seconds * 0.6, ethernet(ipv4(6, tcp(8080, 50000, flags: ack, payload: Array(repeating: 0x41, count: 1400)), up: false))),
            (t + seconds, ethernet(ipv4(6, tcp(50000, 8080, flags: fin | ack, payload: [])))),
        ]
    }

    static func keepalive(_ t: Double) -> [(time: Double, bytes: [UInt8])] { [pingreq(t), pingresp(t + 0.02), mqttAck(t + 0.06)] }
}

@Suite("Pcap")
struct PcapTests {
    let frames = Frames.fetch(1_767_571_200.25) + Frames.keepalive(1_767_571_300.5)

    @Test("reads both byte orders, microsecond and nanosecond timestamps, to the same packets")
    func byteOrdersAndResolutions() throws {
        var seen: [[Pcap.Packet]] = []
        for big in [false, true] {
            for nano in [false, true] {
                let c = try Pcap.parse(Pcap.write(linkType: .ethernet, nanosecond: nano, bigEndian: big, frames: frames))
                #expect(c.littleEndian == !big)
                #expect(c.nanosecond == nano)
                #expect(c.linkType == .ethernet)
                #expect(c.packets.count == frames.count)
                for (p, f) in zip(c.packets, frames) {
                    #expect(abs(p.time - f.time) < 2e-6)
                    #expect(p.length == f.bytes.count)
                }
                seen.append(c.packets.map { var p = $0; p.time = 0; return p })
            }
        }
        #expect(seen.allSatisfy { $0 == seen[0] })
    }

    @Test("decodes TCP over IPv4 and IPv6 (with an extension header) on Ethernet, Linux cooked v1 and v2 and raw IP")
    func linkTypes() throws {
        let segment = Frames.tcp(40000, 1883, flags: Frames.psh | Frames.ack, payload: [0xC0, 0])
        let ips = [Frames.ipv4(6, segment), Frames.ipv6(6, segment), Frames.ipv6(6, segment, hopByHop: true)]
        let wrap: [(Pcap.LinkType, ([UInt8]) -> [UInt8])] = [
            (.ethernet, Frames.ethernet), (.linuxCooked, Frames.cooked), (.linuxCooked2, Frames.cooked2), (.raw, { $0 }),
        ]
        for (link, frame) in wrap {
            let c = try Pcap.parse(Pcap.write(linkType: link, frames: ips.enumerated().map { (Double($0.offset), frame($0.element)) }))
            #expect(c.linkType == link)
            #expect(c.packets.map { $0.ip?.version } == [4, 6, 6], "\(link)")
            for p in c.packets {
                let ip = try #require(p.ip, "\(link)")
                #expect(ip.proto == 6)
                #expect(ip.sourcePort == 40000)
                #expect(ip.destinationPort == 1883)
                #expect(ip.tcpFlags == Frames.psh | Frames.ack)
                #expect(ip.payloadLength == 2)
                #expect(ip.payload == [0xC0, 0])
            }
        }
    }

    @Test("the payload's length comes from the headers when the capture cut the packet short")
    func snapLength() throws {
        var frame = Frames.ethernet(Frames.ipv4(6, Frames.tcp(8080, 50000, flags: Frames.ack, payload: Array(repeating: 7, count: 1400))))
        frame.removeLast(1400 - 20)
        let c = try Pcap.parse(Pcap.write(linkType: .ethernet, snapLength: 74, frames: [(1, frame)]))
        #expect(c.packets[0].ip?.payloadLength == 1400)
        #expect(c.packets[0].ip?.payload.count == 20)  // what the capture kept, within Pcap.payloadPrefix
    }

    @Test("UDP, and frames that are not IP")
    func udpAndNotIP() throws {
        let c = try Pcap.parse(Pcap.write(linkType: .ethernet, frames: [
            (1, Frames.ethernet(Frames.ipv4(17, Frames.udp(5353, 53, payload: [1, 2, 3])))), (2, Frames.arp()),
        ]))
        #expect(c.packets[0].ip?.proto == 17)
        #expect(c.packets[0].ip?.destinationPort == 53)
        #expect(c.packets[0].ip?.payloadLength == 3)
        #expect(c.packets[1].ip == nil)
    }

    @Test("refuses what is not a classic pcap file, with a reason")
    func refusals() {
        func refusal(_ bytes: [UInt8]) -> PcapError? {
            do { _ = try Pcap.parse(bytes); return nil } catch { return error }
        }
        let good = Pcap.write(linkType: .ethernet, frames: frames)
        // pcapng, text, empty.
        #expect(refusal([0x0A, 0x0D, 0x0D, 0x0A] + Array(repeating: 0, count: 40))?.description.contains("pcapng") == true)
        #expect(refusal(Array("hello, this is not a capture".utf8))?.description.contains("not a pcap file") == true)
        #expect(refusal([])?.description.contains("too short") == true)
        // 802.11 radiotap (127) is not decoded.
        var wifi = good
        wifi[20] = 127
        #expect(refusal(wifi)?.description.contains("unsupported: link type 127") == true)
        // Cut inside the file header, a record header and a record.
        #expect(refusal(Array(good[0..<10])) == .truncated("the file header is 10 of 24 bytes"))
        #expect(refusal(Array(good[0..<30]))?.description.hasPrefix("truncated: packet 1 at byte 24") == true)
        #expect(refusal(Array(good[0..<(good.count - 1)]))?.description.hasPrefix("truncated: packet 7") == true)
        // A record claiming 1 GB, a microsecond fraction of a second or more.
        var huge = good
        huge[24 + 8..<24 + 12] = [0, 0, 0, 0x40]
        #expect(refusal(huge)?.description.contains("a record of 1073741824 bytes") == true)
        var fraction = good
        fraction[24 + 4..<24 + 8] = [0x40, 0x42, 0x0F, 0]  // 1 000 000
        #expect(refusal(fraction)?.description.contains("timestamp fraction") == true)
        var version = good
        version[4] = 3
        #expect(refusal(version)?.description.contains("version 3") == true)
    }

    @Test("never crashes on a cut or damaged file: each prefix and many random corruptions parse or are refused")
    func garbage() {
        let good = Pcap.write(linkType: .ethernet, frames: frames + Frames.fetch(1_767_571_400))
        var outcomes = (parsed: 0, refused: 0)
        func attempt(_ bytes: [UInt8]) {
            do { _ = try Pcap.parse(bytes); outcomes.parsed += 1 } catch { outcomes.refused += 1 }
        }
        for n in 0..<good.count { attempt(Array(good[0..<n])) }
        var g = SplitMix64(seed: 7)
        for _ in 0..<3000 {
            var bad = good
            for _ in 0..<(1 + Int(g.next() % 8)) {
                // Beyond the file header, so most damage reaches the records and the frames.
                let at = 24 + Int(g.next() % UInt64(bad.count - 24))
                bad[at] = UInt8(truncatingIfNeeded: g.next())
            }
            attempt(bad)
        }
        for link in [Pcap.LinkType.raw, .linuxCooked, .linuxCooked2] {
            var other = good
            other[20..<24] = [UInt8(link.rawValue & 0xFF), UInt8(link.rawValue >> 8), 0, 0]
            attempt(other)
        }
        // Every strict prefix but the whole-record ones is refused; corruptions go both ways.
        #expect(outcomes.refused >= good.count - 12)
        #expect(outcomes.parsed > 0)
    }
}

@Suite("WireRadio")
struct WireRadioTests {
    static let t0 = 1_767_571_200.0

    func packets(_ frames: [(time: Double, bytes: [UInt8])]) throws -> [Pcap.Packet] {
        try Pcap.parse(Pcap.write(linkType: .ethernet, frames: frames)).packets
    }

    @Test("classifies PINGREQ, PINGRESP and the broker connection's bare ACKs apart from everything else")
    func classify() throws {
        let kinds = try packets(Frames.keepalive(Self.t0) + [Frames.publish(Self.t0 + 1)] + Frames.fetch(Self.t0 + 2)
            + [(Self.t0 + 3, Frames.arp())]).map { WireRadio.classify($0, brokerPort: 1883) }
        #expect(kinds == [.keepalive, .keepalive, .brokerAck, .other, .other, .other, .other, .other, nil])
        // On another broker port, the same pings are other traffic.
        let elsewhere = try packets(Frames.keepalive(Self.t0)).map { WireRadio.classify($0, brokerPort: 8883) }
        #expect(elsewhere == [.other, .other, .other])
        // SYN and FIN of the broker connection are not keepalive.
        let syn = try packets([(Self.t0, Frames.ethernet(Frames.ipv4(6, Frames.tcp(40000, 1883, flags: Frames.syn, payload: []))))])
        #expect(WireRadio.classify(syn[0], brokerPort: 1883) == .other)
    }

    @Test("the adaptive keepalive's ping (UNSUBSCRIBE of …/keepalive, MQTT 3.1.1 and 5) and its UNSUBACK are keepalive; another UNSUBSCRIBE is not")
    func unsubscribePing() throws {
        func up(_ payload: [UInt8]) -> (time: Double, bytes: [UInt8]) {
            (Self.t0, Frames.ethernet(Frames.ipv4(6, Frames.tcp(40000, 1883, flags: Frames.psh | Frames.ack, payload: payload))))
        }
        let topic = Array("drowse/dev1/keepalive".utf8)
        let v311: [UInt8] = [0xA2, UInt8(4 + topic.count), 0, 9, 0, UInt8(topic.count)] + topic
        let v5: [UInt8] = [0xA2, UInt8(5 + topic.count), 0, 9, 0, 0, UInt8(topic.count)] + topic
        let app = Array("drowse/dev1/apps/news/notify".utf8)
        let other: [UInt8] = [0xA2, UInt8(4 + app.count), 0, 9, 0, UInt8(app.count)] + app
        let unsuback: (time: Double, bytes: [UInt8]) = (Self.t0, Frames.ethernet(Frames.ipv4(6, Frames.tcp(1883, 40000, flags: Frames.psh | Frames.ack, payload: [0xB0, 2, 0, 9]), up: false)))
        let kinds = try packets([up(v311), up(v5), unsuback, up(other), up(v311 + [0xC0, 0]), up(Array(v311.dropLast()))])
            .map { WireRadio.classify($0, brokerPort: 1883) }
        #expect(kinds == [.keepalive, .keepalive, .keepalive, .other, .keepalive, .other])
    }

    @Test("counts wakes with the simulator's radio model and the keepalive-only ones apart")
    func keepaliveOnlyWakes() throws {
        let t = Self.t0
        // A fetch; a lone keepalive; a keepalive with a notification in its tail; a keepalive
        // riding a fetch; a lone keepalive; a keepalive whose broker ACK comes late but within the tail.
        let frames = Frames.fetch(t) + Frames.keepalive(t + 100) + Frames.keepalive(t + 200) + [Frames.publish(t + 205)]
            + Frames.fetch(t + 300) + Frames.keepalive(t + 300.5) + Frames.keepalive(t + 400)
            + [Frames.pingreq(t + 500), Frames.pingresp(t + 500.01), Frames.mqttAck(t + 508)]
        let ps = try packets(frames)
        let r = WireRadio.analyze(ps + [Pcap.Packet(time: t + 1, length: 42, ip: nil)], model: .lte)
        #expect(r.wakes == 6)
        #expect(r.keepaliveWakes == 3)
        #expect(r.wakeList.map(\.keepaliveOnly) == [false, true, false, false, true, true])
        #expect(r.skipped == 1)
        #expect(r.ipPackets == frames.count)
        #expect(r.keepalivePackets == 10)
        // The totals are the model's own usage of the same instants.
        let u = RadioModel.lte.usage(of: ps.map { ($0.time, $0.time) })
        #expect(r.wakes == u.promotions)
        #expect(abs(r.radioOnSeconds - u.radioOnSeconds) < 1e-6)
        #expect(abs(r.joules - u.joules) < 1e-6)
        #expect(abs(r.wakeList.map(\.radioOnSeconds).reduce(0, +) - r.radioOnSeconds) < 1e-6)
        // Each keepalive-only wake: promotion, ~0.06 s (the last 8 s) between packets, the tail.
        let lone = RadioModel.lte.promotionSeconds + 0.06 + RadioModel.lte.tailSeconds
        #expect(abs(r.wakeList[1].radioOnSeconds - lone) < 1e-3)
        #expect(abs(r.wakeList[5].radioOnSeconds - (lone + 7.94)) < 1e-3)
        #expect(abs(r.keepaliveRadioOnSeconds - r.wakeList.filter(\.keepaliveOnly).map(\.radioOnSeconds).reduce(0, +)) < 1e-9)
        #expect(abs(r.spanSeconds - 508) < 1e-3)
        // Another model groups by its own tail: on Wi-Fi the late ACK is a wake of its own (only an ACK: not keepalive-only).
        let wifi = WireRadio.analyze(ps, model: .wifi)
        #expect(wifi.wakeList.count == wifi.wakes)
        #expect(wifi.wakeList.last?.packets == 1)
        #expect(wifi.wakeList.last?.keepaliveOnly == false)
    }

    @Test("a capture made K times faster gives the figures of the uncompressed run")
    func compress() throws {
        let t = Self.t0
        let timeline = Frames.fetch(t, seconds: 2) + Frames.keepalive(t + 60) + Frames.fetch(t + 65) + Frames.keepalive(t + 240)
            + Frames.fetch(t + 600) + Frames.keepalive(t + 611) + Frames.keepalive(t + 900)
        let real = WireRadio.analyze(try packets(timeline), model: .lte)
        // [fetch], [keepalive, fetch], [keepalive], [fetch, keepalive], [keepalive].
        #expect(real.wakes == 5)
        #expect(real.keepaliveWakes == 2)
        for k in [2.0, 12, 24, 72] {
            let squeezed = timeline.map { (time: t + ($0.time - t) / k, bytes: $0.bytes) }
            let r = WireRadio.analyze(try packets(squeezed), model: .lte, compress: k)
            #expect(r.wakes == real.wakes, "K = \(k)")
            #expect(r.keepaliveWakes == real.keepaliveWakes, "K = \(k)")
            // Timestamps keep microseconds: K × 1 µs of rounding per packet at most.
            #expect(abs(r.radioOnSeconds - real.radioOnSeconds) < 1e-3 * k, "K = \(k): \(r.radioOnSeconds) vs \(real.radioOnSeconds)")
            #expect(abs(r.joules - real.joules) < 2e-3 * k, "K = \(k)")
            #expect(abs(r.keepaliveRadioOnSeconds - real.keepaliveRadioOnSeconds) < 1e-3 * k, "K = \(k)")
            #expect(abs(r.spanSeconds - real.spanSeconds) < 1e-3 * k, "K = \(k)")
            // Read without the compression, the squeezed capture is fewer, longer wakes.
            if k >= 12 { #expect(WireRadio.analyze(try packets(squeezed), model: .lte).wakes < real.wakes, "K = \(k)") }
        }
        // The model is divided for grouping only: 11 s apart is one wake at K = 1 and two at K = 2.
        let pair = try packets(Frames.keepalive(t) + Frames.keepalive(t + 11))
        #expect(WireRadio.analyze(pair, model: .lte).wakes == 1)
        #expect(WireRadio.analyze(pair, model: .lte, compress: 2).wakes == 2)
    }

    @Test("an empty capture has no wakes; the JSON names every figure")
    func emptyAndJSON() throws {
        let r = WireRadio.analyze([], model: .threeG, compress: 24)
        #expect(r.wakes == 0 && r.radioOnSeconds == 0 && r.spanSeconds == 0)
        let j = WireRadio.analyze(try packets(Frames.keepalive(Self.t0)), model: .lte, compress: 24).json(wakes: true)
        #expect(j["wakes"]?.intValue == 1)
        #expect(j["keepalive_wakes"]?.intValue == 1)
        #expect(j["compress"]?.doubleValue == 24)
        #expect(j["model"]?.stringValue == "lte")
        #expect(j["wake_list"]?.arrayValue?.first?["keepalive_only"]?.boolValue == true)
        let all = try #require(j["radio_on_seconds"]?.doubleValue), keepalive = try #require(j["keepalive_radio_on_seconds"]?.doubleValue)
        #expect(abs(all - keepalive) < 1e-9)
    }
}
