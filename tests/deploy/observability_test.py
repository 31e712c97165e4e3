#!/usr/bin/env python3
"""Prometheus in the loop: the compose stack's monitoring files against a real server.

Static checks: `promtool check rules` and `promtool check config` on docker/prometheus,
`docker-compose config` on docker/compose.yaml, the mounts and names that tie the files
together (rule file and dashboards reachable through compose's volumes, the dashboard's
datasource uid provisioned), and promtool unit tests that make every alert fire (and not
fire) on synthetic series.

Live checks: gemm-server (CPU backend) on loopback, Debian's prometheus scraping it with
docker/prometheus/prometheus.yml (only its target, its rule file's path and its intervals
rewritten), a known workload sent with gemm-cli, then through Prometheus' HTTP API: the
request counts per code, the p99 latency against what the clients measured, the rules
loaded and healthy with their series and exact values, no alert active, every dashboard
query valid (and the ones the workload must feed, fed), and `promtool check metrics` clean
on the server's /metrics.

Usage (ctest runs it): observability_test.py GEMM_SERVER GEMM_CLI SOURCE_DIR
The tools come from $PROMETHEUS, $PROMTOOL, $DOCKER_COMPOSE, else from PATH; without one
of them the test exits 77 (ctest: skipped), naming it.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

import numpy as np

try:
    import yaml  # python3-yaml: docker-compose depends on it
except ImportError:
    yaml = None

SKIP = 77
OK_CALLS = 30           # successful 64x64x64 Matmuls
INVALID_CALLS = 3       # inner dimensions differ: INVALID_ARGUMENT
PRECONDITION_CALLS = 2  # a kernel the server does not have: FAILED_PRECONDITION
# The server's duration buckets (server/observability/metrics.cc), for the latency bounds.
DURATION_BUCKETS = [50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
                    100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
ALL_CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
             "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
             "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
             "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


def run(cmd, **kwargs):
    """Runs a tool and fails with its output when it exits non-zero."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {result.returncode}:\n"
                             f"{result.stdout}{result.stderr}")
    return result


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bucket_of(seconds):
    """(lower, upper] of the duration bucket an observation falls in."""
    lower = 0.0
    for upper in DURATION_BUCKETS:
        if seconds <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf


def parse_time(text):
    """Prometheus' RFC 3339 times (nanosecond fractions) as Unix seconds."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    assert m, text
    base = datetime.strptime(m.group(1) + (m.group(3) if m.group(3) != "Z" else "+00:00"),
                             "%Y-%m-%dT%H:%M:%S%z")
    return base.timestamp() + float(m.group(2) or 0)


class Prometheus:
    def __init__(self, address):
        self.base = f"http://{address}"

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr, at):
        """An instant query's vector as [(labels, value)]."""
        data = self.get("/api/v1/query", query=expr, time=f"{at:.3f}")
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def one(self, expr, at):
        result = self.query(expr, at)
        assert len(result) == 1, f"{expr}: expected one series, got {result}"
        return result[0][1]


class Exited(Exception):
    """A process the test started died: no point waiting for it."""


def wait_for(what, check, timeout_s, interval_s=0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (OSError, AssertionError) as e:  # not listening yet, or not yet scraped
            last = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last})")


# ---------------------------------------------------------------------------------------
# Static checks


def check_files(tools, source, tmp):
    prom_dir = os.path.join(source, "docker", "prometheus")
    rules_path = os.path.join(prom_dir, "rules", "gemmd.rules.yml")
    run([tools["promtool"], "check", "rules", rules_path])

    # The config names the rule file as the container sees it; promtool reads rule_files
    # from the file system, so check a copy that names the repository's file instead.
    with open(os.path.join(prom_dir, "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    checked = dict(config, rule_files=[rules_path])
    checked_path = os.path.join(tmp, "prometheus-check.yml")
    with open(checked_path, "w") as f:
        yaml.safe_dump(checked, f)
    run([tools["promtool"], "check", "config", checked_path])

    compose_path = os.path.join(source, "docker", "compose.yaml")
    run([tools["docker-compose"], "-f", compose_path, "config", "-q"])
    compose = yaml.safe_load(run([tools["docker-compose"], "-f", compose_path,
                                  "config"]).stdout)
    check_wiring(source, config, rules_path, compose)
    check_alerts(tools, rules_path, tmp)
    return config, rules_path


def mounts(service):
    """Container path -> host path of a service's bind mounts (compose config resolves
    them to absolute paths)."""
    result = {}
    for volume in service.get("volumes", []):
        parts = volume.split(":") if isinstance(volume, str) else [volume["source"],
                                                                    volume["target"]]
        if parts[0].startswith("/"):
            result[parts[1]] = parts[0]
    return result


def host_path(service_mounts, container_path):
    for target, source in sorted(service_mounts.items(), key=lambda kv: -len(kv[0])):
        if container_path == target or container_path.startswith(target + "/"):
            return source + container_path[len(target):]
    raise AssertionError(f"{container_path} is not under any mount: {service_mounts}")


def check_wiring(source, config, rules_path, compose):
    """What the files say about each other: a rename in one breaks it here, not in a
    container that starts with no rules or an empty dashboard."""
    services = compose["services"]
    prom_mounts = mounts(services["prometheus"])
    assert os.path.samefile(host_path(prom_mounts, "/etc/prometheus/prometheus.yml"),
                            os.path.join(source, "docker", "prometheus", "prometheus.yml"))
    for rule_file in config["rule_files"]:
        assert os.path.samefile(host_path(prom_mounts, rule_file), rules_path), rule_file
    (job,) = config["scrape_configs"]
    (static,) = job["static_configs"]
    (target,) = static["targets"]
    host, port = target.split(":")
    assert host in services, f"scrape target {target}: no compose service {host}"
    published = {str(p["target"]) if isinstance(p, dict) else str(p).split(":")[-1]
                 for p in services[host].get("ports", [])}
    assert port in published, f"scrape target {target}: {host} exposes {published}"
    grace = services["gemm-server"]["stop_grace_period"]
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", str(grace))
    assert parts and any(parts.groups()), f"stop_grace_period {grace!r}: not a duration"
    seconds = sum(int(v or 0) * k for v, k in zip(parts.groups(), (3600, 60, 1)))
    assert seconds > 30, \
        f"stop_grace_period {grace} must exceed the server's --shutdown_grace_s (30 s)"

    grafana_mounts = mounts(services["grafana"])
    provisioning = host_path(grafana_mounts, "/etc/grafana/provisioning")
    with open(os.path.join(provisioning, "datasources", "prometheus.yml")) as f:
        (datasource,) = yaml.safe_load(f)["datasources"]
    assert datasource["url"] == "http://prometheus:9090", datasource["url"]
    with open(os.path.join(provisioning, "dashboards", "gemmd.yml")) as f:
        (provider,) = yaml.safe_load(f)["providers"]
    dashboards = host_path(grafana_mounts, provider["options"]["path"])
    dashboard = load_dashboard(source)
    assert os.path.samefile(os.path.join(dashboards, "gemmd.json"),
                            os.path.join(source, "docker", "grafana", "dashboards", "gemmd.json"))
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert os.path.isfile(host_path(grafana_mounts, home)), home
    for panel in dashboard["panels"]:
        for item in [panel] + panel["targets"]:
            assert item["datasource"]["uid"] == datasource["uid"], \
                f"panel {panel['title']!r} uses datasource {item['datasource']['uid']!r}, " \
                f"provisioned: {datasource['uid']!r}"


def load_dashboard(source):
    with open(os.path.join(source, "docker", "grafana", "dashboards", "gemmd.json")) as f:
        return json.load(f)


# Each alert made to fire on synthetic series, one evaluation after its `for` has run, and
# checked silent one evaluation before and on series that must not trip it. The rules are
# tested from a copy without annotations: promtool compares annotations verbatim, and
# their templates are checked by `promtool check rules` already.
L = 'job="gemmd",instance="a:9464"'
ALERT_TESTS = {
    "GemmdTargetDown": {
        "series": [(f"up{{{L}}}", "1 1 0 0 0 0"),
                   ('up{job="gemmd",instance="b:9464"}', "1 1 1 1 1 1")],
        # Down from 2m; `for: 1m` -> firing at 3m, pending (not listed) at 2m.
        "quiet_at": "2m", "fires_at": "3m",
        "labels": [{"job": "gemmd", "instance": "a:9464", "severity": "critical"}]},
    "GemmdDeviceUnhealthy": {
        "series": [(f'gemm_device_healthy{{{L},device="0"}}', "1 1 1 1 1 1"),
                   (f'gemm_device_healthy{{{L},device="1"}}', "1 1 0 0 0 0")],
        "quiet_at": "2m", "fires_at": "3m",
        "labels": [{"job": "gemmd", "instance": "a:9464", "device": "1",
                    "severity": "critical"}]},
    "GemmdErrorRatioHigh": {
        # Matmul: 1 INTERNAL per 10 OK (9%): fires. QuantizedMatmul: mostly
        # INVALID_ARGUMENT, the callers' fault: must not. Active from 1m (two samples),
        # `for: 5m` -> firing at 6m.
        "series": [(f'gemm_requests_total{{{L},method="Matmul",precision="FP32",code="OK"}}',
                    "0+600x15"),
                   (f'gemm_requests_total{{{L},method="Matmul",precision="FP32",code="INTERNAL"}}',
                    "0+60x15"),
                   (f'gemm_requests_total{{{L},method="QuantizedMatmul",precision="INT8",code="OK"}}',
                    "0+60x15"),
                   (f'gemm_requests_total{{{L},method="QuantizedMatmul",precision="NONE",code="INVALID_ARGUMENT"}}',
                    "0+600x15")],
        "quiet_at": "5m", "fires_at": "6m",
        "labels": [{"job": "gemmd", "method": "Matmul", "severity": "critical"}]},
    "GemmdLatencyP99High": {
        # Matmul totals all in (2.5 s, 5 s]: p99 ~4.98 s, fires. QuantizedMatmul totals
        # under 1 s, and Matmul's queue phase slow: neither may fire (only `total` counts).
        "series": [(f'gemm_request_duration_seconds_bucket{{{L},method="{m}",phase="{p}",le="{le}"}}',
                    f"0+{rate}x15")
                   for m, p, per_le in [("Matmul", "total", (0, 0, 10, 10)),
                                        ("Matmul", "queue", (0, 0, 10, 10)),
                                        ("QuantizedMatmul", "total", (10, 10, 10, 10))]
                   for le, rate in zip(("1", "2.5", "5", "+Inf"), per_le)],
        "quiet_at": "10m", "fires_at": "11m",
        "labels": [{"job": "gemmd", "method": "Matmul", "phase": "total",
                    "severity": "warning"}]},
    "GemmdQueueDepthHigh": {
        "series": [(f"gemm_queue_depth{{{L}}}", "0 600 600 600 600"),
                   ('gemm_queue_depth{job="gemmd",instance="b:9464"}', "0 500 500 500 500")],
        "quiet_at": "2m", "fires_at": "3m",
        "labels": [{"job": "gemmd", "instance": "a:9464", "severity": "warning"}]},
}


def check_alerts(tools, rules_path, tmp):
    with open(rules_path) as f:
        rules = yaml.safe_load(f)
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    names = {r["alert"] for r in alerts}
    assert names == set(ALERT_TESTS), \
        f"alerts without a unit test here, or tests of missing alerts: {names ^ set(ALERT_TESTS)}"
    for rule in alerts:
        assert rule.get("for"), f"{rule['alert']} has no `for`"
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        del rule["annotations"]
    stripped = os.path.join(tmp, "rules-without-annotations.yml")
    with open(stripped, "w") as f:
        yaml.safe_dump(rules, f)
    tests = []
    for name, case in ALERT_TESTS.items():
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case["series"]],
            "alert_rule_test": [
                {"eval_time": case["quiet_at"], "alertname": name, "exp_alerts": []},
                {"eval_time": case["fires_at"], "alertname": name,
                 "exp_alerts": [{"exp_labels": dict(labels, alertname=name)}
                                for labels in case["labels"]]}]})
    test_path = os.path.join(tmp, "alerts.test.yml")
    with open(test_path, "w") as f:
        yaml.safe_dump({"rule_files": [stripped], "evaluation_interval": "1m",
                        "tests": tests}, f)
    run([tools["promtool"], "test", "rules", test_path])


# ---------------------------------------------------------------------------------------
# Live checks


def start_server(server_bin, tmp):
    log_path = os.path.join(tmp, "gemm-server.log")
    log = open(log_path, "w")
    server = subprocess.Popen([server_bin, "--host", "127.0.0.1", "--port", "0",
                               "--metrics_port", "0", "--backend", "cpu"],
                              stdout=log, stderr=subprocess.STDOUT)

    def started():
        if server.poll() is not None:
            raise Exited(f"gemm-server exited {server.returncode}")
        with open(log_path) as f:
            m = re.search(r"event=server_started .*grpc=(\S+) metrics=(\S+)/metrics", f.read())
        return m and (m.group(1), m.group(2))

    try:
        grpc_address, metrics_address = wait_for("gemm-server to start", started, 30)
    except (AssertionError, Exited):
        server.kill()
        server.wait()
        raise
    return server, grpc_address, metrics_address


def start_prometheus(tools, config, rules_path, metrics_address, tmp):
    # The compose config with only what must differ here: the target (loopback, a free
    # port), the rule file's path (the repository's), and 1 s intervals for a short test.
    live = json.loads(json.dumps(config))
    (job,) = live["scrape_configs"]
    job["static_configs"] = [{"targets": [metrics_address]}]
    job.pop("scrape_interval", None)
    live["global"]["scrape_interval"] = "1s"
    live["global"]["evaluation_interval"] = "1s"
    live["rule_files"] = [rules_path]
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as f:
        yaml.safe_dump(live, f)
    address = f"127.0.0.1:{free_port()}"
    log_path = os.path.join(tmp, "prometheus.log")
    process = subprocess.Popen([tools["prometheus"], f"--config.file={config_path}",
                                f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                f"--web.listen-address={address}"],
                               stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    prometheus = Prometheus(address)

    def ready():
        if process.poll() is not None:
            raise Exited(f"prometheus exited {process.returncode}")
        with urllib.request.urlopen(f"{prometheus.base}/-/ready", timeout=2) as r:
            return r.status == 200

    try:
        wait_for("prometheus to be ready", ready, 30)
    except (AssertionError, Exited):
        process.kill()
        process.wait()
        raise
    return process, prometheus


def send_workload(cli_bin, grpc_address, tmp):
    """Runs the gemm-cli calls; returns per-call (wall seconds, server total seconds or
    None) and the counts per code."""
    a_path, b_path = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
    np.save(a_path, np.ones((4, 5), np.float32))
    np.save(b_path, np.ones((6, 3), np.float32))  # K 5 vs 6
    target = ["--target", grpc_address]
    calls = ([("OK", ["matmul", "--m", "64", "--n", "64", "--k", "64", "--seed", str(i)])
              for i in range(OK_CALLS)] +
             [("INVALID_ARGUMENT", ["matmul", "--a", a_path, "--b", b_path])] * INVALID_CALLS +
             [("FAILED_PRECONDITION", ["matmul", "--m", "64", "--n", "64", "--k", "64",
                                       "--kernel", "no_such_kernel"])] * PRECONDITION_CALLS)
    timings = []
    for code, args in calls:
        started = time.monotonic()
        result = subprocess.run([cli_bin] + args + target, capture_output=True, text=True,
                                timeout=30)
        wall = time.monotonic() - started
        if code == "OK":
            assert result.returncode == 0, result.stderr
            m = re.search(r"server_us: .*total=(\d+)", result.stdout)
            assert m, result.stdout
            timings.append((wall, int(m.group(1)) * 1e-6))
        else:
            assert result.returncode == 1 and f"Matmul failed: {code}" in result.stderr, \
                (code, result.returncode, result.stderr)
            timings.append((wall, None))
    counts = {"OK": OK_CALLS, "INVALID_ARGUMENT": INVALID_CALLS,
              "FAILED_PRECONDITION": PRECONDITION_CALLS}
    return timings, counts


def p99_bounds(timings):
    """Where histogram_quantile(0.99, ...) over the Matmul totals must land.

    With n = 35 observations the 0.99 rank (34.65) falls in the bucket of the largest
    observation, and histogram_quantile interpolates inside that bucket, so the answer
    lies within the bucket's bounds. The largest observation is at least the largest
    `server_us total` the server reported (that timer stops before the response is
    written; the histogram's stops at OnDone, later) and at most the longest gemm-cli run
    (process start to exit, around the whole RPC: the server's OnDone follows the
    client's receipt by microseconds, against the tens of milliseconds a process start
    adds). So: lower edge of the bucket of the longest reported time <= p99 <= upper edge
    of the bucket of the longest run.
    """
    n = len(timings)
    assert math.ceil(0.99 * n) == n, "the bounds below assume the rank hits the maximum"
    low = bucket_of(max(total for _, total in timings if total is not None))[0]
    high = bucket_of(max(wall for wall, _ in timings))[1]
    return low, high


def check_live(prometheus, timings, counts, metrics_address, rules_path, source, tools):
    # A scrape that started after every call had returned (and the server had counted
    # it, at OnDone, just after), then a rule evaluation after that scrape.
    workload_end = time.time()
    scrape_at = wait_for(
        "a scrape after the workload",
        lambda: next((v for _, v in prometheus.query('timestamp(up{job="gemmd"})', time.time())
                      if v > workload_end + 0.5), None), 15)

    def evaluated():
        groups = prometheus.get("/api/v1/rules")["groups"]
        return groups and all(parse_time(g["lastEvaluation"]) > scrape_at + 0.5
                              for g in groups)

    wait_for("a rule evaluation after that scrape", evaluated, 15)
    at = time.time()
    report = {}

    # The counts per code, exactly: every one of the 17 codes is exported from the start.
    by_code = {labels["code"]: value for labels, value in
               prometheus.query('sum by (code) (gemm_requests_total{method="Matmul"})', at)}
    assert set(by_code) == set(ALL_CODES), sorted(by_code)
    expected = {code: counts.get(code, 0) for code in ALL_CODES}
    assert by_code == expected, f"Prometheus has {by_code}, the workload sent {counts}"
    total_calls = sum(counts.values())
    matmul = 'method="Matmul"'
    assert prometheus.one(f'gemm_request_duration_seconds_count{{{matmul},phase="total"}}',
                          at) == total_calls
    # Device phases are observed for calls that ran; refused ones have a total only.
    assert prometheus.one(f'gemm_request_duration_seconds_count{{{matmul},phase="compute"}}',
                          at) == counts["OK"]
    # Sequential callers: every launch carried one request.
    assert prometheus.one("gemm_batch_size_count", at) == counts["OK"]
    assert prometheus.one("gemm_batch_size_sum", at) == counts["OK"]

    low, high = p99_bounds(timings)
    buckets = f'gemm_request_duration_seconds_bucket{{{matmul},phase="total"}}'
    p99s = {
        # Over the counters since the server started: exactly the workload's calls.
        "since start": prometheus.one(f"histogram_quantile(0.99, sum by (le) ({buckets}))", at),
        # As a dashboard or rule would ask, over a window holding the whole workload.
        "increase[5m]": prometheus.one(
            f"histogram_quantile(0.99, sum by (le) (increase({buckets}[5m])))", at),
        "recording rule": prometheus.one(
            f'job_method_phase:gemm_request_duration_seconds:p99_rate5m{{{matmul},phase="total"}}',
            at),
    }
    for name, p99 in p99s.items():
        assert math.isfinite(p99) and p99 > 0 and low <= p99 <= high, \
            f"p99 ({name}) {p99} s outside [{low}, {high}] s; timings {timings}"
    report["p99_ms"] = p99s["since start"] * 1e3
    report["p99_bounds_ms"] = (low * 1e3, high * 1e3)
    report["max_wall_ms"] = max(w for w, _ in timings) * 1e3

    check_rules(prometheus, rules_path, counts, at)
    report["panels"] = check_dashboard(prometheus, source, counts, at)

    # Healthy server, callers' mistakes only: no alert may be pending or firing.
    active = prometheus.get("/api/v1/alerts")["alerts"]
    assert not active, f"alerts active against a healthy server: {active}"

    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as r:
        page = r.read()
    lint = subprocess.run([tools["promtool"], "check", "metrics"], input=page,
                          capture_output=True, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), \
        f"promtool check metrics exited {lint.returncode}: {lint.stdout!r} {lint.stderr!r}"
    return report


def check_rules(prometheus, rules_path, counts, at):
    with open(rules_path) as f:
        defined = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    loaded = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
    assert sorted(r.get("record") or r.get("alert") for r in defined) == \
        sorted(r["name"] for r in loaded), loaded
    for rule in loaded:
        assert rule["health"] == "ok" and not rule.get("lastError"), rule
    for rule in defined:
        if "record" in rule:
            assert prometheus.query(rule["record"], at), f"{rule['record']} has no series"
    matmul = 'method="Matmul"'
    # The 5m ratios are exact: every Matmul counter was 0 at the first scrape (taken
    # before the workload), so rate() extrapolates each series by the same factor.
    ratio = prometheus.one(f"job_method:gemm_requests_errors:ratio_rate5m{{{matmul}}}", at)
    failed = counts["INVALID_ARGUMENT"] + counts["FAILED_PRECONDITION"]
    assert abs(ratio - failed / sum(counts.values())) < 1e-9, ratio
    assert prometheus.one(f"job_method:gemm_requests_server_errors:ratio_rate5m{{{matmul}}}",
                          at) == 0
    assert prometheus.one(f'job_method_code:gemm_requests:rate1m{{{matmul},code="OK"}}', at) > 0
    assert abs(prometheus.one("job:gemm_batch_size:mean_rate5m", at) - 1) < 1e-9
    assert prometheus.one('instance_device:gemm_device_busy:ratio_rate1m{device="0"}', at) > 0


def check_dashboard(prometheus, source, counts, at):
    """Every panel query valid on this Prometheus, and fed: the workload (failures
    included, for the panels that draw only non-OK codes) gives each one data, so an empty
    panel, e.g. a misspelt metric, cannot pass as valid."""
    dashboard = load_dashboard(source)
    results = {}
    for panel in dashboard["panels"]:
        series = []
        for target in panel["targets"]:
            # Grafana's $__rate_interval: 1m holds the workload and many 1 s scrapes.
            expr = target["expr"].replace("$__rate_interval", "1m")
            assert "$" not in expr, f"{panel['title']}: unsubstituted variable in {expr}"
            result = prometheus.query(expr, at)
            assert result, f"panel {panel['title']!r}: no data for {expr}"
            series += result
        results[panel["title"]] = series

    def values(title, **match):
        return [v for labels, v in results[title]
                if all(labels.get(k) == want for k, want in match.items())]

    assert {labels["code"] for labels, v in results["Requests/s by code"] if v > 0} == \
        set(counts), results["Requests/s by code"]
    phases = {labels["phase"] for labels, v in results["Latency p99 by phase"]
              if labels["method"] == "Matmul" and math.isfinite(v)}
    assert phases == {"queue", "copy_in", "compute", "copy_out", "total"}, phases
    assert values("Batch size") and all(math.isfinite(v) for v in values("Batch size"))
    assert values("Device health", device="0") == [1.0]
    assert values("Scrape targets") == [1.0]
    assert values("Device busy fraction", device="0")[0] > 0
    assert values("Server-side error ratio") == [0.0]
    assert values("Compute throughput", precision="FP32")[0] > 0
    return len(results)


def stop(process, name):
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        print(f"{name} ignored SIGTERM for 15 s; killing it", file=sys.stderr)
        process.kill()
        process.wait()


def find_tools():
    tools = {}
    for name, env in (("prometheus", "PROMETHEUS"), ("promtool", "PROMTOOL"),
                      ("docker-compose", "DOCKER_COMPOSE")):
        path = os.environ.get(env)
        if path is None:
            path = shutil.which(name)
        tools[name] = path if path and not path.endswith("NOTFOUND") else None
    return tools


def main():
    server_bin, cli_bin, source = sys.argv[1:4]
    source = os.path.abspath(source)  # rule_files paths must not depend on the cwd
    tools = find_tools()
    missing = [name for name, path in tools.items() if not path]
    if yaml is None:
        missing.append("python3-yaml")
    if missing:
        print(f"SKIPPED: {', '.join(missing)} not found (Debian: apt-get install "
              "prometheus docker-compose python3-yaml)")
        return SKIP
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="gemmd_observability_")
    server = prometheus_process = None
    try:
        config, rules_path = check_files(tools, source, tmp)
        server, grpc_address, metrics_address = start_server(server_bin, tmp)
        prometheus_process, prometheus = start_prometheus(tools, config, rules_path,
                                                          metrics_address, tmp)
        # The first scrape before the first call: counters start from a sample of 0.
        wait_for("the first scrape", lambda: prometheus.query('up{job="gemmd"} == 1',
                                                              time.time()), 15)
        timings, counts = send_workload(cli_bin, grpc_address, tmp)
        report = check_live(prometheus, timings, counts, metrics_address, rules_path,
                            source, tools)
    except BaseException:
        for name in ("gemm-server.log", "prometheus.log"):
            log = os.path.join(tmp, name)
            if not os.path.exists(log):
                continue
            with open(log) as f:
                tail = f.read()[-3000:]
            print(f"--- {log} (last 3000 characters)\n{tail}", file=sys.stderr)
        raise
    finally:
        stop(prometheus_process, "prometheus")
        stop(server, "gemm-server")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"observability: rules, config, compose and {len(ALERT_TESTS)} alert unit tests "
          f"pass; Matmul counts by code {counts} match Prometheus; p99 "
          f"{report['p99_ms']:.3f} ms within [{report['p99_bounds_ms'][0]:.3f}, "
          f"{report['p99_bounds_ms'][1]:.3f}] ms (longest gemm-cli run "
          f"{report['max_wall_ms']:.1f} ms); rules healthy, no alert active; "
          f"{report['panels']} dashboard panels evaluate; /metrics lint clean; "
          f"{time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
