#!/usr/bin/env python3
"""The table of bench/resident_bench.sh: each measurement beside its baseline and the
ratio the issue's acceptance asks for. Usage: resident_summary.py OUT_DIR"""
import glob
import json
import os
import re
import sys


def load(out, name):
    path = os.path.join(out, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read()
    except OSError:
        return ""


def row(label, value, note=""):
    print(f"| {label} | {value} | {note} |")


def main():
    out = sys.argv[1]
    print("| measurement | value | baseline / check |")
    print("|---|---:|---|")
    c1i, c1r = load(out, "skinny_inline_c1"), load(out, "skinny_resident_c1")
    c4i, c4r = load(out, "skinny_inline_c4"), load(out, "skinny_resident_c4")
    if c1i and c1r:
        row("16x8192^2 NVFP4, 1 caller, B inline: p50 ms", f"{c1i['latency_ms']['p50']:.3f}",
            f"{c1i['requests_per_s']:.1f} req/s")
        row("16x8192^2 NVFP4, 1 caller, B resident: p50 ms", f"{c1r['latency_ms']['p50']:.3f}",
            f"{c1r['requests_per_s']:.1f} req/s; server compute "
            f"{c1r['server_ms']['compute']:.3f} ms, total {c1r['server_ms']['total']:.3f} ms;"
            f" target p50 <= 1 ms")
    if c4i and c4r:
        ratio = c4r["requests_per_s"] / max(c4i["requests_per_s"], 1e-9)
        row("4 callers: req/s resident / inline", f"{ratio:.1f}x",
            f"{c4r['requests_per_s']:.0f} vs {c4i['requests_per_s']:.1f} req/s; target >= 50x")
    c4a = load(out, "skinny_resident_c4_async")
    if c4a and c4i:
        row("4 callers (async client): req/s resident / inline",
            f"{c4a['requests_per_s'] / max(c4i['requests_per_s'], 1e-9):.1f}x",
            f"{c4a['requests_per_s']:.0f} req/s, p50 {c4a['latency_ms']['p50']:.3f} ms")
    for name, label in (("skinny_same_size_c4", "gemm-server"),
                        ("skinny_same_size_c4_async", "gemm-server, async client"),
                        ("skinny_floor_c4", "grpc-floor"),
                        ("skinny_floor_c4_async", "grpc-floor, async client")):
        d = load(out, name)
        if d and c4i:
            row(f"4 callers, same sizes, nothing to compute ({label}): req/s",
                f"{d['requests_per_s']:.0f}",
                f"= {d['requests_per_s'] / max(c4i['requests_per_s'], 1e-9):.1f}x the inline "
                f"rate; p50 {d['latency_ms']['p50']:.3f} ms")
    verify = text(out, "skinny_verify.txt")
    m = re.search(r"kernel[^\n]*?(?:rel_error|error)[=: ]+([0-9.e+-]+)", verify)
    if m:
        row("kernel error, resident NVFP4 weight vs FP64", m.group(1), "target <= 1e-5")
    elif verify:
        row("kernel error (raw)", verify.strip().splitlines()[-1][:100], "")

    st, tiny, unb = (load(out, n) for n in ("stack_resident_64", "stack_tiny_64",
                                            "stack_unbatched_64"))
    if st:
        row("64 callers M=1, resident NVFP4 8192^2: rows per launch",
            f"{st['mean_batch_size']:.1f}", "target >= 8")
        row("  req/s", f"{st['requests_per_s']:.0f}",
            f"p50 {st['latency_ms']['p50']:.3f} ms, p99 {st['latency_ms']['p99']:.3f} ms")
    if st and unb:
        ratio = unb["server_compute_per_request_ms"] / max(st["server_compute_per_request_ms"],
                                                            1e-12)
        row("  server compute per request: --max_batch_size=1 / batched",
            f"{ratio:.1f}x", f"{unb['server_compute_per_request_ms'] * 1e3:.1f} vs "
            f"{st['server_compute_per_request_ms'] * 1e3:.1f} us; target >= 4x")
    sw, swv = load(out, "stack_swapab_64"), load(out, "stack_swapab_verify")
    if sw:
        row("  the weight re-laid out (--quantized_layout=swap-ab): server compute per request",
            f"{sw['server_compute_per_request_ms'] * 1e3:.2f} us",
            (f"canonical {st['server_compute_per_request_ms'] * 1e3:.2f} us; " if st else "")
            + f"{sw['mean_batch_size']:.1f} rows per launch, {sw['requests_per_s']:.0f} req/s"
            + (f"; {swv['verify']['checked']} rows vs FP64: max error "
               f"{swv['verify']['max_rel_error']:.2e}" if swv and swv.get("verify", {}).get(
                   "checked") else "") + "; target <= 1.5 us")
    ss = load(out, "stack_stream_512")
    if ss:
        row("  on 8 MatmulStreams, 64 rows in flight each: rows/s", f"{ss['requests_per_s']:.0f}",
            f"{ss['mean_batch_size']:.1f} rows per launch, p50 {ss['latency_ms']['p50']:.3f} ms"
            + (f"; {ss['requests_per_s'] / max(st['requests_per_s'], 1e-9):.2f}x the 64 "
               "unary callers" if st else "") + "; target >= 150000"
            + (f"; {ss['verify']['checked']} rows vs FP64: max error "
               f"{ss['verify']['max_rel_error']:.2e}" if ss.get("verify", {}).get("checked")
               else ""))
    for name, label in (("stack_tiny_stream_512", "gemm-server"),
                        ("stack_tiny_stream_512_floor", "grpc-floor")):
        d = load(out, name)
        if ss and d:
            row(f"  the tiny Matmul of the same size on the same streams ({label}): req/s",
                f"{d['requests_per_s']:.0f}",
                f"the M=1 rows are {ss['requests_per_s'] / max(d['requests_per_s'], 1e-9):.2f}x "
                f"this; server CPU {d['server_cpu_us_per_request']:.0f} us/req (rows: "
                f"{ss['server_cpu_us_per_request']:.0f})")
    if st and tiny:
        ratio = st["requests_per_s"] / max(tiny["requests_per_s"], 1e-9)
        row("  req/s against a tiny Matmul of the same size", f"{ratio * 100:.0f}%",
            f"{st['requests_per_s']:.0f} vs {tiny['requests_per_s']:.0f} req/s; target >= 90%")

    put = text(out, "big_put.txt")
    m = re.search(r"in ([0-9.]+) s \(([0-9.]+) GB/s\)", put)
    if m:
        row("3 GiB FP32 [32768,24576] put", f"{m.group(2)} GB/s", f"{m.group(1)} s")
    verify = text(out, "big_verify.txt")
    m = re.search(r"rel_error=([0-9.e+-]+)[^\n]*", verify)
    if m:
        row("  Matmul M=4 with it as B, C vs FP64", m.group(1), m.group(0)[-40:].strip())

    iperf = 0.0
    for path in glob.glob(os.path.join(out, "iperf_4_*.json")):
        try:
            with open(path) as f:
                iperf += json.load(f)["end"]["sum_received"]["bits_per_second"] / 8e9
        except (OSError, ValueError, KeyError):
            pass
    for c in (1, 4, 8):
        rates = [float(x) for x in re.findall(r"\(([0-9.]+) GB/s\)", text(out, f"upload_c{c}.txt"))]
        if rates:
            best = max(rates)
            note = f"runs {', '.join(f'{r:.2f}' for r in rates)}"
            if iperf > 0:
                note += f"; {best / iperf * 100:.0f}% of 4-stream TCP {iperf:.2f} GB/s (target >= 50%)"
            row(f"2 GiB put over {c} connection(s)", f"{best:.2f} GB/s", note)


if __name__ == "__main__":
    main()
