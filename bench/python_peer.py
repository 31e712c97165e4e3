#!/usr/bin/env python3
"""The yardstick: what a user could write in an afternoon instead of gemmd.

A Python grpcio server of the same API (gemm.v1.GemmService/Matmul) that answers with
numpy on a thread pool: protobuf messages in and out, numpy's BLAS for the product.
bench/cpu_service_bench.sh drives it with the same `gemm-cli bench` as gemm-server.

Usage: bench/python_peer.py [--port 50778] [--workers 8]
Needs python3-grpcio, python3-numpy, python3-protobuf and protoc (Debian packages; the
message classes are generated from proto/gemm/v1/gemm.proto at start-up).
"""
import argparse
import os
import subprocess
import sys
import tempfile
from concurrent import futures

import grpc
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {1: np.float32, 2: np.float16}


def load_messages():
    out = tempfile.mkdtemp(prefix="gemm_pb2_")
    subprocess.run(["protoc", f"--proto_path={ROOT}/proto", f"--python_out={out}",
                    "gemm/v1/gemm.proto"], check=True)
    sys.path.insert(0, out)
    from gemm.v1 import gemm_pb2  # noqa: E402 (generated above)
    return gemm_pb2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=50778)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    pb = load_messages()

    def matrix(t):
        a = np.frombuffer(t.data, dtype=DTYPES[t.dtype]).reshape(tuple(t.shape))
        return a.astype(np.float32, copy=False)

    def matmul(request, context):
        try:
            a, b = matrix(request.a), matrix(request.b)
            if request.transpose_a:
                a = np.swapaxes(a, -1, -2)
            if request.transpose_b:
                b = np.swapaxes(b, -1, -2)
            alpha = request.alpha if request.HasField("alpha") else 1.0
            c = np.matmul(a, b)
            if alpha != 1.0:
                c *= alpha
            if request.beta != 0.0:
                c += request.beta * matrix(request.c)
        except (KeyError, ValueError) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.MatmulResponse(
            c=pb.Tensor(shape=c.shape, dtype=pb.DATA_TYPE_FLOAT32, data=c.tobytes()),
            kernel="numpy", device="cpu:0 (python peer)", precision=pb.PRECISION_FP32)

    handler = grpc.method_handlers_generic_handler("gemm.v1.GemmService", {
        "Matmul": grpc.unary_unary_rpc_method_handler(
            matmul, request_deserializer=pb.MatmulRequest.FromString,
            response_serializer=pb.MatmulResponse.SerializeToString),
        "GetServerInfo": grpc.unary_unary_rpc_method_handler(
            lambda request, context: pb.ServerInfo(
                version="python-peer", backend="cpu",
                limits=pb.Limits(max_message_bytes=1 << 31, max_elements=1 << 40)),
            request_deserializer=pb.GetServerInfoRequest.FromString,
            response_serializer=pb.ServerInfo.SerializeToString),
    })
    unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers), options=unlimited)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print(f"python peer on 127.0.0.1:{args.port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
