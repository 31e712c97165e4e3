#!/usr/bin/env python3
"""Side-by-side tables of bench/transport_bench.sh's results (a directory of JSON)."""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1]
    tcp = {}
    for streams in (1, 4):
        parts = [load(p) for p in glob.glob(os.path.join(out, f"iperf_{streams}_*.json"))]
        parts = [j for j in parts if j and "end" in j]
        if len(parts) == streams:
            tcp[streams] = sum(j["end"]["sum_received"]["bits_per_second"] for j in parts) / 8e6
    runs = {}
    for path in glob.glob(os.path.join(out, "*__*.json")):
        server, case = os.path.basename(path)[:-5].split("__")
        j = load(path)
        if j:
            runs.setdefault(case, {})[server] = j
    for streams, rate in sorted(tcp.items()):
        print(f"loopback TCP, {streams} stream{'s' if streams > 1 else ''}: {rate:.0f} MB/s")
    print()
    print("| case | server | req/s | payload MB/s | % of TCP | p50 ms | p99 ms | server total ms |"
          " server CPU us/req | client CPU us/req |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in sorted(runs):
        for server in sorted(runs[case]):
            j = runs[case][server]
            # Several callers, or one call striped over several connections: against four
            # TCP streams.
            callers = case[len("big_c"):] if case.startswith("big_c") else ""
            several = case.startswith("big_striped") or (callers.isdigit() and int(callers) > 1)
            streams = 4 if several else 1
            share = ""
            if case.startswith("big") and streams in tcp:
                share = f"{100 * j['payload_mb_per_s'] / tcp[streams]:.0f}%"
            print(f"| {case} | {server} | {j['requests_per_s']:.1f} | {j['payload_mb_per_s']:.0f} |"
                  f" {share} | {j['latency_ms']['p50']:.2f} | {j['latency_ms']['p99']:.2f} |"
                  f" {j.get('server_ms', {}).get('total', 0):.2f} |"
                  f" {j.get('server_cpu_us_per_request', 0):.0f} |"
                  f" {j.get('client_cpu_us_per_request', 0):.0f} |")
    print()
    # A striped call against the same call on one connection: its client p50 over that
    # call's server-side total (the part of the call that is not the wire).
    one = runs.get("big_c1", {}).get("server")
    for case in sorted(c for c in runs if c.startswith("big_striped") or c == "big_shm"):
        j = runs[case].get("server")
        if one and j and one["server_ms"]["total"] > 0:
            print(f"{case}: p50 {j['latency_ms']['p50']:.2f} ms = "
                  f"{j['latency_ms']['p50'] / one['server_ms']['total']:.2f}x the one-connection "
                  f"call's server total ({one['server_ms']['total']:.2f} ms); one connection "
                  f"p50 {one['latency_ms']['p50']:.2f} ms; its server copy-in "
                  f"{j['server_ms'].get('copy_in', 0):.2f} ms")
            for floor in ("floor_async", "floor_copy"):
                f = runs[case].get(floor)
                if f and f["payload_mb_per_s"] > 0:
                    print(f"  {j['payload_mb_per_s'] / f['payload_mb_per_s']:.2f}x the payload of "
                          f"the same call against {floor} ({f['payload_mb_per_s']:.0f} MB/s, p50 "
                          f"{f['latency_ms']['p50']:.2f} ms)")
            steps = j.get("striped_ms")
            if j.get("striped_calls"):
                print(f"  its steps (client, mean of {j['striped_calls']} calls): put "
                      f"{steps['put']:.2f} ms, call {steps['call']:.2f} ms (server total "
                      f"{j['server_ms']['total']:.2f}), get {steps['get']:.2f} ms, cleanup "
                      f"{steps['cleanup']:.2f} ms")
    # A stream against the same requests as unary calls (one run), and against the floor's
    # stream.
    for case in sorted(c for c in runs if c.endswith("_stream")):
        unary = runs.get(case[:-len("_stream")], {})
        for server in ("server", "server_unix"):
            j = runs[case].get(server)
            u = unary.get(server) or runs.get(case[:-len("_stream")] + "_c8", {}).get(server)
            floor = runs[case].get("floor")
            floor_async = runs[case].get("floor_async")
            if not j:
                continue
            parts = [f"{case} {server}: {j['requests_per_s']:.0f} req/s"]
            if u and u["requests_per_s"] > 0:
                parts.append(f"{j['requests_per_s'] / u['requests_per_s']:.2f}x its unary calls "
                             f"({u['requests_per_s']:.0f})")
            if floor and floor["requests_per_s"] > 0:
                parts.append(f"{j['requests_per_s'] / floor['requests_per_s']:.2f}x the stream floor "
                             f"({floor['requests_per_s']:.0f})")
            if floor_async and floor_async["requests_per_s"] > 0:
                parts.append(f"{j['requests_per_s'] / floor_async['requests_per_s']:.2f}x the "
                             f"stream floor on the queues ({floor_async['requests_per_s']:.0f})")
            if j.get("server_cpu_us_per_request"):
                parts.append(f"server CPU {j['server_cpu_us_per_request']:.0f} us/request")
            v = j.get("verify", {})
            if v.get("checked"):
                parts.append(f"{v['checked']} answers vs FP64: max error {v['max_rel_error']:.2e}"
                             f" ({'PASS' if v['pass'] else 'FAIL'})")
            print(", ".join(parts))
    for case in sorted(runs):
        r = runs[case]
        base = r.get("python") or r.get("floor")
        if "server" in r and base and base["requests_per_s"] > 0:
            name = "python" if "python" in r else "floor"
            print(f"{case}: server/{name} = {r['server']['requests_per_s'] / base['requests_per_s']:.2f}x"
                  + (f", server/floor = {r['server']['requests_per_s'] / r['floor']['requests_per_s']:.2f}x"
                     if "floor" in r and name != "floor" and r["floor"]["requests_per_s"] > 0
                     else ""))


if __name__ == "__main__":
    main()
