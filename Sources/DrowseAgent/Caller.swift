#if canImport(Glibc)
import Glibc
#endif
import DrowseSystem

/// Who is calling the local API, from SO_PEERCRED. Root, the daemon's own user and members
/// of the `drowse` group see everything; anyone else sees only the apps that run as them.
public struct Caller: Sendable, Equatable {
    public var uid: UInt32
    public var gid: UInt32
    public var isAdmin: Bool
    public var userName: String?
    /// Primary and supplementary groups, for file permission checks.
    public var groups: [UInt32] = []

    /// For checks of what this caller could read or write itself.
    public var subject: Permissions.Subject { Permissions.Subject(uid: uid, gids: [gid] + groups) }

    public static func from(uid: UInt32, gid: UInt32) -> Caller {
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
    public static let daemon = Caller(uid: geteuid(), gid: getegid(), isAdmin: true, userName: nil)
}

/// An API failure: HTTP status, a stable code and a message.
public struct APIError: Error, Sendable {
    public var status: Int
    public var code: String
    public var message: String

    public init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public static func notFound(_ what: String) -> APIError { APIError(404, "not_found", what) }
    public static func forbidden(_ what: String) -> APIError { APIError(403, "forbidden", what) }
    public static func badRequest(_ what: String) -> APIError { APIError(400, "bad_request", what) }
    public static func `internal`(_ what: String) -> APIError { APIError(500, "internal", what) }
}
