import DrowseCore
@testable import DrowseStore
import Foundation
import Testing

/// `drowse timeline` reads state.db beside a running drowsed: read-only, only what overlaps the
/// span asked for.
@Suite("Store history")
struct StoreHistoryTests {
    @Test("history holds the runs, notifications, transfers and uses that overlap the span, read through a read-only store")
    func history() throws {
        try withStorePath { path in
            let writer = try Store(path: path)
            for (app, start) in [("a", 50.0), ("a", 100.0), ("b", 195.0), ("b", 400.0)] {
                try writer.record(RunRecord(app: app, event: .fetch, trigger: .scheduled, result: .newData, ending: "exit status 0", startedAt: start, endedAt: start + 10))
            }
            _ = try writer.recordNotification(app: "a", dedupeKey: "k1", payload: "{}", at: 150)
            _ = try writer.recordNotification(app: "a", dedupeKey: "k0", payload: "{}", at: 10)
            let pushed = try #require(try writer.recordNotification(app: "a", dedupeKey: "k2", payload: "{}", at: 170))
            try writer.markNotification(pushed, state: .downloading(transfer: "t9"), at: 171)
            var t = Transfer(id: "t1", app: "b", session: "s", kind: .download, url: "https://example.invalid/x", destination: nil, sha256: nil, createdAt: 120)
            t.state = .completed
            t.finishedAt = 130
            t.bytesDone = 42
            try writer.save(t)
            try writer.recordUse(app: "a", at: 160)
            try writer.recordUse(app: "a", at: 300)

            let reader = try Store(readingOnly: path)
            let h = try reader.history(from: 100, to: 200)
            #expect(h.runs.map(\.start) == [100, 195])
            #expect(h.runs.first == AgentHistory.Run(app: "a", event: "fetch", trigger: "scheduled", result: "new-data", ending: "exit status 0", start: 100, end: 110))
            #expect(h.notifications.map(\.receivedAt) == [150, 170])
            #expect(h.notifications.map(\.state) == ["pending", "downloading t9"], "a download is shown with its transfer")
            #expect(h.transfers.map(\.id) == ["t1"] && h.transfers.first?.bytes == 42 && h.transfers.first?.finishedAt == 130)
            #expect(h.uses.map(\.at) == [160])
            // Read-only: a write through it fails, and it makes no file of its own.
            #expect(throws: StoreError.self) { try reader.recordUse(app: "a", at: 170) }
        }
    }

    @Test("a read-only store opens no file that is not there and refuses another schema")
    func refuses() throws {
        try withStorePath { path in
            #expect(throws: StoreError.self) { try Store(readingOnly: path) }
            #expect(!FileManager.default.fileExists(atPath: path))
            let writer = try Store(path: path)
            try writer.db.exec("UPDATE schema_version SET version = 99")
            #expect(throws: StoreError.self) { try Store(readingOnly: path) }
        }
    }
}
