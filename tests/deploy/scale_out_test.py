#!/usr/bin/env python3
"""Scale-out across replicas, as a client of several gemm-server processes sees it.

Three servers on loopback ports (CPU backend, --max_connection_age_s AGE). gemm-cli bench
with the three as one gRPC target (ipv4:A,B,C: round_robin and the retry policy are the
client library's defaults):
  1. spread: each server's Matmul count is within +-25% of a third of the total;
  2. a replica killed (SIGKILL) mid-run: every call of the run ends OK (calls in flight on
     it are retried on the others), none is lost;
  3. the replica started again on its port receives traffic again within AGE seconds;
  4. a replica stopped with SIGTERM mid-run (a rolling update): every call ends OK, and
     it drains and exits 0 within 5 s while the run goes on for 10 s more (clients stop
     sending to it once its health says NOT_SERVING; without that it would see no quiet
     moment, which ends a drain early, until the run ended).
Usage (ctest runs it): scale_out_test.py GEMM_SERVER GEMM_CLI
SCALE_OUT_BENCH_ARGS adds flags to every bench run: with
--grpc_arg=grpc.enable_retries=0 the killed replica's calls in flight are lost, and with
--grpc_arg=grpc.inhibit_health_checking=1 the drain lasts as long as the run: the test
fails either way, which is what the retry policy and the health watch are for.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

AGE_S = 6.0  # --max_connection_age_s of every replica
SHAPE = ["--m", "64", "--n", "64", "--k", "64"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def matmul_ok(metrics_port):
    """The server's gemm_requests_total for Matmul with code OK (0 when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith("gemm_requests_total{") and 'method="Matmul"' in line \
                and 'code="OK"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


class Replica:
    def __init__(self, binary, log_dir, index):
        self.binary, self.index = binary, index
        self.port, self.metrics_port = free_port(), free_port()
        self.log_path = os.path.join(log_dir, f"server{index}.log")
        self.proc = None

    def started_lines(self):
        if not os.path.exists(self.log_path):
            return 0
        with open(self.log_path) as f:
            return f.read().count("server_started")

    def start(self):
        seen = self.started_lines()
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "--host", "127.0.0.1", "--port", str(self.port),
             "--metrics_port", str(self.metrics_port), "--backend", "cpu",
             "--max_connection_age_s", str(AGE_S)],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.started_lines() > seen:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.index} exited: see {self.log_path}")
            time.sleep(0.05)
        raise RuntimeError(f"server {self.index} did not start: see {self.log_path}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def bench(cli, target, duration_s, concurrency=6):
    return subprocess.Popen(
        [cli, "bench", "--target", target, *SHAPE, "--concurrency", str(concurrency),
         "--channels", "2", "--duration_s", str(duration_s), "--warmup_s", "0.5",
         "--timeout_s", "20", "--json", *os.environ.get("SCALE_OUT_BENCH_ARGS", "").split()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report_of(proc):
    out, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"gemm-cli bench failed ({proc.returncode}): {err}{out}")
    return json.loads(out.strip().splitlines()[-1])


def main():
    server_bin, cli = sys.argv[1], sys.argv[2]
    logs = tempfile.mkdtemp(prefix="gemm_scale_out_")
    replicas = [Replica(server_bin, logs, i) for i in range(3)]
    failures = []
    try:
        for r in replicas:
            r.start()
        target = "ipv4:" + ",".join(f"127.0.0.1:{r.port}" for r in replicas)

        # 1. Spread.
        report = report_of(bench(cli, target, 3))
        counts = [matmul_ok(r.metrics_port) for r in replicas]
        total = sum(counts)
        print(f"spread: {counts} of {total} (bench ok={report['ok']} "
              f"errors={report['errors']})")
        if report["errors"]:
            failures.append(f"spread run had errors: {report['errors']}")
        for i, c in enumerate(counts):
            if not 0.75 * total / 3 <= c <= 1.25 * total / 3:
                failures.append(f"server {i} served {c} of {total}, outside a third +-25%")

        # 2. and 3. Kill replica 1 mid-run, start it again, watch it take traffic.
        victim = replicas[1]
        run = bench(cli, target, 4 + 2 * AGE_S)
        time.sleep(2.0)
        before_kill = [matmul_ok(r.metrics_port) for r in replicas]
        victim.kill()
        killed_at = time.time()
        time.sleep(1.0)
        victim.start()  # same port; its counters start again from zero
        restarted_at = time.time()
        rejoin_s = None
        while time.time() - restarted_at < 2 * AGE_S and run.poll() is None:
            if matmul_ok(victim.metrics_port) > 0:
                rejoin_s = time.time() - restarted_at
                break
            time.sleep(0.1)
        report = report_of(run)
        print(f"kill: served before kill {before_kill}; killed {killed_at - restarted_at:+.1f} s "
              f"before restart; run ok={report['ok']} errors={report['errors']} "
              f"examples={report['error_examples']}")
        print(f"rejoin: the restarted replica served its first call "
              f"{'never' if rejoin_s is None else f'{rejoin_s:.2f} s'} after it started "
              f"(--max_connection_age_s={AGE_S})")
        if before_kill[1] == 0:
            failures.append("the victim served nothing before it was killed")
        if report["errors"]:
            failures.append(f"calls lost while a replica was killed: {report['errors']} "
                            f"{report['error_examples']}")
        if report["ok"] <= 0:
            failures.append("the run with a killed replica completed no call")
        if rejoin_s is None or rejoin_s > AGE_S:
            failures.append(f"the restarted replica took no traffic within {AGE_S} s")

        # 4. SIGTERM one replica mid-run.
        leaving = replicas[0]
        run = bench(cli, target, 12)  # runs on for 10 s after the signal
        time.sleep(2.0)
        leaving.proc.send_signal(signal.SIGTERM)
        term_at = time.time()
        code = leaving.proc.wait(timeout=60)
        drain_s = time.time() - term_at
        report = report_of(run)
        print(f"sigterm: the replica exited {code} after {drain_s:.2f} s; run ok={report['ok']} "
              f"errors={report['errors']} examples={report['error_examples']}")
        if code != 0:
            failures.append(f"the replica stopped by SIGTERM exited {code}")
        if drain_s > 5:
            failures.append(f"the drain took {drain_s:.1f} s: clients kept sending to it")
        if report["errors"]:
            failures.append(f"calls lost while a replica drained: {report['errors']} "
                            f"{report['error_examples']}")
    finally:
        for r in replicas:
            r.kill()
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures) + f"\n(server logs: {logs})")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
