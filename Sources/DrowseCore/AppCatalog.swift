/// The apps of an apps.d folder: each `*.toml` file there is one app, usable or not (docs/contract.md,
/// "App definition": an invalid app file is reported and skipped; the other apps keep working).
package struct AppCatalog: Sendable {
    /// An app file that cannot be used, and why.
    package struct Invalid: Sendable, Equatable {
        package var file: String
        /// The file's name without `.toml`: what `drowse apps` lists it as, since its own id
        /// may be missing, unreadable or shared.
        package var id: String
        package var error: ConfigError
    }

    /// Usable apps by id.
    package private(set) var apps: [String: AppDefinition] = [:]
    /// Unusable app files, in the order given.
    package private(set) var invalid: [Invalid] = []

    /// `files` are the app files' paths, each with its text or why it could not be read.
    /// Two files declaring the same id are both refused: picking one (the first by name, say)
    /// would let a stray copy silently replace an app or leave it, depending on file names.
    package init(_ files: [(path: String, text: Result<String, ConfigError>)]) {
        var parsed: [(path: String, app: Result<AppDefinition, ConfigError>)] = []
        var filesByID: [String: [String]] = [:]
        for (path, text) in files {
            let app: Result<AppDefinition, ConfigError>
            switch text {
            case .failure(let error): app = .failure(error)
            case .success(let text):
                do { app = .success(try AppDefinition.parse(text, file: path)) } catch { app = .failure(error) }
            }
            if case .success(let a) = app { filesByID[a.id, default: []].append(path) }
            parsed.append((path, app))
        }
        for (path, app) in parsed {
            switch app {
            case .failure(let error):
                invalid.append(Invalid(file: path, id: Self.stem(path), error: error))
            case .success(let a):
                let others = filesByID[a.id, default: []].filter { $0 != path }
                guard others.isEmpty else {
                    let error = ConfigError(
                        file: path, key: "id", line: a.idLine,
                        problem: "'\(a.id)' is also the id in \(others.joined(separator: ", ")); "
                            + "all files with this id are refused until each has its own")
                    invalid.append(Invalid(file: path, id: Self.stem(path), error: error))
                    continue
                }
                apps[a.id] = a
            }
        }
    }

    /// `/etc/drowse/apps.d/weather.toml` → `weather`.
    static func stem(_ path: String) -> String {
        let name = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? path
        return name.hasSuffix(".toml") ? String(name.dropLast(5)) : name
    }
}
