"""Loads the generated gemm.v1 / grpc.health.v1 modules as the subpackage gemmd._proto.

The stubs live in $GEMMD_PROTO_DIR when set (a build directory, for tests), else in
gemmd/_proto/ beside this file (clients/python/generate.sh writes both). Whichever it is,
it is mounted under the one name gemmd._proto instead of being put on sys.path: the
generated tree has a top-level "grpc" directory, which on sys.path would lose to grpcio's
own "grpc" package (and a top-level "gemm" could shadow a caller's module). generate.sh
makes the generated files import each other relatively, so they need no other name.
"""
import importlib
import importlib.machinery
import importlib.util
import os
import sys

_NAME = __package__ + "._proto"


def _mount():
    directory = os.environ.get("GEMMD_PROTO_DIR") or os.path.join(os.path.dirname(__file__),
                                                                  "_proto")
    directory = os.path.abspath(directory)
    if not os.path.isfile(os.path.join(directory, "gemm", "v1", "gemm_pb2_grpc.py")):
        raise ImportError(
            f"gemmd: no generated stubs in {directory}; run clients/python/generate.sh "
            "(or generate.sh DIR and set GEMMD_PROTO_DIR=DIR)")
    module = sys.modules.get(_NAME)
    if module is None:
        init = os.path.join(directory, "__init__.py")
        spec = importlib.util.spec_from_file_location(_NAME, init,
                                                      submodule_search_locations=[directory])
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return module


_mount()
gemm_pb2 = importlib.import_module(_NAME + ".gemm.v1.gemm_pb2")
gemm_pb2_grpc = importlib.import_module(_NAME + ".gemm.v1.gemm_pb2_grpc")
health_pb2 = importlib.import_module(_NAME + ".grpc.health.v1.health_pb2")
health_pb2_grpc = importlib.import_module(_NAME + ".grpc.health.v1.health_pb2_grpc")
