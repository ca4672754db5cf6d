import DrowseCore
import Testing

@Suite("Topics")
struct TopicsTests {
    @Test("builds the contract's notify and status topics")
    func build() {
        #expect(Topics.notify(prefix: "drowse", device: "pi-kitchen", app: "weather") == "drowse/pi-kitchen/apps/weather/notify")
        #expect(Topics.status(prefix: "drowse", device: "pi-kitchen") == "drowse/pi-kitchen/status")
        #expect(Topics.notify(prefix: "home/iot", device: "d", app: "a") == "home/iot/d/apps/a/notify")
    }

    @Test("finds the app id in this device's notify topics", arguments: ["weather", "a.b-c_1", "x"])
    func appInTopic(app: String) {
        let topic = Topics.notify(prefix: "drowse", device: "pi", app: app)
        #expect(Topics.app(inNotifyTopic: topic, prefix: "drowse", device: "pi") == app)
    }

    @Test("works with a multi-level prefix")
    func multiLevelPrefix() {
        #expect(Topics.app(inNotifyTopic: "home/iot/pi/apps/w/notify", prefix: "home/iot", device: "pi") == "w")
        #expect(Topics.app(inNotifyTopic: "home/iot/pi/apps/w/notify", prefix: "home", device: "iot") == nil)
    }

    @Test("refuses topics that are not this device's notify topics", arguments: [
        "drowse/other/apps/w/notify",      // another device
        "other/pi/apps/w/notify",          // another prefix
        "drowse/pi/apps/w/status",         // another suffix
        "drowse/pi/apps/w/notify/x",       // extra level
        "drowse/pi/apps/a/b/notify",       // an app id with a slash
        "drowse/pi/apps//notify",          // an empty app id
        "drowse/pi/apps/notify",           // no app level at all
        "drowse/pi/status",
        "drowse/pi/apps/",
        "drowse/pi/app/w/notify",
        "drowse/pi/apps/w/notifyx",
        "Drowse/pi/apps/w/notify",         // topics are case-sensitive
        "",
    ])
    func refuses(topic: String) {
        #expect(Topics.app(inNotifyTopic: topic, prefix: "drowse", device: "pi") == nil)
    }

    @Test("a device id that is a prefix of another device's id does not match")
    func devicePrefix() {
        #expect(Topics.app(inNotifyTopic: "drowse/pi2/apps/w/notify", prefix: "drowse", device: "pi") == nil)
        #expect(Topics.app(inNotifyTopic: "drowse/pi/apps/w/notify", prefix: "drowse", device: "pi2") == nil)
    }

    @Test("notify and app(inNotifyTopic:) are inverse for valid ids")
    func roundTrip() {
        for (prefix, device, app) in [("drowse", "pi-kitchen", "weather"), ("a/b/c", "d.e", "f_g"), ("p", "notify", "apps")] {
            let topic = Topics.notify(prefix: prefix, device: device, app: app)
            #expect(Topics.app(inNotifyTopic: topic, prefix: prefix, device: device) == app)
        }
    }
}

@Suite("Topics: groups")
struct GroupTopicsTests {
    @Test("builds group topics and the device's topic list, its own first")
    func build() {
        #expect(Topics.groupNotify(prefix: "drowse", group: "eu", app: "weather") == "drowse/groups/eu/apps/weather/notify")
        #expect(Topics.notifyTopics(prefix: "p/q", device: "pi", groups: ["eu", "beta"], app: "w") == [
            "p/q/pi/apps/w/notify", "p/q/groups/eu/apps/w/notify", "p/q/groups/beta/apps/w/notify",
        ])
        #expect(Topics.notifyTopics(prefix: "drowse", device: "pi", groups: [], app: "w") == ["drowse/pi/apps/w/notify"])
    }

    @Test("finds the app id in the device's groups' topics")
    func appInGroupTopic() {
        let groups = ["eu", "beta", "with space"]
        #expect(Topics.app(inNotifyTopic: "drowse/groups/eu/apps/weather/notify", prefix: "drowse", device: "pi", groups: groups) == "weather")
        #expect(Topics.app(inNotifyTopic: "drowse/groups/with space/apps/a.b/notify", prefix: "drowse", device: "pi", groups: groups) == "a.b")
        #expect(Topics.app(inNotifyTopic: "home/iot/groups/beta/apps/w/notify", prefix: "home/iot", device: "pi", groups: groups) == "w")
        // Its own topic still works with groups configured.
        #expect(Topics.app(inNotifyTopic: "drowse/pi/apps/w/notify", prefix: "drowse", device: "pi", groups: groups) == "w")
    }

    @Test("refuses group topics that are not the device's", arguments: [
        "drowse/groups/us/apps/w/notify",        // a group the device is not in
        "drowse/groups/eu/apps/w/notify/x",      // extra level
        "drowse/groups/eu/apps/a/b/notify",      // an app id with a slash
        "drowse/groups/eu/apps//notify",         // empty app id
        "drowse/groups/eu/apps/notify",
        "drowse/groups//apps/w/notify",          // empty group
        "drowse/groups/eu/w/notify",
        "drowse/groups/eu",
        "drowse/groups/",
        "drowse/groups/EU/apps/w/notify",        // case-sensitive
        "other/groups/eu/apps/w/notify",
    ])
    func refuses(topic: String) {
        #expect(Topics.app(inNotifyTopic: topic, prefix: "drowse", device: "pi", groups: ["eu"]) == nil)
    }

    @Test("without groups, group topics are not the device's")
    func noGroups() {
        #expect(Topics.app(inNotifyTopic: "drowse/groups/eu/apps/w/notify", prefix: "drowse", device: "pi") == nil)
    }

    @Test("a device named 'groups' keeps its own topics apart from group topics")
    func deviceNamedGroups() {
        #expect(Topics.app(inNotifyTopic: "drowse/groups/apps/w/notify", prefix: "drowse", device: "groups", groups: ["apps"]) == "w")
        #expect(Topics.app(inNotifyTopic: "drowse/groups/apps/apps/w/notify", prefix: "drowse", device: "groups", groups: ["apps"]) == "w")
        #expect(Topics.app(inNotifyTopic: "drowse/groups/apps/apps/w/notify", prefix: "drowse", device: "groups", groups: []) == nil)
    }

    @Test("finds the device id in status topics")
    func statusTopics() {
        #expect(Topics.allStatuses(prefix: "drowse") == "drowse/+/status")
        #expect(Topics.device(inStatusTopic: "drowse/pi-1/status", prefix: "drowse") == "pi-1")
        #expect(Topics.device(inStatusTopic: "a/b/pi/status", prefix: "a/b") == "pi")
        for bad in ["drowse/status", "drowse//status", "drowse/a/b/status", "other/pi/status", "drowse/pi/statusx"] {
            #expect(Topics.device(inStatusTopic: bad, prefix: "drowse") == nil, "\(bad)")
        }
    }
}
