/// A reader of classic libpcap capture files (what `tcpdump -w` writes): either byte order,
/// microsecond or nanosecond timestamps, Ethernet (with 802.1Q tags), Linux cooked captures v1
/// and v2 (`tcpdump -i any`) and raw IP (a `wwan0` modem interface). Each frame is decoded down
/// to what radio accounting needs: when, how long on the wire, and for IPv4 and IPv6 the
/// transport protocol, ports, TCP flags, the payload's length and its first bytes. Pure: the
/// caller reads the file. Every length in the file is checked before it is used: a truncated
/// or garbage file is refused with a `PcapError` that says where, never a crash.
package enum Pcap {
    /// The link types it decodes (their LINKTYPE_ numbers, as stored in the file).
    package enum LinkType: UInt32, Sendable, Equatable {
        case ethernet = 1
        case raw = 101
        case linuxCooked = 113
        case linuxCooked2 = 276

        package var name: String {
            switch self {
            case .ethernet: "Ethernet"
            case .raw: "raw IP"
            case .linuxCooked: "Linux cooked v1"
            case .linuxCooked2: "Linux cooked v2"
            }
        }
    }

    /// What an IPv4 or IPv6 packet carries, as far as the captured bytes go.
    package struct IPInfo: Sendable, Equatable {
        package var version: Int
        /// The transport protocol (6 TCP, 17 UDP, …); nil when an IPv6 extension chain could
        /// not be followed in the captured bytes.
        package var proto: UInt8?
        package var sourcePort: UInt16?
        package var destinationPort: UInt16?
        /// TCP's flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
        package var tcpFlags: UInt8?
        /// The transport payload's length, from the IP and TCP/UDP headers (not the captured
        /// length); nil when the headers were not captured or the packet is a later fragment.
        package var payloadLength: Int?
        /// The captured first bytes of the payload (at most `Pcap.payloadPrefix`).
        package var payload: [UInt8]

        package init(version: Int, proto: UInt8?, sourcePort: UInt16? = nil, destinationPort: UInt16? = nil, tcpFlags: UInt8? = nil,
                     payloadLength: Int? = nil, payload: [UInt8] = []) {
            self.version = version
            self.proto = proto
            self.sourcePort = sourcePort
            self.destinationPort = destinationPort
            self.tcpFlags = tcpFlags
            self.payloadLength = payloadLength
            self.payload = payload
        }
    }

    package struct Packet: Sendable, Equatable {
        /// Seconds since the epoch.
        package var time: Double
        /// The frame's length on the wire (the record's original length).
        package var length: Int
        /// nil: not an IP packet (ARP, LLDP, …).
        package var ip: IPInfo?

        package init(time: Double, length: Int, ip: IPInfo?) {
            self.time = time
            self.length = length
            self.ip = ip
        }
    }

    package struct Capture: Sendable, Equatable {
        package var linkType: LinkType
        package var nanosecond: Bool
        /// The file's byte order (tcpdump writes its machine's).
        package var littleEndian: Bool
        package var snapLength: UInt32
        package var packets: [Packet]
    }

    /// How many payload bytes a packet keeps.
    package static let payloadPrefix = 128
    /// The largest record accepted: far above any link's frame (a GSO segment is at most 64 KiB
    /// plus headers); a bigger length is garbage.
    package static let maxRecord: UInt32 = 262_144

    package static func parse(_ bytes: [UInt8]) throws(PcapError) -> Capture {
        guard bytes.count >= 4 else { throw PcapError.notPcap("\(bytes.count) bytes: too short for a capture file (a pcap file starts with a 24-byte header)") }
        let magicBE = UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
        let littleEndian: Bool, nano: Bool
        switch magicBE {
        // Read big-endian: a file written big-endian shows the magic as is, one written
        // little-endian shows it byte-reversed.
        case 0xA1B2_C3D4: littleEndian = false; nano = false
        case 0xA1B2_3C4D: littleEndian = false; nano = true
        case 0xD4C3_B2A1: littleEndian = true; nano = false
        case 0x4D3C_B2A1: littleEndian = true; nano = true
        case 0x0A0D_0D0A:
            throw PcapError.notPcap("a pcapng file; write classic pcap (tcpdump -w does by default; convert with `editcap -F pcap IN OUT` or `tcpdump -r IN -w OUT`)")
        default:
            throw PcapError.notPcap("not a pcap file (its first 4 bytes are \(hex(Array(bytes[0..<4]))); a pcap file starts with a1b2c3d4 or a1b23c4d in either byte order)")
        }
        let r = Reader(bytes: bytes, littleEndian: littleEndian)
        guard bytes.count >= 24 else { throw PcapError.truncated("the file header is \(bytes.count) of 24 bytes") }
        let major = r.u16(4), minor = r.u16(6)
        guard major == 2 else { throw PcapError.notPcap("pcap version \(major).\(minor); only version 2.x is known") }
        let snap = r.u32(16)
        let rawLink = r.u32(20)
        // The top bits may carry the FCS length; the link type is the low 16 bits.
        let linkNumber = rawLink & 0xFFFF
        guard let link = LinkType(rawValue: linkNumber) else {
            throw PcapError.unsupportedLink("link type \(linkNumber); this reader knows Ethernet (1), raw IP (101) and Linux cooked captures (113, 276)")
        }
        var packets: [Packet] = []
        var offset = 24
        var index = 0
        let fractionLimit: UInt32 = nano ? 1_000_000_000 : 1_000_000
        while offset < bytes.count {
            index += 1
            guard bytes.count - offset >= 16 else {
                throw PcapError.truncated("packet \(index) at byte \(offset): its 16-byte record header has only \(bytes.count - offset) bytes")
            }
            let seconds = r.u32(offset), fraction = r.u32(offset + 4)
            let included = r.u32(offset + 8), original = r.u32(offset + 12)
            guard fraction < fractionLimit else {
                throw PcapError.garbage("packet \(index) at byte \(offset): a timestamp fraction of \(fraction) (must be below \(fractionLimit))")
            }
            guard included <= maxRecord else {
                throw PcapError.garbage("packet \(index) at byte \(offset): a record of \(included) bytes (at most \(maxRecord) are plausible)")
            }
            let start = offset + 16
            guard bytes.count - start >= Int(included) else {
                throw PcapError.truncated("packet \(index) at byte \(offset) holds \(included) bytes, the file has \(bytes.count - start) left")
            }
            let end = start + Int(included)
            let time = Double(seconds) + Double(fraction) / Double(fractionLimit)
            let ip = decodeLink(link, bytes, start, end)
            packets.append(Packet(time: time, length: Int(max(original, included)), ip: ip))
            offset = end
        }
        return Capture(linkType: link, nanosecond: nano, littleEndian: littleEndian, snapLength: snap, packets: packets)
    }

    /// The IP packet inside a frame, if it is one.
    static func decodeLink(_ link: LinkType, _ b: [UInt8], _ start: Int, _ end: Int) -> IPInfo? {
        var at = start
        var etherType: UInt16
        switch link {
        case .raw:
            guard end > at else { return nil }
            return decodeIP(b, at, end)
        case .ethernet:
            guard end - at >= 14 else { return nil }
            etherType = be16(b, at + 12)
            at += 14
            // 802.1Q and 802.1ad tags.
            while etherType == 0x8100 || etherType == 0x88A8, end - at >= 4 {
                etherType = be16(b, at + 2)
                at += 4
            }
        case .linuxCooked:
            guard end - at >= 16 else { return nil }
            etherType = be16(b, at + 14)
            at += 16
        case .linuxCooked2:
            guard end - at >= 20 else { return nil }
            etherType = be16(b, at)
            at += 20
        }
        switch etherType {
        case 0x0800: return decodeIP(b, at, end).flatMap { $0.version == 4 ? $0 : nil }
        case 0x86DD: return decodeIP(b, at, end).flatMap { $0.version == 6 ? $0 : nil }
        default: return nil
        }
    }

    /// An IPv4 or IPv6 header at `at` and what follows it, within `end`.
    static func decodeIP(_ b: [UInt8], _ at: Int, _ end: Int) -> IPInfo? {
        guard end > at else { return nil }
        switch b[at] >> 4 {
        case 4:
            guard end - at >= 20 else { return nil }
            let headerLength = Int(b[at] & 0x0F) * 4
            let total = Int(be16(b, at + 2))
            let proto = b[at + 9]
            let fragmentOffset = be16(b, at + 6) & 0x1FFF
            var info = IPInfo(version: 4, proto: proto)
            guard headerLength >= 20, total >= headerLength, fragmentOffset == 0 else { return info }
            transport(&info, b, at + headerLength, end, length: total - headerLength)
            return info
        case 6:
            guard end - at >= 40 else { return nil }
            var length = Int(be16(b, at + 4))
            var next = b[at + 6]
            var x = at + 40
            var info = IPInfo(version: 6, proto: nil)
            // Follow the extension headers that may come before the transport header.
            while true {
                switch next {
                case 0, 43, 60:  // hop-by-hop, routing, destination options
                    guard end - x >= 2 else { return info }
                    let n = (Int(b[x + 1]) + 1) * 8
                    next = b[x]
                    x += n
                    length -= n
                case 44:  // fragment
                    guard end - x >= 8 else { return info }
                    let later = be16(b, x + 2) & 0xFFF8 != 0
                    next = b[x]
                    x += 8
                    length -= 8
                    if later { info.proto = next; return info }
                case 51:  // authentication header
                    guard end - x >= 2 else { return info }
                    let n = (Int(b[x + 1]) + 2) * 4
                    next = b[x]
                    x += n
                    length -= n
                default:
                    info.proto = next
                    guard length >= 0 else { return info }
                    transport(&info, b, x, end, length: length)
                    return info
                }
                guard length >= 0 else { return info }
            }
        default:
            return nil
        }
    }

    /// TCP's or UDP's header at `at`; `length` is the transport segment's length by the IP header.
    static func transport(_ info: inout IPInfo, _ b: [UInt8], _ at: Int, _ end: Int, length: Int) {
        switch info.proto {
        case 6:
            guard end - at >= 14 else { return }
            info.sourcePort = be16(b, at)
            info.destinationPort = be16(b, at + 2)
            let headerLength = Int(b[at + 12] >> 4) * 4
            info.tcpFlags = b[at + 13]
            guard headerLength >= 20, length >= headerLength else { return }
            info.payloadLength = length - headerLength
            info.payload = prefix(b, at + headerLength, end, length - headerLength)
        case 17:
            guard end - at >= 8 else { return }
            info.sourcePort = be16(b, at)
            info.destinationPort = be16(b, at + 2)
            let udpLength = Int(be16(b, at + 4))
            guard udpLength >= 8 else { return }
            info.payloadLength = min(udpLength, length) - 8
            info.payload = prefix(b, at + 8, end, min(udpLength, length) - 8)
        default:
            guard length >= 0 else { return }
            info.payloadLength = length
        }
    }

    static func prefix(_ b: [UInt8], _ at: Int, _ end: Int, _ length: Int) -> [UInt8] {
        let n = min(length, end - at, payloadPrefix)
        return n > 0 ? Array(b[at..<(at + n)]) : []
    }

    static func be16(_ b: [UInt8], _ at: Int) -> UInt16 { UInt16(b[at]) << 8 | UInt16(b[at + 1]) }

    static func hex(_ b: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(b.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
    }

    /// The file's header fields, in its byte order.
    struct Reader {
        let bytes: [UInt8]
        let littleEndian: Bool
        func u16(_ at: Int) -> UInt16 {
            littleEndian ? UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8 : UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])
        }
        func u32(_ at: Int) -> UInt32 {
            let b0 = UInt32(bytes[at]), b1 = UInt32(bytes[at + 1]), b2 = UInt32(bytes[at + 2]), b3 = UInt32(bytes[at + 3])
            return littleEndian ? b0 | b1 << 8 | b2 << 16 | b3 << 24 : b0 << 24 | b1 << 16 | b2 << 8 | b3
        }
    }
}

/// Why a capture file was refused.
package enum PcapError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a classic pcap file at all.
    case notPcap(String)
    case unsupportedLink(String)
    /// It ends inside a header or a record.
    case truncated(String)
    /// A header field that no pcap writer produces.
    case garbage(String)

    package var description: String {
        switch self {
        case .notPcap(let s): s
        case .unsupportedLink(let s): "unsupported: " + s
        case .truncated(let s): "truncated: " + s
        case .garbage(let s): "not a valid capture: " + s
        }
    }
}

extension Pcap {
    /// A classic pcap file of the given frames (microsecond timestamps unless `nanosecond`,
    /// little-endian unless `bigEndian`): for tests and tools that make captures.
    package static func write(linkType: LinkType, nanosecond: Bool = false, bigEndian: Bool = false, snapLength: UInt32 = 262_144,
                              frames: [(time: Double, bytes: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        func u32(_ v: UInt32) {
            let le = [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24)]
            out += bigEndian ? le.reversed() : le
        }
        func u16(_ v: UInt16) { out += bigEndian ? [UInt8(v >> 8), UInt8(v & 0xFF)] : [UInt8(v & 0xFF), UInt8(v >> 8)] }
        u32(nanosecond ? 0xA1B2_3C4D : 0xA1B2_C3D4)
        u16(2); u16(4); u32(0); u32(0); u32(snapLength); u32(linkType.rawValue)
        let scale = nanosecond ? 1_000_000_000.0 : 1_000_000.0
        for f in frames {
            let seconds = f.time.rounded(.down)
            var fraction = ((f.time - seconds) * scale).rounded()
            if fraction >= scale { fraction = scale - 1 }
            u32(UInt32(seconds)); u32(UInt32(fraction)); u32(UInt32(f.bytes.count)); u32(UInt32(f.bytes.count))
            out += f.bytes
        }
        return out
    }
}
