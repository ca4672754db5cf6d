import CCurl
import DrowseTransfers
import Logging

/// The transfer engine, started by the first transfer that needs it. Until then libcurl is not
/// loaded and there is no transfer thread: libcurl and the libraries Debian's build of it
/// pulls in (GnuTLS, Kerberos, LDAP, libssh2, ...) are 4 MB of resident memory that an idle
/// drowsed without transfers has no use for. Once started it stays: a board that downloads
/// once tends to download again, and unloading libcurl's dependencies is not safe. What it
/// costs while idle is bounded instead: `release_code_after` without a transfer, the engine
/// gives back the resident pages of the libraries' code (`LibraryCode`).
///
/// Only the transfers part calls it (on the daemon's executor), as it calls the engine.
package final class LazyTransferEngine: TransferEngineControl {
    private let options: TransferEngine.Options
    private let logger: Logger
    private let onEvent: @Sendable (TransferEvent) -> Void
    /// The engine, once a transfer started it (the agent shuts it down at stop).
    package private(set) var engine: TransferEngine?
    /// libcurl could not be loaded: every transfer fails with this, the daemon serves on.
    private var refusal: TransferError?

    package init(options: TransferEngine.Options, logger: Logger, onEvent: @escaping @Sendable (TransferEvent) -> Void) {
        self.options = options
        self.logger = logger
        self.onEvent = onEvent
    }

    /// The running engine, started now if need be; nil (with `refusal` set) without libcurl.
    private func started() -> TransferEngine? {
        if let engine { return engine }
        if refusal != nil { return nil }
        if let why = ccurl_load() {
            let error = TransferError("transfers are off: \(String(cString: why))", transient: false)
            logger.error("\(error.reason)")
            refusal = error
            return nil
        }
        logger.info("starting the transfer engine (libcurl loaded)")
        let engine = TransferEngine(options: options, logger: logger, onEvent: onEvent)
        self.engine = engine
        return engine
    }

    package func start(_ job: DownloadJob) {
        if let engine = started() { engine.start(job) } else if let refusal { onEvent(.failed(id: job.id, error: refusal)) }
    }

    package func start(_ job: UploadJob) {
        if let engine = started() { engine.start(job) } else if let refusal { onEvent(.failed(id: job.id, error: refusal)) }
    }

    /// Nothing runs before the engine starts: nothing to stop.
    package func stop(id: String) { engine?.stop(id: id) }

    /// Ending an upload asks its server to drop the resource: that needs libcurl.
    package func cancel(_ job: UploadJob) { started()?.cancel(job) }

    package var running: TransferEngine? { engine }
}
