"""Signed notifications: an app with notification.public_key accepts only JWS (EdDSA) payloads
that verify (docs/contract.md: "Notifications over MQTT", `drowse keygen`, `drowse push --sign`)."""

import json

from drowse_e2e import notify_topic


def test_only_verified_notifications_reach_an_app_with_a_public_key(broker, make_drowse):
    d = make_drowse(broker=broker, handler_deadline="5s")
    key = d.base / "signer.key"
    other = d.base / "other.key"
    d.cli_ok("keygen", str(key))
    d.cli_ok("keygen", str(other))
    pub = (d.base / "signer.key.pub").read_text().strip()
    d.add_app("secure", raw=f'id = "secure"\n[notification]\ncommand = {json.dumps(d.recorder("secure"))}\npublic_key = "{pub}"\n')
    d.add_app("open", notification=d.recorder("open"))
    d.start()
    broker.wait_subscribed(notify_topic("secure"))
    broker.wait_subscribed(notify_topic("open"))

    d.push("secure", "-d", "content-id=1")                      # unsigned
    d.push("secure", "-d", "content-id=2", "--sign", str(other))  # signed by the wrong key
    # Tampered: a valid signature over another payload, with the payload part swapped.
    good = d.push_payload_bytes("secure", "-d", "content-id=3", "--sign", str(key))
    forged = d.push_payload_bytes("secure", "-d", "content-id=999", "--sign", str(other))
    h, _, s = good.split(b".")
    _, p2, _ = forged.split(b".")
    broker.publish(notify_topic("secure"), b".".join([h, p2, s]), qos=1)
    broker.publish(notify_topic("secure"), b"not.a.jws!", qos=1)
    d.push("secure", "-d", "content-id=4", "--sign", str(key))  # the only one that verifies

    [run] = d.wait_runs("secure", 1, timeout=15)
    assert run.json()["content-id"] == 4
    assert run.json()["aps"]["content-available"] == 1

    # An app without a key still takes plain notifications, and the session stayed up.
    d.push("open", "-d", "content-id=5")
    [run] = d.wait_runs("open", 1, timeout=15)
    assert run.json()["content-id"] == 5
    d.wait_idle()  # the refused ones came before it (MQTT keeps order): one wrongly accepted has run
    assert len(d.runs("secure")) == 1, [r.json() for r in d.runs("secure")]
    assert d.status()["mqtt"]["refused_notifications"] >= 4
