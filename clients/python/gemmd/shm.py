"""Shared-memory regions: a caller on the server's machine puts operands and C in a
POSIX shared-memory object the server maps, so a call carries slices of it instead of
tensor bytes (gemm.proto's RegisterRegionRequest / RegionSlice).

    with gemmd.Client("unix:/run/gemmd.sock") as client:
        region = client.create_region("work", 256 << 20)
        a = region.array((4096, 4096), np.float32)     # numpy arrays over the region
        b = region.array((4096, 4096), np.float32)
        c = region.array((4096, 4096), np.float32)
        a[:] = ...; b[:] = ...
        client.matmul(a, b, out=c)                     # no tensor byte on the socket
        region.close()                                 # unregistered and removed

Any C-contiguous little-endian float32 / float16 array that lies inside a registered
region goes by slice, whichever way it was made (region.array, or numpy views of the
region's buffer); other operands go inline as usual. In containers the server and the
caller share /dev/shm (docker/compose.yaml, docker/k8s).
"""
import os
import threading
from multiprocessing import shared_memory

import numpy as np

from ._stubs import gemm_pb2 as pb

_ALIGN = 4096  # each array starts on a page


class SharedRegion:
    """A shared-memory object this process created (key: its POSIX name) and registered
    with the server as `name`. array() hands out numpy arrays over it, each on its own
    page; close() unregisters it and removes the object."""

    def __init__(self, client, name, key, nbytes):
        self.name, self.key, self.nbytes = name, key, int(nbytes)
        self._client = client
        # Python's own name for it has no leading "/".
        self._shm = shared_memory.SharedMemory(name=key.lstrip("/"), create=True,
                                               size=self.nbytes)
        # Python's resource tracker removes it at exit if close() was never called.
        self._bytes = np.frombuffer(self._shm.buf, dtype=np.uint8)
        self._base = self._bytes.__array_interface__["data"][0]
        self._next = 0
        self._lock = threading.Lock()
        self._closed = False

    def array(self, shape, dtype=np.float32):
        """A zero-filled, C-contiguous numpy array of `shape` and `dtype` in the region
        (MemoryError when the region has no room left)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape)) if len(shape) else 1
        size = count * dtype.itemsize
        with self._lock:
            start = self._next
            if start + size > self.nbytes:
                raise MemoryError(f"region {self.name!r} has {self.nbytes - start} bytes left; "
                                  f"{size} asked for")
            self._next = (start + size + _ALIGN - 1) // _ALIGN * _ALIGN
        view = np.ndarray(shape, dtype=dtype, buffer=self._shm.buf, offset=start)
        view[...] = 0
        return view

    def slice_of(self, x):
        """(offset, nbytes) of array x in the region, or None when it is not wholly in
        it as one C-contiguous run."""
        if self._closed or not isinstance(x, np.ndarray) or not x.flags["C_CONTIGUOUS"]:
            return None
        start = x.__array_interface__["data"][0] - self._base
        if start < 0 or start + x.nbytes > self.nbytes:
            return None
        return start, x.nbytes

    def close(self):
        """Unregisters the region and removes the object (arrays over it must not be used
        after)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._client.unregister_region(self.name)
        finally:
            self._discard()

    def _discard(self):
        """Unmaps (once no array views it) and removes the object; the server is not told."""
        self._closed = True
        self._bytes = None
        try:
            self._shm.close()
        except BufferError:  # arrays still view it: the mapping goes with them
            pass
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def default_key(prefix, tenant, name):
    """The key create_region uses: the server's prefix, the tenant's part, a unique tail."""
    tenant_part = f"{tenant}@" if tenant else ""
    return f"/{prefix}{tenant_part}py-{os.getpid()}-{name}"


def slice_message(region, x):
    """pb.RegionSlice of array x in `region`, or None."""
    where = region.slice_of(x)
    if where is None:
        return None
    return pb.RegionSlice(region=region.name, offset=where[0], bytes=where[1])
