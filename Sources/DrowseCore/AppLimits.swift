/// Per-app resource limits for handlers and resident processes (`[limits] processes` and
/// `[limits] memory`, in an app file, with defaults under `[limits]` in drowse.toml).
///
/// Without them a handler inherits root's process limit: one fork bomb from one app takes the
/// board. They are held by the app's cgroup (`pids.max`, `memory.max`, covering every process of
/// the app together) where the tree drowsed manages has those controllers, else by rlimits set
/// in each process before exec (`RLIMIT_NPROC`, which the kernel counts over every process of the
/// app's *user*, and `RLIMIT_DATA`, per process).
package struct AppLimits: Sendable, Equatable {
    /// How many processes (tasks) the app may have; nil: no limit.
    package var processes: Int?
    /// Bytes of memory the app may use; nil: no limit.
    package var memory: Int64?

    /// 256 processes: far above what a handler needs (a shell pipeline is a handful), far below
    /// what starves the board (a Pi's pid_max is 32768 and each task costs kernel memory).
    /// Memory is unlimited by default: a right size depends on the app and the board, the kernel's
    /// OOM killer and drowsed's memory-pressure monitor handle the board as a whole, and a
    /// fraction of RAM guessed here would kill legitimate large handlers on small boards.
    package static let defaults = AppLimits(processes: 256, memory: nil)

    package init(processes: Int? = nil, memory: Int64? = nil) {
        self.processes = processes
        self.memory = memory
    }

    /// The smallest limits that still let a handler start (a shell and one child; the dynamic
    /// loader and libc need a few MiB of data).
    package static let minProcesses = 2
    package static let minMemory: Int64 = 4 << 20

    /// Parses a memory size: a whole number of bytes, or with a suffix K, M, G (powers of 1024,
    /// optionally followed by "i" and/or "B", e.g. "256M", "1GiB"), or "unlimited" (nil).
    package static func parseMemory(_ text: String) -> Int64?? {
        if text == "unlimited" || text == "max" { return .some(nil) }
        var digits = Substring(text)
        var unit: Int64 = 1
        for (suffix, factor) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("GB", 1 << 30), ("MB", 1 << 20),
                                 ("KB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)] as [(String, Int64)]
        where digits.hasSuffix(suffix) {
            digits = digits.dropLast(suffix.count)
            unit = factor
            break
        }
        guard !digits.isEmpty, digits.utf8.count <= 18, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
              let n = Int64(digits) else { return nil }
        let (bytes, overflow) = n.multipliedReportingOverflow(by: unit)
        return overflow ? nil : .some(bytes)
    }

    /// The text `drowse apps show` gives a memory limit ("256M", "unlimited").
    package static func formatMemory(_ bytes: Int64?) -> String {
        guard let b = bytes else { return "unlimited" }
        for (suffix, factor) in [("G", Int64(1) << 30), ("M", 1 << 20), ("K", 1 << 10)] where b % factor == 0 {
            return "\(b / factor)\(suffix)"
        }
        return "\(b)"
    }
}

extension AppLimits {
    /// What an app file sets under `[limits]`: each key that is set overrides drowse.toml's default
    /// (`.some(nil)` is an explicit "unlimited").
    package struct Setting: Sendable, Equatable {
        package var processes: Int??
        package var memory: Int64??

        package init(processes: Int?? = nil, memory: Int64?? = nil) {
            self.processes = processes
            self.memory = memory
        }

        /// The limits an app runs with: its own where set, else `defaults`.
        package func resolved(defaults: AppLimits) -> AppLimits {
            AppLimits(processes: processes ?? defaults.processes, memory: memory ?? defaults.memory)
        }
    }
}

extension TableReader {
    /// Reads `processes` (an integer, or "unlimited") and `memory` (e.g. "256M", or "unlimited")
    /// of a `[limits]` table, with clear errors for anything else.
    package mutating func limits() throws(ConfigError) -> AppLimits.Setting {
        var s = AppLimits.Setting()
        if let v = table["processes"], case .string = v {
            guard try string("processes") == "unlimited" else { throw error("processes", "expected a number of processes or \"unlimited\"") }
            s.processes = .some(nil)
        } else if let n = try integer("processes", in: AppLimits.minProcesses...4_194_304) {
            s.processes = .some(n)
        }
        if let v = table["memory"], case .integer = v, let n = try integer("memory") {
            guard n >= AppLimits.minMemory else { throw error("memory", "must be at least 4M, found \(n) bytes") }
            s.memory = .some(Int64(n))
        } else if let text = try string("memory") {
            guard let parsed = AppLimits.parseMemory(text) else {
                throw error("memory", "'\(text)' is not a size like \"256M\", \"1G\" or \"unlimited\"")
            }
            if let b = parsed, b < AppLimits.minMemory { throw error("memory", "must be at least 4M, found '\(text)'") }
            s.memory = .some(parsed)
        }
        return s
    }
}
