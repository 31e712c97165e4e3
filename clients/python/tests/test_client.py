#!/usr/bin/python3
"""Tests of the gemmd Python client against real gemm-server processes (CPU backend).

    test_client.py [--server PATH] [--cli PATH] [--stubs DIR [--generate]] [unittest args...]

--server (or $GEMM_SERVER): the gemm-server binary (default: build/server/gemm-server).
--stubs (or $GEMMD_PROTO_DIR): where generate.sh wrote the stubs; with --generate, run
  generate.sh into DIR first (ctest does, into the build tree); with neither, the stubs
  are generated into a temporary directory.
--cli (or $GEMM_CLI): gemm-cli, optional: with it, the Python quantizers are checked byte
  for byte against the C++ client's (gemm-cli put --format ...); without it that test
  skips.
Each server runs on a free loopback port (--port 0, read back from its start log line)
with --backend cpu --metrics_port -1.
"""
import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)            # clients/python
REPO = os.path.dirname(os.path.dirname(PACKAGE_ROOT))

# Relative Frobenius error against an FP64 reference, as README.md states them for N(0,1)
# data: FP32 <= 1e-5, FP16_TENSOR <= 1e-3.
FP32_TOLERANCE = 1e-5
FP16_TOLERANCE = 1e-3

SERVER = None
CLI = None
gemmd = None  # imported in main(), once GEMMD_PROTO_DIR is known


def rel_error(c, ref):
    return float(np.linalg.norm(np.asarray(c, np.float64) - ref) / np.linalg.norm(ref))


class Server:
    """One gemm-server process on a free loopback port."""

    def __init__(self, *extra):
        self.log = tempfile.NamedTemporaryFile(prefix="gemm_server_", suffix=".log",
                                               delete=False)
        self.process = subprocess.Popen(
            [SERVER, "--host", "127.0.0.1", "--port", "0", "--metrics_port", "-1",
             "--backend", "cpu", "--shutdown_grace_s", "5", *extra],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            with open(self.log.name) as f:
                text = f.read()
            started = re.search(r"event=server_started .*grpc=([0-9.]+):(\d+).*instance=(\w+)",
                                text)
            if started:
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"gemm-server did not start:\n{text}")
            time.sleep(0.02)
        self.port = int(started.group(2))
        self.instance = started.group(3)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM):
        if self.log is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        os.unlink(self.log.name)
        self.log = None


class OneServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = gemmd.Client(cls.server.address, timeout_s=60)
        cls.client.wait_ready(30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(zlib.crc32(self.id().encode()))  # stable per test

    def normal(self, *shape, dtype=np.float32):
        return self.rng.standard_normal(shape).astype(dtype)


class MatmulTest(OneServerTest):
    def test_fp32_against_fp64(self):
        a, b = self.normal(37, 300), self.normal(300, 21)
        result = self.client.matmul(a, b, precision="fp32", return_info=True)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        self.assertEqual(result.c.shape, (37, 21))
        self.assertEqual(result.c.dtype, np.float32)
        self.assertLess(rel_error(result.c, ref), FP32_TOLERANCE)
        self.assertEqual(result.kernel, "cpu_sgemm_openblas")
        self.assertEqual(result.precision, "FP32")
        self.assertTrue(result.device.startswith("cpu:"), result.device)
        self.assertGreater(result.timing.total_us, 0)
        self.assertGreaterEqual(result.timing.batch_size, 1)
        self.assertIsNone(result.c_ref)
        # Without return_info: the array alone, and writable.
        c = self.client.matmul(a, b)
        np.testing.assert_array_equal(c, result.c)
        c[0, 0] = 1.0

    def test_float64_in_fp64(self):
        # C-ordered, a transposed view and a strided slice; alpha and beta that FP32
        # cannot hold. The reference sums in long double.
        a = self.normal(300, 37, dtype=np.float64).T
        b = self.normal(300, 42, dtype=np.float64)[:, ::2]
        c = self.normal(37, 21, dtype=np.float64)
        result = self.client.matmul(a, b, c, alpha=1 / 3, beta=-0.1, return_info=True)
        wide = np.longdouble
        ref = (a.astype(wide) @ b.astype(wide)) * wide(1 / 3) + c.astype(wide) * wide(-0.1)
        self.assertEqual(result.c.dtype, np.float64)
        self.assertEqual(result.precision, "FP64")
        self.assertEqual(result.kernel, "cpu_dgemm_openblas")
        err = float(np.linalg.norm((result.c - ref).astype(np.float64)) /
                    np.linalg.norm(ref.astype(np.float64)))
        self.assertLess(err, 1e-13)
        # FLOAT64 operands take FP64 only: the server says so.
        with self.assertRaises(gemmd.InvalidArgument) as raised:
            self.client.matmul(a, b, precision="fp32")
        self.assertIn("FLOAT64 operands take precision FP64", raised.exception.message)

    def test_fp16_tensor(self):
        a, b = self.normal(64, 256), self.normal(256, 48)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        result = self.client.matmul(a, b, precision="fp16_tensor", return_info=True)
        self.assertEqual(result.precision, "FP16_TENSOR")
        self.assertEqual(result.kernel, "cpu_hgemm_emulated_openblas")
        self.assertLess(rel_error(result.c, ref), FP16_TOLERANCE)
        # float16 operands: AUTO resolves to FP16_TENSOR; a float16 C comes back float16.
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        ref16 = a16.astype(np.float64) @ b16.astype(np.float64)
        result = self.client.matmul(a16, b16, output_dtype="float16", return_info=True)
        self.assertEqual(result.precision, "FP16_TENSOR")
        self.assertEqual(result.c.dtype, np.float16)
        self.assertLess(rel_error(result.c, ref16), FP16_TOLERANCE)
        # out_dtype: the older name, still taken; both at once is an error.
        np.testing.assert_array_equal(self.client.matmul(a16, b16, out_dtype="float16"),
                                      result.c)
        with self.assertRaisesRegex(gemmd.InvalidArgument, "not both"):
            self.client.matmul(a16, b16, output_dtype="float16", out_dtype="float16")

    def test_bfloat16(self):
        a = gemmd.BFloat16.from_float(self.normal(16, 64))
        b = gemmd.BFloat16.from_float(self.normal(64, 8))
        ref = a.to_float32().astype(np.float64) @ b.to_float32().astype(np.float64)
        c = self.client.matmul(a, b, out_dtype="bfloat16")
        self.assertEqual(c.dtype, np.float32)  # widened exactly
        self.assertFalse((c.view(np.uint32) & 0xFFFF).any(), "not bfloat16 values")
        self.assertLess(rel_error(c, ref), 1e-2)  # one bfloat16 rounding of C
        c = self.client.matmul(a, b)
        self.assertLess(rel_error(c, ref), FP32_TOLERANCE)  # products exact, FP32 sums
        # from_float rounds to nearest even, and keeps NaN a NaN.
        x = np.array([1.0, 1.00390625, 1.01171875, np.nan, -np.inf], np.float32)
        np.testing.assert_array_equal(gemmd.BFloat16.from_float(x).bits,
                                      [0x3F80, 0x3F80, 0x3F82, 0x7FC0, 0xFF80])

    def test_alpha_beta_with_c(self):
        a, b, c = self.normal(20, 30), self.normal(30, 10), self.normal(20, 10)
        out = self.client.matmul(a, b, c, alpha=0.5, beta=-2.0)
        ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) - 2.0 * c
        self.assertLess(rel_error(out, ref), FP32_TOLERANCE)

    def test_transposes(self):
        a, b = self.normal(30, 20), self.normal(10, 30)  # stored [K,M] and [N,K]
        out = self.client.matmul(a, b, transpose_a=True, transpose_b=True)
        ref = a.T.astype(np.float64) @ b.T.astype(np.float64)
        self.assertLess(rel_error(out, ref), FP32_TOLERANCE)
        # A numpy view that is not C-contiguous is sent row-major as it reads.
        out = self.client.matmul(a.T, b.T)
        self.assertLess(rel_error(out, ref), FP32_TOLERANCE)

    def test_batched(self):
        a, b = self.normal(3, 16, 24), self.normal(3, 24, 8)
        out = self.client.matmul(a, b)
        self.assertEqual(out.shape, (3, 16, 8))
        self.assertLess(rel_error(out, np.matmul(a.astype(np.float64), b)), FP32_TOLERANCE)
        shared = self.normal(24, 8)  # a 2-D operand is shared by every batch item
        out = self.client.matmul(a, shared)
        self.assertEqual(out.shape, (3, 16, 8))
        self.assertLess(rel_error(out, np.matmul(a.astype(np.float64), shared)),
                        FP32_TOLERANCE)

    def test_invalid_argument_from_server(self):
        with self.assertRaises(gemmd.InvalidArgument) as raised:
            self.client.matmul(self.normal(4, 8), self.normal(9, 3))
        e = raised.exception
        self.assertEqual(e.code, "INVALID_ARGUMENT")
        self.assertEqual(e.method, "Matmul")
        self.assertFalse(e.client_side)
        self.assertIn("inner dimensions differ", e.message)
        self.assertIn("[M=4, K=8]", e.message)
        self.assertIsInstance(e, gemmd.GemmError)
        self.assertIsInstance(e, ValueError)

    def test_failed_precondition_unknown_kernel(self):
        with self.assertRaises(gemmd.FailedPrecondition) as raised:
            self.client.matmul(self.normal(4, 8), self.normal(8, 3), kernel="no_such_kernel")
        self.assertEqual(raised.exception.code, "FAILED_PRECONDITION")
        self.assertIn("no_such_kernel", raised.exception.message)
        # A kernel the server has runs when forced.
        info = self.client.matmul(self.normal(4, 8), self.normal(8, 3), precision="fp16_tensor",
                                  kernel="cpu_hgemm_emulated_openblas", return_info=True)
        self.assertEqual(info.kernel, "cpu_hgemm_emulated_openblas")

    def test_client_side_validation(self):
        a, b = self.normal(4, 8), self.normal(8, 3)
        cases = [
            (dict(a=np.ones(8, np.float32), b=b), "must be 2-D or 3-D"),
            (dict(a=np.ones((1, 1, 4, 8), np.float32), b=b), "got shape [1, 1, 4, 8]"),
            (dict(a=a.astype(np.complex64), b=b), "dtype complex64"),
            (dict(a=a, b=b.astype(np.int32)), "dtype int32"),
            (dict(a=np.ones((0, 8), np.float32), b=b), "empty dimension"),
            (dict(a=a, b=b, beta=1.0), "no c was given"),
            (dict(a=a, b=b, precision="tf32"), "precision 'tf32'"),
            (dict(a=a, b=b, output_dtype="int8"), "output_dtype 'int8' is not one of"),
            (dict(a=a, b=gemmd.quantize_int8(self.normal(3, 8))), "use quantized_matmul"),
            (dict(a=a, b=b, keep_c="yes"), "keep_c"),
        ]
        for kwargs, text in cases:
            with self.subTest(text), self.assertRaises(gemmd.InvalidArgument) as raised:
                self.client.matmul(**kwargs)
            self.assertTrue(raised.exception.client_side)
            self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
            self.assertIn(text, raised.exception.message)

    def test_deadline_exceeded(self):
        a, b = self.normal(512, 512), self.normal(512, 512)
        with self.assertRaises(gemmd.DeadlineExceeded) as raised:
            self.client.matmul(a, b, timeout_s=1e-4)
        self.assertEqual(raised.exception.code, "DEADLINE_EXCEEDED")
        self.assertIsInstance(raised.exception, TimeoutError)

    def test_health_and_server_info(self):
        self.assertEqual(self.client.health(), "SERVING")
        info = self.client.server_info()
        self.assertEqual(info.backend, "cpu")
        self.assertEqual(info.instance, self.server.instance)
        self.assertIn("cpu_sgemm_openblas", [k.name for k in info.kernels])

    def test_unavailable(self):
        # A port nothing listens on (a stopped server's): UNAVAILABLE after the retries.
        gone = Server()
        address = gone.address
        gone.stop()
        with gemmd.Client(address, timeout_s=10) as client:
            with self.assertRaises(gemmd.Unavailable) as raised:
                client.health()
        self.assertEqual(raised.exception.code, "UNAVAILABLE")


class QuantizedTest(OneServerTest):
    def check(self, quantize, both_quantized):
        m, n, k = 24, 40, 96
        a, w = self.normal(m, k), self.normal(n, k)
        b = quantize(w)
        self.assertEqual(b.shape, (n, k))
        a_operand = quantize(a) if both_quantized else a
        a_ref = a_operand.dequantize() if both_quantized else a
        # The reference: FP64 on the dequantized values, i.e. the kernel's error alone.
        ref = a_ref.astype(np.float64) @ b.dequantize().astype(np.float64).T
        result = self.client.quantized_matmul(a_operand, b, return_info=True)
        self.assertEqual(result.c.shape, (m, n))
        self.assertEqual(result.c.dtype, np.float32)
        self.assertLess(rel_error(result.c, ref), FP32_TOLERANCE)
        # The format's own error, against the FP32 originals: small, not zero.
        format_error = rel_error(b.dequantize(), w.astype(np.float64))
        self.assertGreater(format_error, 0)
        self.assertLess(format_error, 0.2 if b.format == "nvfp4" else 0.01)
        return result

    def test_int8_weight_only(self):
        result = self.check(gemmd.quantize_int8, both_quantized=False)
        self.assertEqual(result.kernel, "cpu_weight_only_sgemm_openblas")

    def test_int8_both(self):
        self.check(gemmd.quantize_int8, both_quantized=True)

    def test_nvfp4_weight_only(self):
        result = self.check(gemmd.quantize_nvfp4, both_quantized=False)
        self.assertEqual(result.kernel, "cpu_weight_only_sgemm_openblas")

    def test_nvfp4_both(self):
        self.check(gemmd.quantize_nvfp4, both_quantized=True)

    def test_layout(self):
        # INT8: per-row scale amax/127, round half to even; an all-zero row has scale 1.
        w = np.array([[127.0, -63.5, 0.5, 1.5], [0, 0, 0, 0]], np.float32)
        q = gemmd.quantize_int8(w)
        np.testing.assert_array_equal(np.frombuffer(q.data, np.int8), [127, -64, 0, 2, 0, 0, 0, 0])
        np.testing.assert_array_equal(np.frombuffer(q.scales, "<f4"), [1.0, 1.0])
        # NVFP4: g = amax / 2688; block scale e4m3(amax(block) / 6 / g); codes two per
        # byte, even K index low. A block of 6 * 448 * g-multiples decodes exactly.
        row = np.array([2688.0, -1344.0, 448.0 * 1.5, 0.0, -0.0] + [0.0] * 11, np.float32)
        q = gemmd.quantize_nvfp4(row[None, :])
        self.assertEqual(q.tensor_scale, 1.0)
        self.assertEqual(q.scales, bytes([0x7E]))  # 2688 / 6 / 1 = 448: E4M3 0x7E
        # 6 -> 7, -3 -> 8|5, 1.5 -> 3, 0 -> 0, -0 -> 8 (the sign is kept).
        self.assertEqual(q.data[:3], bytes([0x7 | 0xD << 4, 0x3 | 0x0 << 4, 0x8]))
        np.testing.assert_array_equal(q.dequantize()[0], row)
        # E2M1 ties go to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0,
        # 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0; 7 clamps to 6.
        from gemmd import quant
        ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0], np.float32)
        np.testing.assert_array_equal(quant._encode_e2m1(ties), [0, 2, 2, 4, 4, 6, 6, 7])
        # E4M3: subnormals step by 2^-9, 2^-6 is 0x08, 448 is 0x7E and the top.
        v = np.array([0, 2.0**-9, 2.0**-6, 1.0, 448.0, 1e9], np.float32)
        np.testing.assert_array_equal(quant._encode_e4m3(v), [0, 1, 8, 0x38, 0x7E, 0x7E])

    def test_same_bytes_as_cpp_client(self):
        if not CLI:
            self.skipTest("no gemm-cli (--cli or GEMM_CLI)")
        w = self.normal(64, 128)
        w[1] = 0                                       # an all-zero row
        w[2] *= 1e-5                                   # E4M3 subnormal block scales
        w[3, :16] = -0.0                               # negative zeros
        w[4] = self.rng.standard_normal(128) * 1e-7
        w[5, :8] = 4.0                                 # repeated values
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "w.npy")
            np.save(path, w)
            for fmt, quantize in (("int8", gemmd.quantize_int8),
                                  ("nvfp4", gemmd.quantize_nvfp4)):
                with self.subTest(fmt):
                    handle = subprocess.run(
                        [CLI, "put", "--target", self.server.address, "--format", fmt, path],
                        check=True, capture_output=True, text=True).stdout.strip()
                    theirs = self.client.get_tensor(handle)
                    ours = quantize(w)
                    self.assertIsInstance(theirs, gemmd.QuantizedTensor)
                    self.assertEqual(theirs.format, fmt)
                    self.assertEqual(theirs.data, ours.data)
                    self.assertEqual(theirs.scales, ours.scales)
                    if fmt == "nvfp4":
                        self.assertEqual(theirs.tensor_scale, ours.tensor_scale)
                    self.client.delete_tensor(handle)

    def test_quantize_errors(self):
        cases = [
            (gemmd.quantize_int8, np.array([[1, 2, np.nan, 3]], np.float32),
             "cannot quantize to INT8: element 2 is nan"),
            (gemmd.quantize_nvfp4, np.array([[np.inf] + [0] * 15], np.float32),
             "cannot quantize to NVFP4: element 0 is inf"),
            (gemmd.quantize_nvfp4, np.ones((2, 20), np.float32),
             "K is 20: pad K with zeros to 32"),
            (gemmd.quantize_int8, np.ones(8, np.float32), "expected a 2-D array"),
            (gemmd.quantize_int8, np.ones((0, 8), np.float32), "rows and cols > 0"),
            (gemmd.quantize_nvfp4, np.ones((2, 16), np.int32), "floating-point"),
            (gemmd.quantize_int8, gemmd.quantize_int8(np.ones((2, 2), np.float32)),
             "not a QuantizedTensor"),
        ]
        for quantize, w, text in cases:
            with self.subTest(text), self.assertRaises(gemmd.InvalidArgument) as raised:
                quantize(w)
            self.assertIn(text, raised.exception.message)
            self.assertTrue(raised.exception.client_side)
        # float64 input is rounded to float32 first, as gemm-cli does with a float64 .npy.
        w = self.rng.standard_normal((4, 32))
        self.assertEqual(gemmd.quantize_nvfp4(w).data,
                         gemmd.quantize_nvfp4(w.astype(np.float32)).data)
        # Malformed QuantizedTensors are refused when built.
        with self.assertRaisesRegex(gemmd.InvalidArgument, "needs 8 data bytes"):
            gemmd.QuantizedTensor("int8", (2, 4), b"\0" * 7, b"\0" * 8)
        with self.assertRaisesRegex(gemmd.InvalidArgument, "'fp8'"):
            gemmd.QuantizedTensor("fp8", (2, 4), b"", b"")

    def test_quantized_matmul_errors(self):
        a, w = self.normal(4, 32), self.normal(8, 32)
        with self.assertRaisesRegex(gemmd.InvalidArgument, r"quantize_int8\(b\)"):
            self.client.quantized_matmul(a, w)
        with self.assertRaisesRegex(gemmd.InvalidArgument, "K must agree"):
            self.client.quantized_matmul(self.normal(4, 16), gemmd.quantize_int8(w))
        # Scale bytes that cannot be scales are the server's to refuse (a NaN E4M3).
        q = gemmd.quantize_nvfp4(w)
        bad = gemmd.QuantizedTensor("nvfp4", q.shape, q.data, b"\x7f" + q.scales[1:],
                                    q.tensor_scale)
        with self.assertRaises(gemmd.InvalidArgument) as raised:
            self.client.quantized_matmul(a, bad)
        self.assertFalse(raised.exception.client_side)
        self.assertIn("0x7f", raised.exception.message)


class StripedTest(OneServerTest):
    """Striped calls (striping.py): the same C, byte for byte, as over one connection,
    and no tensor left on the server."""

    def assertNothingStored(self):
        deadline = time.monotonic() + 10
        while len(self.client.list_tensors()) and time.monotonic() < deadline:
            time.sleep(0.01)  # a part stream's server side may end just after its answer
        self.assertEqual(len(self.client.list_tensors()), 0)

    def test_matmul_striped_equals_one_connection(self):
        a, b, c = self.normal(1024, 512), self.normal(512, 640), self.normal(1024, 640)
        for kw in ({}, {"c": c, "beta": -0.5, "alpha": 2.0}):
            one = self.client.matmul(a, b, stripes=1, **kw)
            many = self.client.matmul(a, b, stripes=4, **kw)
            self.assertEqual(many.tobytes(), one.tobytes())
            self.assertNothingStored()
        # Batched, FP16 in and out.
        a16, b16 = self.normal(3, 512, 384, dtype=np.float16), self.normal(384, 700, dtype=np.float16)
        one = self.client.matmul(a16, b16, output_dtype="float16", stripes=1)
        many = self.client.matmul(a16, b16, output_dtype="float16", stripes=3)
        self.assertEqual((many.dtype, many.shape), (np.float16, (3, 512, 700)))
        self.assertEqual(many.tobytes(), one.tobytes())
        self.assertNothingStored()

    def test_quantized_striped_equals_one_connection(self):
        b = gemmd.quantize_nvfp4(self.normal(1024, 1024))
        a = self.normal(512, 1024, dtype=np.float16)
        one = self.client.quantized_matmul(a, b, stripes=1)
        many = self.client.quantized_matmul(a, b, stripes=4)
        self.assertEqual(many.tobytes(), one.tobytes())
        self.assertNothingStored()

    def test_a_refused_call_leaves_nothing(self):
        a, b = self.normal(1024, 512), self.normal(512, 512)
        with self.assertRaises(gemmd.FailedPrecondition) as caught:
            self.client.matmul(a, b, kernel="no_such_kernel", stripes=2)
        self.assertIn("no_such_kernel", str(caught.exception))
        self.assertNothingStored()
        with self.assertRaises(gemmd.InvalidArgument):
            self.client.matmul(a, b, stripes=65)


class StreamTest(OneServerTest):
    """client.stream(): many requests on one MatmulStream, each answered through its
    future (C equal to the same unary call's), a bad one among good ones failing alone,
    tagged answers from results(), per-request deadlines checked client-side."""

    def test_many_requests_match_their_unary_calls(self):
        pairs = [(self.normal(int(m), 24), self.normal(24, int(n)))
                 for m, n in self.rng.integers(1, 40, size=(60, 2))]
        q = gemmd.quantize_nvfp4(self.normal(32, 64))
        a16 = self.normal(5, 64, dtype=np.float16)
        with self.client.stream(max_outstanding=8) as stream:
            futures = [stream.matmul(a, b) for a, b in pairs]
            self.assertLessEqual(stream.outstanding, 8)
            quantized = stream.quantized_matmul(a16, q, return_info=True)
        for (a, b), future in zip(pairs, futures):
            got = future.result()
            self.assertEqual(got.tobytes(), self.client.matmul(a, b).tobytes())
            want = a.astype(np.float64) @ b.astype(np.float64)
            self.assertLess(np.linalg.norm(got - want) / np.linalg.norm(want), 1e-5)
        info = quantized.result()
        self.assertEqual(info.c.tobytes(), self.client.quantized_matmul(a16, q).tobytes())
        self.assertGreater(info.timing.total_us, 0)

    def test_a_bad_request_fails_alone_and_results_come_tagged(self):
        a, b = self.normal(4, 8), self.normal(8, 3)
        with self.client.stream() as stream:
            good = stream.matmul(a, b, tag="good")
            bad = stream.matmul(a, self.normal(5, 3), tag="bad")  # K 8 against 5
            also = stream.matmul(a, b, precision="fp16_tensor", tag="also")
            answers = dict(stream.results())
        with self.assertRaises(gemmd.InvalidArgument) as raised:
            bad.result()
        self.assertIn("K", str(raised.exception))
        self.assertIsInstance(answers["bad"], gemmd.InvalidArgument)
        self.assertEqual(answers["good"].tobytes(), good.result().tobytes())
        self.assertEqual(answers["also"].shape, (4, 3))
        self.assertEqual(set(answers), {"good", "bad", "also"})

    def test_submitting_after_close_and_bad_arguments(self):
        stream = self.client.stream()
        stream.close()
        stream.close()  # again: nothing
        with self.assertRaises(gemmd.FailedPrecondition):
            stream.matmul(self.normal(2, 2), self.normal(2, 2)).result()
        with self.assertRaises(gemmd.InvalidArgument):
            self.client.stream(max_outstanding=0)
        with self.client.stream() as s:
            with self.assertRaises(gemmd.InvalidArgument):
                s.matmul(self.normal(2, 2), self.normal(2, 2), timeout_s=0)


class StreamBatchingTest(unittest.TestCase):
    """The stream's sender: requests queued while gRPC was sending go out as one batch
    (StreamRequest.batch), a lone one as itself, and the caller's close ends it."""

    def test_queued_requests_go_as_one_batch(self):
        import queue
        from gemmd import streaming
        pb = streaming.pb

        class Sender:
            _outgoing = queue.Queue()

        for i in (1, 2, 3):
            Sender._outgoing.put(pb.StreamRequest(id=i))
        Sender._outgoing.put(streaming._END)
        sent = list(streaming.Stream._requests(Sender()))
        self.assertEqual(len(sent), 1)
        self.assertEqual([r.id for r in sent[0].batch], [1, 2, 3])
        self.assertEqual(sent[0].id, 0)
        Sender._outgoing.put(pb.StreamRequest(id=4))
        Sender._outgoing.put(streaming._END)
        alone = list(streaming.Stream._requests(Sender()))
        self.assertEqual([(r.id, len(r.batch)) for r in alone], [(4, 0)])
        # At most 256 a message.
        for i in range(300):
            Sender._outgoing.put(pb.StreamRequest(id=i + 1))
        Sender._outgoing.put(streaming._END)
        self.assertEqual([len(r.batch) for r in streaming.Stream._requests(Sender())],
                         [256, 44])


class UnixSocketTest(unittest.TestCase):
    def test_matmul_over_a_unix_socket(self):
        directory = tempfile.mkdtemp(prefix="gemmd_unix_")
        path = os.path.join(directory, "gemmd.sock")
        server = Server("--unix_socket", path)
        try:
            with gemmd.Client(f"unix:{path}") as client:
                a = np.arange(12, dtype=np.float32).reshape(3, 4)
                b = np.ones((4, 2), np.float32)
                np.testing.assert_array_equal(client.matmul(a, b), a @ b)
                big_a = np.random.default_rng(1).standard_normal((1024, 512), np.float32)
                big_b = np.random.default_rng(2).standard_normal((512, 512), np.float32)
                self.assertEqual(client.matmul(big_a, big_b, stripes=3).tobytes(),
                                 client.matmul(big_a, big_b, stripes=1).tobytes())
        finally:
            server.stop()
            shutil.rmtree(directory, ignore_errors=True)


class SharedMemoryTest(OneServerTest):
    """Operands and C in a region of create_region(): the same C as inline calls, C
    written into the caller's array, and the server's refusals as their errors."""

    def test_matmul_through_a_region_matches_inline(self):
        with self.client.create_region("py", 8 << 20) as region:
            a = region.array((3, 64, 40), np.float32)
            b = region.array((40, 24), np.float32)
            c = region.array((3, 64, 24), np.float32)
            a[:] = self.normal(3, 64, 40)
            b[:] = self.normal(40, 24)
            c_in = self.normal(3, 64, 24)
            c[:] = c_in
            want = self.client.matmul(a.copy(), b.copy(), c_in, alpha=0.5, beta=-1.5)
            out = region.array((3, 64, 24), np.float32)
            got = self.client.matmul(a, b, c, alpha=0.5, beta=-1.5, out=out)
            self.assertIs(got, out)
            self.assertEqual(out.tobytes(), want.tobytes())
            # C updated in place: C's array is both C_in and out.
            self.client.matmul(a, b, c, alpha=0.5, beta=-1.5, out=c)
            self.assertEqual(c.tobytes(), want.tobytes())
            # FP16 out into an FP16 array; a weight-only QuantizedMatmul with A there.
            h = region.array((64, 24), np.float16)
            self.client.matmul(a[0], b, out=h)
            self.assertEqual(h.tobytes(),
                             self.client.matmul(a[0].copy(), b.copy(),
                                                output_dtype="float16").tobytes())
            q = gemmd.quantize_int8(self.normal(24, 40))
            qc = region.array((64, 24), np.float32)
            self.client.quantized_matmul(a[1], q, out=qc)
            self.assertEqual(qc.tobytes(), self.client.quantized_matmul(a[1].copy(), q).tobytes())
            # put_tensor of an array in the region: one chunk naming it.
            big = region.array((1024, 1536), np.float32)  # 6 MiB: more than a chunk
            big[:] = self.normal(1024, 1536)
            handle = self.client.put_tensor(big, label="from-shm")
            self.assertEqual(self.client.get_tensor(handle).tobytes(), big.tobytes())
            self.client.delete_tensor(handle)
            listed = self.client.list_regions()
            self.assertEqual([r.name for r in listed.regions], ["py"])
        self.assertEqual(len(self.client.list_regions().regions), 0)

    def test_refusals(self):
        with self.assertRaises(gemmd.InvalidArgument):  # out not in a region
            self.client.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                               out=np.empty((2, 2), np.float32))
        with self.assertRaises(gemmd.PermissionDenied):
            self.client.register_region("x", "/elsewhere")
        # A refused registration leaves no object behind.
        with self.assertRaises(gemmd.PermissionDenied):
            self.client.create_region("y", 4096, key="/elsewhere-py")
        self.assertFalse(os.path.exists("/dev/shm/elsewhere-py"))
        with self.assertRaises(gemmd.NotFound):
            self.client.unregister_region("nobody")
        with self.client.create_region("small", 4096) as region:
            out = region.array((2, 2), np.float32)
            with self.assertRaises(gemmd.InvalidArgument) as e:  # C is 3x2, out is 2x2
                self.client.matmul(np.ones((3, 2), np.float32), np.ones((2, 2), np.float32),
                                   out=out)
            self.assertIn("c_shm holds 16 bytes; C is 24", str(e.exception))
            with self.assertRaises(gemmd.AlreadyExists):
                self.client.register_region("small", region.key)
            with self.assertRaises(MemoryError):
                region.array((4096,), np.float32)


class ResidentTest(OneServerTest):
    def test_put_get_round_trip(self):
        b = self.normal(300, 4000)  # 4.8 MB: two chunks
        handle = self.client.put_tensor(b, label="rt-f32")
        self.assertIsInstance(handle, gemmd.Handle)
        self.assertTrue(handle.handle.startswith("t1-"), handle)
        self.assertEqual((handle.shape, handle.dtype), ((300, 4000), "float32"))
        got = self.client.get_tensor(handle)
        self.assertEqual(got.dtype, np.float32)
        self.assertEqual(got.tobytes(), b.tobytes())
        for x in (self.normal(2, 5, 7, dtype=np.float16),
                  gemmd.BFloat16.from_float(self.normal(6, 10))):
            h = self.client.put_tensor(x)
            got = self.client.get_tensor(h.handle)  # a plain string works too
            want = x.to_float32() if isinstance(x, gemmd.BFloat16) else x
            self.assertEqual(got.dtype, want.dtype)
            self.assertEqual(got.tobytes(), want.tobytes())
            self.client.delete_tensor(h)
        self.client.delete_tensor(handle)

    def test_quantized_round_trip_small_chunks(self):
        q = gemmd.quantize_nvfp4(self.normal(40, 64))
        # 1000-byte chunks: some carry the end of the data and the start of the scales.
        handle = self.client.put_tensor(q, chunk_bytes=1000, label="rt-nvfp4")
        self.assertEqual(handle.format, "nvfp4")
        got = self.client.get_tensor(handle)
        self.assertEqual((got.format, got.shape), ("nvfp4", q.shape))
        self.assertEqual((got.data, got.scales, got.tensor_scale),
                         (q.data, q.scales, q.tensor_scale))
        q8 = gemmd.quantize_int8(self.normal(3, 10))
        h8 = self.client.put_tensor(q8)
        got = self.client.get_tensor(h8)
        self.assertEqual((got.format, got.data, got.scales), ("int8", q8.data, q8.scales))
        self.client.delete_tensor(handle)
        self.client.delete_tensor(h8)

    def test_matmul_by_handle_equals_inline(self):
        a, b, c = self.normal(33, 70), self.normal(70, 45), self.normal(33, 45)
        inline = self.client.matmul(a, b, c, alpha=1.5, beta=0.5)
        hb = self.client.put_tensor(b)
        np.testing.assert_array_equal(self.client.matmul(a, hb, c, alpha=1.5, beta=0.5),
                                      inline)
        ha, hc = self.client.put_tensor(a), self.client.put_tensor(c)
        np.testing.assert_array_equal(self.client.matmul(ha, hb, hc, alpha=1.5, beta=0.5),
                                      inline)
        # Quantized by handle, too.
        q = gemmd.quantize_int8(self.normal(45, 70))
        hq = self.client.put_tensor(q)
        np.testing.assert_array_equal(self.client.quantized_matmul(a, hq),
                                      self.client.quantized_matmul(a, q))
        for h in (ha, hb, hc, hq):
            self.client.delete_tensor(h)

    def test_keep_c(self):
        a, b = self.normal(16, 32), self.normal(32, 24)
        inline = self.client.matmul(a, b)
        kept = self.client.matmul(a, b, keep_c=gemmd.KeepC(ttl_s=600, label="kept-c"))
        self.assertIsInstance(kept, gemmd.Handle)
        self.assertEqual(kept.shape, (16, 24))
        np.testing.assert_array_equal(self.client.get_tensor(kept), inline)
        listed = {t.handle: t for t in self.client.list_tensors()}
        self.assertEqual(listed[kept].label, "kept-c")
        self.assertGreater(listed[kept].expires_unix_ms, 0)
        # C by handle is an operand for the next GEMM; return_info shows the handle.
        d = self.normal(24, 8)
        result = self.client.matmul(kept, d, keep_c=True, return_info=True)
        self.assertIsNone(result.c)
        self.assertEqual(result.shape, (16, 8))
        np.testing.assert_allclose(self.client.get_tensor(result.c_ref),
                                   inline.astype(np.float64) @ d, rtol=1e-4, atol=1e-4)
        kq = self.client.quantized_matmul(a, gemmd.quantize_int8(self.normal(8, 32)),
                                          keep_c=True)
        self.assertEqual(self.client.get_tensor(kq).shape, (16, 8))
        for h in (kept, result.c_ref, kq):
            self.client.delete_tensor(h)

    def test_delete_then_not_found(self):
        handle = self.client.put_tensor(self.normal(8, 4))
        self.client.delete_tensor(handle)
        for call in (lambda: self.client.get_tensor(handle),
                     lambda: self.client.matmul(self.normal(3, 8), handle),
                     lambda: self.client.delete_tensor(handle)):
            with self.assertRaises(gemmd.NotFound) as raised:
                call()
            self.assertEqual(raised.exception.code, "NOT_FOUND")
            self.assertIsInstance(raised.exception, LookupError)
            self.assertIn(handle.handle[:20], raised.exception.message)

    def test_list_tensors_follows_every_page(self):
        # The server answers at most 1000 tensors a page; the client returns them all.
        before = {t.handle for t in self.client.list_tensors()}
        handles = [self.client.put_tensor(np.ones((1, 1), np.float32)) for _ in range(1003)]
        listed = [t.handle for t in self.client.list_tensors() if t.handle not in before]
        self.assertEqual(listed, handles)
        for h in handles:
            self.client.delete_tensor(h)

    def test_list_tensors(self):
        handle = self.client.put_tensor(self.normal(5, 6), label="listed-label", ttl_s=300)
        listing = self.client.list_tensors()
        mine = [t for t in listing if t.handle == handle]
        self.assertEqual(len(mine), 1)
        t = mine[0]
        self.assertEqual((t.label, t.shape, t.dtype, t.format), ("listed-label", (5, 6),
                                                                  "float32", None))
        self.assertTrue(t.complete)
        self.assertGreater(t.bytes, 0)
        self.assertGreater(listing.store_cap_bytes, 0)
        self.assertGreaterEqual(listing.store_bytes, t.bytes)
        self.client.delete_tensor(handle)

    def test_put_on_a_named_device(self):
        handle = self.client.put_tensor(self.normal(3, 4), device="cpu:0")
        listed = [t for t in self.client.list_tensors() if t.handle == handle]
        self.assertTrue(listed[0].device.startswith("cpu:0 "), listed[0].device)
        self.client.delete_tensor(handle)
        with self.assertRaises(gemmd.InvalidArgument) as raised:
            self.client.put_tensor(self.normal(3, 4), device="cuda:3")
        self.assertEqual(raised.exception.message,
                         'header.device "cuda:3" is no device of this server; '
                         'its devices: cpu:0')

    def test_float64_resident_round_trip_and_matmul(self):
        a = self.normal(5, 7, dtype=np.float64)
        b = self.normal(7, 3, dtype=np.float64)
        handle = self.client.put_tensor(b)
        back = self.client.get_tensor(handle)
        self.assertEqual(back.dtype, np.float64)
        np.testing.assert_array_equal(back, b)  # bit for bit
        c = self.client.matmul(a, handle)
        ref = a.astype(np.longdouble) @ b.astype(np.longdouble)
        self.assertEqual(c.dtype, np.float64)
        self.assertLess(float(np.abs((c - ref).astype(np.float64)).max()), 1e-13)
        self.client.delete_tensor(handle)

    def test_put_errors(self):
        with self.assertRaisesRegex(gemmd.InvalidArgument, "dtype int64"):
            self.client.put_tensor(np.ones((2, 2), np.int64))
        with self.assertRaisesRegex(gemmd.InvalidArgument, "chunk_bytes"):
            self.client.put_tensor(np.ones((2, 2), np.float32), chunk_bytes=5 << 20)
        with self.assertRaisesRegex(gemmd.InvalidArgument, "Handle or a handle string"):
            self.client.get_tensor(None)


class BalancingTest(unittest.TestCase):
    """One client over two servers: ipv4:a,b with round_robin and retries."""

    def setUp(self):
        self.servers = [Server(), Server()]
        target = "ipv4:" + ",".join(s.address for s in self.servers)
        self.client = gemmd.Client(target, timeout_s=30)

    def tearDown(self):
        self.client.close()
        for s in self.servers:
            s.stop()

    def instances_reached(self, calls):
        return {self.client.server_info().instance for _ in range(calls)}

    def test_both_servers_serve(self):
        # round_robin only counts a server once it is connected: allow a moment.
        seen = set()
        deadline = time.monotonic() + 10
        while seen != {s.instance for s in self.servers} and time.monotonic() < deadline:
            seen |= self.instances_reached(4)
        self.assertEqual(seen, {s.instance for s in self.servers})
        # Consecutive calls alternate: over 10 calls each server gets some.
        got = [self.client.server_info().instance for _ in range(10)]
        self.assertEqual(set(got), seen)
        a, b = np.ones((4, 8), np.float32), np.ones((8, 2), np.float32)
        for _ in range(6):
            np.testing.assert_array_equal(self.client.matmul(a, b), np.full((4, 2), 8.0))

    def check_survives_stop(self, sig):
        self.client.wait_ready(10)
        a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        ref = a.astype(np.float64) @ a
        failures, done, calls = [], threading.Event(), [0]

        def load():
            while not done.is_set():
                try:
                    self.assertLess(rel_error(self.client.matmul(a, a), ref), FP32_TOLERANCE)
                except Exception as e:  # every failure is reported, not just the first
                    failures.append(repr(e))
                calls[0] += 1

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        start = time.monotonic()
        self.servers[1].stop(sig)  # mid-load
        if sig == signal.SIGTERM:
            # The drain ends once calls stop arriving: the clients' health watch must have
            # taken the server out of rotation well before its 5 s grace period ran out.
            self.assertLess(time.monotonic() - start, 4.0)
        time.sleep(1.0)
        done.set()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        self.assertGreater(calls[0], 20)
        # Everything now lands on the survivor.
        self.assertEqual(self.instances_reached(6), {self.servers[0].instance})

    def test_calls_succeed_when_one_drains(self):
        self.check_survives_stop(signal.SIGTERM)

    def test_calls_succeed_when_one_is_killed(self):
        self.check_survives_stop(signal.SIGKILL)


class DrainTest(unittest.TestCase):
    """A server draining (SIGTERM) with accepted work: health() answers NOT_SERVING (its
    own channel), the accepted calls complete, new ones get Unavailable."""

    def test_health_not_serving_while_draining(self):
        server = Server("--shutdown_grace_s", "60")
        try:
            client = gemmd.Client(server.address, timeout_s=60)
            rng = np.random.default_rng(5)
            n = 4096  # ~0.1-1 s per product on a 2-core machine; four queue behind another
            a = client.put_tensor(rng.standard_normal((n, n), dtype=np.float32))
            b = client.put_tensor(rng.standard_normal((n, n), dtype=np.float32))
            results, failures = [], []

            def work():
                try:  # operands and C by handle: the calls are accepted at once
                    results.append(client.matmul(a, b, keep_c=True))
                except Exception as e:
                    failures.append(repr(e))

            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.3)
            server.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            status = client.health()
            while status == "SERVING" and time.monotonic() < deadline:
                time.sleep(0.01)
                status = client.health()
            self.assertEqual(status, "NOT_SERVING")
            with self.assertRaises(gemmd.Unavailable):
                client.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
            for t in threads:
                t.join()
            self.assertEqual(failures, [])
            self.assertEqual([h.shape for h in results], [(n, n)] * 4)
            self.assertEqual(server.process.wait(timeout=60), 0)
            client.close()
        finally:
            server.stop(signal.SIGKILL)



class SecurityTest(unittest.TestCase):
    """A server with mutual TLS and tokens: the client's tls_* and token arguments."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gemmd_security_")
        subprocess.run(["sh", os.path.join(REPO, "tests/security/make_test_certs.sh"), cls.dir],
                       check=True)
        cls.token = "alice-0123456789abcdef"
        tokens = os.path.join(cls.dir, "tokens")
        with open(tokens, "w") as f:
            f.write(f"# test\nalice:{cls.token}\n")
        c = lambda name: os.path.join(cls.dir, name)  # noqa: E731
        cls.c = staticmethod(c)
        cls.server = Server("--tls_cert_file", c("server.pem"), "--tls_key_file", c("server.key"),
                            "--tls_client_ca_file", c("ca.pem"), "--auth_tokens_file", tokens)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def client(self, **kw):
        return gemmd.Client(self.server.address, timeout_s=10, **kw)

    def test_tls_client_with_certificate_and_token_gets_the_right_product(self):
        rng = np.random.default_rng(11)
        a = rng.standard_normal((19, 23)).astype(np.float32)
        b = rng.standard_normal((23, 17)).astype(np.float32)
        with self.client(tls_ca_file=self.c("ca.pem"), tls_cert_file=self.c("client.pem"),
                         tls_key_file=self.c("client.key"), token=self.token) as client:
            c = client.matmul(a, b)
        self.assertLess(rel_error(c, a.astype(np.float64) @ b.astype(np.float64)),
                        FP32_TOLERANCE)

    def test_without_a_token_the_call_is_unauthenticated_but_health_answers(self):
        with self.client(tls_ca_file=self.c("ca.pem"), tls_cert_file=self.c("client.pem"),
                         tls_key_file=self.c("client.key")) as client:
            with self.assertRaises(gemmd.errors.Unauthenticated):
                client.list_tensors()
            self.assertEqual(client.health(), "SERVING")
        with self.client(tls_ca_file=self.c("ca.pem"), tls_cert_file=self.c("client.pem"),
                         tls_key_file=self.c("client.key"), token="wrong-0123456789abcdef") as client:
            with self.assertRaises(gemmd.errors.Unauthenticated) as caught:
                client.list_tensors()
            self.assertNotIn("wrong-0123456789abcdef", str(caught.exception))

    def test_without_a_client_certificate_the_handshake_fails(self):
        # gRPC says only "Socket closed"; the error says what is likely missing.
        with self.client(tls_ca_file=self.c("ca.pem"), token=self.token) as client:
            with self.assertRaises(gemmd.errors.Unavailable) as caught:
                client.list_tensors()
            self.assertIn("it may want a client certificate, tls_cert_file= and tls_key_file=",
                          caught.exception.message)
        with warnings.catch_warnings(record=True):
            client = self.client(token=self.token)  # plaintext
        with client:
            with self.assertRaises(gemmd.errors.Unavailable) as caught:
                client.list_tensors()
            self.assertIn("it may speak TLS only; pass tls_ca_file=", caught.exception.message)

    def test_a_token_file_newline_is_not_part_of_the_token_and_plaintext_warns(self):
        # As gemm-cli reads --token_file: "alice-...\n" is the token alice-...
        with self.client(tls_ca_file=self.c("ca.pem"), tls_cert_file=self.c("client.pem"),
                         tls_key_file=self.c("client.key"), token=self.token + "\n") as client:
            self.assertEqual(list(client.list_tensors()), [])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.client(token=self.token).close()
        self.assertEqual(len(caught), 1)
        self.assertIn("without TLS", str(caught[0].message))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.client(tls_ca_file=self.c("ca.pem"), token=self.token).close()
        self.assertEqual(caught, [])

    def test_bad_security_arguments_are_refused_before_any_call(self):
        with self.assertRaises(gemmd.errors.InvalidArgument):
            self.client(tls_ca_file=self.c("nope.pem"))
        with self.assertRaises(gemmd.errors.InvalidArgument):
            self.client(tls_cert_file=self.c("client.pem"))
        with self.assertRaises(gemmd.errors.InvalidArgument):
            self.client(token="two words")

def main():
    global SERVER, CLI, gemmd
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--server", default=os.environ.get("GEMM_SERVER"))
    parser.add_argument("--cli", default=os.environ.get("GEMM_CLI"))
    parser.add_argument("--stubs", default=os.environ.get("GEMMD_PROTO_DIR"))
    parser.add_argument("--generate", action="store_true")
    # The installed package (pip install clients/python), with the stubs its wheel holds.
    parser.add_argument("--installed", action="store_true")
    args, rest = parser.parse_known_args()
    SERVER = os.path.abspath(args.server or os.path.join(REPO, "build/server/gemm-server"))
    if not os.access(SERVER, os.X_OK):
        sys.exit(f"test_client.py: no gemm-server at {SERVER} (--server or GEMM_SERVER)")
    CLI = os.path.abspath(args.cli) if args.cli else None
    if args.installed:
        os.environ.pop("GEMMD_PROTO_DIR", None)
        import gemmd as module  # noqa: E402
        where = os.path.abspath(module.__file__)
        if where.startswith(PACKAGE_ROOT + os.sep):
            sys.exit(f"test_client.py: --installed, but gemmd came from the source tree ({where})")
        print(f"testing the installed gemmd at {os.path.dirname(where)}", flush=True)
        gemmd = module
        unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
        return
    stubs = args.stubs
    if not stubs or args.generate:
        if not stubs:
            stubs = tempfile.mkdtemp(prefix="gemmd_stubs_")
            atexit.register(shutil.rmtree, stubs, ignore_errors=True)
        subprocess.run(["bash", os.path.join(PACKAGE_ROOT, "generate.sh"), stubs], check=True)
    os.environ["GEMMD_PROTO_DIR"] = os.path.abspath(stubs)
    sys.path.insert(0, PACKAGE_ROOT)
    import gemmd as module  # noqa: E402 (the stub directory is known only now)
    gemmd = module
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
