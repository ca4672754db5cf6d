import DrowseSystem
import Logging
import ServiceLifecycle
import UnixSignals

/// The agent's own place in the ServiceGroup, last in its list: once the API and every part
/// have started (`StartOrder`), it tells systemd it is ready, re-reads the app files on SIGHUP
/// (`systemctl reload drowsed`), and, first to hear a graceful shutdown, stops launching
/// handlers. The group then stops the parts in reverse order (`Agent.services`).
package struct AgentService: Service {
    let agent: Agent
    let order: StartOrder
    let logger: Logger
    let onReady: @Sendable () -> Void
    /// systemd notifications (`RELOADING=1` … `READY=1` around a reload).
    let notify: @Sendable (String) -> Void

    package init(agent: Agent, order: StartOrder, logger: Logger, notify: @escaping @Sendable (String) -> Void = { _ in },
                 onReady: @escaping @Sendable () -> Void) {
        self.agent = agent
        self.order = order
        self.logger = logger
        self.notify = notify
        self.onReady = onReady
    }

    package func run() async throws {
        // Trapped before anything else: SIGHUP's default action would end the daemon.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        // A graceful shutdown during the start abandons the parts not yet started.
        if await order.allReady() {
            onReady()
        } else {
            await agent.stopLaunching()
            return
        }
        // Sleep until shutdown (no loop, no timer), waking only for a reload.
        for await _ in hangups.cancelOnGracefulShutdown() {
            notify("RELOADING=1\nMONOTONIC_USEC=\(UInt64(WallClock.monotonic() * 1_000_000))")
            await agent.reload()
            notify("READY=1")
        }
        // Queued runs do not start now; running ones finish when the group stops the handlers.
        await agent.stopLaunching()
    }
}
