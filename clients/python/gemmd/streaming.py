"""Many GEMMs on one MatmulStream (Client.stream()).

A stream message costs far less than a call, so a caller with many independent GEMMs
(a batch job, a decode loop) sends them on one stream and keeps many in flight:

    with client.stream(max_outstanding=64) as stream:
        futures = [stream.matmul(a, b) for a, b in pairs]
        cs = [f.result() for f in futures]

Each request is answered on its own, as it completes, with its own status: a failed one
raises from its future (the GemmError of its code) and the stream goes on. Or iterate
the answers as they come, with the tag each request was given:

    with client.stream() as stream:
        for i, (a, b) in enumerate(pairs):
            stream.matmul(a, b, tag=i)
        for tag, c in stream.results():   # closes, then each tagged answer in the order
            ...                            # they came

At most max_outstanding requests are unanswered at once: matmul() waits for room. A
stream the server ends while requests are unanswered (it drains for a restart) fails
them with Unavailable: send them again (on a new stream). Thread-safe: several threads
may submit on one stream.
"""
import concurrent.futures
import itertools
import queue
import threading

import grpc

from . import errors
from ._stubs import gemm_pb2 as pb

_END = object()  # the request iterator's end: the caller closed the stream
# Most requests, and request bytes, one message carries (gemm.proto's StreamRequest.batch).
_MAX_BATCH = 256
_MAX_BATCH_BYTES = 1 << 20


class Stream:
    """One MatmulStream. Made by Client.stream(); use as a context manager or close()."""

    def __init__(self, client, max_outstanding=64, timeout_s=None):
        if not isinstance(max_outstanding, int) or max_outstanding < 1:
            raise errors.InvalidArgument(
                f"max_outstanding must be a positive integer, got {max_outstanding!r}",
                client_side=True)
        self._client = client
        self._slots = threading.BoundedSemaphore(max_outstanding)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending = {}  # id -> (future, keep, return_info, out, tag)
        self._answers = queue.Queue()  # (tag, result or error) of tagged requests: results()
        self._outgoing = queue.Queue()
        self._closed = False
        self._ended = None  # the GemmError the stream ended with, or True once it ended OK
        kw = client._kw(timeout_s)
        self._call = client._stub.MatmulStream(self._requests(), timeout=kw["timeout"],
                                               metadata=kw["metadata"],
                                               wait_for_ready=kw["wait_for_ready"])
        self._reader = threading.Thread(target=self._read, name="gemmd-stream", daemon=True)
        self._reader.start()

    # -- submitting -------------------------------------------------------------------

    def matmul(self, a, b, c=None, *, alpha=1.0, beta=0.0, precision="auto",
               output_dtype=None, transpose_a=False, transpose_b=False, kernel=None,
               keep_c=False, return_info=False, out=None, timeout_s=None, tag=None):
        """Client.matmul's request, sent on the stream. Returns a Future of what
        Client.matmul returns. timeout_s: this request's deadline, counted from when the
        server reads it (None: the stream's). tag: any value, paired with the answer in
        results() (untagged requests are answered through their future alone). The
        operands are serialized before this returns."""
        request, keep = self._client._matmul_request(
            a, b, c, alpha=alpha, beta=beta, precision=precision, output_dtype=output_dtype,
            transpose_a=transpose_a, transpose_b=transpose_b, kernel=kernel, keep_c=keep_c,
            out=out)
        return self._submit(pb.StreamRequest(matmul=request), keep, return_info, out,
                            timeout_s, tag)

    def quantized_matmul(self, a, b, *, kernel=None, keep_c=False, return_info=False, out=None,
                         timeout_s=None, tag=None):
        """Client.quantized_matmul's request, sent on the stream (as matmul())."""
        request, keep = self._client._quantized_request(a, b, kernel=kernel, keep_c=keep_c,
                                                        out=out)
        return self._submit(pb.StreamRequest(quantized=request), keep, return_info, out,
                            timeout_s, tag)

    def _submit(self, message, keep, return_info, out, timeout_s, tag):
        if timeout_s is not None:
            if not timeout_s > 0:
                raise errors.InvalidArgument(f"timeout_s must be > 0, got {timeout_s!r}",
                                             client_side=True)
            message.timeout_us = max(1, int(timeout_s * 1e6))
        future = concurrent.futures.Future()
        self._slots.acquire()
        with self._lock:
            if self._closed or self._ended is not None:
                self._slots.release()
                future.set_exception(
                    errors.FailedPrecondition("the stream is closed", client_side=True)
                    if self._closed else self._ended_error())
                return future
            message.id = next(self._ids)
            self._pending[message.id] = (future, keep, return_info, out, tag)
        self._outgoing.put(message)
        return future

    # -- the end ----------------------------------------------------------------------

    def close(self):
        """No more requests: waits until every request is answered and the stream has
        ended. Raises the stream's error if it failed as a whole (a request's own failure
        is in its future). Later calls do nothing."""
        with self._lock:
            if self._closed:
                first = False
            else:
                self._closed = first = True
        if first:
            self._outgoing.put(_END)
        self._reader.join()
        if isinstance(self._ended, errors.GemmError):
            raise self._ended

    def cancel(self):
        """Ends the stream now: unanswered requests fail with Cancelled."""
        self._call.cancel()
        self._reader.join()

    def results(self):
        """(tag, value) of every request sent with a tag, in the order the answers came;
        value is what the request's future gives, or the error it failed with. Closes the
        stream first."""
        try:
            self.close()
        except errors.GemmError:
            pass  # each unanswered request carries the error
        while True:
            try:
                yield self._answers.get_nowait()
            except queue.Empty:
                return

    @property
    def outstanding(self):
        """Requests sent and not yet answered."""
        with self._lock:
            return len(self._pending)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None:
            self.cancel()
            return
        self.close()

    # -- the call's two sides ---------------------------------------------------------

    def _requests(self):
        # Requests submitted while gRPC was sending go out together, as one batch.
        while True:
            message = self._outgoing.get()
            if message is _END:
                return
            batch, size, end = [message], message.ByteSize(), False
            while len(batch) < _MAX_BATCH and size < _MAX_BATCH_BYTES:
                try:
                    more = self._outgoing.get_nowait()
                except queue.Empty:
                    break
                if more is _END:
                    end = True
                    break
                batch.append(more)
                size += more.ByteSize()
            yield batch[0] if len(batch) == 1 else pb.StreamRequest(batch=batch)
            if end:
                return

    def _read(self):
        try:
            for message in self._call:
                # Answers that were ready together come as one batch.
                for answer in (message.batch or (message,)):
                    self._answer(answer)
            ended = True
        except grpc.RpcError as e:
            ended = self._client._error(e, "MatmulStream")
        with self._lock:
            self._ended = ended
            unanswered = list(self._pending.values())
            self._pending.clear()
        failure = self._ended_error()
        for future, _, _, _, tag in unanswered:
            self._slots.release()
            future.set_exception(failure)
            self._collect(tag, failure)
        self._outgoing.put(_END)  # the request iterator stops, if it has not

    def _ended_error(self):
        if isinstance(self._ended, errors.GemmError):
            return self._ended
        return errors.Unavailable("the server ended the stream before answering this request "
                                  "(it is shutting down); send it again", client_side=True)

    def _answer(self, answer):
        with self._lock:
            entry = self._pending.pop(answer.id, None)
        if entry is None:
            return  # not one of ours (an unreadable request the server answered as id 0)
        future, keep, return_info, out, tag = entry
        self._slots.release()
        if answer.code != 0:
            code = grpc.StatusCode.UNKNOWN
            for candidate in grpc.StatusCode:
                if candidate.value[0] == answer.code:
                    code = candidate
            error = errors._BY_CODE.get(code, errors.GemmError)(answer.message,
                                                                method="MatmulStream",
                                                                grpc_code=code)
            future.set_exception(error)
            self._collect(tag, error)
            return
        try:
            value = self._client._result(answer.result, keep, return_info, out)
        except Exception as e:  # noqa: BLE001 (a response that does not decode fails its request)
            future.set_exception(e)
            self._collect(tag, e)
            return
        future.set_result(value)
        self._collect(tag, value)

    def _collect(self, tag, value):
        if tag is not None:
            self._answers.put((tag, value))
