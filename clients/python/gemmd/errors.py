"""Errors: one GemmError subclass per gRPC status code.

Callers branch on the class (`except gemmd.NotFound`) or count by `err.code`, the
grpc.StatusCode name ("NOT_FOUND"), which is stable and label-friendly for metrics.
The server's message is kept verbatim: it says what was wrong and what was expected.
"""
import grpc

__all__ = [
    "GemmError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
    "Unauthenticated", "error_from_rpc",
]


class GemmError(Exception):
    """A failed call. `code`: the grpc.StatusCode name; `message`: the server's text;
    `method`: the RPC ("Matmul"); `client_side`: True when this client refused the
    input before sending anything."""

    grpc_code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, *, method=None, client_side=False, grpc_code=None):
        super().__init__(message)
        if grpc_code is not None:
            self.grpc_code = grpc_code
        self.message = message
        self.method = method
        self.client_side = client_side

    @property
    def code(self):
        return self.grpc_code.name

    def __str__(self):
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.code}: {self.message}"


class Cancelled(GemmError):
    grpc_code = grpc.StatusCode.CANCELLED


class Unknown(GemmError):
    grpc_code = grpc.StatusCode.UNKNOWN


# Also a ValueError: bad input is what Python code conventionally catches as one.
class InvalidArgument(GemmError, ValueError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(GemmError, TimeoutError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(GemmError, LookupError):
    grpc_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(GemmError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(GemmError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(GemmError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(GemmError):
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(GemmError):
    grpc_code = grpc.StatusCode.ABORTED


class OutOfRange(GemmError):
    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(GemmError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class Internal(GemmError):
    grpc_code = grpc.StatusCode.INTERNAL


class Unavailable(GemmError):
    grpc_code = grpc.StatusCode.UNAVAILABLE


class DataLoss(GemmError):
    grpc_code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(GemmError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.grpc_code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def error_from_rpc(error, method=None, tls=None, client_certificate=False):
    """The GemmError for a grpc.RpcError (a failed call). With `tls` (whether the channel
    speaks TLS), a connection the server closed at once, which gRPC reports only as
    "Socket closed", says what is likely missing."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    if (tls is not None and code == grpc.StatusCode.UNAVAILABLE
            and "Socket closed" in (message or "")):
        if not tls:
            message += (" (the server closed the connection at once: it may speak TLS only; "
                        "pass tls_ca_file=, and tls_cert_file= and tls_key_file= if it asks "
                        "for a client certificate)")
        elif client_certificate:
            message += (" (the server refused the TLS handshake: it may not trust this "
                        "client certificate, or not speak TLS)")
        else:
            message += (" (the server refused the TLS handshake: it may want a client "
                        "certificate, tls_cert_file= and tls_key_file=, or not speak TLS)")
    cls = _BY_CODE.get(code, GemmError)
    # A code this module has no class for (none today) still reports its own name.
    return cls(message or "", method=method, grpc_code=code)
