"""Silent notifications over a real mosquitto broker (docs/contract.md: "Notifications over MQTT")."""

import json
import time

from drowse_e2e import notify_topic


def start_with_notify_app(broker, make_drowse, app="news", handler_deadline="5s"):
    d = make_drowse(broker=broker, handler_deadline=handler_deadline)
    d.add_app(app, notification=d.recorder(app))
    d.start()
    # Publishing before the daemon's SUBSCRIBE reached the broker would lose the message (its
    # session does not exist yet), so wait for the broker to see the subscription.
    broker.wait_subscribed(notify_topic(app))
    return d


def test_silent_notification_runs_handler_with_payload_and_env(broker, make_drowse):
    d = start_with_notify_app(broker, make_drowse)
    status = d.status()
    assert status["mqtt"]["configured"] is True
    d.wait_mqtt_connected(True)

    d.push("news", "-d", "content-id=42")

    [run] = d.wait_runs("news", 1, timeout=15)
    payload = run.json()
    assert isinstance(payload, dict), payload
    assert payload["content-id"] == 42
    assert payload["aps"]["content-available"] == 1

    assert run.env.get("DROWSE_EVENT") == "notification"
    assert run.env.get("DROWSE_APP") == "news"
    assert run.env.get("DROWSE_SOCKET") == str(d.socket)
    deadline = float(run.env["DROWSE_DEADLINE"])
    # handler_deadline is 5 s: the deadline lies after the launch and at most ~5 s after it.
    assert run.start < deadline <= run.start + 5.5, (run.start, deadline)

    d.wait_idle()  # a second run of the delivery would have run by now
    assert len(d.runs("news")) == 1, d.runs("news")


def test_refused_notifications_do_not_run_handler_and_session_stays_up(broker, make_drowse):
    d = start_with_notify_app(broker, make_drowse)
    topic = notify_topic("news")

    # 1. not silent: no aps.content-available
    d.push("news", "-d", "content-id=1", silent=False)
    # 2. oversized: a well-formed silent notification of more than 4096 bytes
    big = {"aps": {"content-available": 1}, "id": "oversized-1", "content-id": 2, "pad": "x" * 5000}
    big_bytes = json.dumps(big).encode()
    assert len(big_bytes) > 4096
    broker.publish(topic, big_bytes, qos=1)
    # 3. malformed: not JSON at all
    broker.publish(topic, b'{"aps": {"content-available": 1}, "content-id": 3', qos=1)
    broker.publish(topic, b"\xff\xfe not json", qos=1)
    # 4. JSON, but an array rather than an object
    broker.publish(topic, json.dumps([{"aps": {"content-available": 1}, "content-id": 4}]).encode(), qos=1)

    # A good one afterwards still runs the handler: the session survived the bad ones.
    d.push("news", "-d", "content-id=99")
    d.wait_runs("news", 1, timeout=15)
    d.wait_idle()  # anything wrongly accepted before it (received earlier: MQTT keeps order) has run by now
    got = []
    for r in d.runs("news"):
        try:
            doc = r.json()
        except ValueError:
            doc = None
        got.append(doc.get("content-id") if isinstance(doc, dict) else r.stdin)
    assert got == [99], f"handler runs: {d.runs('news')}"

    status = d.status()
    assert status["mqtt"]["connected"] is True, status
    # Still connected on the same session: the daemon did not have to re-subscribe.
    assert broker.subscription_count(topic) == 1


def test_mqtt_reconnect_after_broker_restart(broker, make_drowse):
    d = start_with_notify_app(broker, make_drowse)
    d.wait_mqtt_connected(True)

    broker.stop()  # SIGTERM: mosquitto saves its persistent sessions
    d.wait_mqtt_connected(False, timeout=15)
    broker.start()  # same port, same persistence dir

    # Published right away, possibly before drowsed is back: its persistent session queues it.
    t0 = time.monotonic()
    d.push("news", "-d", "content-id=7")
    [run] = d.wait_runs("news", 1, timeout=15)
    assert run.json()["content-id"] == 7
    assert time.monotonic() - t0 < 15

    d.wait_mqtt_connected(True, timeout=15)
    # And one published once it is back also arrives.
    d.push("news", "-d", "content-id=8")
    runs = d.wait_runs("news", 2, timeout=15)
    assert [r.json()["content-id"] for r in runs] == [7, 8]


def test_duplicate_id_runs_once_and_expired_is_dropped(broker, make_drowse):
    d = start_with_notify_app(broker, make_drowse)
    # docs/contract.md: `id` dedupes, `expiration` (Unix time) is honoured.
    d.push("news", "--id", "dup-1", "-d", "content-id=1")
    d.push("news", "--id", "dup-1", "-d", "content-id=1")
    d.push("news", "--expiration", str(int(time.time()) - 60), "-d", "content-id=2")
    d.push("news", "-d", "content-id=3")
    d.wait_runs("news", 2, timeout=15)
    d.wait_idle()
    assert sorted(r.json()["content-id"] for r in d.runs("news")) == [1, 3], d.runs("news")


def test_messages_on_unexpected_topics_are_counted_and_logged_once_per_topic(broker, make_drowse):
    """A broker may deliver topics drowsed never asked for (a second broker's retained messages, an
    old subscription kept in the persistent session). Reproduced with a stock mosquitto: a client
    with drowsed's own client id subscribes to the whole device tree with a persistent session
    first; drowsed then resumes that session, subscription included."""
    import subprocess
    from drowse_e2e import DEVICE_ID, MOSQUITTO_PUB
    mosquitto_sub = MOSQUITTO_PUB.replace("mosquitto_pub", "mosquitto_sub")
    subprocess.run([mosquitto_sub, "-h", "127.0.0.1", "-p", str(broker.port), "-i", f"drowse-{DEVICE_ID}", "-c",
                    "-q", "1", "-t", f"drowse/{DEVICE_ID}/#", "-E"], check=True, timeout=15, capture_output=True)
    d = start_with_notify_app(broker, make_drowse)
    d.wait_mqtt_connected(True)
    status_topic = f"drowse/{DEVICE_ID}/status"
    # drowsed's own retained status comes back on the old subscription; so does any other status.
    for _ in range(5):
        broker.publish(status_topic, b'{"online": true}', qos=1)
    for name in ("a", "b"):
        broker.publish_many(f"drowse/{DEVICE_ID}/foreign/{name}", [b'{"aps": {"content-available": 1}, "n": %d}' % i
                                                                   for i in range(20)])
    d.push("news", "-d", "content-id=7")  # a real one still runs after them
    d.wait_runs("news", 1, timeout=15)
    from drowse_e2e import wait_until
    mqtt = wait_until(lambda: (lambda m: m if m.get("unexpected_messages") == 40 else None)(d.status()["mqtt"]), 10,
                      what="mqtt.unexpected_messages == 40")
    assert mqtt["refused_notifications"] == 0, mqtt
    assert len(d.runs("news")) == 1
    log = d.stderr_text()
    assert log.count("unexpected topic") == 2, "logged once per topic, not once per message"
    assert "status" not in "".join(l for l in log.splitlines() if "unexpected topic" in l)
