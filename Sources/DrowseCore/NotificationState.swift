/// What became of a recorded notification: its row's `state` (and `download_id`) in state.db.
package enum NotificationState: Sendable, Hashable {
    /// Recorded; its handler has not run to its end yet.
    case pending
    /// Waiting for a fetch window, its app's hourly budget or its rollout delay.
    case deferred
    /// Its app's file could not be used when it came: it runs once the file is valid again.
    /// `checked`: recorded before (its signature checked, its `signed` flag known).
    case held(checked: Bool)
    /// Its handler ran to this end (a push download that could not be queued ends `failed`).
    case handled(FetchResult)
    /// Recorded, then not run: its app went away, or has no command for it.
    case dropped
    /// Its `expiration` passed before it could run.
    case expired
    /// A newer one with the same `collapse-id` replaced it.
    case collapsed
    /// Past `max_deferred`, the oldest of the lowest priority.
    case evicted
    /// Its signed download is this transfer; the app hears of it when the file is ready.
    case downloading(transfer: String)

    /// The `state` column's text (a download's transfer is in `download_id`).
    package var stored: String {
        switch self {
        case .pending: "pending"
        case .deferred: "deferred"
        case .held(let checked): checked ? "held-checked" : "held"
        case .handled(let result): result.rawValue
        case .dropped: "dropped"
        case .expired: "expired"
        case .collapsed: "collapsed"
        case .evicted: "evicted"
        case .downloading: "downloading"
        }
    }

    /// The transfer of a notification that became a download.
    package var downloadID: String? {
        if case .downloading(let id) = self { id } else { nil }
    }

    /// From the row's `state` and `download_id`; nil for text no drowse wrote.
    package init?(stored: String, downloadID: String? = nil) {
        switch stored {
        case "pending": self = .pending
        case "deferred": self = .deferred
        case "held": self = .held(checked: false)
        case "held-checked": self = .held(checked: true)
        case "dropped": self = .dropped
        case "expired": self = .expired
        case "collapsed": self = .collapsed
        case "evicted": self = .evicted
        case "downloading": self = .downloading(transfer: downloadID ?? "")
        default:
            guard let result = FetchResult(rawValue: stored) else { return nil }
            self = .handled(result)
        }
    }

    /// It still waits to run, and so needs its payload.
    package var waits: Bool { self == .pending || self == .deferred }

    /// The states the partial index `notifications_waiting` holds: those waiting to run or held.
    package static let waitingOrHeld: [NotificationState] = [.pending, .deferred, .held(checked: false), .held(checked: true)]
}
