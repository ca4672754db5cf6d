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
            throw CLIError(r.json?["error"]?["message"]?.stringValue ?? "drowsed answered HTTP \(r.status)")
        }
        // The text already ends in a newline.
        print(String(decoding: r.body, as: UTF8.self), terminator: "")
    }
}
