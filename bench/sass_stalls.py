#!/usr/bin/env python3
"""Summarises one kernel's per-instruction profile from Nsight Compute's source page.

Make the CSV on the GPU machine (ncu is there), e.g. for cuBLAS's DGEMM:
  ncu --clock-control none -k regex:xmma_gemm_f64 -c 1 --section SourceCounters \\
      --page source --print-source sass --csv gemm-bench --filter='4096x4096x4096 FP64' > k.csv
then: bench/sass_stalls.py k.csv [--per OPCODE] [--top N]

Prints where the warps' stall samples went (by reason), each opcode's executed count (per
executed OPCODE, default DMMA, to compare kernels doing the same math) with its main
stall reasons, and the N instructions with the most samples.
"""
import argparse
import collections
import csv
import sys


def number(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    parser.add_argument("--per", default="DMMA", help="opcode to count the others per")
    parser.add_argument("--top", type=int, default=15, help="hottest instructions to list")
    args = parser.parse_args()

    with open(args.csv, newline="") as f:
        lines = f.readlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"Address"')]
    if not starts:
        sys.exit(f"{args.csv}: no source table (was ncu run with --page source --csv?)")
    reader = csv.reader(lines[starts[0]:])
    header = next(reader)
    col = {name: i for i, name in enumerate(header)}
    for needed in ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"):
        if needed not in col:
            sys.exit(f"{args.csv}: no column '{needed}'")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    rows = [r for r in reader if len(r) == len(header)]
    samples = lambda r: number(r[col["Warp Stall Sampling (All Samples)"]])
    total = sum(samples(r) for r in rows) or 1

    by_reason = collections.Counter()
    executed = collections.Counter()
    op_reasons = collections.defaultdict(collections.Counter)
    for r in rows:
        op = opcode(r[col["Source"]].strip())
        executed[op] += number(r[col["Instructions Executed"]])
        for reason in reasons:
            by_reason[reason] += number(r[col[reason]])
            op_reasons[op][reason] += number(r[col[reason]])

    print(f"{len(rows)} instructions, {sum(executed.values()):,} executed, {total:,} samples")
    print("stall samples by reason: " + ", ".join(
        f"{k[6:]} {v / total:.1%}" for k, v in by_reason.most_common(8) if v))
    base = executed.get(args.per, 0)
    print(f"\n{'opcode':10} {'executed':>14} {'per ' + args.per:>10}  main stalls (share of all samples)")
    for op, count in executed.most_common(20):
        per = f"{count / base:.2f}" if base else "-"
        stalls = ", ".join(f"{k[6:]} {v / total:.1%}" for k, v in op_reasons[op].most_common(3) if v)
        print(f"{op:10} {count:>14,} {per:>10}  {stalls}")
    print(f"\nthe {args.top} instructions with the most samples:")
    for r in sorted(rows, key=samples, reverse=True)[:args.top]:
        top = sorted(((number(r[col[k]]), k[6:]) for k in reasons), reverse=True)[:2]
        print(f"{samples(r) / total:6.1%}  {r[col['Source']].strip()[:64]:64}  " +
              ", ".join(f"{name} {n}" for n, name in top if n))


if __name__ == "__main__":
    main()
