/// Radio accounting of real packets (`drowse radio`): each IP packet of a capture is an instant
/// of radio activity, and the very `RadioModel` that `drowse simulate` uses groups them into
/// wakes (one promotion each, then the tail) and prices them. Wakes whose packets are only the
/// MQTT keepalive (PINGREQ `c0 00`, PINGRESP `d0 00`, the keepalive's UNSUBSCRIBE and UNSUBACK on
/// the broker's port, and the bare TCP
/// segments of that connection that carry no data) are counted apart: what keeping the push
/// channel open costs on its own. Frames that are not IP (ARP and the like, which a cellular
/// link does not have) are skipped.
///
/// A capture made with time compressed K times (`compress`): the model's promotion and tail
/// are divided by K for grouping, and the seconds and joules are multiplied by K again, so the
/// figures are those of the uncompressed run and compare across K. Pure.
package enum WireRadio {
    /// What a packet is to the accounting.
    package enum Kind: Sendable, Equatable {
        /// PINGREQ or PINGRESP (only) on the broker's port.
        case keepalive
        /// A TCP segment on the broker's port with no data and no SYN, FIN or RST: an ACK.
        case brokerAck
        case other
    }

    /// nil: not an IP packet (skipped).
    package static func classify(_ p: Pcap.Packet, brokerPort: UInt16) -> Kind? {
        guard let ip = p.ip else { return nil }
        guard ip.proto == 6, let s = ip.sourcePort, let d = ip.destinationPort, s == brokerPort || d == brokerPort,
              let flags = ip.tcpFlags, let n = ip.payloadLength
        else { return .other }
        if n == 0 { return flags & 0x07 == 0 ? .brokerAck : .other }
        return isKeepalive(ip.payload, length: n) ? .keepalive : .other
    }

    /// The whole payload was captured and is one or more keepalive packets: PINGREQ, PINGRESP,
    /// the UNSUBSCRIBE of the device's `…/keepalive` topic that pings between CONNECT keepalives
    /// (docs/design.md, "The adaptive keepalive"), and UNSUBACK.
    static func isKeepalive(_ payload: [UInt8], length: Int) -> Bool {
        guard length >= 2, payload.count == length else { return false }
        let suffix = Array("/keepalive".utf8)
        var i = 0
        while i < length {
            let type = payload[i]
            var remaining = 0, shift = 0, j = i + 1
            while true {
                guard j < length, shift <= 21 else { return false }
                remaining |= Int(payload[j] & 0x7F) << shift
                shift += 7
                j += 1
                if payload[j - 1] & 0x80 == 0 { break }
            }
            let end = j + remaining
            guard end <= length else { return false }
            switch type {
            case 0xC0, 0xD0: guard remaining == 0 else { return false }
            case 0xB0: break
            case 0xA2: guard end - j >= suffix.count, payload[(end - suffix.count)..<end].elementsEqual(suffix) else { return false }
            default: return false
            }
            i = end
        }
        return true
    }

    /// One wake: a promotion, the packets within each other's tail, and the last tail.
    package struct Wake: Sendable, Equatable {
        /// The first and last packet's capture times.
        package var first: Double
        package var last: Double
        package var packets: Int
        package var keepaliveOnly: Bool
        /// Scaled back by the compression.
        package var radioOnSeconds: Double
        package var joules: Double
    }

    package struct Report: Sendable, Equatable {
        package var model: RadioModel
        package var compress: Double
        package var brokerPort: UInt16
        package var packets = 0
        package var ipPackets = 0
        /// Not IP: not counted as radio activity.
        package var skipped = 0
        /// On the wire, every frame.
        package var bytes = 0
        /// PINGREQ/PINGRESP packets.
        package var keepalivePackets = 0
        /// The first and last IP packet's capture times.
        package var first: Double?
        package var last: Double?
        package var wakes = 0
        package var radioOnSeconds = 0.0
        package var joules = 0.0
        package var keepaliveWakes = 0
        package var keepaliveRadioOnSeconds = 0.0
        package var keepaliveJoules = 0.0
        package var wakeList: [Wake] = []

        /// From the first IP packet to the last, scaled back by the compression.
        package var spanSeconds: Double {
            guard let first, let last else { return 0 }
            return (last - first) * compress
        }

        package func json(wakes listed: Bool = false) -> JSON {
            var members: [(String, JSON)] = [
                ("model", .string(model.name)), ("compress", JSON(compress)), ("broker_port", JSON(Int(brokerPort))),
                ("packets", JSON(packets)), ("ip_packets", JSON(ipPackets)), ("skipped_not_ip", JSON(skipped)), ("bytes", JSON(bytes)),
                ("keepalive_packets", JSON(keepalivePackets)), ("span_seconds", JSON(spanSeconds)),
                ("wakes", JSON(wakes)), ("radio_on_seconds", JSON(radioOnSeconds)), ("joules", JSON(joules)),
                ("keepalive_wakes", JSON(keepaliveWakes)), ("keepalive_radio_on_seconds", JSON(keepaliveRadioOnSeconds)),
                ("keepalive_joules", JSON(keepaliveJoules)),
            ]
            if listed {
                members.append(("wake_list", .array(wakeList.map { w in
                    .object([("first", JSON(w.first)), ("last", JSON(w.last)), ("packets", JSON(w.packets)),
                             ("keepalive_only", .bool(w.keepaliveOnly)), ("radio_on_seconds", JSON(w.radioOnSeconds)), ("joules", JSON(w.joules))])
                })))
            }
            return .object(members)
        }
    }

    package static func analyze(_ packets: [Pcap.Packet], model: RadioModel, compress: Double = 1, brokerPort: UInt16 = 1883) -> Report {
        precondition(compress > 0 && compress.isFinite, "compress must be a positive number")
        var report = Report(model: model, compress: compress, brokerPort: brokerPort)
        report.packets = packets.count
        var instants: [(time: Double, kind: Kind)] = []
        for p in packets {
            report.bytes += p.length
            guard let kind = classify(p, brokerPort: brokerPort) else { report.skipped += 1; continue }
            if kind == .keepalive { report.keepalivePackets += 1 }
            instants.append((p.time, kind))
        }
        report.ipPackets = instants.count
        guard !instants.isEmpty else { return report }
        instants.sort { $0.time < $1.time }
        report.first = instants.first?.time
        report.last = instants.last?.time

        let scaled = model.compressed(by: compress)
        // From the first packet: epoch seconds would cost the sums their last digits.
        let origin = instants[0].time
        let activities = instants.map { (start: $0.time - origin, end: $0.time - origin) }
        let usage = scaled.usage(of: activities)
        report.wakes = usage.promotions
        report.radioOnSeconds = usage.radioOnSeconds * compress
        report.joules = usage.joules * compress

        // Each period holds the packets from its first activity to its last, in time order.
        var i = 0
        for period in scaled.periods(of: activities) {
            var count = 0, pings = 0, others = 0
            while i < instants.count, instants[i].time - origin <= period.lastActivityEnd {
                switch instants[i].kind {
                case .keepalive: pings += 1
                case .brokerAck: break
                case .other: others += 1
                }
                count += 1
                i += 1
            }
            let wake = Wake(first: origin + period.firstActivity, last: origin + period.lastActivityEnd, packets: count, keepaliveOnly: pings > 0 && others == 0,
                            radioOnSeconds: period.radioOnSeconds * compress, joules: period.joules * compress)
            if wake.keepaliveOnly {
                report.keepaliveWakes += 1
                report.keepaliveRadioOnSeconds += wake.radioOnSeconds
                report.keepaliveJoules += wake.joules
            }
            report.wakeList.append(wake)
        }
        return report
    }
}

extension RadioModel {
    /// The model for a run whose time went K times faster: promotion and tail last 1/K as long.
    package func compressed(by k: Double) -> RadioModel {
        var m = self
        m.promotionSeconds /= k
        m.tailSeconds /= k
        return m
    }
}
