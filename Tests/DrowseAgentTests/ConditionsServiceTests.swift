@testable import DrowseAgent
import DrowseCore
import Logging
import Testing

/// The conditions service over a reader double: no sysfs, no netlink.
@Suite("Conditions service")
@DaemonActor struct ConditionsServiceTests {
    final class Reader: ConditionsReader {
        var next = Conditions()
        var reads = 0
        func read(now: Double) -> Conditions {
            reads += 1
            var c = next
            c.readAt = now
            return c
        }
    }

    static func conditions(_ network: Conditions.Network, power: Conditions.PowerSource = .ac, battery: Int? = nil) -> Conditions {
        var c = Conditions()
        c.network = network
        c.powerSource = power
        c.batteryPercent = battery
        return c
    }

    @Test("a reading that differs only in its time is no change; another network is")
    func change() {
        let reader = Reader()
        reader.next = Self.conditions(.ethernet)
        var seen: [Conditions.Network] = []
        let events = DaemonEvents()
        let s = ConditionsService(reader: reader, policy: ConditionsPolicy(batteryLowPercent: 20), radioModel: .auto, now: 1, logger: Logger(label: "t"),
                                  events: events)
        events.listen { if case .conditionsRead(let c) = $0 { seen.append(c.network) } }
        #expect(!s.read(now: 2))
        reader.next = Self.conditions(.none)
        #expect(s.read(now: 3))
        #expect(seen == [.ethernet, .none], "every reading is posted")
        #expect(!s.forScheduler.online)
    }

    @Test("the scheduler hears online, low battery and the tail of the radio in use")
    func forScheduler() {
        let reader = Reader()
        reader.next = Self.conditions(.cellular, power: .battery, battery: 10)
        let auto = ConditionsService(reader: reader, policy: ConditionsPolicy(batteryLowPercent: 20), radioModel: .auto, now: 1, logger: Logger(label: "t"))
        #expect(auto.forScheduler.online && auto.forScheduler.lowBattery)
        #expect(auto.forScheduler.radioTail == RadioModel.lte.tailSeconds)
        let wifi = ConditionsService(reader: reader, policy: ConditionsPolicy(batteryLowPercent: 5), radioModel: .fixed(.wifi), now: 1, logger: Logger(label: "t"))
        #expect(!wifi.forScheduler.lowBattery && wifi.forScheduler.radioTail == RadioModel.wifi.tailSeconds)
        let tail = ConditionsService(reader: reader, policy: ConditionsPolicy(batteryLowPercent: 5), radioModel: .fixed(.lte), radioTail: 0.08,
                                     now: 1, logger: Logger(label: "t"))
        #expect(tail.forScheduler.radioTail == 0.08 && tail.radio.promotionSeconds == RadioModel.lte.promotionSeconds)
    }
}
