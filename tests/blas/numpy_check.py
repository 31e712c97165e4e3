"""numpy's matmul through libgemmd_blas.so (run under LD_PRELOAD by
blas_library_test.py): float64 and float32 products of several shapes, transposed and
strided views among them, each checked against a reference numpy computes without BLAS
(einsum's own loops, in long double) with an elementwise bound:
|C - ref| <= tol * (|A| @ |B|), tol 1e-13 for float64 and 1e-5 for float32.
Prints one line per product and exits 1 if any is out of bounds."""
import sys

import numpy as np


def reference(a, b):
    wide = np.longdouble
    exact = np.einsum("ik,kj->ij", a.astype(wide), b.astype(wide), optimize=False)
    scale = np.einsum("ik,kj->ij", np.abs(a).astype(wide), np.abs(b).astype(wide),
                      optimize=False)
    return exact, scale


def main():
    rng = np.random.default_rng(7)
    bad = 0
    cases = []
    for dtype in (np.float64, np.float32):
        a = rng.standard_normal((200, 300)).astype(dtype)
        b = rng.standard_normal((300, 150)).astype(dtype)
        cases += [
            (f"{dtype.__name__} a @ b", a, b),
            (f"{dtype.__name__} a.T-view @ c", rng.standard_normal((300, 200)).astype(dtype).T, b),
            (f"{dtype.__name__} a @ b.T-view", a, rng.standard_normal((150, 300)).astype(dtype).T),
            (f"{dtype.__name__} column slice", a[:, 10:290], b[10:290, :]),
            (f"{dtype.__name__} np.dot 257x129x65", rng.standard_normal((257, 129)).astype(dtype),
             rng.standard_normal((129, 65)).astype(dtype)),
        ]
    for name, a, b in cases:
        c = np.dot(a, b) if "np.dot" in name else a @ b
        exact, scale = reference(a, b)
        tol = 1e-13 if a.dtype == np.float64 else 1e-5
        excess = np.abs(c.astype(np.longdouble) - exact) - tol * scale
        worst = float(np.max(np.abs(c.astype(np.longdouble) - exact) / (scale + 1e-300)))
        ok = bool(np.all(excess <= 0)) and c.dtype == a.dtype
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name}: {a.shape} x {b.shape} -> {c.dtype}, "
              f"worst |C-ref|/(|A||B|) {worst:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
