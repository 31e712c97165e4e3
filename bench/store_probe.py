#!/usr/bin/python3
"""Careless and hostile callers of the tensor store and the drain, as an outside grpcio
client sees them (bench/store_hardening_bench.sh runs them; docs/RELIABILITY.md has the
results). Needs the Python stubs: GEMMD_PROTO_DIR (clients/python/generate.sh).

  store_probe.py tiny-puts --target T [--count N]
      [1,1] FLOAT32 PutTensor calls until one is refused (or N stored); prints how many
      were stored, the refusal, and the store's use.
  store_probe.py idle-upload --target T [--rows R --cols C] [--hold_s S]
      a PutTensor stream that sends its header and then nothing; prints the store's bytes
      while it is open and when (and how) the server ended it.
  store_probe.py drain --target T --metrics HOST:PORT --server_pid PID [--calls 3]
                 [--n 3072]
      --calls FP32 Matmuls of [n,n] x [n,n] (n=3072: 72 MiB each) on their own channels,
      SIGTERM to the server as soon as its gemm_inflight_requests shows them all taken
      (their requests still uploading); prints each call's status.
"""
import argparse
import os
import re
import signal
import sys
import threading
import time
import urllib.request

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients",
                                "python"))
from gemmd._stubs import gemm_pb2 as pb  # noqa: E402
from gemmd._stubs import gemm_pb2_grpc  # noqa: E402

OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def stub(target):
    return gemm_pb2_grpc.GemmServiceStub(grpc.insecure_channel(target, options=OPTIONS))


def store_use(s):
    r = s.ListTensors(pb.ListTensorsRequest(page_size=1), timeout=10)
    return r.store_bytes, r.store_tensors


def tiny_puts(args):
    s = stub(args.target)
    header = pb.TensorChunk(header=pb.TensorHeader(shape=[1, 1], dtype=pb.DATA_TYPE_FLOAT32),
                            data=b"\0\0\0\0")
    start = time.monotonic()
    stored = 0
    refusal = None
    for _ in range(args.count):
        try:
            s.PutTensor(iter([header]), timeout=10)
            stored += 1
        except grpc.RpcError as e:
            refusal = f"{e.code().name}: {e.details()}"
            break
    used, tensors = store_use(s)
    print(f"tiny-puts: {stored} [1,1] tensors stored in {time.monotonic() - start:.1f} s; "
          f"store_bytes={used} tensors={tensors}; then {refusal or 'no refusal'}")


def idle_upload(args):
    s = stub(args.target)
    closed = threading.Event()

    def chunks():
        yield pb.TensorChunk(header=pb.TensorHeader(shape=[args.rows, args.cols],
                                                    dtype=pb.DATA_TYPE_FLOAT32))
        closed.wait()  # then nothing: an upload that stalls, until the probe gives up

    outcome = {}

    def run():
        start = time.monotonic()
        try:
            s.PutTensor(chunks(), timeout=args.hold_s + 10)
            outcome["status"] = "OK"
        except grpc.RpcError as e:
            outcome["status"] = f"{e.code().name}: {e.details()}"
        outcome["after_s"] = time.monotonic() - start

    t = threading.Thread(target=run)
    t.start()
    start = time.monotonic()
    samples = []
    while t.is_alive() and time.monotonic() - start < args.hold_s:
        samples.append((time.monotonic() - start, store_use(s)[0]))
        time.sleep(0.5)
    held = max(b for _, b in samples) if samples else 0
    ended_by_server = t.is_alive() is False
    left = store_use(s)[0]
    closed.set()
    t.join()
    print(f"idle-upload: a header of [{args.rows},{args.cols}] FLOAT32 held {held} store bytes; "
          f"the stream ended after {outcome['after_s']:.1f} s "
          f"({'by the server' if ended_by_server else f'when the client gave up at {args.hold_s:.0f} s'}) "
          f"with {outcome['status']}; store bytes then: {left}")


def drain(args):
    rng = np.random.default_rng(1)
    n = args.n
    a = rng.standard_normal((n, n)).astype(np.float32)
    request = pb.MatmulRequest(
        a=pb.Tensor(shape=[n, n], dtype=pb.DATA_TYPE_FLOAT32, data=a.tobytes()),
        b=pb.Tensor(shape=[n, n], dtype=pb.DATA_TYPE_FLOAT32, data=a.tobytes()))
    # Serialized before the clock starts, so each call's headers go out at once and its
    # request is on the wire when the signal comes.
    serialized = request.SerializeToString()
    size = len(serialized)
    results = [None] * args.calls
    channels = [grpc.insecure_channel(args.target, options=OPTIONS) for _ in range(args.calls)]
    calls = []
    for channel in channels:  # connected before the clock starts
        gemm_pb2_grpc.GemmServiceStub(channel).GetServerInfo(pb.GetServerInfoRequest(),
                                                             timeout=10)
        calls.append(channel.unary_unary("/gemm.v1.GemmService/Matmul",
                                         request_serializer=lambda b: b,
                                         response_deserializer=pb.MatmulResponse.FromString))
    started = time.monotonic()

    def call(i):
        try:
            r = calls[i](serialized, timeout=120)
            results[i] = (f"OK (C {len(r.c.data)} bytes) after "
                          f"{time.monotonic() - started:.2f} s")
        except grpc.RpcError as e:
            results[i] = f"{e.code().name}: {e.details()}"

    threads = [threading.Thread(target=call, args=(i,)) for i in range(args.calls)]
    for t in threads:
        t.start()
    # The signal goes once the server has taken every call (their headers in), while the
    # requests are still arriving: the server's own gauge says when.
    inflight = 0
    while inflight < args.calls and time.monotonic() - started < 30:
        page = urllib.request.urlopen(f"http://{args.metrics}/metrics", timeout=5).read()
        m = re.search(rb"\ngemm_inflight_requests ([0-9.]+)", page)
        inflight = int(float(m.group(1))) if m else 0
    received = re.search(rb"\ngemm_bytes_received_total ([0-9.e+]+)", page)
    os.kill(args.server_pid, signal.SIGTERM)
    sent_at = time.monotonic()
    for t in threads:
        t.join()
    print(f"drain: {args.calls} Matmuls of {size / 2**20:.0f} MiB; SIGTERM "
          f"{(sent_at - started) * 1e3:.0f} ms after they started, with {inflight} in flight "
          f"and {float(received.group(1)) if received else 0:.0f} payload bytes counted "
          f"received; answered within {time.monotonic() - sent_at:.1f} s:")
    for i, r in enumerate(results):
        print(f"  call {i}: {r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["tiny-puts", "idle-upload", "drain"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--count", type=int, default=30000)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--hold_s", type=float, default=20)
    parser.add_argument("--server_pid", type=int)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--n", type=int, default=3072)
    parser.add_argument("--metrics", help="the server's metrics address (drain)")
    args = parser.parse_args()
    {"tiny-puts": tiny_puts, "idle-upload": idle_upload, "drain": drain}[args.mode](args)


if __name__ == "__main__":
    main()
