import DrowseCore
import Testing

@Suite("Notification states")
struct NotificationStateTests {
    static let all: [NotificationState] = [
        .pending, .deferred, .held(checked: false), .held(checked: true), .handled(.newData), .handled(.noData), .handled(.failed),
        .dropped, .expired, .collapsed, .evicted, .downloading(transfer: "t-1"),
    ]

    @Test("every state reads back from the text and download_id it is stored as; the stored texts are distinct; unknown text is nil")
    func roundTrip() {
        for state in Self.all {
            #expect(NotificationState(stored: state.stored, downloadID: state.downloadID) == state, "\(state)")
        }
        #expect(Set(Self.all.map(\.stored)).count == Self.all.count)
        #expect(NotificationState(stored: "download:t-1") == nil && NotificationState(stored: "") == nil)
        #expect(Self.all.filter(\.waits) == [.pending, .deferred])
    }
}
