// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "drowse",
    platforms: [.macOS(.v14)],
    products: [
        // One multi-call program: `drowsed` is a link to `drowse` (deploy/common.sh makes it).
        .executable(name: "drowse", targets: ["drowse"]),
        .library(name: "DrowseKit", targets: ["DrowseKit"]),
        .executable(name: "drowse-resident-example", targets: ["drowse-resident-example"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        // C libraries, found through pkg-config.
        .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        // Small C helpers for what Swift cannot do safely between fork and exec.
        // The child's side of a handler start and the spawn helper's loop, shared by drowsed and
        // the small drowse-spawner program.
        .target(name: "CDrowseSpawn"),
        .target(name: "CDrowseSys", dependencies: ["CDrowseSpawn"]),
        // libcurl's API through a table filled by dlopen when the first transfer starts: an idle
        // drowsed does not map libcurl and its dependencies (headers: libcurl4-openssl-dev).
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("dl")]),
        // The MQTT session's inbound gate: bounds each packet libmosquitto reads before it
        // allocates for it (docs/architecture.md, "The MQTT inbound gate").
        // Its read and SSL_read must be in the executable's dynamic symbol table, where
        // libmosquitto binds to them, also in a release linked with --no-export-dynamic.
        .target(name: "CMQTTGate", linkerSettings: [
            .linkedLibrary("dl"),
            .unsafeFlags(["-Xlinker", "--export-dynamic-symbol=read", "-Xlinker", "--export-dynamic-symbol=SSL_read"]),
        ]),

        // No I/O, no C: models, config, planner, state machines.
        .target(name: "DrowseCore"),
        .target(name: "DrowseStore", dependencies: ["DrowseCore", "DrowsePOSIX", "CSQLite"]),
        // `drowse simulate`: scenarios, the virtual-clock driver of the fetch scheduler and the
        // baselines.
        .target(name: "DrowseSimulation", dependencies: ["DrowseCore"]),
        // The checked system layer: checked libc calls, the clocks, threads, the HTTP client on
        // drowsed's Unix socket. Shared by drowsed, the CLI and DrowseKit; no Foundation, no NIO.
        .target(name: "DrowsePOSIX", dependencies: ["CDrowseSys"]),
        .target(name: "DrowseSystem", dependencies: [
            "DrowseCore", "DrowsePOSIX", "CDrowseSys", "CCrypto",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "DrowseTransfers", dependencies: [
            "DrowseCore", "DrowseSystem", "CCurl", "CCrypto",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "DrowseMQTT", dependencies: [
            "DrowseCore", "DrowseSystem", "CMosquitto", "CMQTTGate",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "DrowseAgent", dependencies: [
            "DrowseCore", "DrowseStore", "DrowseSystem", "DrowseTransfers", "DrowseMQTT", "CCurl",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "UnixSignals", package: "swift-service-lifecycle"),
        ]),
        // The daemon's entry point and command line, run by `drowse` under the name `drowsed`.
        .target(name: "DrowseDaemon", dependencies: [
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            "DrowseAgent", "DrowseCore", "DrowseSystem", "CDrowseSys",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
        // The text the CLI prints for drowsed's JSON answers (status, apps, transfers): pure, so
        // tests can call it.
        .target(name: "DrowseCLIFormat", dependencies: ["DrowseCore", "DrowsePOSIX"]),
        .executableTarget(name: "drowse", dependencies: [
            "DrowseDaemon", "DrowseCLIFormat", "DrowseCore", "DrowseSimulation", "DrowseStore", "DrowseSystem", "DrowseMQTT",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        // The client library a resident app imports: the lifecycle API over the Unix socket.
        .target(name: "DrowseKit", dependencies: ["DrowseCore", "DrowsePOSIX"]),
        .executableTarget(name: "drowse-resident-example", dependencies: ["DrowseKit"]),

        // Helpers shared by the test targets (temporary folders, free ports, waiting, a mosquitto
        // broker, a capturing log handler): every .swift file in Tests/DrowseTestSupport is in it.
        .target(name: "DrowseTestSupport", dependencies: [.product(name: "Logging", package: "swift-log")],
                path: "Tests/DrowseTestSupport"),
        .testTarget(name: "DrowseCoreTests", dependencies: ["DrowseCore"], exclude: ["toml-test"]),
        .testTarget(name: "DrowseSimulationTests", dependencies: ["DrowseSimulation", "DrowseCore", "DrowseSystem"]),
        .testTarget(name: "DrowseStoreTests", dependencies: ["DrowseStore", "DrowseCore"]),
        .testTarget(name: "DrowseSystemTests", dependencies: ["DrowseSystem", "DrowseCore", "DrowseTestSupport", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "DrowseTransfersTests", dependencies: ["DrowseTransfers", "DrowseCore", "DrowseSystem", "DrowseTestSupport", "CCurl", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "DrowseAgentTests", dependencies: [
            "DrowseAgent", "DrowseCore", "DrowseSimulation", "DrowseStore", "DrowseSystem", "DrowseTestSupport",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
        ]),
        .testTarget(name: "DrowseKitTests", dependencies: ["DrowseKit", "DrowseCore", "DrowsePOSIX", "DrowseTestSupport"]),
        .testTarget(name: "DrowseCLIFormatTests", dependencies: ["DrowseCLIFormat", "DrowseCore"]),
        .testTarget(name: "DrowseMQTTTests", dependencies: ["DrowseMQTT", "CMosquitto", "DrowseTestSupport", .product(name: "Logging", package: "swift-log")]),
    ],
    swiftLanguageModes: [.v6]
)
