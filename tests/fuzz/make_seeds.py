#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).
The formats of validation_fuzz and put_tensor_fuzz are in their functions below.

wire_fuzz:
Each seed is one byte (the piece size the target splits the rest into) followed by a
protobuf message written by hand: MatmulRequests, QuantizedMatmulRequests, a
MatmulResponse and MatmulStream's StreamRequests and StreamResponses, in canonical and
unusual field orders, with unknown fields. Run it again
after changing the messages; the files are small and kept in the repository.
"""
import os
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
OUT = os.path.join(CORPUS, "wire_fuzz")


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(field, wire_type):
    return varint(field << 3 | wire_type)


def ld(field, body):
    return tag(field, 2) + varint(len(body)) + body


def vi(field, v):
    return tag(field, 0) + varint(v)


def f32(field, x):
    return tag(field, 5) + struct.pack("<f", x)


def f64(field, x):
    return tag(field, 1) + struct.pack("<d", x)


def tensor(shape, dtype, data, packed=True):
    shape_bytes = ld(1, b"".join(varint(d) for d in shape)) if packed else b"".join(
        vi(1, d) for d in shape)
    return shape_bytes + vi(2, dtype) + ld(3, data)


def qtensor(shape, fmt, data, scales, tensor_scale=None):
    body = ld(1, b"".join(varint(d) for d in shape)) + vi(2, fmt) + ld(3, data) + ld(4, scales)
    if tensor_scale is not None:
        body += f32(5, tensor_scale)
    return body


def seeds():
    a = tensor([2, 4], 1, bytes(range(32)))
    b = tensor([4, 3], 1, bytes(range(48)))
    yield "matmul_plain", ld(1, a) + ld(2, b)
    yield "matmul_all_fields", (ld(1, a) + ld(2, b) + ld(3, tensor([2, 3], 1, bytes(24))) +
                                f32(4, 0.5) + f32(5, 1.0) + vi(6, 1) + vi(7, 0) + vi(8, 2) +
                                vi(9, 2) + ld(10, b"cpu_sgemm_openblas"))
    unknown = vi(99, 7) + tag(100, 1) + bytes(8) + f32(101, 2.0) + ld(102, b"xyz")
    yield "matmul_reordered_unknown", (vi(8, 1) + unknown + ld(2, tensor([4, 3], 1, bytes(48),
                                                                         packed=False)) +
                                       ld(1, unknown + tensor([2, 4], 1, bytes(32))))
    # FLOAT64 operands, precision FP64, C FLOAT64, alpha and beta in FP64.
    yield "matmul_fp64", (ld(1, tensor([2, 4], 6, bytes(64))) + ld(2, tensor([4, 3], 6, bytes(96))) +
                          ld(3, tensor([2, 3], 6, bytes(48))) + vi(8, 3) + vi(9, 6) +
                          f64(17, 1 / 3) + f64(18, -0.25))
    yield "matmul_fp16_batched", ld(1, tensor([2, 2, 4], 2, bytes(32))) + ld(
        2, tensor([4, 2], 2, bytes(16)))
    yield "quantized_int8", (ld(1, qtensor([2, 32], 1, bytes(64), struct.pack("<2f", 1, 2))) +
                             ld(3, qtensor([3, 32], 1, bytes(96), struct.pack("<3f", 1, 2, 3))))
    yield "quantized_nvfp4_weight_only", (ld(2, tensor([1, 32], 1, bytes(128))) +
                                          ld(3, qtensor([2, 32], 2, bytes(32), bytes([0x38] * 4),
                                                        0.5)) + ld(4, b"k"))
    handle = ld(1, b"t1-0123456789abcdef-00112233445566778899aabbccddeeff")
    yield "matmul_by_reference", (ld(1, a) + ld(12, handle) + ld(13, handle) + f32(5, 1.0) +
                                  ld(14, vi(1, 60) + ld(2, b"C")))
    yield "quantized_by_reference", ld(2, tensor([1, 32], 1, bytes(128))) + ld(6, handle)
    header = ld(1, b"".join(varint(d) for d in [2, 32])) + vi(3, 2) + f32(4, 0.5) + vi(5, 60) + \
        ld(6, b"weights")
    yield "tensor_chunk_header", ld(1, header) + ld(2, bytes(32)) + ld(3, bytes([0x38] * 4))
    yield "tensor_chunk_part", ld(1, ld(8, handle) + vi(9, 1)) + ld(2, bytes(16))
    yield "tensor_chunk_data", ld(2, bytes(range(64))) + ld(3, bytes(8))
    region = ld(1, b"r") + vi(2, 4096) + vi(3, 32)  # a RegionSlice
    yield "matmul_in_a_region", (ld(1, ld(1, b"".join(varint(d) for d in [2, 4])) + vi(2, 1) +
                                    ld(4, region)) + ld(2, b) + ld(15, region))
    yield "quantized_in_a_region", (ld(1, ld(1, b"".join(varint(d) for d in [2, 32])) +
                                       vi(2, 1) + ld(6, region) + ld(7, region)) +
                                    ld(3, qtensor([3, 32], 1, bytes(96),
                                                  struct.pack("<3f", 1, 2, 3))) + ld(8, region))
    yield "tensor_chunk_region", ld(1, header) + ld(4, region) + ld(5, region)
    response = (ld(1, tensor([2, 3], 1, bytes(24))) + ld(2, b"cpu_sgemm_openblas") +
                ld(3, b"cpu:0") + ld(4, vi(1, 3) + vi(3, 40) + vi(6, 1)) + vi(5, 1))
    yield "response", response
    # MatmulStream's envelopes: a StreamRequest around each kind of call, and answers.
    yield "stream_matmul", vi(1, 7) + ld(2, ld(1, a) + ld(2, b)) + vi(4, 2500)
    yield "stream_quantized", vi(1, 1 << 40) + ld(3, ld(2, tensor([1, 32], 1, bytes(128))) +
                                                     ld(6, handle))
    yield "stream_response", vi(1, 7) + ld(4, response)
    yield "stream_error", vi(1, 8) + vi(2, 3) + ld(3, b"b.data has 16 bytes")


def npy(descr, shape, payload, version=1):
    """A .npy file written by hand (as numpy.save would), header padded to 64 bytes."""
    dims = "".join(f"{d}, " if len(shape) == 1 else f"{d}, " for d in shape).rstrip(", ")
    if len(shape) == 1:
        dims += ","
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    size_bytes = 2 if version == 1 else 4
    pad = (-(10 + (size_bytes - 2) + len(header) + 1)) % 64
    header = (header + " " * pad + "\n").encode()
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + payload


def npy_seeds():
    yield "f4_2d", npy("<f4", [2, 3], struct.pack("<6f", *range(6)))
    yield "f2_3d", npy("<f2", [2, 1, 2], bytes(8))
    yield "f4_1d", npy("<f4", [3], bytes(12))
    yield "f4_v2", npy("<f4", [1, 1], bytes(4), version=2)
    yield "f4_empty", npy("<f4", [0, 4], b"")
    yield "f8_2d", npy("<f8", [2, 2], struct.pack("<4d", 0.1, 0.2, 0.3, 1e-300))
    yield "i8_refused", npy("<i8", [1, 1], bytes(8))
    yield "truncated", npy("<f4", [4, 4], bytes(10))


def token_seeds():
    yield "two_tenants", b"# tenants\nalice:alice-0123456789abcdef\nbob : bob-fedcba9876543210\n"
    yield "rotation", b"alice:alice-0123456789abcdef\nalice:alice-new-0123456789ab\n\n"
    yield "short", b"alice:short\n"
    yield "duplicate", b"a:aaaaaaaaaaaaaaaaaaaa\nb:aaaaaaaaaaaaaaaaaaaa\n"
    yield "no_colon", b"alice alice-0123456789abcdef\n"


def validation_seeds():
    """validation_fuzz: a flags byte (bit 0 QuantizedMatmul; bits 1-4 resident A, B, C,
    kept C), then the message."""
    a = tensor([2, 4], 1, struct.pack("<8f", *range(8)))
    b = tensor([4, 3], 1, struct.pack("<12f", *range(12)))
    c = tensor([2, 3], 1, struct.pack("<6f", *range(6)))
    yield "matmul_plain", bytes([0]) + ld(1, a) + ld(2, b)
    yield "matmul_beta_c", bytes([0]) + ld(1, a) + ld(2, b) + ld(3, c) + f32(4, 0.5) + f32(5, 2.0)
    yield "matmul_transposed", bytes([0]) + ld(1, tensor([4, 2], 1, bytes(32))) + ld(
        2, tensor([3, 4], 1, bytes(48))) + vi(6, 1) + vi(7, 1)
    yield "matmul_batched_broadcast", bytes([0]) + ld(1, tensor([3, 2, 4], 2, bytes(48))) + ld(
        2, tensor([4, 3], 2, bytes(24))) + vi(8, 2) + vi(9, 1)
    yield "matmul_bf16_out_fp16", bytes([0]) + ld(1, tensor([2, 4], 3, bytes(16))) + ld(
        2, tensor([4, 3], 3, bytes(24))) + vi(11, 2)
    yield "matmul_fp64_beta_c", bytes([0]) + ld(1, tensor([2, 4], 6, struct.pack(
        "<8d", *range(8)))) + ld(2, tensor([4, 3], 6, struct.pack("<12d", *range(12)))) + ld(
        3, tensor([2, 3], 6, struct.pack("<6d", *range(6)))) + f64(17, 1 / 3) + f64(18, 1e-300)
    yield "matmul_resident_kept", bytes([2 | 4 | 16]) + ld(1, a) + ld(2, b)
    yield "matmul_k_mismatch", bytes([0]) + ld(1, a) + ld(2, tensor([5, 3], 1, bytes(60)))
    yield "quantized_int8", bytes([1]) + ld(1, qtensor([2, 32], 1, bytes(64), struct.pack(
        "<2f", 1, 2))) + ld(3, qtensor([3, 32], 1, bytes(96), struct.pack("<3f", 1, 2, 3)))
    yield "quantized_nvfp4", bytes([1]) + ld(1, qtensor([2, 32], 2, bytes(32), bytes([0x38] * 4),
                                                        0.5)) + ld(
        3, qtensor([3, 32], 2, bytes(range(48)), bytes([0x38] * 6), 2.0))
    yield "quantized_weight_only_fp16", bytes([1]) + ld(2, tensor([2, 32], 2, bytes(128))) + ld(
        3, qtensor([2, 32], 2, bytes(32), bytes([0x38] * 4), 0.5))
    yield "quantized_resident_b", bytes([1 | 4]) + ld(2, tensor([1, 32], 1, bytes(128))) + ld(
        3, qtensor([2, 32], 1, bytes(64), struct.pack("<2f", float("nan"), 1)))


def put_tensor_seeds():
    """put_tensor_fuzz: records (see put_tensor_fuzz.cc): stream << 4 | action, then a
    chunk with a 2-byte length, or one byte for actions 11, 14 and 15."""

    def chunk(stream, body, split=None):
        if split is None:
            return bytes([stream << 4 | 0]) + struct.pack("<H", len(body)) + body
        return bytes([stream << 4 | 11, split]) + struct.pack("<H", len(body)) + body

    def complete(stream):
        return bytes([stream << 4 | 12])

    def header(shape, dtype=0, fmt=0, scale=None, parts=0, label=b"", device=b""):
        h = ld(1, b"".join(varint(d) for d in shape))
        if dtype:
            h += vi(2, dtype)
        if fmt:
            h += vi(3, fmt)
        if scale is not None:
            h += f32(4, scale)
        if parts:
            h += vi(7, parts)
        if label:
            h += ld(6, label)
        if device:
            h += ld(10, device)
        return ld(1, h)

    yield "dense_one_chunk", chunk(0, header([2, 4], dtype=1) + ld(2, bytes(range(32)))) + \
        complete(0)
    yield "dense_fp64", chunk(0, header([2, 4], dtype=6) + ld(2, bytes(range(64)))) + \
        complete(0)
    yield "dense_three_chunks", chunk(0, header([2, 2, 4], dtype=2, label=b"w")) + chunk(
        0, ld(2, bytes(range(16)))) + chunk(0, ld(2, bytes(16)), split=3) + complete(0)
    yield "int8", chunk(0, header([2, 32], fmt=1) + ld(2, bytes(64)) + ld(
        3, struct.pack("<2f", 0.5, 2))) + complete(0)
    yield "nvfp4_scales_later", chunk(2, header([2, 32], fmt=2, scale=0.5) + ld(2, bytes(32))) + \
        chunk(2, ld(3, bytes([0x38] * 4))) + complete(2)
    yield "parts", chunk(0, header([4, 4], dtype=1, parts=2)) + complete(0) + bytes(
        [1 << 4 | 14, 0x00]) + chunk(1, ld(2, bytes(32))) + complete(1) + bytes(
        [2 << 4 | 14, 0x10]) + chunk(2, ld(2, bytes(32))) + complete(2) + bytes(
        [1 << 4 | 14, 0x10]) + chunk(1, ld(2, bytes(32))) + complete(1)
    yield "disconnect_and_delete", chunk(0, header([8, 8], dtype=1)) + chunk(
        0, ld(2, bytes(64))) + bytes([0 << 4 | 13]) + chunk(1, header([1, 4], dtype=1) + ld(
            2, bytes(16))) + complete(1) + bytes([15, 0])
    yield "named_devices", chunk(0, header([2, 4], dtype=1, device=b"host:0") + ld(
        2, bytes(32))) + complete(0) + chunk(1, header([2, 4], dtype=1, device=b"cuda:7")) + \
        complete(1) + chunk(2, header([4, 4], dtype=1, parts=2, device=b"host:0")) + \
        complete(2)
    yield "too_few_bytes", chunk(0, header([2, 4], dtype=1) + ld(2, bytes(8))) + complete(0)
    # Bytes from the tenant's region "r": the whole tensor in one chunk, then a part of
    # an opened tensor from there, and a slice beyond the region.
    def region(offset, nbytes, name=b"r"):
        return ld(1, name) + vi(2, offset) + vi(3, nbytes)
    yield "from_a_region", chunk(0, header([64, 64], dtype=1) + ld(4, region(4096, 16384))) + \
        complete(0) + chunk(1, header([4, 4], dtype=1, parts=2)) + complete(1) + bytes(
            [2 << 4 | 14, 0x00]) + chunk(2, ld(4, region(8, 32))) + complete(2) + chunk(
            0, header([2, 4], dtype=1) + ld(4, region((1 << 20) - 16, 32))) + complete(0) + \
        chunk(1, header([2, 4], dtype=1) + ld(4, region(0, 32, b"nobody"))) + complete(1)


def write(target, named):
    out = os.path.join(CORPUS, target)
    os.makedirs(out, exist_ok=True)
    for name, body in named:
        with open(os.path.join(out, name), "wb") as f:
            f.write(body)


def main():
    write("npy_fuzz", npy_seeds())
    write("tokens_fuzz", token_seeds())
    write("validation_fuzz", validation_seeds())
    write("put_tensor_fuzz", put_tensor_seeds())
    os.makedirs(OUT, exist_ok=True)
    for name, body in seeds():
        for piece in (0, 6):  # whole-ish pieces (64 bytes) and 7-byte pieces
            path = os.path.join(OUT, f"{name}_{piece + 1}")
            with open(path, "wb") as f:
                f.write(bytes([63 if piece == 0 else piece]) + body)


if __name__ == "__main__":
    main()
