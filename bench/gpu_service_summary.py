#!/usr/bin/env python3
"""Summary table of bench/gpu_service_bench.sh's JSON results (issue 4's acceptance)."""
import json
import os
import sys

out = sys.argv[1]


def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip().splitlines()
    return json.loads(text[-1]) if text else None


print("\n| run | req/s | p50 ms | p99 ms | mean batch | server total ms | errors |")
print("|---|---:|---:|---:|---:|---:|---|")
for name in ["b64_128", "b1_128", "b64_256", "b1_256", "b64_128_async", "b1_128_async",
             "b64_256_async", "b1_256_async", "big_4096", "overload_512", "overload_b1_512"]:
    r = load(name)
    if r is None:
        print(f"| {name} | missing | | | | | |")
        continue
    print(f"| {name} | {r['requests_per_s']:.0f} | {r['latency_ms']['p50']:.3f} | "
          f"{r['latency_ms']['p99']:.3f} | {r['mean_batch_size']:.1f} | "
          f"{r['server_ms']['total']:.3f} | {r['errors']} |")

for shape in ["128", "256", "128_async", "256_async"]:
    on, off = load("b64_" + shape), load("b1_" + shape)
    if on and off and off["requests_per_s"] > 0:
        print(f"batching speed-up {shape}^3: {on['requests_per_s'] / off['requests_per_s']:.2f}x")

big = load("big_4096")
bench_path = os.path.join(out, "gemm_bench_4096.json")
if big and os.path.exists(bench_path):
    s = big["server_ms"]
    server = s["queue"] + s["copy_in"] + s["compute"] + s["copy_out"]
    print(f"4096^3 server: queue {s['queue']:.3f} + copy_in {s['copy_in']:.3f} + compute "
          f"{s['compute']:.3f} + copy_out {s['copy_out']:.3f} = {server:.3f} ms "
          f"(Timing.total {s['total']:.3f}); client p50 {big['latency_ms']['p50']:.3f} ms")

for over in [load("overload_512"), load("overload_b1_512")]:
    if not over:
        continue
    e = over.get("error_latency_ms", {})
    print(f"overload (mean batch {over['mean_batch_size']:.1f}): {over['ok']} ok, ok p50 "
          f"{over['latency_ms']['p50']:.3f} ms, errors {over['errors']}, error p50 {e.get('p50', 0):.3f} "
          f"ms p99 {e.get('p99', 0):.3f} ms")
