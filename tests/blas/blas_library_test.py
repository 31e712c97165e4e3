"""libgemmd_blas.so as programs use it: the reference BLAS testers (xblat3d, xblat3s and
the CBLAS ones, libblas-test) and numpy run unmodified under LD_PRELOAD against a
gemm-server process on the CPU backend, every call with a product sent to the server (the
server's request count says so too); the build that stands in for the system's
libblas.so.3 serves a whole BLAS; a threaded program checks concurrent calls; and
with the server down, refusing a call, or not named, the calls are computed by the local
BLAS and the programs still pass.

  blas_library_test.py --server gemm-server --library libgemmd_blas.so
                       --alternative alternative/libblas.so.3
                       --threads_check blas_threads_check --testers DIR
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = re.compile(r"gemmd_blas: (\d+) calls remote, (\d+) local below GEMMD_BLAS_MIN_FLOPS "
                     r"or with no server, (\d+) local with no product, (\d+) fallbacks")
CALL = re.compile(r"gemmd_blas: ([sd]gemm) [NT][NT] m=(\d+) n=(\d+) k=(\d+) (remote|local) "
                  r"[0-9.]+ ms(.*)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="gemm-server-", suffix=".log")
        self.process = subprocess.Popen(
            [ARGS.server, "--host", "127.0.0.1", "--port", str(self.port), "--metrics_port",
             str(self.metrics_port), "--backend", "cpu", *flags],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("gemm-server did not start")

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def matmuls_answered(self, code="OK"):
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("gemm_requests_total{") and 'method="Matmul"' in line \
                    and f'code="{code}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def gauge(self, name):
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def tester_input(tester, workdir):
    """The tester's stock input with every routine but the GEMM one switched off."""
    stock = {"xblat3d": "dblat3.in", "xblat3s": "sblat3.in", "xdcblat3": "din3",
             "xscblat3": "sin3"}[tester]
    routine = {"xblat3d": "DGEMM", "xblat3s": "SGEMM", "xdcblat3": "cblas_dgemm",
               "xscblat3": "cblas_sgemm"}[tester]
    lines = []
    with open(os.path.join(ARGS.testers, stock)) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 2 and fields[1] in ("T", "F") and \
                    re.fullmatch(r"(cblas_)?[A-Za-z0-9]+", fields[0]) and \
                    "PUT F FOR NO TEST" in line:
                flag = "T" if fields[0] == routine else "F"
                # Fixed columns (the Fortran testers read the name as A6): the flag is
                # replaced where it stands.
                at = line.index(fields[1], len(fields[0]))
                line = line[:at] + flag + line[at + 1:]
            lines.append(line)
    path = os.path.join(workdir, stock)
    with open(path, "w") as f:
        f.writelines(lines)
    return path, routine


def run(command, env_extra, stdin=None, cwd=None, timeout=600):
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("GEMMD_"):
            del env[key]
    env.update(env_extra)
    started = time.time()
    result = subprocess.run(command, stdin=stdin, cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    return result, time.time() - started


def counts(stderr):
    found = SUMMARY.findall(stderr)
    if not found:
        return None
    remote, small, no_product, fallbacks = map(int, found[-1])
    return {"remote": remote, "small": small, "no_product": no_product, "fallbacks": fallbacks}


class BlasLibraryTest(unittest.TestCase):
    def run_tester(self, tester, env):
        """Runs a reference tester through the library; returns its stderr after checking
        it passed. The reference BLAS computes the local calls (the CBLAS testers need its
        RowMajorStrg)."""
        with tempfile.TemporaryDirectory() as workdir:
            path, routine = tester_input(tester, workdir)
            env = {"LD_PRELOAD": ARGS.library, "LD_LIBRARY_PATH": ARGS.testers, **env}
            with open(path) as stdin:
                result, seconds = run([os.path.join(ARGS.testers, tester)], env, stdin=stdin,
                                      cwd=workdir)
            report = result.stdout
            for name in os.listdir(workdir):
                if name.endswith(".out") or name.endswith(".SUMM"):
                    with open(os.path.join(workdir, name)) as f:
                        report += f.read()
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(report, rf"{routine}\s+PASSED THE TESTS OF ERROR-EXITS")
        passes = re.findall(rf"{routine}\s+PASSED THE (?:[A-Z-]+\s+)?COMPUTATIONAL TESTS", report)
        self.assertEqual(len(passes), 2 if tester.startswith("xdc") or tester.startswith("xsc")
                         else 1, report)
        self.assertNotIn("FAIL", report)
        self.assertNotIn("NOT DETECTED", report)
        return result.stderr, seconds

    def test_reference_testers_every_product_remote(self):
        server = Server()
        try:
            for tester in ("xblat3d", "xblat3s", "xdcblat3", "xscblat3"):
                with self.subTest(tester=tester):
                    before = server.matmuls_answered()
                    stderr, _ = self.run_tester(tester, {
                        "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
                        "GEMMD_BLAS_VERBOSE": "1"})
                    c = counts(stderr)
                    self.assertIsNotNone(c, stderr[-2000:])
                    self.assertGreater(c["remote"], 5000)
                    self.assertEqual(c["small"], 0)
                    self.assertEqual(c["fallbacks"], 0)
                    calls = CALL.findall(stderr)
                    self.assertEqual(len(calls), c["remote"] + c["no_product"])
                    for routine, m, n, k, where, why in calls:
                        has_product = int(m) > 0 and int(n) > 0 and int(k) > 0 and \
                            why != " (no product)"
                        self.assertEqual(where == "remote", has_product, (m, n, k, where, why))
                    self.assertEqual(server.matmuls_answered() - before, c["remote"])
        finally:
            server.stop()

    def test_numpy_products_remote(self):
        server = Server()
        try:
            before = server.matmuls_answered()
            result, _ = run([sys.executable, os.path.join(HERE, "numpy_check.py")], {
                "LD_PRELOAD": ARGS.library, "GEMMD_TARGET": server.target,
                "GEMMD_BLAS_MIN_FLOPS": "0", "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertEqual(result.stdout.count("ok "), 10, result.stdout)
            c = counts(result.stderr)
            self.assertGreaterEqual(c["remote"], 10, result.stderr)
            self.assertEqual(c["fallbacks"], 0)
            self.assertEqual(server.matmuls_answered() - before, c["remote"])
        finally:
            server.stop()

    def test_threads_share_one_client(self):
        server = Server()
        try:
            result, _ = run([ARGS.threads_check, "8", "12"], {
                "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
                "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertIn("96 calls, 0 wrong", result.stdout)
            c = counts(result.stderr)
            self.assertEqual((c["remote"], c["fallbacks"]), (96, 0), result.stderr[-2000:])
        finally:
            server.stop()

    def test_large_calls_to_a_local_server_go_through_shared_memory(self):
        """A call that moves 8 MiB or more to a server on this machine is staged in a
        shared-memory region (sub-matrices, transposes and beta included); concurrent ones
        find it busy and take the socket; at exit the region is unregistered and removed."""
        server = Server()
        try:
            before = set(os.listdir("/dev/shm"))
            result, _ = run([ARGS.threads_check, "3", "2", "700", "760"], {
                "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
                "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertIn("6 calls, 0 wrong", result.stdout)
            c = counts(result.stderr)
            self.assertEqual((c["remote"], c["fallbacks"]), (6, 0), result.stderr[-2000:])
            staged = [call for call in CALL.findall(result.stderr)
                      if call[5] == " (shared memory)"]
            self.assertGreaterEqual(len(staged), 1, result.stderr[-2000:])
            self.assertTrue(all(call[0] == "dgemm" for call in staged), staged)
            self.assertEqual({name for name in set(os.listdir("/dev/shm")) - before
                              if "blas-" in name}, set())
            self.assertEqual(server.gauge("gemm_shm_regions"), 0)
            off, _ = run([ARGS.threads_check, "1", "2", "700", "760"], {
                "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
                "GEMMD_BLAS_VERBOSE": "1", "GEMMD_BLAS_SHM": "0"})
            self.assertEqual(off.returncode, 0, off.stdout + off.stderr[-2000:])
            self.assertNotIn("(shared memory)", off.stderr)
        finally:
            server.stop()

    def test_a_server_without_regions_takes_large_calls_over_the_socket(self):
        server = Server("--shm=off")
        try:
            result, _ = run([ARGS.threads_check, "1", "1", "700", "760"], {
                "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
                "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertIn("1 calls, 0 wrong", result.stdout)
            self.assertEqual(result.stderr.count("no shared-memory region with the server"), 1,
                             result.stderr[-2000:])
            c = counts(result.stderr)
            self.assertEqual((c["remote"], c["fallbacks"]), (1, 0), result.stderr[-2000:])
        finally:
            server.stop()

    def test_a_forked_child_computes_locally(self):
        """Python's multiprocessing forks: a child of a process whose client is up must
        not use the copied connections (they would hang); it computes locally, correctly."""
        server = Server()
        code = (
            "import multiprocessing as mp, numpy as np\n"
            "def child(q):\n"
            "    a = np.arange(40000.0).reshape(200, 200) / 7; b = a[::-1].copy()\n"
            "    ref = np.einsum('ik,kj->ij', a, b); q.put(float(abs(a @ b - ref).max() / abs(ref).max()))\n"
            "a = np.ones((200, 200)); print('parent', (a @ a)[0, 0])\n"
            "q = mp.get_context('fork').Queue(); p = mp.get_context('fork').Process(target=child, args=(q,)); p.start()\n"
            "print('child error', q.get(timeout=60)); p.join(60); print('child exit', p.exitcode)\n")
        try:
            result, seconds = run([sys.executable, "-c", code], {
                "LD_PRELOAD": ARGS.library, "GEMMD_TARGET": server.target,
                "GEMMD_BLAS_MIN_FLOPS": "0", "GEMMD_BLAS_VERBOSE": "1"}, timeout=120)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertIn("parent 200.0", result.stdout)
            self.assertIn("child exit 0", result.stdout)
            error = float(result.stdout.split("child error ")[1].split()[0])
            self.assertLess(error, 1e-13)
            self.assertIn("in a process forked after the first remote call", result.stderr)
            self.assertIn("remote", result.stderr)  # the parent's call
        finally:
            server.stop()

    def test_min_flops_splits_remote_and_local(self):
        server = Server()
        threshold = 10_000_000
        try:
            result, _ = run([sys.executable, os.path.join(HERE, "numpy_check.py")], {
                "LD_PRELOAD": ARGS.library, "GEMMD_TARGET": server.target,
                "GEMMD_BLAS_MIN_FLOPS": str(threshold), "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            calls = CALL.findall(result.stderr)
            wheres = set()
            for routine, m, n, k, where, why in calls:
                wheres.add(where)
                self.assertEqual(where == "remote", 2 * int(m) * int(n) * int(k) >= threshold,
                                 (m, n, k, where))
            self.assertEqual(wheres, {"remote", "local"})
        finally:
            server.stop()

    def test_server_down_falls_back_once_and_fast(self):
        port = free_port()  # nothing listens there
        stderr, seconds = self.run_tester("xblat3d", {"GEMMD_TARGET": f"127.0.0.1:{port}",
                                                      "GEMMD_BLAS_MIN_FLOPS": "0"})
        self.assertLess(seconds, 60)
        said = [line for line in stderr.splitlines() if "computed locally: the server" in line]
        self.assertEqual(len(said), 1, stderr[-2000:])
        self.assertIn("UNAVAILABLE", said[0])
        c = counts(stderr)  # printed at exit because calls fell back
        self.assertEqual(c["remote"], 0)
        self.assertEqual(c["fallbacks"], 6750)

    def test_refused_call_falls_back_and_the_next_goes_remote(self):
        server = Server("--max_elements", "40000")
        try:
            result, _ = run([sys.executable, os.path.join(HERE, "numpy_check.py")], {
                "LD_PRELOAD": ARGS.library, "GEMMD_TARGET": server.target,
                "GEMMD_BLAS_MIN_FLOPS": "0", "GEMMD_BLAS_VERBOSE": "1"})
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            calls = CALL.findall(result.stderr)
            for routine, m, n, k, where, why in calls:
                fits = max(int(m) * int(n), int(m) * int(k), int(k) * int(n)) <= 40000
                self.assertEqual(where == "remote", fits, (m, n, k, where, why))
                if not fits:
                    self.assertIn("fallback:", why)
            self.assertGreater(server.matmuls_answered(code="OK"), 0)
        finally:
            server.stop()

    def test_as_the_systems_libblas_so_3(self):
        """The alternative build found as libblas.so.3 (what update-alternatives does, here
        by LD_LIBRARY_PATH): xblat3d's whole level 3 passes, GEMM products remote and the
        other routines from the OpenBLAS it links; numpy's products go remote too."""
        server = Server()
        env = {"LD_LIBRARY_PATH": os.path.dirname(ARGS.alternative),
               "GEMMD_TARGET": server.target, "GEMMD_BLAS_MIN_FLOPS": "0",
               "GEMMD_BLAS_VERBOSE": "1"}
        try:
            with tempfile.TemporaryDirectory() as workdir:
                with open(os.path.join(ARGS.testers, "dblat3.in")) as stdin:
                    result, _ = run([os.path.join(ARGS.testers, "xblat3d")], env, stdin=stdin,
                                    cwd=workdir)
                with open(os.path.join(workdir, "dblat3.out")) as f:
                    report = f.read()
            self.assertEqual(result.returncode, 0, result.stderr[-2000:])
            for routine in ("DGEMM", "DSYMM", "DTRMM", "DTRSM", "DSYRK", "DSYR2K"):
                self.assertRegex(report, rf"{routine}\s+PASSED THE COMPUTATIONAL TESTS")
            self.assertNotIn("FAIL", report)
            c = counts(result.stderr)
            self.assertEqual((c["remote"], c["fallbacks"]), (6750, 0))
            self.assertIn("libopenblas.so.0", result.stderr)  # the local BLAS it names
            result, _ = run([sys.executable, os.path.join(HERE, "numpy_check.py")], env)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr[-2000:])
            self.assertGreaterEqual(counts(result.stderr)["remote"], 10)
        finally:
            server.stop()

    def test_bad_arguments_reported_as_the_reference_does_without_a_handler(self):
        """No XERBLA or cblas_xerbla in the program: the reference's messages are printed
        (positions as the reference reports them), nothing is computed, and unlike
        reference CBLAS the program goes on."""
        result, _ = run([ARGS.threads_check, "--bad_arguments"], {"GEMMD_TARGET": "127.0.0.1:1"})
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("continued", result.stdout)
        self.assertIn(" ** On entry to DGEMM parameter number  8 had an illegal value",
                      result.stderr)
        self.assertIn("Parameter 1 to routine cblas_dgemm was incorrect", result.stderr)

    def test_no_target_computes_locally_and_says_nothing(self):
        stderr, _ = self.run_tester("xblat3d", {})
        self.assertEqual(stderr, "")

    def test_bad_setting_is_reported_and_the_default_used(self):
        server = Server()
        try:
            stderr, _ = self.run_tester("xblat3d", {"GEMMD_TARGET": server.target,
                                                    "GEMMD_BLAS_MIN_FLOPS": "lots",
                                                    "GEMMD_BLAS_VERBOSE": "1"})
            self.assertIn("GEMMD_BLAS_MIN_FLOPS='lots' is not a non-negative number", stderr)
            c = counts(stderr)
            self.assertEqual(c["remote"], 0)  # the tester's 9^3 calls are below the default
            self.assertEqual(c["small"], 6750)
        finally:
            server.stop()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--threads_check", required=True)
    parser.add_argument("--alternative", required=True, help="the libblas.so.3 build")
    parser.add_argument("--testers", default="/usr/lib/x86_64-linux-gnu/blas")
    ARGS, rest = parser.parse_known_args()
    for name in ("server", "library", "threads_check", "alternative", "testers"):
        setattr(ARGS, name, os.path.abspath(getattr(ARGS, name)))  # the tests change cwd
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
