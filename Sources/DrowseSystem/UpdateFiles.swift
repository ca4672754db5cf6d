#if canImport(Glibc)
import Glibc
#endif
import DrowseCore

/// An update's directory, `<state_dir>/updates/<id>/` (docs/updates.md, "On the device"):
/// `update.json` (what it asks for), `state.json` (how far it got), `package.deb`; and
/// `<state_dir>/updates/kept/`, the package file of each package's installed version, which a
/// rollback installs again.
package struct UpdateFiles: Sendable {
    package let root: String
    package let id: String

    package init(root: String, id: String) {
        self.root = root
        self.id = id
    }

    /// From the directory's path; nil when its name is not an update id.
    package init?(dir: String) {
        var path = dir
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        guard let slash = path.lastIndex(of: "/") else { return nil }
        let name = String(path[path.index(after: slash)...])
        guard UpdateRequest.isValidID(name), name != Self.keptName else { return nil }
        root = slash == path.startIndex ? "/" : String(path[..<slash])
        id = name
    }

    package static let keptName = "kept"

    /// `<state_dir>/updates`.
    package static func directory(stateDir: String) -> String { stateDir + "/updates" }

    package var dir: String { root + "/" + id }
    package var requestPath: String { dir + "/update.json" }
    package var statePath: String { dir + "/state.json" }
    package var packagePath: String { dir + "/package.deb" }
    package var keptDir: String { root + "/" + Self.keptName }

    /// The kept package file of `package` at `version`.
    package func kept(_ package: String, _ version: String) -> String {
        // A version may hold ':' (an epoch); file names on a FAT boot partition may not, and
        // dpkg's own files use '%3a' for it.
        keptDir + "/" + package + "_" + version.replacingOccurrences(":", with: "%3a") + ".deb"
    }

    /// The update's progress; nil when there is none yet.
    package func progress() throws(SystemError) -> UpdateProgress? {
        guard FileSystem.exists(statePath) else { return nil }
        let text = try FileSystem.readText(statePath, limit: 65536)
        guard let json = try? JSON.parse(text), let p = UpdateProgress.parse(json) else {
            throw SystemError("\(statePath): not an update state", errno: EINVAL)
        }
        return p
    }

    package func request() throws(SystemError) -> UpdateRequest {
        let text = try FileSystem.readText(requestPath, limit: 65536)
        guard let json = try? JSON.parse(text), let r = UpdateRequest.parse(json) else {
            throw SystemError("\(requestPath): not an update request", errno: EINVAL)
        }
        return r
    }

    /// Writes the progress durably (a power cut leaves the old one or the new one).
    package func save(_ progress: UpdateProgress) throws(SystemError) {
        try FileSystem.writeAtomically(statePath, Array(progress.json.serialized.utf8), mode: 0o644)
    }

    /// A new update: its directory, the request, then its first state, in that order, so a cut
    /// leaves either no state (nothing to resume) or a whole update.
    package func begin(request: UpdateRequest, state: UpdateState, step: UpdateProgress.Step, now: Double) throws(SystemError) {
        Self.prune(in: root)
        try FileSystem.makeDirectories(dir, mode: 0o755)
        try FileSystem.writeAtomically(requestPath, Array(request.json.serialized.utf8), mode: 0o644)
        var p = UpdateProgress(report: UpdateReport(id: request.id, state: state), package: request.package, step: step)
        p.enter(state, at: now)
        try save(p)
    }

    /// Copies the package file in and syncs it (a copy, then a rename: whole or absent).
    package func adoptPackage(from path: String) throws(SystemError) {
        let partial = packagePath + ".part"
        let copied = runCommand(["/bin/cp", "--", path, partial], timeout: 600)
        guard copied.status == 0 else { throw SystemError("copying \(path) to \(partial): \(copied.lastLine)", errno: EIO) }
        let synced = runCommand(["/bin/sync", "--", partial], timeout: 600)
        guard synced.status == 0 else { throw SystemError("sync \(partial): \(synced.lastLine)", errno: EIO) }
        try FileSystem.rename(partial, to: packagePath)
    }

    /// A new update of a package file at hand: the file copied in, then `begin`.
    package func create(request: UpdateRequest, package: String, now: Double) throws(SystemError) {
        try FileSystem.makeDirectories(dir, mode: 0o755)
        try adoptPackage(from: package)
        try begin(request: request, state: .installing, step: .prepare, now: now)
    }

    /// Every update under `root` with a readable state, oldest first (by the time it began).
    package static func all(in root: String) -> [UpdateProgress] {
        FileSystem.listDirectory(root).filter { $0 != keptName && UpdateRequest.isValidID($0) }
            .compactMap { try? UpdateFiles(root: root, id: $0).progress() }
            .sorted { ($0.report.times.values.min() ?? 0, $0.report.id) < ($1.report.times.values.min() ?? 0, $1.report.id) }
    }

    /// How many finished updates of one package stay on disk (their `update.json` and
    /// `state.json`; the package file goes when an update ends).
    package static let keptPerPackage = 3

    /// Removes the oldest finished updates of each package beyond `keptPerPackage`; unfinished
    /// ones stay whatever their age.
    package static func prune(in root: String) {
        var byPackage: [String: [UpdateProgress]] = [:]
        for p in all(in: root) where p.report.state.isFinal && p.step == .done { byPackage[p.package ?? p.report.id, default: []].append(p) }
        for (_, done) in byPackage where done.count > keptPerPackage {
            for p in done.dropLast(keptPerPackage) {
                _ = runCommand(["/bin/rm", "-rf", "--", UpdateFiles(root: root, id: p.report.id).dir], timeout: 120)
            }
        }
    }

    /// Each package's newest update, for the fleet status.
    package static func newestByPackage(in root: String) -> [String: UpdateReport] {
        var out: [String: UpdateReport] = [:]
        for p in all(in: root) { out[p.package ?? p.report.id] = p.report }
        return out
    }
}
