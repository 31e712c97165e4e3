#!/usr/bin/env python3
"""A Python grpcio client against gemm-server, as any user of the API would write it.

The message classes come from proto/gemm/v1/gemm.proto (protoc --python_out); the stub
is grpcio's generic unary call. Checks a Matmul's C against numpy, and that a malformed
request gets INVALID_ARGUMENT with the server's message. Usage (ctest runs it):
    python_client_test.py GEMM_SERVER_BINARY SOURCE_DIR
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np


def main():
    server_bin, source = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="gemm_pb2_")
    subprocess.run(["protoc", f"--proto_path={source}/proto", f"--python_out={out}",
                    "gemm/v1/gemm.proto"], check=True)
    sys.path.insert(0, out)
    from gemm.v1 import gemm_pb2 as pb  # noqa: E402 (generated above)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([server_bin, "--host", "127.0.0.1", "--port", str(port),
                               "--metrics_port", "-1", "--backend", "cpu"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        matmul = channel.unary_unary("/gemm.v1.GemmService/Matmul",
                                     request_serializer=pb.MatmulRequest.SerializeToString,
                                     response_deserializer=pb.MatmulResponse.FromString)
        rng = np.random.default_rng(1)
        a = rng.standard_normal((37, 300), dtype=np.float32)
        b = rng.standard_normal((300, 21), dtype=np.float32)
        request = pb.MatmulRequest(
            a=pb.Tensor(shape=a.shape, dtype=pb.DATA_TYPE_FLOAT32, data=a.tobytes()),
            b=pb.Tensor(shape=b.shape, dtype=pb.DATA_TYPE_FLOAT32, data=b.tobytes()))
        response = matmul(request, timeout=30)
        c = np.frombuffer(response.c.data, dtype=np.float32).reshape(tuple(response.c.shape))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        error = np.linalg.norm(c - ref) / np.linalg.norm(ref)
        assert tuple(response.c.shape) == (37, 21), response.c.shape
        assert error < 1e-5, error
        assert response.kernel == "cpu_sgemm_openblas", response.kernel

        request.b.shape[:] = [299, 21]
        try:
            matmul(request, timeout=30)
            raise AssertionError("a malformed request was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code()
            assert "b.data has" in e.details(), e.details()
        print(f"python client: C {response.c.shape} rel_error={error:.2e}; "
              "a malformed request got INVALID_ARGUMENT")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
