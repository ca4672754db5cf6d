import DrowseCore
import Testing

@Suite("NotificationBudget")
struct NotificationBudgetTests {
    let budget = NotificationBudget(maxPerHour: 3)

    @Test("within the hour's budget priority 5 runs; beyond it, it waits; priority 10 always runs")
    func admits() {
        #expect(budget.admits(priority: 5, used: [], now: 1000))
        #expect(budget.admits(priority: 5, used: [100, 200], now: 1000))
        #expect(!budget.admits(priority: 5, used: [100, 200, 300], now: 1000))
        #expect(budget.admits(priority: 10, used: [100, 200, 300], now: 1000))
    }

    @Test("uses older than an hour no longer count")
    func slidingHour() {
        let used = [0.0, 10, 20]
        #expect(budget.room(used: used, now: 3599) == 0)
        #expect(budget.room(used: used, now: 3600.5) == 1)
        #expect(budget.room(used: used, now: 3620.5) == 3)
    }

    @Test("the next room opens when the oldest use that fills the budget leaves the hour")
    func nextRoom() {
        #expect(budget.nextRoom(used: [0, 10], now: 50) == 50)
        #expect(budget.nextRoom(used: [0, 10, 20], now: 50) == 3600)
        // Five uses (priority 10 over the budget): room again when only two are left in the hour.
        #expect(budget.nextRoom(used: [0, 10, 20, 30, 40], now: 50) == 3620)
    }

    @Test("a restart changes nothing: the same uses give the same answer on a manual clock")
    func restart() {
        // What the store holds after 3 launches in the minute before a restart.
        let fromStore = [1000.0, 1010, 1020]
        let fresh = NotificationBudget(maxPerHour: 3)
        #expect(!fresh.admits(priority: 5, used: fromStore, now: 1060))
        #expect(fresh.nextRoom(used: fromStore, now: 1060) == 4600)
    }
}
