import DrowseCore
#if canImport(Glibc)
import Glibc
#endif
import DrowseSystem

/// Who is calling the local API, from SO_PEERCRED. Root, the daemon's own user and members
/// of the `drowse` group see everything; anyone else sees only the apps that run as them.
package struct Caller: Sendable, Equatable {
    package var uid: UInt32
    package var gid: UInt32
    package var isAdmin: Bool
    package var userName: String?
    /// Primary and supplementary groups, for file permission checks.
    package var groups: [UInt32] = []

    /// For checks of what this caller could read or write itself.
    package var subject: Permissions.Subject { Permissions.Subject(uid: uid, gids: [gid] + groups) }

    package static func from(uid: UInt32, gid: UInt32) -> Caller {
        let admin: Bool
        if uid == 0 || uid == geteuid() {
            admin = true
        } else if let g = UserAccount.groupID("drowse") {
            admin = UserAccount.isMember(uid: uid, primaryGID: gid, of: g)
        } else {
            admin = false
        }
        let account = UserAccount.lookup(uid: uid)
        return Caller(uid: uid, gid: gid, isAdmin: admin, userName: account?.name, groups: account?.groups ?? [])
    }

    /// The daemon itself, for internal calls.
    package static let daemon = Caller(uid: geteuid(), gid: getegid(), isAdmin: true, userName: nil)
}

/// An API failure: HTTP status, a stable code and a message.
package struct APIError: Error, Sendable {
    package var status: Int
    package var code: String
    package var message: String

    /// Messages quote what the caller sent (an app id, a path, a key): a long one is cut, so a
    /// 200 KB id does not come back as a 200 KB answer or log line.
    package static let messageLimit = 600

    package init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message.utf8.count > Self.messageLimit ? LogText.clip(message, limit: Self.messageLimit) : message
    }

    package static func notFound(_ what: String) -> APIError { APIError(404, "not_found", what) }
    package static func forbidden(_ what: String) -> APIError { APIError(403, "forbidden", what) }
    package static func badRequest(_ what: String) -> APIError { APIError(400, "bad_request", what) }
    package static func `internal`(_ what: String) -> APIError { APIError(500, "internal", what) }

    /// The answer's body: the API's `Error`.
    package var wire: APIWire.Error { APIWire.Error(code: code, message: message) }
}
