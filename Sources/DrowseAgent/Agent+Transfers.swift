#if canImport(Glibc)
import Glibc
#endif
import DrowseCore
import DrowseStore
import DrowseSystem
import DrowseTransfers

/// A request to create a transfer, from the API.
package struct TransferRequest: Sendable {
    package var kind: Transfer.Kind
    package var url: String
    package var app: String
    package var session: String
    package var destination: String?
    package var sha256: String?
    /// Uploads: the file to send.
    package var source: String?
    package var uploadProtocol: UploadProtocol = .auto
    /// Uploads: the file's media type (tus `filetype`, a PUT's Content-Type).
    package var contentType: String?
    /// `--timeout-resource`: give up if not finished in this long (default 7 days, as on iOS).
    package var timeoutResource: Double = 7 * 86400
    package var requirements = TransferRequirements()
    /// A size announced in advance (push to transfer): the byte cap from the first byte.
    package var expectedSize: Int64?
}

extension TransferService {
    /// Why a new transfer was refused.
    package enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        case app(AppRegistry.Refusal)
        /// What the request asks is not a transfer drowsed can make (the reason).
        case badRequest(String)
        /// The app runs as a user this machine does not have.
        case noSuchUser(app: String, user: String)
        /// The caller or the app's user may not touch that file (the reason).
        case forbidden(String)
        /// The app has this many unfinished transfers, the most allowed.
        case tooMany(app: String, unfinished: Int)
        case store(String)
        /// No such transfer, or one of an app the caller may not see (they answer alike).
        case noTransfer(String)
        /// A listing asked to start after a transfer that is not there.
        case noPageStart(String)

        package var description: String {
            switch self {
            case .app(let r): r.description
            case .badRequest(let why), .forbidden(let why), .store(let why): why
            case .noSuchUser(let app, let user): "app '\(app)' runs as '\(user)', which is not a user here"
            case .tooMany(let app, let n): "app '\(app)' has \(n) unfinished transfers, the most allowed ([transfers] max_per_app)"
            case .noTransfer(let id): "no transfer '\(id)'"
            case .noPageStart(let id): "no transfer '\(id)' to list after"
            }
        }
    }

    /// Push to transfer: a signed notification's download, queued as the daemon.
    package func pushDownload(_ request: TransferRequest) throws(Refusal) -> Transfer { try create(request, caller: .daemon) }

    /// A new transfer from the API (or a notification): checked against what the caller and
    /// the app's user may touch, stored, and handed to the lifecycle.
    package func create(_ req: TransferRequest, caller: Caller) throws(Refusal) -> Transfer {
        let app: AppDefinition
        do { app = try registry.app(req.app, for: caller) } catch { throw .app(error) }
        guard URLParts.isTransferURL(req.url) else {
            throw .badRequest("only http and https URLs can be transferred: '\(req.url)'")
        }
        var total: Int64?
        // Whose rights the transfer's files are touched with, at every attempt: the app's user,
        // whoever queued it (root included), so a root-queued transfer into an app's folder is
        // no tool against the machine. Only an app that runs as root gets root's rights.
        let owner: (uid: UInt32, gid: UInt32)?
        if let user = app.user {
            guard let account = UserAccount.lookup(name: user) else {
                throw .noSuchUser(app: app.id, user: user)
            }
            owner = account.uid == 0 ? nil : (account.uid, account.gid)
        } else {
            owner = caller.uid == 0 ? nil : (caller.uid, caller.gid)
        }
        let files = owner.map { FileIdentity.of(uid: $0.uid, gid: $0.gid) }
        // Each path is checked for the caller too: an admin reaches no file through an app
        // that it could not reach itself.
        var deciders = [caller.subject]
        if let files, files.uid != caller.uid { deciders.append(Permissions.Subject(uid: files.uid, gids: files.groups)) }
        let callerFiles = FileIdentity(uid: caller.uid, gid: caller.gid, groups: [caller.gid] + caller.groups)
        if req.kind == .upload {
            guard let src = req.source, src.hasPrefix("/") else { throw .badRequest("an upload needs the absolute path of its file") }
            // drowsed runs as root: it reads only what the caller and the app's user could read.
            // The check by mode bits says why; opening as them is what the kernel enforces (and
            // every later attempt opens as the app's user again).
            guard deciders.allSatisfy({ Permissions.canRead(src, by: $0) }),
                let size = FileIdentity.regularFileSize(src, as: callerFiles),
                files == nil || FileIdentity.regularFileSize(src, as: files) == size
            else {
                throw .forbidden("'\(src)' is not a regular file you and the app's user can read")
            }
            total = size
        }
        if let d = req.destination {
            guard d.hasPrefix("/") else { throw .badRequest("--to must be an absolute path") }
            // Whether the folder exists is said only to a caller who could see it anyway: in a
            // folder closed to the caller, a missing one and a closed one answer alike.
            let folder = ConfigPath.directory(of: d)
            if Permissions.canLookUp(folder, by: caller.subject), !FileSystem.isDirectory(folder) {
                throw .badRequest("folder of '\(d)' does not exist")
            }
            guard deciders.allSatisfy({ Permissions.canWrite(d, by: $0) }) else {
                throw .forbidden("you or the app's user cannot write '\(d)'")
            }
        }
        guard req.timeoutResource > 0 else { throw .badRequest("--timeout-resource must be positive") }
        if let h = req.sha256, h.count != 64 || !h.allSatisfy(\.isHexDigit) {
            throw .badRequest("sha256 must be 64 hex digits")
        }
        guard Identifier.isValid(req.session) else { throw .badRequest("session names hold only letters, digits, '-', '_' and '.'") }
        if let live = refusal(app: app.id) {
            throw .tooMany(app: app.id, unfinished: live)
        }
        var bytes = [UInt8](repeating: 0, count: 8)
        for i in 0..<8 { bytes[i] = UInt8.random(in: 0...255) }
        let id = SHA256Hasher.hex(bytes)
        var t = Transfer(
            id: id, app: app.id, session: req.session, kind: req.kind, url: req.url, destination: req.destination,
            sha256: req.sha256?.lowercased(), createdAt: now())
        t.timeoutAt = t.createdAt + req.timeoutResource
        t.requirements = req.requirements
        if req.kind == .download, let size = req.expectedSize { t.bytesTotal = size }
        t.ownerUID = owner?.uid
        t.ownerGID = owner?.gid
        if req.kind == .upload {
            t.source = req.source
            t.bytesTotal = total
            t.uploadProtocol = req.uploadProtocol.rawValue
            t.contentType = req.contentType
        }
        do { try store.save(t) } catch { throw .store("\(error)") }
        submitted(t)
        return withLive(t)
    }
}

/// The transfers part of the API.
extension Agent {
    package func createTransfer(_ req: TransferRequest, caller: Caller) throws(APIError) -> Transfer {
        try refused { () throws(TransferService.Refusal) in try parts.transfers.create(req, caller: caller) }
    }

    /// One page of the transfers `caller` may see (all of them for admins, even those of apps
    /// since removed; their own apps' for anyone else), in creation order, after the transfer
    /// `after`. Pages keep each answer, and so what a client that does not read can make
    /// drowsed hold, small however many transfers there are.
    package func transfers(app: String?, after: String?, limit: Int, caller: Caller) throws(APIError) -> [Transfer] {
        var scope: [String]? = caller.isAdmin ? nil : parts.registry.apps.values.filter { parts.registry.visible($0, to: caller) }.map(\.id)
        if let app { scope = scope.map { $0.contains(app) ? [app] : [] } ?? [app] }
        return try refused { () throws(TransferService.Refusal) in
            let page: [Transfer]?
            do { page = try store.transfers(apps: scope, after: after, limit: limit) } catch { throw .store("\(error)") }
            guard let page else { throw .noPageStart(after ?? "") }
            return page.map(parts.transfers.withLive)
        }
    }

    package func transfer(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        try refused { () throws(TransferService.Refusal) in
            guard let t = parts.transfers.current(id),
                  caller.isAdmin || (parts.registry[t.app].map { parts.registry.visible($0, to: caller) } ?? false) else { throw .noTransfer(id) }
            return parts.transfers.withLive(t)
        }
    }

    /// `GET /v1/transfers/ID?wait=S` (`drowse transfer wait`): the transfer once it is
    /// finished, or as it is after `seconds` (at most `maxWait`), whichever comes first; at once
    /// when it is finished already or drowsed is stopping.
    package func transfer(_ id: String, caller: Caller, waitingUpTo seconds: Double) async throws(APIError) -> Transfer {
        let t = try transfer(id, caller: caller)
        guard seconds > 0, !t.state.isFinished, !stopping else { return t }
        await parts.transfers.waitFinished(id, upTo: min(seconds, Self.maxTransferWait))
        return (try? transfer(id, caller: caller)) ?? t
    }

    /// The longest a request may wait for a transfer's end, in seconds.
    package nonisolated static let maxTransferWait = 60.0

    package func cancel(_ id: String, caller: Caller) throws(APIError) -> Transfer {
        let t = try transfer(id, caller: caller)
        guard !t.state.isFinished else { return t }
        parts.transfers.cancel(id)
        return parts.transfers.withLive(parts.transfers.current(id) ?? t)
    }

    /// `drowse quit ID`: the force-quit cancels the app's unfinished transfers.
    package func quit(_ id: String, caller: Caller) throws(APIError) -> Int {
        let app = try self.app(id, for: caller)
        return parts.transfers.quit(app: app.id)
    }
}
