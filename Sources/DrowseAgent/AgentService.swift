import DrowseSystem
import Logging
import ServiceLifecycle

/// Runs the agent inside the ServiceGroup: starts it, tells systemd it is ready, and stops
/// it cleanly on SIGTERM/SIGINT.
package struct AgentService: Service {
    let agent: Agent
    let logger: Logger
    let onReady: @Sendable () -> Void

    package init(agent: Agent, logger: Logger, onReady: @escaping @Sendable () -> Void) {
        self.agent = agent
        self.logger = logger
        self.onReady = onReady
    }

    package func run() async throws {
        await agent.start()
        onReady()
        // Sleep until shutdown: no loop, no timer.
        try? await gracefulShutdown()
        // Queued runs do not start now; running ones finish in agent.shutdown().
        await agent.stopQueuedHandlers()
        await agent.shutdown()
    }
}
