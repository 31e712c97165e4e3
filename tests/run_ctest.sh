#!/bin/sh
# Runs a build's tests: run_ctest.sh CTEST BUILD_DIR [ctest args...] (dev.sh test, and
# the ASan suite inside it). On a failure it prints each failed test's own output (its
# last 150 lines) once more at the end, where a log kept only by its ends (CI's) still
# shows what failed and why.
ctest=$1
dir=$2
shift 2
"$ctest" --test-dir "$dir" "$@"
status=$?
[ "$status" -eq 0 ] && exit 0
failed="$dir/Testing/Temporary/LastTestsFailed.log"
log="$dir/Testing/Temporary/LastTest.log"
if [ -f "$failed" ] && [ -f "$log" ]; then
  cut -d: -f2- "$failed" | while IFS= read -r name; do
    echo "==== the output of $name ===="
    awk -v name="$name" '
      $0 ~ /^[0-9]+\/[0-9]+ Testing: / { sub(/^[0-9]+\/[0-9]+ Testing: /, ""); inside = ($0 == name); next }
      inside && /^<end of output>$/ { inside = 0 }
      inside { print }' "$log" | tail -n 150
  done
fi
exit "$status"
