import DrowseCore
import Testing

@Suite("FetchResult")
struct FetchResultTests {
    @Test("exit status 0 is new data, 100 no data, anything else failed", arguments: [
        (Int32(0), FetchResult.newData), (100, .noData), (1, .failed), (2, .failed), (99, .failed), (101, .failed),
        (127, .failed), (255, .failed), (-1, .failed), (Int32.min, .failed),
    ])
    func exitStatus(status: Int32, result: FetchResult) {
        #expect(FetchResult(exitStatus: status) == result)
    }

    @Test("results are spelled as the contract's last_result")
    func rawValues() {
        #expect(FetchResult.allCases.map(\.rawValue) == ["new-data", "no-data", "failed"])
        #expect(FetchResult(rawValue: "no-data") == .noData)
    }

    @Test("only a normal exit can succeed; signals, deadlines and launch failures count as failed")
    func outcomes() {
        func outcome(_ e: HandlerOutcome.Ending) -> HandlerOutcome { HandlerOutcome(ending: e, startedAt: 10, endedAt: 12.5) }
        #expect(outcome(.exited(0)).result == .newData)
        #expect(outcome(.exited(100)).result == .noData)
        #expect(outcome(.exited(3)).result == .failed)
        #expect(outcome(.signaled(9)).result == .failed)
        #expect(outcome(.signaled(0)).result == .failed)
        #expect(outcome(.timedOut).result == .failed)
        #expect(outcome(.launchFailed("no such user")).result == .failed)
    }

    @Test("outcomes summarise how the handler ended")
    func summaries() {
        func summary(_ e: HandlerOutcome.Ending) -> String { HandlerOutcome(ending: e, startedAt: 0, endedAt: 1).summary }
        #expect(summary(.exited(100)) == "exit status 100")
        #expect(summary(.signaled(15)) == "killed by signal 15")
        #expect(summary(.timedOut) == "killed at its deadline")
        #expect(summary(.launchFailed("no such file")) == "could not start: no such file")
    }
}
