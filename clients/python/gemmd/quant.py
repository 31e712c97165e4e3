"""Quantized operands (INT8, NVFP4) and bfloat16 values, laid out as the server reads them.

The quantizers mirror kernels/quant_formats.cc operation for operation (FP32 arithmetic
where the C++ code uses float, FP64 where it uses double, round-half-even everywhere), so
`quantize_nvfp4(w)` gives the very bytes `gemm-cli put --format nvfp4 w.npy` uploads. A
cheaper approximation would still be "valid" NVFP4, but results would then differ from
the C++ client's for the same weights, which is what users compare against.

Formats (kernels/quant_formats.h), both K-major [rows, K]:
  INT8:  one int8 per value, one little-endian FP32 scale per row; x = q * s,
         s = amax(row) / 127, q = rint(x / s) clamped to +-127; an all-zero row has s = 1.
  NVFP4: two E2M1 codes per byte (even K index in the low nibble), one E4M3 byte per 16
         values along K, one FP32 tensor scale g: x = e2m1 * e4m3 * g,
         g = amax / (448 * 6); K % 16 == 0; an all-zero tensor has g = 1.
"""
import numpy as np

from .errors import InvalidArgument

__all__ = ["QuantizedTensor", "quantize_int8", "quantize_nvfp4", "BFloat16"]

NVFP4_BLOCK = 16
_E4M3_MAX = np.float32(448.0)
_E2M1_MAX = np.float32(6.0)
_E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
_E2M1_SIGNED = np.concatenate([_E2M1_GRID, -_E2M1_GRID]).astype(np.float32)


def _e4m3_table():
    # DecodeE4m3 for all 256 bytes (exact in float32): NaN for 0x7F and 0xFF.
    table = np.empty(256, dtype=np.float32)
    for byte in range(256):
        exponent, mantissa = (byte >> 3) & 0xF, byte & 7
        if exponent == 0xF and mantissa == 7:
            value = np.nan
        elif exponent == 0:
            value = mantissa * 2.0 ** -9
        else:
            value = (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
        table[byte] = -value if byte & 0x80 else value
    return table


_E4M3 = _e4m3_table()


def _error(message):
    return InvalidArgument(message, client_side=True)


class QuantizedTensor:
    """A quantized K-major matrix [rows, K]: what QuantizedTensor carries on the wire.

    format: "int8" or "nvfp4"; data, scales: bytes as the server reads them;
    tensor_scale: NVFP4's FP32 tensor scale (unused by INT8)."""

    __slots__ = ("format", "shape", "data", "scales", "tensor_scale")

    def __init__(self, format, shape, data, scales, tensor_scale=1.0):
        fmt = str(format).lower()
        if fmt not in ("int8", "nvfp4"):
            raise _error(f"format {format!r} is not one of 'int8', 'nvfp4'")
        shape = tuple(int(d) for d in shape)
        if len(shape) != 2 or min(shape) <= 0:
            raise _error(f"a quantized tensor is [rows, K] with both > 0, got {list(shape)}")
        rows, k = shape
        if fmt == "int8":
            want = (rows * k, rows * 4)
        else:
            if k % NVFP4_BLOCK:
                raise _error(f"NVFP4 needs K to be a multiple of 16; K is {k}")
            want = (rows * k // 2, rows * (k // NVFP4_BLOCK))
        data, scales = bytes(data), bytes(scales)
        if (len(data), len(scales)) != want:
            raise _error(f"{fmt.upper()} {list(shape)} needs {want[0]} data bytes and "
                         f"{want[1]} scale bytes; got {len(data)} and {len(scales)}")
        self.format, self.shape, self.data, self.scales = fmt, shape, data, scales
        self.tensor_scale = float(np.float32(tensor_scale)) if fmt == "nvfp4" else 0.0

    @property
    def nbytes(self):
        """Bytes on the wire: data + scales."""
        return len(self.data) + len(self.scales)

    def dequantize(self):
        """The values as float32 [rows, K], computed as the server computes them."""
        rows, k = self.shape
        if self.format == "int8":
            q = np.frombuffer(self.data, dtype=np.int8).reshape(rows, k)
            s = np.frombuffer(self.scales, dtype="<f4").astype(np.float32)
            return q.astype(np.float32) * s[:, None]
        scale_bytes = np.frombuffer(self.scales, dtype=np.uint8).reshape(rows, k // NVFP4_BLOCK)
        bad = np.flatnonzero((scale_bytes.ravel() & 0x7F) == 0x7F)
        if bad.size:
            r, b = divmod(int(bad[0]), k // NVFP4_BLOCK)
            raise _error(f"NVFP4 block scale [{r}, {b}] is 0x{scale_bytes[r, b]:x}, a NaN "
                         "in E4M3 (0x7F and 0xFF are not scales)")
        packed = np.frombuffer(self.data, dtype=np.uint8).reshape(rows, k // 2)
        codes = np.empty((rows, k), dtype=np.uint8)
        codes[:, 0::2] = packed & 0xF
        codes[:, 1::2] = packed >> 4
        scale = np.repeat(_E4M3[scale_bytes], NVFP4_BLOCK, axis=1)
        # (e2m1 * e4m3) * g, in float32 and in that order: e2m1 * e4m3 is exact, the
        # tensor scale adds the only rounding (as in DequantizeNvfp4).
        return (_E2M1_SIGNED[codes] * scale) * np.float32(self.tensor_scale)

    def __repr__(self):
        extra = f", tensor_scale={self.tensor_scale!r}" if self.format == "nvfp4" else ""
        return f"QuantizedTensor({self.format!r}, shape={list(self.shape)}{extra})"


def _as_matrix(w, fmt):
    if isinstance(w, (QuantizedTensor, BFloat16)):
        raise _error(f"cannot quantize to {fmt}: pass the float values (a numpy array), "
                     f"not a {type(w).__name__}")
    w = np.asarray(w)
    if w.dtype.kind != "f":
        raise _error(f"cannot quantize to {fmt}: expected a floating-point array "
                     f"(float16/32/64), got dtype {w.dtype}")
    if w.ndim != 2:
        raise _error(f"cannot quantize to {fmt}: expected a 2-D array [rows, K], got "
                     f"shape {list(w.shape)}")
    if w.shape[0] <= 0 or w.shape[1] <= 0:
        raise _error(f"a quantized matrix needs rows and cols > 0, got {list(w.shape)}")
    # The C++ quantizer takes float: wider inputs are rounded to FP32 first, as gemm-cli
    # does when it loads a float64 .npy.
    x = np.ascontiguousarray(w, dtype=np.float32)
    finite = np.isfinite(x)
    if not finite.all():
        i = int(np.flatnonzero(~finite.ravel())[0])
        raise _error(f"cannot quantize to {fmt}: element {i} is {x.ravel()[i]} (NaN and "
                     f"Inf have no {fmt} encoding)")
    return x


def quantize_int8(w):
    """INT8 with one FP32 scale per row, for a float [rows, K] array."""
    x = _as_matrix(w, "INT8")
    amax = np.abs(x).max(axis=1)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    q = np.clip(np.rint(x / scale[:, None]), -127, 127).astype(np.int8)
    return QuantizedTensor("int8", x.shape, q.tobytes(), scale.astype("<f4").tobytes())


def _encode_e4m3(v):
    """EncodeE4m3 on an array of float32 >= 0 (FP64 arithmetic, ties to even)."""
    v = v.astype(np.float64)
    out = np.zeros(v.shape, dtype=np.int64)
    sub = (v > 0) & (v < 2.0 ** -6)
    # Subnormals step by 2^-9; a count of 8 is byte 0x08, the smallest normal.
    out[sub] = np.rint(np.ldexp(v[sub], 9)).astype(np.int64)
    normal = (v >= 2.0 ** -6) & (v < float(_E4M3_MAX))
    f, e = np.frexp(v[normal])  # v = f * 2^e, f in [0.5, 1)
    exponent = e.astype(np.int64) - 1 + 7
    mantissa = np.rint((2.0 * f - 1.0) * 8.0).astype(np.int64)
    carry = mantissa == 8
    mantissa[carry] = 0
    exponent[carry] += 1
    out[normal] = np.minimum((exponent << 3) | mantissa, 0x7E)
    out[v >= float(_E4M3_MAX)] = 0x7E  # clamp to 448
    return out.astype(np.uint8)


def _encode_e2m1(y):
    """EncodeE2m1 on a float32 array: nearest code, ties to the even code, clamped to 6."""
    a = np.abs(y)
    i = np.clip(np.searchsorted(_E2M1_GRID, a, side="right") - 1, 0, 6)
    mid = np.float32(0.5) * (_E2M1_GRID[i] + _E2M1_GRID[i + 1])
    code = np.where(a < mid, i, np.where(a > mid, i + 1, np.where(i % 2 == 0, i, i + 1)))
    code = np.where(a < _E2M1_MAX, code, 7).astype(np.uint8)
    return np.where(np.signbit(y), code | 8, code).astype(np.uint8)


def quantize_nvfp4(w):
    """NVFP4 (E2M1 values, E4M3 scale per 16 along K, FP32 tensor scale) for a float
    [rows, K] array; K must be a multiple of 16."""
    x = _as_matrix(w, "NVFP4")
    rows, k = x.shape
    if k % NVFP4_BLOCK:
        raise _error(f"NVFP4 needs K to be a multiple of 16 (one scale per 16 values along "
                     f"K); K is {k}: pad K with zeros to {(k + 15) // 16 * 16}")
    amax = np.float32(np.abs(x).max())
    g = amax / (_E4M3_MAX * _E2M1_MAX) if amax > 0 else np.float32(1.0)
    g = np.float32(g)
    blocks = x.reshape(rows, k // NVFP4_BLOCK, NVFP4_BLOCK)
    block_amax = np.abs(blocks).max(axis=2)
    scale_bytes = _encode_e4m3((block_amax / _E2M1_MAX) / g)  # two float32 divisions
    denominator = _E4M3[scale_bytes] * g
    with np.errstate(divide="ignore", invalid="ignore"):
        y = blocks / denominator[:, :, None]
    codes = np.where(denominator[:, :, None] > 0, _encode_e2m1(y), 0).astype(np.uint8)
    codes = codes.reshape(rows, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return QuantizedTensor("nvfp4", x.shape, packed.astype(np.uint8).tobytes(),
                           scale_bytes.tobytes(), float(g))


class BFloat16:
    """bfloat16 values held as their uint16 bit patterns (numpy has no bfloat16 dtype).

    Pass one wherever the client takes a dense operand; build it with
    BFloat16.from_float(x) (round to nearest even). Arrays of ml_dtypes.bfloat16 are
    accepted directly too."""

    __slots__ = ("bits",)

    def __init__(self, bits):
        bits = np.asarray(bits)
        if bits.dtype != np.uint16:
            raise _error(f"BFloat16 holds uint16 bit patterns, got dtype {bits.dtype}; "
                         "use BFloat16.from_float(x) for values")
        self.bits = bits

    @classmethod
    def from_float(cls, x):
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        rounded = ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
        # A NaN stays a (quiet) NaN: rounding could carry it into Inf.
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return cls(np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded))

    def to_float32(self):
        """The values, exactly, as float32."""
        return (self.bits.astype(np.uint32) << 16).view(np.float32)

    @property
    def shape(self):
        return self.bits.shape

    @property
    def ndim(self):
        return self.bits.ndim

    def __repr__(self):
        return f"BFloat16(shape={list(self.shape)})"
