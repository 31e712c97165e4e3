# Sourced by the benchmark scripts that drive a server process (resident_bench.sh,
# multi_device_bench.sh, transport_bench.sh): finding the binaries, starting a server and waiting until it
# answers, stopping it. The script sets `bin` (a build tree or a flat folder of binaries),
# `out` (where logs go) and `target` (host:port the server listens on) first.

# The path of binary $1 under $bin (flat, or where a build tree puts it).
bench_exe() {
  for p in "$bin/$1" "$bin/server/$1" "$bin/client_cli/$1" "$bin/bench/$1"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  echo "missing $1 under $bin" >&2
  return 1
}

# bench_start NAME COMMAND...: runs COMMAND (a server on $target) in the background, its
# output in $out/NAME.log, and waits until gemm-cli info answers (20 s at most); its pid
# in $pid.
pid=
bench_start() {
  local name=$1
  shift
  "$@" >"$out/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    "$(bench_exe gemm-cli)" info --target "$target" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$name did not start:"
  cat "$out/$name.log"
  return 1
}

# Stops the server bench_start started (SIGTERM: it drains), if any.
bench_stop() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  pid=
}
