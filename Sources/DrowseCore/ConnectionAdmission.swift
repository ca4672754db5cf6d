/// Who may hold a local API connection: the decision the API server makes once it knows a new
/// connection's uid (SO_PEERCRED), at accept time. No I/O: the server performs the verdicts.
///
/// The server accepts at most `APIServer.maxConnections` connections at once, for the daemon's
/// file descriptors. Within that, each ordinary uid may hold `perUID` and all of them together
/// `shared`; the rest is kept for root and the drowse group, who are never refused here. So one
/// user's idle or slow connections are refused at once instead of filling the listen backlog,
/// and never keep another user (or `drowse status` as root) waiting.
package struct ConnectionAdmission: Sendable {
    package enum Verdict: Sendable, Equatable {
        case admitted
        /// This uid already holds `perUID` connections.
        case overUserLimit(Int)
        /// Ordinary users together hold `shared` connections.
        case full(Int)
    }

    package let perUID: Int
    package let shared: Int
    private(set) var byUID: [UInt32: Int] = [:]
    private(set) var sharedOpen = 0

    package init(perUID: Int, shared: Int) {
        self.perUID = perUID
        self.shared = shared
    }

    /// A connection of `uid` was accepted. When admitted, `closed(uid:privileged:)` must follow.
    package mutating func opened(uid: UInt32, privileged: Bool) -> Verdict {
        if privileged { return .admitted }
        let mine = byUID[uid, default: 0]
        guard mine < perUID else { return .overUserLimit(perUID) }
        guard sharedOpen < shared else { return .full(shared) }
        byUID[uid] = mine + 1
        sharedOpen += 1
        return .admitted
    }

    /// An admitted connection of `uid` closed.
    package mutating func closed(uid: UInt32, privileged: Bool) {
        if privileged { return }
        guard let mine = byUID[uid], mine > 0 else { return }
        byUID[uid] = mine > 1 ? mine - 1 : nil
        sharedOpen -= 1
    }

    /// Connections `uid` holds now (privileged ones are not counted).
    package func open(uid: UInt32) -> Int { byUID[uid, default: 0] }
}
