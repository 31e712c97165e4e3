#!/usr/bin/env bash
# Counts the instructions that matter for a GEMM (tensor/FP32 math, shared and global
# memory, barriers) per kernel in a binary's SASS. Run where cuobjdump exists (the GPU
# machine's CUDA image has it):   bench/sass_opcodes.sh build/bench/gemm-bench
set -euo pipefail
cuobjdump -sass "$1" | awk '
  /Function :/ { f = $3 }
  /(HMMA|HGMMA|FFMA|LDSM|LDS|STS|LDGSTS|LDG|STG|BAR|LDL|STL)/ {
    if (match($0, /(HMMA|HGMMA|FFMA|LDSM|LDS|STS|LDGSTS|LDG|STG|BAR|LDL|STL)[A-Z0-9_.]*/)) {
      c[f "\t" substr($0, RSTART, RLENGTH)]++
    }
  }
  END { for (k in c) print c[k] "\t" k }' | sort -t$'\t' -k2,2 -k1,1nr
