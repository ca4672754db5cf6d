import DrowseCore
import Testing

@Suite("Topics")
struct TopicsTests {
    @Test("builds the SPEC's notify and status topics")
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
