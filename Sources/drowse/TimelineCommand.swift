#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import DrowseCore
import DrowseSimulation
import DrowseStore
import DrowseSystem

/// `drowse timeline --svg FILE`: what a running agent did, drawn like a simulated day. Reads
/// drowsed's state.db read-only (and a scheduler trace if given): no API call, nothing for the
/// daemon to do, so an idle drowsed is not woken.
struct TimelineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline",
        abstract: "Draw what drowsed did as an SVG timeline: radio-on time the model assigns, windows, runs, notifications, transfers.",
        discussion: """
            Reads state_dir/state.db (from the config file) read-only, so it needs read access to the state directory \
            (run it as root, or as drowsed's user). With --trace, the windows and the conditions come from a trace \
            written by `drowsed --scheduler-trace`; without, the windows are the scheduled fetches that started together. \
            The radio model is [radio] model from the config (lte when it is auto), or --radio.
            """)
    @Option(help: "Main config file (env DROWSE_CONFIG); its state_dir holds state.db.") var config: String?
    @Option(help: "Read this state.db instead of the config's.") var state: String?
    @Option(help: "How far back to draw, e.g. 24h, 90m.") var since = "24h"
    @Option(help: "Write the SVG here (- for standard output).") var svg: String
    @Option(help: "A scheduler trace written by drowsed --scheduler-trace: adds its windows and conditions.") var trace: String?
    @Option(help: "Radio model: lte, 3g, wifi or ethernet (default: the config's).") var radio: String?

    func run() throws {
        guard let span = DurationText.parse(since), span > .zero else { throw CLIError("--since '\(since)' is not a duration (e.g. 24h, 90m)") }
        var dbPath = state
        var device = "drowse"
        var radioName = radio ?? "auto"
        if dbPath == nil || radio == nil {
            let path = config ?? getenv("DROWSE_CONFIG").map { String(cString: $0) } ?? MainConfig.defaultPath
            do {
                let bytes = try FileSystem.readRegularFile(path, limit: ConfigFile.maxSize)
                let c = try MainConfig.parse(ConfigFile.text(bytes, file: path), file: path, machineID: FileSystem.machineID())
                if dbPath == nil { dbPath = c.stateDir + "/state.db" }
                device = c.deviceID
                if radio == nil { radioName = c.radioModel.description }
            } catch let e as ConfigError {
                throw CLIError(e.description)
            } catch let e as RefusedFile {
                throw CLIError("\(path): \(e.reason)")
            }
        }
        guard let model = radioName == "auto" ? .lte : RadioModel.named(radioName) else {
            throw CLIError("--radio '\(radioName)' is not one of lte, 3g, wifi, ethernet")
        }
        let to = WallClock.now()
        let from = to - span.seconds
        var history: AgentHistory
        do {
            let store = try Store(readingOnly: dbPath!)
            history = try store.history(from: from, to: to)
        } catch {
            throw CLIError("\(dbPath!): \(error)")
        }
        if let trace {
            let text: String
            do { text = try FileSystem.readText(trace, limit: 256 << 20) } catch { throw CLIError(error.description) }
            do { try history.addTrace(text, from: from) } catch { throw CLIError("\(trace): \(error)") }
        }
        let drawing = AgentTimeline.drawing(history, from: from, to: to, radio: model, device: device)
        let text = TimelineSVG.render(drawing)
        if svg == "-" { print(text, terminator: ""); return }
        do { try FileSystem.writeAtomically(svg, Array(text.utf8), durable: false) } catch { throw CLIError(error.description) }
        let figures = drawing.radioLanes[0].figures.map(\.text).joined(separator: ", ")
        say("\(svg): \(AgentTimeline.windows(history).count) windows, \(figures)")
    }
}
