"""The Grafana dashboard in deploy/grafana/ is built on
the metrics drowsed exports: every query names a metric a real `drowse metrics` prints, and every
label it groups or filters by is one that metric carries (besides the scrape's own `instance` and
`job`). A renamed metric or label fails here instead of drawing an empty panel."""

from __future__ import annotations

import json
import re

from drowse_e2e import REPO, wait_until

DASHBOARD = REPO / "deploy" / "grafana" / "drowse-dashboard.json"
# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "by", "without", "rate", "irate", "increase", "delta", "deriv", "topk", "bottomk",
    "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "abs", "clamp_min", "clamp_max",
    "label_values", "histogram_quantile", "quantile", "stddev", "time", "vector", "scalar", "sort", "sort_desc",
}
SCRAPE_LABELS = {"instance", "job"}


def queries(dashboard) -> list[str]:
    out = []
    for p in dashboard["panels"]:
        out += [t["expr"] for t in p.get("targets", [])]
        for inner in p.get("panels", []):
            out += [t["expr"] for t in inner.get("targets", [])]
    out += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return out


def parse(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) a PromQL expression uses."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels = set()
    for matchers in re.findall(r"\{([^}]*)\}", e):
        labels |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", e):
        labels |= {x.strip() for x in grouping.split(",") if x.strip()}
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$[a-zA-Z_]+", " ", e)
    e = e.replace("label_values(drowse_apps, instance)", "label_values(drowse_apps)")
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e)) - PROMQL_WORDS
    if "label_values" in expr:
        labels |= set(re.findall(r"label_values\([^,]+,\s*([a-zA-Z_]+)\)", expr))
    return names, labels


def exported(text: str) -> dict[str, set[str]]:
    """Metric name → the label names its series carry, from Prometheus text."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            out.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
            assert m, line
            out.setdefault(m.group(1), set()).update(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
    return out


def test_parse_finds_metrics_and_labels():
    names, labels = parse('sum by (app, direction) (increase(drowse_transfer_bytes_total{instance=~"$instance",x!="a{b}"}[1h]))')
    assert names == {"drowse_transfer_bytes_total"} and labels == {"app", "direction", "instance", "x"}
    assert parse("rate(process_cpu_seconds_total[$__rate_interval]) / drowse_apps")[0] == {"process_cpu_seconds_total", "drowse_apps"}


def test_every_dashboard_query_names_a_metric_drowsed_exports(nginx, make_drowse):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    # A real agent after a fetch and a download, so that the labelled series exist.
    d = make_drowse()
    d.add_app("news", fetch=d.recorder("news"), minimum_interval="5s")
    d.add_app("dl", events=d.recorder("dl"))
    d.start()
    d.wait_runs("news", 1)
    url, digest, _ = nginx.add_file("payload.bin", 64 * 1024)
    tid = d.download(url, "dl", "--sha256", digest, "--to", str(d.base / "payload.bin"))
    wait_until(lambda: d.transfer(tid)["state"] == "completed", 20, what="the download completed")
    metrics = exported(d.cli_ok("metrics").stdout)

    used: set[str] = set()
    for expr in queries(dashboard):
        names, labels = parse(expr)
        assert names, f"no metric in {expr!r}"
        for name in names:
            assert name in metrics, f"{name} (in {expr!r}) is not a metric drowsed exports"
            missing = labels - SCRAPE_LABELS - metrics[name]
            assert not missing, f"{expr!r}: {name} carries no label {sorted(missing)} (it has {sorted(metrics[name])})"
        used |= names
    # What the dashboard is for: windows, runs by result, notifications by outcome, transfer bytes
    # and retries, the MQTT state, PSS.
    for name in ["drowse_wake_windows_opened_total", "drowse_fetch_runs_total", "drowse_notifications_total", "drowse_transfer_bytes_total",
                 "drowse_transfer_retries_total", "drowse_mqtt_connected", "drowse_process_pss_bytes"]:
        assert name in used, name
    # Every panel but a row has a query, and the ids are unique.
    assert all(p.get("targets") for p in dashboard["panels"] if p["type"] != "row")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
