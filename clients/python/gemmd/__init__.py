"""gemmd: a Python client for the gemmd GEMM service (gemm.v1.GemmService).

    import numpy as np, gemmd
    with gemmd.Client("127.0.0.1:50051") as client:
        c = client.matmul(np.ones((4, 8), np.float32), np.ones((8, 2), np.float32))

The gRPC stubs are generated, not committed: run clients/python/generate.sh first
(see README.md beside this package).
"""
from .errors import *  # noqa: F401,F403 (the error classes are the public API)
from .errors import __all__ as _errors_all
from .quant import BFloat16, QuantizedTensor, quantize_int8, quantize_nvfp4
from .client import (DEFAULT_SERVICE_CONFIG, Client, Handle, KeepC, MatmulResult,
                     TensorInfo, TensorList, Timing)
from .shm import SharedRegion
from .streaming import Stream
from ._stubs import gemm_pb2, health_pb2  # the raw messages, for what the client lacks

__all__ = ["Client", "Handle", "KeepC", "MatmulResult", "Timing", "TensorInfo", "TensorList",
           "SharedRegion", "Stream", "QuantizedTensor", "BFloat16", "quantize_int8",
           "quantize_nvfp4", "DEFAULT_SERVICE_CONFIG", "gemm_pb2", "health_pb2"] + list(_errors_all)
