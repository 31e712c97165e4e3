"""Big calls over several connections: the protocol of the C++ client's
client/striped_call.h, from Python.

One HTTP/2 connection carries a fraction of what TCP can. A call whose operands and C
are large moves them over a pool of connections the client keeps open:
  1. each large inline operand is put as a temporary resident tensor, in row parts, part
     i on connection i (PutTensor with parts, then part_of/part), all on one device;
  2. the Matmul / QuantizedMatmul names them by handle and keeps a large C (keep_c);
  3. C is read back in row ranges, range i on connection i (GetTensor row_begin/row_end);
  4. the temporaries are deleted.
C is the same, byte for byte, as the one-connection call's. A step that fails fails the
call with the server's status and deletes what was made; the temporaries carry a TTL of
the call's timeout, so a process that dies mid-call leaks nothing past it. Where the
client chose to stripe (stripes=0) and the server cannot keep the operands (no store, no
room), the call is made on one connection instead; so is one whose connections reach two
server processes. Not the default (stripes=1): a server that starts draining refuses the
RPCs of a striped call after the first, where a one-connection call is served to its end.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

from . import errors
from ._stubs import gemm_pb2 as pb
from ._stubs import gemm_pb2_grpc

STRIPE_CALL_BYTES = 32 << 20     # a call moving this much goes striped (stripes=0)
STRIPE_OPERAND_BYTES = 4 << 20   # ... and within it, operands and C this large
DEFAULT_STRIPES = 8
MAX_STRIPES = 64
MIN_PART_BYTES = 1 << 20         # a part of an upload or download is at least this
CHUNK_BYTES = 4 << 20            # data + scales per TensorChunk (the server's limit)
LABEL = "striped call"
CONTINUES = "gemmd-continues"   # the metadata key (proto/call_metadata.h)
_ELEMENT_BYTES = {pb.DATA_TYPE_FLOAT16: 2, pb.DATA_TYPE_BFLOAT16: 2, pb.DATA_TYPE_INT8: 1,
                  pb.DATA_TYPE_FLOAT64: 8}


def single_address(target):
    """Whether every connection to `target` reaches one server process."""
    if "," in target:
        return False
    return not (target.startswith("dns:") or target.startswith("xds:"))


def _rows(shape):
    rows = 1
    for d in list(shape)[:-1]:
        rows *= d
    return rows


def _parts(nbytes, rows, stripes):
    return max(1, min(stripes, rows, max(1, nbytes // MIN_PART_BYTES), MAX_STRIPES))


def _part_rows(rows, i, n):
    return rows * i // n, rows * (i + 1) // n


def matmul_c_bytes(request):
    """C's bytes for a MatmulRequest with both operands inline; -1 otherwise."""
    if not (request.HasField("a") and request.HasField("b")):
        return -1
    a, b = list(request.a.shape), list(request.b.shape)
    if len(a) not in (2, 3) or len(b) not in (2, 3):
        return -1
    m = a[-1] if request.transpose_a else a[-2]
    n = b[-2] if request.transpose_b else b[-1]
    batch = max(a[0] if len(a) == 3 else 1, b[0] if len(b) == 3 else 1)
    return batch * m * n * _ELEMENT_BYTES.get(request.output_dtype, 4)


def quantized_c_bytes(request):
    a = (request.a.shape if request.HasField("a") else
         request.a_dense.shape if request.HasField("a_dense") else None)
    if a is None or len(a) != 2 or not request.HasField("b") or len(request.b.shape) != 2:
        return -1
    return a[0] * request.b.shape[0] * 4


def _operands(request):
    """(field, ref field, header, data, scales) of each inline operand of a request."""
    out = []
    if isinstance(request, pb.MatmulRequest):
        for name in ("a", "b", "c"):
            if request.HasField(name):
                t = getattr(request, name)
                out.append((name, name + "_ref", pb.TensorHeader(shape=t.shape, dtype=t.dtype),
                            t.data, b""))
        return out
    for name, ref in (("a", "a_ref"), ("a_dense", "a_ref"), ("b", "b_ref")):
        if not request.HasField(name):
            continue
        t = getattr(request, name)
        if name == "a_dense":
            header = pb.TensorHeader(shape=t.shape, dtype=t.dtype)
            out.append((name, ref, header, t.data, b""))
        else:
            header = pb.TensorHeader(shape=t.shape, format=t.format)
            if t.format == pb.QUANT_FORMAT_NVFP4:
                header.tensor_scale = t.tensor_scale
            out.append((name, ref, header, t.data, t.scales))
    return out


def chunks(first, data, scales, chunk_bytes=CHUNK_BYTES):
    """A PutTensor stream: `first` (the header chunk), then data and scales, each in order;
    a chunk may carry the end of one and the start of the other, data + scales <=
    chunk_bytes."""
    yield first
    d, s = memoryview(data), memoryview(scales)
    while len(d) or len(s):
        take_d = min(len(d), chunk_bytes)
        take_s = min(len(s), chunk_bytes - take_d)
        yield pb.TensorChunk(data=bytes(d[:take_d]), scales=bytes(s[:take_s]))
        d, s = d[take_d:], s[take_s:]


def _first_failure(failures):
    """A refused part takes the whole tensor out, so the parts still going end NOT_FOUND:
    the cause is the first failure that is not NOT_FOUND."""
    for e in failures:
        if not (isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.NOT_FOUND):
            return e
    return failures[0]


class Striper:
    """A client's pool of connections and the striped calls over them."""

    def __init__(self, client):
        self._client = client
        self._lock = threading.Lock()
        self._channels, self._stubs = [], []
        self.single_address = single_address(client.target)
        self.no_store = False

    def stub(self, i):
        with self._lock:
            while len(self._stubs) <= i:
                # Its own connection: a local subchannel pool and an argument of its own.
                # No health checking: it carries only RPCs that continue a call the
                # client's channel began, which a draining server (NOT_SERVING) still
                # serves.
                options = dict(self._client._options,
                               **{"grpc.use_local_subchannel_pool": 1,
                                  "grpc.inhibit_health_checking": 1,
                                  "gemmd.channel_index": len(self._stubs) + 1})
                channel = self._client._open(options)
                self._channels.append(channel)
                self._stubs.append(gemm_pb2_grpc.GemmServiceStub(channel))
            return self._stubs[i]

    def close(self):
        with self._lock:
            for channel in self._channels:
                channel.close()
            self._channels, self._stubs = [], []

    def stripes_for(self, call_bytes, stripes):
        if stripes == 1:
            return 1
        if stripes and stripes >= 2:
            return min(stripes, MAX_STRIPES)
        if not self.single_address or self.no_store or call_bytes < STRIPE_CALL_BYTES:
            return 1
        return DEFAULT_STRIPES

    def _put(self, header, data, scales, stripes, ttl_s, device, kw, continues):
        header.ttl_s, header.label, header.device = ttl_s, LABEL, device
        header.temporary = True
        rows = _rows(header.shape)
        parts = _parts(len(data) + len(scales), rows, stripes)
        put = self._client._stub.PutTensor
        if continues:  # on a connection that reaches a draining server
            put = self.stub(0).PutTensor
        if parts == 1:
            answer = put(chunks(pb.TensorChunk(header=header), data, scales),
                         **_continuing(kw, continues))
            return answer.handle, answer.device
        header.parts = parts
        opened = put(iter([pb.TensorChunk(header=header)]), **_continuing(kw, continues))
        data_row, scales_row = len(data) // rows, len(scales) // rows
        data_view, scales_view = memoryview(data), memoryview(scales)

        def send(i):
            begin, end = _part_rows(rows, i, parts)
            first = pb.TensorChunk(header=pb.TensorHeader(
                part_of=pb.TensorHandle(handle=opened.handle), part=i))
            self.stub(i).PutTensor(chunks(first, data_view[begin * data_row:end * data_row],
                                           scales_view[begin * scales_row:end * scales_row]),
                                   **_continuing(kw, opened.handle))

        failures = _run(parts, send)
        if failures:
            self._delete([opened.handle], kw)
            raise _first_failure(failures)
        return opened.handle, opened.device

    def _read(self, handle, shape, dtype, stripes, kw):
        rows = _rows(shape)
        row_bytes = shape[-1] * _ELEMENT_BYTES.get(dtype, 4)
        out = bytearray(rows * row_bytes)
        parts = _parts(len(out), rows, stripes)

        def get(i):
            begin, end = _part_rows(rows, i, parts)
            at = begin * row_bytes
            request = pb.GetTensorRequest(handle=handle, row_begin=begin, row_end=end)
            for chunk in self.stub(i).GetTensor(request, **_continuing(kw, handle)):
                if at + len(chunk.data) > end * row_bytes:
                    raise errors.DataLoss("GetTensor sent more rows than asked for",
                                          method="GetTensor")
                out[at:at + len(chunk.data)] = chunk.data
                at += len(chunk.data)
            if at != end * row_bytes:
                raise errors.DataLoss(f"GetTensor sent {at - begin * row_bytes} bytes of rows "
                                      f"[{begin}, {end}); expected {(end - begin) * row_bytes}",
                                      method="GetTensor")

        failures = _run(parts, get)
        if failures:
            raise failures[0]
        return bytes(out)

    def _delete(self, handles, kw):
        futures = [self.stub(0).DeleteTensor.future(
            pb.TensorHandle(handle=h), **dict(_continuing(kw, h), timeout=5)) for h in handles]
        for f in futures:
            try:
                f.result()
            except grpc.RpcError:
                pass  # the TTL takes it

    def call(self, method, rpc, request, stripes, forced, kw, ttl_s):
        """The call over `stripes` connections; the response as the one-connection
        call's (C's bytes in it, no c_ref)."""
        least = 1 if forced else STRIPE_OPERAND_BYTES
        striped = [o for o in _operands(request) if len(o[3]) + len(o[4]) >= least]
        # The request less the operands that go by handle: their bytes are not copied.
        inner = type(request)()
        for field, value in request.ListFields():
            if field.name in {o[0] for o in striped}:
                continue
            if field.message_type is not None:
                getattr(inner, field.name).CopyFrom(value)
            else:
                setattr(inner, field.name, value)
        temporaries, put_failed = [], False
        try:
            device = ""
            try:
                for name, ref, header, data, scales in striped:
                    handle, where = self._put(header, data, scales, stripes, ttl_s, device, kw,
                                              temporaries[0] if temporaries else None)
                    temporaries.append(handle)
                    device = device or where
                    getattr(inner, ref).handle = handle
            except grpc.RpcError:
                put_failed = True
                raise
            c_bytes = (matmul_c_bytes(request) if isinstance(request, pb.MatmulRequest)
                       else quantized_c_bytes(request))
            stripe_c = not request.HasField("keep_c") and c_bytes >= least
            if stripe_c:
                inner.keep_c.CopyFrom(pb.ResidentResult(ttl_s=ttl_s, label=LABEL, temporary=True))
            # After the first temporary, on a connection that reaches a draining server.
            call = getattr(self.stub(0), method) if temporaries else rpc
            response = call(inner, **_continuing(kw, temporaries[0] if temporaries else None))
            if stripe_c:
                temporaries.append(response.c_ref.handle)
                response.c.data = self._read(response.c_ref.handle, list(response.c.shape),
                                             response.c.dtype, stripes, kw)
                response.ClearField("c_ref")
            return response
        except grpc.RpcError as e:
            if not self._fall_back(e, put_failed, forced):
                raise
        finally:
            if temporaries:
                self._delete(temporaries, kw)
        return rpc(request, **kw)

    def _fall_back(self, e, put_failed, forced):
        if (e.code() == grpc.StatusCode.NOT_FOUND and
                "was issued by server instance" in (e.details() or "")):
            self.single_address = False
            return True
        if forced or not put_failed:
            return False
        if e.code() == grpc.StatusCode.UNIMPLEMENTED or (
                e.code() == grpc.StatusCode.FAILED_PRECONDITION and
                "keeps no resident tensors" in (e.details() or "")):
            self.no_store = True
            return True
        return e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def _continuing(kw, handle):
    """kw with the metadata naming `handle`, a temporary of this call (gemmd-continues):
    a server that starts draining serves the call's later RPCs to its end."""
    if not handle:
        return kw
    return dict(kw, metadata=list(kw.get("metadata") or ()) + [(CONTINUES, handle)])


def _run(n, body):
    """body(0) .. body(n - 1) at once; the exceptions raised, in part order."""
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(body, i) for i in range(n)]
    return [f.exception() for f in futures if f.exception() is not None]
