"""Builds the gemmd wheel with its gRPC stubs: generate.sh writes gemm.v1 and
grpc.health.v1 into the build tree's gemmd/_proto (where gemmd/_stubs.py looks when
GEMMD_PROTO_DIR is unset). Everything else is in pyproject.toml."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "gemmd", "_proto")
        env = dict(os.environ)
        env.pop("GEMMD_PROTO_DIR", None)  # generate into the wheel, whatever the caller set
        subprocess.run(["bash", os.path.join(HERE, "generate.sh"), out], check=True, env=env)


setup(cmdclass={"build_py": BuildWithStubs})
