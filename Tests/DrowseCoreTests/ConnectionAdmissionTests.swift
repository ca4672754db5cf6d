import DrowseCore
import Testing

@Suite("ConnectionAdmission")
struct ConnectionAdmissionTests {
    @Test("a uid holds at most perUID connections; another uid is still admitted")
    func perUID() {
        var a = ConnectionAdmission(perUID: 3, shared: 48)
        for _ in 0..<3 { #expect(a.opened(uid: 65534, privileged: false) == .admitted) }
        #expect(a.opened(uid: 65534, privileged: false) == .overUserLimit(3))
        #expect(a.open(uid: 65534) == 3)
        #expect(a.opened(uid: 1000, privileged: false) == .admitted)
        a.closed(uid: 65534, privileged: false)
        #expect(a.opened(uid: 65534, privileged: false) == .admitted)
    }

    @Test("ordinary users together hold at most shared; root and the drowse group are never refused")
    func sharedAndPrivileged() {
        var a = ConnectionAdmission(perUID: 2, shared: 4)
        for uid: UInt32 in [1001, 1001, 1002, 1002] { #expect(a.opened(uid: uid, privileged: false) == .admitted) }
        #expect(a.opened(uid: 1003, privileged: false) == .full(4))
        for _ in 0..<100 { #expect(a.opened(uid: 0, privileged: true) == .admitted) }
        #expect(a.open(uid: 0) == 0)
        a.closed(uid: 0, privileged: true)
        a.closed(uid: 1001, privileged: false)
        #expect(a.opened(uid: 1003, privileged: false) == .admitted)
    }

    @Test("a close that was never admitted does not free a place")
    func strayClose() {
        var a = ConnectionAdmission(perUID: 1, shared: 1)
        a.closed(uid: 7, privileged: false)
        #expect(a.opened(uid: 8, privileged: false) == .admitted)
        #expect(a.opened(uid: 9, privileged: false) == .full(1))
    }
}
