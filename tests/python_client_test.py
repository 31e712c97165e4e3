#!/usr/bin/env python3
"""A Python grpcio client against gemm-server, as any user of the API would write it.

The message classes come from proto/gemm/v1/gemm.proto (protoc --python_out); the stubs
are grpcio's generic calls. Checks a Matmul's C against numpy, that a malformed request
gets INVALID_ARGUMENT with the server's message, and resident tensors: B uploaded by
PutTensor (a client stream of chunks), a Matmul with b_ref against numpy, GetTensor
giving the bytes back, and NOT_FOUND once it is deleted. Usage (ctest runs it):
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
        target = f"127.0.0.1:{port}"
        channel = grpc.insecure_channel(target)
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
        resident_error = check_resident_tensors(channel, pb, matmul, a, rng)
        print(f"python client: C {response.c.shape} rel_error={error:.2e}; "
              "a malformed request got INVALID_ARGUMENT; "
              f"Matmul with b_ref rel_error={resident_error:.2e}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_resident_tensors(channel, pb, matmul, a, rng):
    """PutTensor B in several chunks, Matmul A by value and B by handle, against numpy."""
    put = channel.stream_unary("/gemm.v1.GemmService/PutTensor",
                               request_serializer=pb.TensorChunk.SerializeToString,
                               response_deserializer=pb.TensorHandle.FromString)
    # GetTensor's chunks fit grpcio's default 4 MiB receive limit: the default channel.
    get = channel.unary_stream("/gemm.v1.GemmService/GetTensor",
                             request_serializer=pb.TensorHandle.SerializeToString,
                             response_deserializer=pb.TensorChunk.FromString)
    delete = channel.unary_unary("/gemm.v1.GemmService/DeleteTensor",
                                 request_serializer=pb.TensorHandle.SerializeToString,
                                 response_deserializer=pb.DeleteTensorResponse.FromString)
    b = rng.standard_normal((a.shape[1], 4000), dtype=np.float32)  # 4.8 MB: two chunks
    data = b.tobytes()
    chunk = 4 << 20  # data + scales per TensorChunk, at most

    def chunks():
        yield pb.TensorChunk(header=pb.TensorHeader(shape=b.shape, dtype=pb.DATA_TYPE_FLOAT32,
                                                    label="python"))
        for at in range(0, len(data), chunk):
            yield pb.TensorChunk(data=data[at:at + chunk])

    handle = put(chunks(), timeout=30)
    assert handle.handle, handle
    response = matmul(pb.MatmulRequest(
        a=pb.Tensor(shape=a.shape, dtype=pb.DATA_TYPE_FLOAT32, data=a.tobytes()),
        b_ref=handle), timeout=30)
    c = np.frombuffer(response.c.data, dtype=np.float32).reshape(tuple(response.c.shape))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    error = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    assert tuple(response.c.shape) == (a.shape[0], b.shape[1]), response.c.shape
    assert error < 1e-5, error

    received = list(get(handle, timeout=30))
    assert received[0].HasField("header"), received[0]
    assert tuple(received[0].header.shape) == b.shape, received[0].header
    assert b"".join(x.data for x in received) == data

    delete(handle, timeout=30)
    try:
        matmul(pb.MatmulRequest(
            a=pb.Tensor(shape=a.shape, dtype=pb.DATA_TYPE_FLOAT32, data=a.tobytes()),
            b_ref=handle), timeout=30)
        raise AssertionError("a deleted tensor was used")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
    return error


if __name__ == "__main__":
    main()
