import DrowseCore
import DrowseSystem

extension AppCatalog {
    /// Reads every `*.toml` in `directory` (none when it does not exist). Only regular files
    /// (or symlinks to them) are read, each up to `ConfigFile.maxSize`: a FIFO or a device
    /// would block start-up, and a cut file could pass as a whole one. Anything else becomes
    /// an invalid app with the reason, so one bad entry never stops the others.
    package static func load(directory: String) -> AppCatalog {
        let names = FileSystem.listDirectory(directory).filter { $0.hasSuffix(".toml") }
        return AppCatalog(names.map { name in
            let path = directory + "/" + name
            let bytes: [UInt8]
            do throws(RefusedFile) {
                bytes = try FileSystem.readRegularFile(path, limit: ConfigFile.maxSize)
            } catch {
                return (path, .failure(ConfigError(file: path, problem: error.reason)))
            }
            do throws(ConfigError) { return (path, .success(try ConfigFile.text(bytes, file: path))) } catch { return (path, .failure(error)) }
        })
    }
}
