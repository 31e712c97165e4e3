#!/usr/bin/env python3
"""Table of bench/multi_device_bench.sh's results: req/s, mean batch and each device's
busy seconds per case, the all-devices/one-device ratios, and the cross-device answer.
Exits 1 (saying why) when a case is missing or had failed calls, when a device stayed idle
where both should work (or worked where it should idle), or when the cross-device matmul
was not refused."""
import json
import os
import sys

out = sys.argv[1]
problems = []


def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = f.read().strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def busy(name):
    """Busy seconds per device over the case: after minus before."""
    def read(which):
        path = os.path.join(out, f"{name}.busy_{which}.txt")
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            return {int(d): float(s) for d, s in (line.split() for line in f if line.strip())}
    before, after = read("before"), read("after")
    return {d: after[d] - before.get(d, 0.0) for d in sorted(after)}


def busy_text(name):
    return ", ".join(f"{d}: {s:.2f} s" for d, s in busy(name).items()) or "-"


def errors(r):
    """Failed calls: gemm-cli bench counts them per status code."""
    return sum(r["errors"].values())


print("\n| case | req/s | p50 ms | mean batch | busy per device | errors |")
print("|---|---:|---:|---:|---|---:|")
rows = [("spread_one_128", "spread_one_128"), ("spread_all_128", "spread_all_128"),
        ("spread_one_256", "spread_one_256"), ("spread_all_256", "spread_all_256"),
        ("resident_second", "resident_second"), ("resident_both_0", "resident_both"),
        ("resident_both_1", "resident_both")]
for name, busy_name in rows:
    r = load(name)
    if r is None:
        print(f"| {name} | missing | | | | |")
        problems.append(f"{name}: no result")
        continue
    if errors(r):
        problems.append(f"{name}: {errors(r)} failed calls")
    print(f"| {name} | {r['requests_per_s']:.0f} | {r['latency_ms']['p50']:.3f} | "
          f"{r['mean_batch_size']:.1f} | {busy_text(busy_name)} | {errors(r)} |")

for shape in ["128", "256"]:
    one, all_ = load(f"spread_one_{shape}"), load(f"spread_all_{shape}")
    if one and all_ and one["requests_per_s"] > 0:
        print(f"{shape}^3: all devices / one = "
              f"{all_['requests_per_s'] / one['requests_per_s']:.2f}x")
second = load("resident_second")
both = [load("resident_both_0"), load("resident_both_1")]
if second and all(both) and second["requests_per_s"] > 0:
    total = sum(b["requests_per_s"] for b in both)
    print(f"resident weights: one per device, both driven / one driven = "
          f"{total / second['requests_per_s']:.2f}x")
cross = os.path.join(out, "cross_device.txt")
cross_text = open(cross).read() if os.path.exists(cross) else ""
print("A on device 0, B on device 1: " + (" ".join(cross_text.split()) or "not run"))
if "FAILED_PRECONDITION" not in cross_text:
    problems.append("the matmul with operands on two devices was not refused")

# Where the work went: every device busy when all serve, only the second one when the
# calls name its weight.
for name in ["spread_all_128", "spread_all_256", "resident_both"]:
    idle = [d for d, s in busy(name).items() if s <= 0]
    if idle:
        problems.append(f"{name}: device {idle} stayed idle")
second_busy = busy("resident_second")
if second_busy.get(1, 0) <= 0 or second_busy.get(0, 0) > 0:
    problems.append(f"resident_second: busy {second_busy}; only device 1 should work")

for p in problems:
    print("CHECK FAILED: " + p)
sys.exit(1 if problems else 0)
