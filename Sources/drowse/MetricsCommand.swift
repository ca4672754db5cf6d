import ArgumentParser
import DrowseCore
import DrowseSystem

/// `drowse metrics`: the counters of `GET /v1/metrics`, in the Prometheus text format.
struct MetricsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics", abstract: "Counters and gauges in the Prometheus text format (root and the drowse group).")
    @OptionGroup var global: GlobalOptions

    func run() throws {
        let r: UnixHTTPClient.Response
        do { r = try UnixHTTPClient.request(socket: global.socketPath, method: "GET", path: "/v1/metrics") } catch {
            throw CLIError(error.description)
        }
        guard (200..<300).contains(r.status) else {
            throw CLIError(r.json.flatMap { APIWire.Error(json: $0).message } ?? "drowsed answered HTTP \(r.status)")
        }
        // Line by line, escaped: Prometheus text holds no control characters, a forged one is shown.
        var text = String(decoding: r.body, as: UTF8.self)
        if text.hasSuffix("\n") { text.removeLast() }
        printLines(text)
    }
}
