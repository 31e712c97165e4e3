"""gemmd.Client: numpy in, numpy out, over one gRPC channel."""
import json
import threading
import warnings
from dataclasses import dataclass, field
from typing import Optional, Tuple

import grpc
import numpy as np

from . import errors, shm, streaming, striping
from ._stubs import gemm_pb2 as pb
from ._stubs import gemm_pb2_grpc
from ._stubs import health_pb2, health_pb2_grpc
from .quant import BFloat16, QuantizedTensor

__all__ = ["Client", "Handle", "KeepC", "MatmulResult", "Timing", "TensorInfo", "TensorList",
           "DEFAULT_SERVICE_CONFIG"]

# round_robin: a target that resolves to several addresses ("ipv4:a:1,b:2",
# "dns:///gemmd:50051") spreads calls over all of them; gRPC's default, pick_first, would
# send everything to one. Retry on UNAVAILABLE: what a draining server (SIGTERM) or one
# with no healthy device answers, before it has done any work, so another attempt (on
# another address, round_robin picks again) is safe; gRPC also retries then after
# connection failures. No other code is retried: they are answers, not outages.
# healthCheckConfig: each connection watches grpc.health.v1 (Watch), and round_robin
# stops picking a server once it reports NOT_SERVING, which a draining server does right
# after it starts refusing work. Without it a client under steady load keeps the
# draining server busy answering UNAVAILABLE until its grace period runs out, and the
# calls it is still sent then are CANCELLED (not retried). A server without the health
# service counts as healthy.
DEFAULT_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [{
        "name": [{"service": "gemm.v1.GemmService"}, {"service": "grpc.health.v1.Health"}],
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }],
}

# The server answers up to --max_message_bytes (512 MiB by default) and gRPC caps a
# message at 2 GiB; grpcio's default receive limit (4 MiB) would refuse any C over 1M
# floats. The server enforces its own limits, so the client takes what it is sent.
_MAX_MESSAGE = 2**31 - 1
# gRPC retries a call only while its request is still buffered (256 KiB by default),
# which would leave any real Matmul unretried (a draining server refuses new calls with
# UNAVAILABLE, which is retried on another). The buffer keeps a reference to the request
# gRPC already holds until the first response arrives; the server's default
# --max_message_bytes is the most worth keeping.
_RETRY_BUFFER = 512 << 20
CHUNK_BYTES = 4 << 20  # PutTensor: data + scales per TensorChunk, at most (server limit)

_DTYPES = {
    pb.DATA_TYPE_FLOAT32: "float32", pb.DATA_TYPE_FLOAT16: "float16",
    pb.DATA_TYPE_BFLOAT16: "bfloat16", pb.DATA_TYPE_INT8: "int8", pb.DATA_TYPE_INT32: "int32",
    pb.DATA_TYPE_FLOAT64: "float64",
}
_DTYPE_ENUM = {name: value for value, name in _DTYPES.items()}
_NUMPY = {pb.DATA_TYPE_FLOAT32: "<f4", pb.DATA_TYPE_FLOAT16: "<f2", pb.DATA_TYPE_INT8: "i1",
          pb.DATA_TYPE_INT32: "<i4", pb.DATA_TYPE_FLOAT64: "<f8"}
_FORMATS = {pb.QUANT_FORMAT_INT8: "int8", pb.QUANT_FORMAT_NVFP4: "nvfp4"}
_FORMAT_ENUM = {name: value for value, name in _FORMATS.items()}
_PRECISIONS = {"auto": pb.PRECISION_AUTO, "fp32": pb.PRECISION_FP32,
               "fp16_tensor": pb.PRECISION_FP16_TENSOR, "fp64": pb.PRECISION_FP64}
_PRECISION_NAMES = {pb.PRECISION_AUTO: "AUTO", pb.PRECISION_FP32: "FP32",
                    pb.PRECISION_FP16_TENSOR: "FP16_TENSOR", pb.PRECISION_FP64: "FP64"}
_DEFAULT = object()  # "the client's timeout", as distinct from None ("no deadline")


def _invalid(message):
    return errors.InvalidArgument(message, client_side=True)


@dataclass(frozen=True)
class Handle:
    """A resident tensor on the server (PutTensor, keep_c). Use it as an operand.

    Valid only on the server instance that issued it: with a client balanced over
    several servers, resident tensors need one client per server."""
    handle: str
    shape: Optional[Tuple[int, ...]] = field(default=None, compare=False)
    dtype: Optional[str] = field(default=None, compare=False)   # dense tensors
    format: Optional[str] = field(default=None, compare=False)  # quantized tensors
    label: str = field(default="", compare=False)

    def __str__(self):
        return self.handle


@dataclass(frozen=True)
class KeepC:
    """keep_c= for matmul/quantized_matmul: C stays on the server (ttl_s 0 = until
    deleted)."""
    ttl_s: int = 0
    label: str = ""


@dataclass(frozen=True)
class Timing:
    """Server-side phases of one request, microseconds (gemm.v1.Timing)."""
    queue_us: int
    copy_in_us: int
    compute_us: int
    copy_out_us: int
    total_us: int
    batch_size: int


@dataclass
class MatmulResult:
    """matmul(..., return_info=True): C (None when kept on the server) and how it ran."""
    c: Optional[np.ndarray]
    c_ref: Optional[Handle]
    shape: Tuple[int, ...]
    dtype: str
    kernel: str
    device: str
    precision: str
    timing: Timing


@dataclass
class TensorInfo:
    """One resident tensor, as ListTensors reports it."""
    handle: Handle
    shape: Tuple[int, ...]
    dtype: Optional[str]
    format: Optional[str]
    tensor_scale: float
    bytes: int
    device: str
    created_unix_ms: int
    expires_unix_ms: int  # 0 = never
    label: str
    complete: bool


class TensorList(list):
    """list_tensors(): TensorInfo items, plus the store's use and cap in bytes."""

    def __init__(self, items, store_bytes, store_cap_bytes):
        super().__init__(items)
        self.store_bytes = store_bytes
        self.store_cap_bytes = store_cap_bytes


def _dtype_name(x):
    """The wire dtype name of a dense operand, or an InvalidArgument saying why not."""
    if isinstance(x, BFloat16):
        return "bfloat16"
    if x.dtype == np.float32:
        return "float32"
    if x.dtype == np.float16:
        return "float16"
    if x.dtype == np.float64:
        return "float64"
    if x.dtype.name == "bfloat16" and x.dtype.itemsize == 2:  # ml_dtypes, jax, ...
        return "bfloat16"
    return None


def _dense(x, what, ranks=(2, 3)):
    """A numpy / BFloat16 operand as a gemm.v1.Tensor, after checking what the client
    can check (rank, dtype, empty dimensions) so the mistake is named here."""
    if isinstance(x, QuantizedTensor):
        raise _invalid(f"{what} is a QuantizedTensor; Matmul takes dense operands "
                       "(use quantized_matmul)")
    if not isinstance(x, (np.ndarray, BFloat16)):
        try:
            x = np.asarray(x)
        except Exception as e:  # an object numpy cannot make an array of
            raise _invalid(f"{what}: expected a numpy array, got {type(x).__name__}") from e
    name = _dtype_name(x)
    if name is None:
        hint = " (convert with .astype(np.float32))" if x.dtype.kind in "fiub" else ""
        raise _invalid(f"{what} has dtype {x.dtype}; the service takes float32, float16, "
                       f"bfloat16 and float64{hint}")
    if x.ndim not in ranks:
        expected = " or ".join(f"{r}-D" for r in ranks)
        raise _invalid(f"{what} must be {expected} ([rows, cols]"
                       f"{' or [batch, rows, cols]' if 3 in ranks else ''}), got shape "
                       f"{list(x.shape)}")
    if min(x.shape) <= 0:
        raise _invalid(f"{what} has an empty dimension: shape {list(x.shape)}")
    if isinstance(x, BFloat16):
        data = np.ascontiguousarray(x.bits, dtype="<u2").tobytes()
    elif name == "bfloat16":
        data = np.ascontiguousarray(x).view(np.uint16).astype("<u2", copy=False).tobytes()
    else:
        # Row-major little-endian, whatever the array's own order and byte order.
        data = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<")).tobytes()
    return pb.Tensor(shape=list(x.shape), dtype=_DTYPE_ENUM[name], data=data)


def _set_scalars(request, alpha, beta):
    """alpha and beta in the FP32 fields (what a server without the FP64 ones reads), and
    in the FP64 ones where FP32 cannot hold them exactly."""
    with np.errstate(over="ignore"):  # beyond FP32's range: the FP64 field carries it
        alpha32, beta32 = float(np.float32(alpha)), float(np.float32(beta))
    request.alpha = alpha32
    request.beta = beta32
    if alpha32 != alpha:
        request.alpha_f64 = alpha
    if beta32 != beta:
        request.beta_f64 = beta


def _decode(dtype, shape, data):
    """Wire bytes -> a writable numpy array. BFLOAT16 widens to float32 (exactly):
    numpy has no bfloat16."""
    shape = tuple(shape)
    if dtype == pb.DATA_TYPE_BFLOAT16:
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32)
        return (bits << 16).view(np.float32).reshape(shape)
    if dtype not in _NUMPY:
        raise errors.Unknown(f"the server sent a tensor of unknown dtype {dtype}")
    return np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape).astype(
        np.dtype(_NUMPY[dtype]).newbyteorder("="))


def _quantized_proto(q):
    return pb.QuantizedTensor(shape=list(q.shape), format=_FORMAT_ENUM[q.format], data=q.data,
                              scales=q.scales,
                              tensor_scale=q.tensor_scale if q.format == "nvfp4" else 0.0)


def _keep(keep_c):
    if keep_c is None or keep_c is False:
        return None
    if keep_c is True:
        keep_c = KeepC()
    if not isinstance(keep_c, KeepC):
        raise _invalid(f"keep_c must be True, False or a KeepC, got {type(keep_c).__name__}")
    return pb.ResidentResult(ttl_s=int(keep_c.ttl_s), label=keep_c.label)


def _check_stripes(stripes):
    if isinstance(stripes, bool) or not isinstance(stripes, int) or \
            not 0 <= stripes <= striping.MAX_STRIPES:
        raise _invalid(f"stripes must be an int in [0, {striping.MAX_STRIPES}], got {stripes!r}")
    return stripes


def _handle_of(message, shape=None, dtype=None, fmt=None, label=""):
    return Handle(message.handle, tuple(shape) if shape is not None else None, dtype, fmt,
                  label)


def _read_pem(name, path, marker):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _invalid(f"{name} {path}: {e.strerror}") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise _invalid(f"{name} {path}: no PEM {marker.decode().strip('-').lower()} in it")
    return data


def _tls_credentials(ca_file, cert_file, key_file):
    if bool(cert_file) != bool(key_file):
        raise _invalid("tls_cert_file and tls_key_file go together (the client certificate "
                       "and its key)")
    return grpc.ssl_channel_credentials(
        root_certificates=_read_pem("tls_ca_file", ca_file, b"CERTIFICATE-----")
        if ca_file else None,
        private_key=_read_pem("tls_key_file", key_file, b"PRIVATE KEY-----") if key_file else None,
        certificate_chain=_read_pem("tls_cert_file", cert_file, b"CERTIFICATE-----")
        if cert_file else None)


class Client:
    """A gemmd client over one gRPC channel (thread-safe; share one per process).

    target: "host:port", "ipv4:10.0.0.1:50051,10.0.0.2:50051", "dns:///gemmd:50051", ...
    timeout_s: default deadline per call (None: none); every method takes timeout_s= too.
    options: extra gRPC channel arguments [(name, value)], overriding the client's own
    (e.g. ("grpc.service_config", json) to replace DEFAULT_SERVICE_CONFIG).
    credentials: grpc.ChannelCredentials for TLS (default: plaintext).
    metadata: [(key, value)] sent with every call.
    wait_for_ready: queue calls while no server is reachable instead of failing fast.
    The usual security settings without building credentials by hand (gemm-cli's flags):
    token: bearer token for servers with --auth_tokens_file ("authorization: Bearer T").
    tls: TLS with the system's roots; implied by any of the tls_* below.
    tls_ca_file: PEM CA that signed the server's certificate.
    tls_cert_file, tls_key_file: PEM client certificate and key (mutual TLS).
    tls_server_name: the name to expect in the server's certificate (e.g. when the target
    is an IP address).
    stripes: the connections each matmul's bytes go over: 0 (default) = the client's
    choice, 8 for a call moving 32 MiB or more (its operands and C of 4 MiB or more put
    and read back as temporary resident tensors in row parts, as gemm-cli --stripes
    does), one for a smaller call; 1 = one connection; N = N. The extra connections open
    on first use (striping.py). A server that starts draining serves a striped call in
    flight to its end, as it does a one-RPC call.
    """

    def __init__(self, target, timeout_s=60.0, options=None, credentials=None, metadata=None,
                 wait_for_ready=False, token=None, tls=False, tls_ca_file=None,
                 tls_cert_file=None, tls_key_file=None, tls_server_name=None, stripes=0):
        merged = {
            "grpc.service_config": json.dumps(DEFAULT_SERVICE_CONFIG),
            "grpc.enable_retries": 1,
            "grpc.per_rpc_retry_buffer_size": _RETRY_BUFFER,
            "grpc.max_receive_message_length": _MAX_MESSAGE,
            "grpc.max_send_message_length": _MAX_MESSAGE,
        }
        # A dict, so a caller's value replaces ours instead of sitting next to it (gRPC
        # does not promise which of two equal names wins).
        if tls_server_name:
            merged["grpc.ssl_target_name_override"] = tls_server_name
        merged.update(dict(options or ()))
        if credentials is None and (tls or tls_ca_file or tls_cert_file or tls_key_file
                                    or tls_server_name):
            credentials = _tls_credentials(tls_ca_file, tls_cert_file, tls_key_file)
        metadata = list(metadata or ())
        if token:
            # As gemm-cli reads --token_file: surrounding whitespace (a file's newline) is
            # not part of the token.
            token = token.strip()
            if not token or any(c <= " " or c > "~" for c in token):
                raise _invalid("the token is empty, or has a space or a character outside "
                               "printable ASCII")
            if credentials is None:
                warnings.warn(f"sending a bearer token to {target} without TLS: anyone on the "
                              "path can read it (pass tls_ca_file= or tls=True)",
                              stacklevel=2)
            metadata.append(("authorization", f"Bearer {token}"))
        self.target = target
        self._options, self._credentials = merged, credentials
        self._client_certificate = bool(tls_cert_file)
        self._channel = self._open(merged)
        self._health_channel = None
        self._health_lock = threading.Lock()
        self.timeout_s = timeout_s
        self._metadata = list(metadata) if metadata else None
        self._wait_for_ready = wait_for_ready
        self._stub = gemm_pb2_grpc.GemmServiceStub(self._channel)
        self._health = None
        self.stripes = _check_stripes(stripes)
        self._striper = striping.Striper(self)
        self._regions = {}  # name -> shm.SharedRegion this client created
        self._regions_lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------

    @property
    def channel(self):
        """The underlying grpc.Channel, for calls this client does not wrap."""
        return self._channel

    def _open(self, options):
        if self._credentials is None:
            return grpc.insecure_channel(self.target, options=list(options.items()))
        return grpc.secure_channel(self.target, self._credentials, list(options.items()))

    def close(self):
        for region in list(self._regions.values()):
            try:
                region.close()
            except errors.GemmError:
                pass  # the server is gone: its mapping went with it
        self._striper.close()
        self._channel.close()
        if self._health_channel is not None:
            self._health_channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_ready(self, timeout_s=30.0):
        """Blocks until the channel has connected (Unavailable after timeout_s)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            raise errors.Unavailable(f"no connection to {self.target} within {timeout_s} s",
                                     client_side=True) from None

    def _kw(self, timeout_s):
        return {"timeout": self.timeout_s if timeout_s is _DEFAULT else timeout_s,
                "metadata": self._metadata, "wait_for_ready": self._wait_for_ready}

    def _error(self, rpc_error, method):
        return errors.error_from_rpc(rpc_error, method, tls=self._credentials is not None,
                                     client_certificate=self._client_certificate)

    def _call(self, method, rpc, request, timeout_s):
        try:
            return rpc(request, **self._kw(timeout_s))
        except grpc.RpcError as e:
            raise self._error(e, method) from e

    def _gemm(self, method, rpc, request, timeout_s, stripes, c_bytes):
        """A Matmul / QuantizedMatmul, striped over the client's connections when that is
        the choice (striping.py)."""
        stripes = self.stripes if stripes is None else _check_stripes(stripes)
        inline = sum(len(t.data) + len(getattr(t, "scales", b""))
                     for name in ("a", "a_dense", "b", "c")
                     if name in type(request).DESCRIPTOR.fields_by_name and request.HasField(name)
                     for t in [getattr(request, name)])
        n = self._striper.stripes_for(inline + max(c_bytes, 0), stripes)
        if n == 1:
            return self._call(method, rpc, request, timeout_s)
        kw = self._kw(timeout_s)
        timeout = kw["timeout"]
        # The temporaries live as long as the call may (10 minutes for a call with no
        # deadline).
        ttl_s = 600 if timeout is None else max(1, min(86400, int(-(-timeout // 1))))
        try:
            return self._striper.call(method, rpc, request, n, stripes >= 2, kw, ttl_s)
        except grpc.RpcError as e:
            raise self._error(e, method) from e

    # -- GEMM -------------------------------------------------------------------------

    def matmul(self, a, b, c=None, *, alpha=1.0, beta=0.0, precision="auto",
               output_dtype=None, transpose_a=False, transpose_b=False, kernel=None,
               keep_c=False, return_info=False, timeout_s=_DEFAULT, out_dtype=None,
               stripes=None, out=None):
        """C = alpha * op(A) @ op(B) + beta * C, per batch item.

        a, b, c: numpy arrays (float32, float16, float64; 2-D or 3-D), BFloat16, or
        Handles. precision: "auto" | "fp32" | "fp16_tensor" | "fp64" (auto: fp64 for
        float64 operands, which take nothing else). output_dtype (the proto's and
        gemm-cli's name; out_dtype is an older spelling of it): "float32" | "float16" |
        "bfloat16", or "float64" for fp64, its only one (default: c's dtype when c is an
        array, else float64 for fp64 and float32 otherwise; bfloat16 comes back widened to
        float32). alpha and beta go in FP64 (fp64 computes with them as they are, the
        other precisions with them rounded to FP32). Returns C as numpy; with keep_c the Handle of C kept on
        the server; with return_info=True a MatmulResult (C, handle, kernel, device,
        precision, timing). stripes: the connections the call's bytes go over (None: the
        client's setting; 1: one; 0: the client's choice, several for a call moving 32 MiB
        or more; N: N), as gemm-cli's --stripes (striping.py).
        Operands that are arrays in a region of create_region() go by slice, not bytes;
        out: an array in such a region (C's shape, output_dtype its dtype) the server
        writes C into, returned in place of a new array (shm.py)."""
        if out_dtype is not None:
            if output_dtype is not None:
                raise _invalid("give output_dtype or out_dtype (its older name), not both")
            output_dtype = out_dtype
        request, keep = self._matmul_request(
            a, b, c, alpha=alpha, beta=beta, precision=precision, output_dtype=output_dtype,
            transpose_a=transpose_a, transpose_b=transpose_b, kernel=kernel, keep_c=keep_c,
            out=out)
        response = self._gemm("Matmul", self._stub.Matmul, request, timeout_s, stripes,
                              striping.matmul_c_bytes(request))
        return self._result(response, keep, return_info, out)

    def _matmul_request(self, a, b, c, *, alpha, beta, precision, output_dtype, transpose_a,
                        transpose_b, kernel, keep_c, out):
        """The MatmulRequest of matmul()'s arguments, and its keep_c (or None)."""
        out_dtype = output_dtype
        request = pb.MatmulRequest(transpose_a=bool(transpose_a),
                                   transpose_b=bool(transpose_b), kernel=kernel or "")
        for name, x in (("a", a), ("b", b), ("c", c)):
            if x is None:
                if name != "c":
                    raise _invalid(f"{name} is required")
            elif isinstance(x, Handle):
                getattr(request, name + "_ref").handle = x.handle
            else:
                getattr(request, name).CopyFrom(self._operand(x, name))
        if beta != 0 and c is None:
            raise _invalid(f"beta = {beta} reads C, but no c was given")
        _set_scalars(request, float(alpha), float(beta))
        key = str(precision).lower()
        if key not in _PRECISIONS:
            raise _invalid(f"precision {precision!r} is not one of {sorted(_PRECISIONS)}")
        request.precision = _PRECISIONS[key]
        if out_dtype is None and out is not None:
            out_dtype = _dtype_name(out)
        if out_dtype is None:
            fp64 = request.precision == pb.PRECISION_FP64 or (
                request.precision == pb.PRECISION_AUTO and
                request.a.dtype == pb.DATA_TYPE_FLOAT64)
            out_dtype = "float64" if fp64 else "float32"
            if c is not None and not isinstance(c, Handle):
                out_dtype = _DTYPES[request.c.dtype]
        try:
            out_name = out_dtype if isinstance(out_dtype, str) else np.dtype(out_dtype).name
        except TypeError:
            out_name = None
        if out_name not in ("float32", "float16", "bfloat16", "float64"):
            raise _invalid(f"output_dtype {out_dtype!r} is not one of float32, float16, "
                           "bfloat16, float64")
        request.output_dtype = _DTYPE_ENUM[out_name]
        keep = _keep(keep_c)
        if keep is not None:
            request.keep_c.CopyFrom(keep)
        self._set_out(request, out, keep)
        return request, keep

    def quantized_matmul(self, a, b, *, kernel=None, keep_c=False, return_info=False,
                         timeout_s=_DEFAULT, stripes=None, out=None):
        """C[M,N] = dequant(A)[M,K] @ dequant(B)[N,K]^T in FP32 (both K-major).

        b: a QuantizedTensor (quantize_int8 / quantize_nvfp4) or the Handle of one.
        a: a QuantizedTensor, a dense [M,K] array (float32/float16/BFloat16: weight-only
        quantization), or a Handle. Returns as matmul does; stripes, a dense a in a region
        and out (float32) as matmul's."""
        request, keep = self._quantized_request(a, b, kernel=kernel, keep_c=keep_c, out=out)
        response = self._gemm("QuantizedMatmul", self._stub.QuantizedMatmul, request, timeout_s,
                              stripes, striping.quantized_c_bytes(request))
        return self._result(response, keep, return_info, out)

    def _quantized_request(self, a, b, *, kernel, keep_c, out):
        """The QuantizedMatmulRequest of quantized_matmul()'s arguments, and its keep_c."""
        request = pb.QuantizedMatmulRequest(kernel=kernel or "")
        if isinstance(b, Handle):
            request.b_ref.handle = b.handle
        elif isinstance(b, QuantizedTensor):
            request.b.CopyFrom(_quantized_proto(b))
        else:
            raise _invalid("b must be a QuantizedTensor (quantize_int8(b) or "
                           f"quantize_nvfp4(b)) or a Handle, got {type(b).__name__}")
        if isinstance(a, Handle):
            request.a_ref.handle = a.handle
        elif isinstance(a, QuantizedTensor):
            request.a.CopyFrom(_quantized_proto(a))
        else:
            request.a_dense.CopyFrom(self._operand(a, "a", ranks=(2,)))
        a_shape = (a.shape if isinstance(a, QuantizedTensor) else
                   tuple(request.a_dense.shape) if request.HasField("a_dense") else a.shape)
        b_shape = b.shape
        if a_shape is not None and b_shape is not None and a_shape[-1] != b_shape[-1]:
            raise _invalid(f"A is {list(a_shape)} and B is {list(b_shape)}: both are K-major "
                           "([M, K] and [N, K]), so K must agree")
        keep = _keep(keep_c)
        if keep is not None:
            request.keep_c.CopyFrom(keep)
        self._set_out(request, out, keep)
        return request, keep

    def stream(self, *, max_outstanding=64, timeout_s=None):
        """A MatmulStream: many matmul / quantized_matmul requests on one stream, each
        answered through a Future as it completes (streaming.py). max_outstanding: the
        requests unanswered at once (submitting waits beyond it); timeout_s: the whole
        stream's deadline (None: none)."""
        return streaming.Stream(self, max_outstanding, timeout_s)

    def _in_region(self, x):
        """The RegionSlice of array x in one of this client's regions, or None."""
        for region in list(self._regions.values()):
            message = shm.slice_message(region, x)
            if message is not None:
                return message
        return None

    def _operand(self, x, what, ranks=(2, 3)):
        """A dense operand: by slice when it lies in a region (and is what _dense accepts
        as it is: float32 / float16 / float64, little-endian), else inline."""
        if isinstance(x, np.ndarray) and \
                x.dtype in (np.dtype("<f4"), np.dtype("<f2"), np.dtype("<f8")) and \
                x.ndim in ranks and x.size > 0:
            where = self._in_region(x)
            if where is not None:
                return pb.Tensor(shape=list(x.shape), dtype=_DTYPE_ENUM[_dtype_name(x)],
                                 shm=where)
        return _dense(x, what, ranks)

    def _set_out(self, request, out, keep):
        if out is None:
            return
        if keep is not None:
            raise _invalid("out and keep_c are both given: C goes to one of them")
        where = self._in_region(out) if isinstance(out, np.ndarray) else None
        if where is None:
            raise _invalid("out must be a C-contiguous numpy array in a region of "
                           "create_region() (the server writes C there)")
        request.c_shm.CopyFrom(where)

    def _result(self, response, keep, return_info, out=None):
        shape, dtype = tuple(response.c.shape), _DTYPES.get(response.c.dtype, "unknown")
        c_ref = None
        if response.HasField("c_ref") and response.c_ref.handle:
            c_ref = _handle_of(response.c_ref, shape, dtype,
                               label=keep.label if keep is not None else "")
        if out is not None:
            c = out  # the server wrote C there
        else:
            c = None if keep is not None else _decode(response.c.dtype, shape, response.c.data)
        if not return_info:
            return c_ref if keep is not None else c
        t = response.timing
        return MatmulResult(
            c=c, c_ref=c_ref, shape=shape, dtype=dtype, kernel=response.kernel,
            device=response.device,
            precision=_PRECISION_NAMES.get(response.precision, str(response.precision)),
            timing=Timing(t.queue_us, t.copy_in_us, t.compute_us, t.copy_out_us, t.total_us,
                          t.batch_size))

    # -- resident tensors -------------------------------------------------------------

    def put_tensor(self, x, ttl_s=None, label=None, *, device=None, chunk_bytes=CHUNK_BYTES,
                   timeout_s=_DEFAULT):
        """Uploads a dense array (2-D/3-D float32, float16, BFloat16) or a QuantizedTensor
        as a resident tensor; returns its Handle. ttl_s None/0: until deleted. device: the
        server device to keep it on ("cuda:1", as server_info() names them); None: the
        server's choice. Tensors one matmul reads by handle must be on one device.

        One stream of chunks (striped matmuls put their temporaries in parallel parts:
        striping.py); an array in a region of create_region() goes as one chunk naming
        its slice, and the server copies it from there."""
        if not 0 < chunk_bytes <= CHUNK_BYTES:
            raise _invalid(f"chunk_bytes must be in (0, {CHUNK_BYTES}], got {chunk_bytes}")
        header = pb.TensorHeader(ttl_s=int(ttl_s or 0), label=label or "", device=device or "")
        if isinstance(x, QuantizedTensor):
            header.shape.extend(x.shape)
            header.format = _FORMAT_ENUM[x.format]
            if x.format == "nvfp4":
                header.tensor_scale = x.tensor_scale
            data, scales, dtype, fmt = x.data, x.scales, None, x.format
        else:
            tensor = self._operand(x, "the tensor")
            header.shape.extend(tensor.shape)
            header.dtype = tensor.dtype
            data, scales, dtype, fmt = tensor.data, b"", _DTYPES[tensor.dtype], None
            if tensor.HasField("shm"):
                message = self._call(
                    "PutTensor", self._stub.PutTensor,
                    iter([pb.TensorChunk(header=header, data_shm=tensor.shm)]), timeout_s)
                return _handle_of(message, header.shape, dtype, fmt, header.label)

        message = self._call("PutTensor", self._stub.PutTensor,
                             striping.chunks(pb.TensorChunk(header=header), data, scales,
                                             chunk_bytes), timeout_s)
        return _handle_of(message, header.shape, dtype, fmt, header.label)

    def get_tensor(self, handle, *, timeout_s=_DEFAULT):
        """Downloads a resident tensor: a numpy array for a dense one (bfloat16 widened
        to float32), a QuantizedTensor for a quantized one."""
        request = pb.GetTensorRequest(handle=_handle_str(handle))
        header, data, scales = None, [], []
        try:
            for chunk in self._stub.GetTensor(request, **self._kw(timeout_s)):
                if chunk.HasField("header"):
                    header = chunk.header
                data.append(chunk.data)
                scales.append(chunk.scales)
        except grpc.RpcError as e:
            raise self._error(e, "GetTensor") from e
        if header is None:
            raise errors.DataLoss("GetTensor: the stream had no header", method="GetTensor")
        data, scales = b"".join(data), b"".join(scales)
        if header.format != pb.QUANT_FORMAT_UNSPECIFIED:
            return QuantizedTensor(_FORMATS.get(header.format, header.format), header.shape,
                                   data, scales, header.tensor_scale)
        return _decode(header.dtype, header.shape, data)

    def delete_tensor(self, handle, *, timeout_s=_DEFAULT):
        """Deletes a resident tensor (NotFound if it is gone already)."""
        self._call("DeleteTensor", self._stub.DeleteTensor,
                   pb.TensorHandle(handle=_handle_str(handle)), timeout_s)

    def list_tensors(self, *, timeout_s=_DEFAULT):
        """The resident tensors: a TensorList of TensorInfo (.store_bytes,
        .store_cap_bytes)."""
        # The server answers in pages (at most 1000 tensors each): follow them all.
        tensors = []
        request = pb.ListTensorsRequest()
        while True:
            response = self._call("ListTensors", self._stub.ListTensors, request, timeout_s)
            tensors.extend(response.tensors)
            if not response.next_page_token:
                break
            request = pb.ListTensorsRequest(page_token=response.next_page_token)
        items = []
        for t in tensors:
            dtype = _DTYPES.get(t.dtype) if t.dtype else None
            fmt = _FORMATS.get(t.format) if t.format else None
            items.append(TensorInfo(
                handle=_handle_of(t.handle, t.shape, dtype, fmt, t.label), shape=tuple(t.shape),
                dtype=dtype, format=fmt, tensor_scale=t.tensor_scale, bytes=t.bytes,
                device=t.device, created_unix_ms=t.created_unix_ms,
                expires_unix_ms=t.expires_unix_ms, label=t.label, complete=t.complete))
        return TensorList(items, response.store_bytes, response.store_cap_bytes)

    # -- shared-memory regions (a server on this machine) -----------------------------

    def create_region(self, name, nbytes, *, key=None, tenant=None, timeout_s=_DEFAULT):
        """Creates a shared-memory object of nbytes, registers it with the server as
        `name` and returns its shm.SharedRegion (arrays over it go by slice). key: its
        POSIX name; default "/" + the server's shm_prefix + (tenant + "@", for a server
        with tenants: your tenant's name) + "py-PID-" + name."""
        if key is None:
            prefix = self.server_info(timeout_s=timeout_s).limits.shm_prefix
            if not prefix:
                raise errors.FailedPrecondition(
                    "the server has shared-memory regions off (--shm=off), or predates them",
                    method="RegisterRegion", client_side=True)
            key = shm.default_key(prefix, tenant, name)
        region = shm.SharedRegion(self, name, key, nbytes)
        try:
            self.register_region(name, key, timeout_s=timeout_s)
        except BaseException:
            region._discard()  # the server refused it: nothing of it stays here either
            raise
        with self._regions_lock:
            self._regions[name] = region
        return region

    def register_region(self, name, key, offset=0, nbytes=0, *, timeout_s=_DEFAULT):
        """RegisterRegion: an object some process made (key: its POSIX name), or
        [offset, offset + nbytes) of it, as `name`. Returns the gemm.v1.RegionInfo."""
        return self._call("RegisterRegion", self._stub.RegisterRegion,
                          pb.RegisterRegionRequest(name=name, key=key, offset=int(offset),
                                                   bytes=int(nbytes)), timeout_s)

    def unregister_region(self, name, *, timeout_s=_DEFAULT):
        """UnregisterRegion (NotFound when the server has no region of that name)."""
        with self._regions_lock:
            self._regions.pop(name, None)
        self._call("UnregisterRegion", self._stub.UnregisterRegion,
                   pb.UnregisterRegionRequest(name=name), timeout_s)

    def list_regions(self, *, timeout_s=_DEFAULT):
        """ListRegions: the gemm.v1.ListRegionsResponse (this tenant's regions, the bytes
        of all, the cap)."""
        return self._call("ListRegions", self._stub.ListRegions, pb.ListRegionsRequest(),
                          timeout_s)

    # -- server -----------------------------------------------------------------------

    def health(self, service="", *, timeout_s=_DEFAULT):
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING", ... (a down server raises
        Unavailable)."""
        with self._health_lock:
            if self._health is None:
                # Its own channel, without client-side health checking: on the main
                # channel a NOT_SERVING server is out of rotation, so its Check would fail
                # UNAVAILABLE instead of answering NOT_SERVING. Opened on first use only.
                self._health_channel = self._open(
                    dict(self._options, **{"grpc.inhibit_health_checking": 1}))
                self._health = health_pb2_grpc.HealthStub(self._health_channel)
        response = self._call("Health.Check", self._health.Check,
                              health_pb2.HealthCheckRequest(service=service), timeout_s)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def server_info(self, *, timeout_s=_DEFAULT):
        """GetServerInfo: the gemm.v1.ServerInfo message (version, backend, devices,
        kernels, quantized_kernels, limits, instance)."""
        return self._call("GetServerInfo", self._stub.GetServerInfo, pb.GetServerInfoRequest(),
                          timeout_s)


def _handle_str(handle):
    if isinstance(handle, Handle):
        return handle.handle
    if isinstance(handle, str) and handle:
        return handle
    raise _invalid(f"expected a Handle or a handle string, got {type(handle).__name__}")
