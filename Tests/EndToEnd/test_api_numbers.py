"""Numbers and query strings are checked at the API's edge:
a bad value is a 400 with the contract's error shape, never a crash."""

from __future__ import annotations

import json

import pytest

from raw_http import request

DEAD_URL = "http://127.0.0.1:9/x"
TEN_YEARS = 3650 * 86400


def post_transfer(d, timeout_text: str, **extra) -> tuple[int | None, dict]:
    fields = {"url": json.dumps(DEAD_URL), "app": json.dumps("num"), "timeout_resource": timeout_text,
              **{k: json.dumps(v) for k, v in extra.items()}}
    body = "{" + ",".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    status, raw = request(d.socket, "POST", "/v1/transfers", body.encode())
    return status, json.loads(raw) if raw else {}


@pytest.fixture
def d(make_drowse):
    d = make_drowse()
    d.add_app("num", fetch=d.recorder("num"))
    d.start()
    yield d


BAD_TIMEOUTS = ["1e300", "1e999", "-1e999", "0", "-0", "-1", "1e-999", str(TEN_YEARS + 1), '"3651d"',
                '"99999999999999999999d"', '"0s"', '"-5s"', '"soon"', "true", "[]", "{}"]
GOOD_TIMEOUTS = [("60", 60), ('"7d"', 7 * 86400), (str(TEN_YEARS), TEN_YEARS), ("0.5", 0.5)]
WRONG_TYPES = [("discretionary", "yes"), ("requires_power", 1), ("to", 5), ("session", ["a"]), ("kind", 0), ("protocol", False)]
ODD_QUERIES = ["?=", "?a=b&=c", "?&&=", "?=&=", "?==", "?%", "??", "?=?="]


def test_timeout_resource_is_checked_at_the_edge(d):
    for value in BAD_TIMEOUTS:
        status, body = post_transfer(d, value)
        assert status == 400, (value, body)
        # Refused by the JSON parser (1e999 is out of range) or by the check on timeout_resource.
        assert body["error"]["code"] == "bad_request", body
    status, body = post_transfer(d, "1e300")
    assert "timeout_resource" in body["error"]["message"], body
    assert d.proc.poll() is None
    for value, seconds in GOOD_TIMEOUTS:
        status, body = post_transfer(d, value)
        assert status == 200, (value, body)
        assert abs(body["timeout_at"] - body["created_at"] - seconds) < 0.01, body
    request(d.socket, "POST", "/v1/apps/num/quit")


def test_a_member_of_the_wrong_type_is_a_400(d):
    for key, value in WRONG_TYPES:
        status, body = post_transfer(d, "60", **{key: value})
        assert status == 400 and key in body["error"]["message"], (key, body)


def test_odd_query_strings_are_answered(d):
    for query in ODD_QUERIES:
        status, body = request(d.socket, "GET", "/v1/transfers" + query)
        assert status == 200, (query, body)
    assert d.proc.poll() is None
    assert request(d.socket, "GET", "/v1/status")[0] == 200
