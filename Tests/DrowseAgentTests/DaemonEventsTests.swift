@testable import DrowseAgent
import Testing

/// Events are heard at the end of a turn: never inside another event's delivery, never inside
/// the turn of the part that posted them.
@Suite("Daemon events")
@DaemonActor struct DaemonEventsTests {
    static func name(_ e: DaemonEvent) -> String {
        switch e {
        case .windowOpened: "window"
        case .radioUsed: "radio"
        default: "other"
        }
    }

    @Test("an event posted while another is delivered is heard after every listener of the first: no nested delivery")
    func noNestedDelivery() {
        let events = DaemonEvents()
        var heard: [String] = []
        events.listen { e in
            heard.append("A " + Self.name(e))
            if case .windowOpened = e { events.post(.radioUsed) }
        }
        events.listen { e in heard.append("B " + Self.name(e)) }
        events.post(.windowOpened)
        #expect(heard == ["A window", "B window", "A radio", "B radio"])
    }

    @Test("what a turn posts is heard after the turn, in the order posted; outside a turn at once")
    func turn() {
        let events = DaemonEvents()
        var log: [String] = []
        events.listen { e in log.append("heard " + Self.name(e)) }
        events.turn {
            events.post(.windowOpened)
            log.append("still in the turn")
            events.turn { events.post(.radioUsed) }
            log.append("end of the turn")
        }
        #expect(log == ["still in the turn", "end of the turn", "heard window", "heard radio"])
        events.post(.radioUsed)
        #expect(log.last == "heard radio" && log.count == 5)
    }
}
