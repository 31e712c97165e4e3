#!/usr/bin/env python3
"""The container images, built and run the way a user builds and runs them.

    containers_test.py setup   DIR             dockerd up (started here if none answers),
                                               the Debian 12 base image made locally
    containers_test.py cpu     DIR GEMM_CLI    docker/Dockerfile
    containers_test.py cuda    DIR GEMM_CLI    docker/Dockerfile.cuda, from a local base
                                               that carries this machine's CUDA toolkit
    containers_test.py cleanup DIR             stops the dockerd that setup started

DIR keeps what the steps share (the PID of the dockerd started here, its log). No
public registry is reachable, so `setup` makes the image the Dockerfiles' default
BASE_IMAGE names (debian:12-slim) with mmdebstrap from Debian's mirror; the CPU image is
then built with no build argument at all. The CUDA image needs NVIDIA's CUDA images, so
its build here names a local toolkit image (this machine's /usr/local/cuda on the same
Debian base) and debian:12-slim as the runtime base.

Each image is checked from outside: gemm-cli info / matmul --verify / quantized --verify
against the published port, the user it runs as, the Docker health status (from the
image's HEALTHCHECK), and `docker stop` with three large calls in flight: all three
answer OK, the container exits 0 and its log says the drain completed.

Exit 77 (skipped) when docker or mmdebstrap is not installed; any other failure exits 1.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
BASE_IMAGE = "debian:12-slim"
CUDA_BUILD_IMAGE = "gemmd-ci/cuda-devel:13.0-bookworm"
CUDA_HOME = "/usr/local/cuda"
MIRROR_LINES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]


class Failure(Exception):
    pass


def log(msg):
    print(f"[containers] {msg}", flush=True)


def run(cmd, timeout=600, check=True, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and result.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {result.returncode}\n"
                      f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
    return result


def docker_answers():
    try:
        return subprocess.run(["docker", "info"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_docker():
    if shutil.which("docker") is None:
        log("SKIPPED: docker is not installed (dev.sh deps installs docker.io)")
        sys.exit(SKIP)
    if not docker_answers():
        raise Failure("dockerd does not answer (did the setup step run?)")


# ---- setup / cleanup ------------------------------------------------------------------

def setup(state_dir):
    for tool in ("docker", "dockerd", "mmdebstrap"):
        if shutil.which(tool) is None:
            log(f"SKIPPED: {tool} is not installed (dev.sh deps installs docker.io and mmdebstrap)")
            sys.exit(SKIP)
    os.makedirs(state_dir, exist_ok=True)
    pid_file = os.path.join(state_dir, "dockerd.pid")
    if os.path.exists(pid_file):
        os.remove(pid_file)
    if docker_answers():
        log("dockerd already answers: using it (and leaving it running)")
    else:
        if os.geteuid() != 0:
            raise Failure("dockerd must start as root")
        log_path = os.path.join(state_dir, "dockerd.log")
        with open(log_path, "wb") as out:
            daemon = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        with open(pid_file, "w") as f:
            f.write(str(daemon.pid))
        deadline = time.time() + 60
        while not docker_answers():
            if daemon.poll() is not None or time.time() > deadline:
                with open(log_path) as f:
                    tail = f.read()[-3000:]
                raise Failure(f"dockerd did not start (exit {daemon.poll()}):\n{tail}")
            time.sleep(0.5)
        log(f"dockerd started, pid {daemon.pid}, log {log_path}")

    if run(["docker", "image", "inspect", BASE_IMAGE], check=False).returncode == 0:
        log(f"{BASE_IMAGE} already present")
        return
    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        tarball = os.path.join(tmp, "bookworm.tar")
        # The mirror's security suite carries a Valid-Until; a machine whose clock is
        # past it (or a mirror snapshot) would refuse it without this option.
        run(["mmdebstrap", "--variant=minbase",
             "--aptopt=Acquire::Check-Valid-Until \"false\"",
             "bookworm", tarball] + MIRROR_LINES, timeout=900)
        run(["docker", "import", tarball, BASE_IMAGE], timeout=300)
    log(f"{BASE_IMAGE} made with mmdebstrap in {time.time() - t0:.0f} s")


def cleanup(state_dir):
    pid_file = os.path.join(state_dir, "dockerd.pid")
    if not os.path.exists(pid_file):
        log("no dockerd was started by setup: nothing to stop")
        return
    with open(pid_file) as f:
        pid = int(f.read())
    os.remove(pid_file)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        log(f"dockerd {pid} had already exited")
        return
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log(f"dockerd {pid} stopped")
            return
        time.sleep(0.5)
    raise Failure(f"dockerd {pid} still running 60 s after SIGTERM")


# ---- the checks of one image -----------------------------------------------------------

def published(name, port):
    out = run(["docker", "port", name, f"{port}/tcp"]).stdout.split()
    host_port = next(a for a in out if a.startswith("127.0.0.1:") or a.startswith("0.0.0.0:"))
    return "127.0.0.1:" + host_port.rsplit(":", 1)[1]


def metric(metrics_addr, name):
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(what, predicate, timeout_s, interval_s=0.5):
    deadline = time.time() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise Failure(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def check_image(tag, cli, expect_backend):
    name = "gemmd-ci-" + re.sub(r"[^a-z0-9]", "-", tag)
    run(["docker", "rm", "-f", name], check=False)
    # Arguments after the image replace its CMD, as a user's would. The batching flags
    # let the drain check below start its three calls together: the first waits (up to
    # 1 s, without computing) for the other two, so they arrive while the CPU is idle
    # and then compute as one batch of 3 x 58 GFLOP (seconds on two cores).
    # --ipc shareable: a co-located caller joins its IPC namespace (its /dev/shm) below.
    run(["docker", "run", "-d", "--name", name, "--ipc", "shareable", "--shm-size", "256m",
         "-p", "127.0.0.1::50051", "-p", "127.0.0.1::9464", tag,
         "--host=0.0.0.0", "--port=50051", "--metrics_port=9464",
         "--max_batch_size=3", "--max_queue_delay_us=1000000", "--wait_when_idle=true"])
    try:
        grpc = published(name, 50051)
        metrics = published(name, 9464)
        log(f"{tag}: gRPC at {grpc}, metrics at {metrics}")
        wait_for("gemm-cli health SERVING",
                 lambda: run([cli, "health", "--target", grpc, "--timeout_s", "2"],
                             check=False).returncode == 0, 60)

        info = run([cli, "info", "--target", grpc]).stdout
        if not re.search(rf"^backend:\s+{expect_backend}$", info, re.M):
            raise Failure(f"info does not say backend {expect_backend}:\n{info}")
        log(f"info: {info.splitlines()[0]} / backend {expect_backend}")

        out = run([cli, "matmul", "--target", grpc, "--m", "257", "--n", "129", "--k", "300",
                   "--verify"]).stdout
        if "PASS" not in out:
            raise Failure(f"matmul --verify did not pass:\n{out}")
        log("matmul --verify: " + out.strip().splitlines()[-1])
        out = run([cli, "quantized", "--target", grpc, "--format", "int8", "--m", "16",
                   "--n", "256", "--k", "512", "--verify"]).stdout
        if "PASS" not in out:
            raise Failure(f"quantized --verify did not pass:\n{out}")
        log("quantized int8 --verify: PASS")

        # A co-located caller in its own container, sharing the server's /dev/shm (and,
        # here, its network): operands and C through a shared-memory region.
        out = run(["docker", "run", "--rm", "--ipc", f"container:{name}",
                   "--network", f"container:{name}", "--entrypoint", "gemm-cli", tag,
                   "matmul", "--target", "127.0.0.1:50051", "--m", "257", "--n", "129",
                   "--k", "300", "--shm", "--verify"]).stdout
        if "PASS" not in out or "over shared memory" not in out:
            raise Failure(f"matmul --shm from a second container did not pass:\n{out}")
        log("matmul --shm --verify from a container sharing /dev/shm: PASS")

        user = run(["docker", "inspect", "--format", "{{.Config.User}}", name]).stdout.strip()
        if user != "10001:10001":
            raise Failure(f"image runs as {user!r}, expected 10001:10001")
        uid = run(["docker", "exec", name, "id", "-u"]).stdout.strip()
        if uid != "10001":
            raise Failure(f"the server's container runs as uid {uid}")
        wait_for("Docker health status 'healthy' (the image's HEALTHCHECK)",
                 lambda: run(["docker", "inspect", "--format", "{{.State.Health.Status}}",
                              name]).stdout.strip() == "healthy", 60, 1)
        log("runs as uid 10001; Docker health status healthy")

        # docker stop with calls in flight: SIGTERM, the server drains, all three answer.
        # In flight = begun on the server. Each call moves 72 MiB, so gemm-cli stripes it
        # (the default): A and B go up as temporary tensors in parts, then the Matmul by
        # handle, C read back, the temporaries deleted; a draining server serves the RPCs
        # that continue a call begun before, and refuses a call's first one (UNAVAILABLE,
        # for the client to retry elsewhere). So the stop waits until all six operands are
        # on the server (milliseconds on loopback); the compute takes seconds, and the
        # check below fails the test if any call had ended before the stop.
        calls = [subprocess.Popen([cli, "matmul", "--target", grpc, "--m", "3072", "--n", "3072",
                                   "--k", "3072", "--timeout_s", "120"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
        wait_for("3 calls begun: their 6 operands stored (gemm_tensor_store_tensors)",
                 lambda: metric(metrics, "gemm_tensor_store_tensors") >= 6, 30, 0.02)
        time.sleep(0.5)
        still_running = sum(c.poll() is None for c in calls)
        t0 = time.time()
        run(["docker", "stop", "-t", "40", name], timeout=90)
        stop_s = time.time() - t0
        if still_running != 3:
            raise Failure(f"only {still_running} of 3 calls were still running at docker stop")
        for i, c in enumerate(calls):
            out, err = c.communicate(timeout=120)
            if c.returncode != 0 or "shape=[3072,3072]" not in out:
                raise Failure(f"call {i} in flight at docker stop ended {c.returncode}:\n{out}{err}")
        exit_code = run(["docker", "inspect", "--format", "{{.State.ExitCode}}",
                         name]).stdout.strip()
        output = run(["docker", "logs", name])
        logs = output.stdout + output.stderr
        if exit_code != "0":
            raise Failure(f"container exited {exit_code} after docker stop:\n{logs[-3000:]}")
        if "event=shutdown_complete" not in logs:
            raise Failure(f"no shutdown_complete in the server's log:\n{logs[-3000:]}")
        log(f"docker stop with 3 calls in flight: 3/3 answered OK, exit 0, stop took {stop_s:.2f} s")
    except Exception:
        print(run(["docker", "logs", name], check=False).stderr[-3000:], file=sys.stderr)
        raise
    finally:
        run(["docker", "rm", "-f", name], check=False)


def build(dockerfile, tag, build_args=()):
    cmd = ["docker", "build", "-f", dockerfile, "-t", tag]
    for arg in build_args:
        cmd += ["--build-arg", arg]
    t0 = time.time()
    run(cmd + [ROOT], timeout=3000)
    size = run(["docker", "image", "inspect", "--format", "{{.Size}}", tag]).stdout.strip()
    log(f"built {tag} from {os.path.relpath(dockerfile, ROOT)} in {time.time() - t0:.0f} s, "
        f"{int(size) / 1e6:.0f} MB")


def cpu(cli):
    require_docker()
    build(os.path.join(ROOT, "docker/Dockerfile"), "gemmd:cpu")
    check_image("gemmd:cpu", cli, "cpu")


def make_cuda_build_image(state_dir):
    """debian:12-slim plus this machine's CUDA toolkit: the compiler and CUDA's runtime,
    without the large libraries gemm-server does not link (cuBLAS, cuDNN, NCCL, ...)."""
    real = os.path.realpath(CUDA_HOME)
    parent, top = os.path.split(real)
    keep = []
    for dirpath, dirnames, filenames in os.walk(real):
        rel = os.path.relpath(dirpath, parent)
        for entry in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            lib_dir = os.path.basename(dirpath) == "lib" and os.path.dirname(dirpath) == real
            if lib_dir and ".so" in entry and not entry.startswith("libcudart"):
                continue
            keep.append(os.path.join(rel, entry))
    with tempfile.TemporaryDirectory(dir=state_dir) as ctx:
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write(f"FROM {BASE_IMAGE}\n"
                    f"COPY {top} /usr/local/{top}\n"
                    f"RUN ln -s {top} /usr/local/cuda\n"
                    "ENV PATH=/usr/local/cuda/bin:$PATH\n")
        with open(os.path.join(ctx, "files"), "w") as f:
            f.write("\n".join(keep) + "\n")
        tar = subprocess.Popen(["tar", "-cf", "-", "-C", ctx, "Dockerfile", "-C", parent,
                                "--no-recursion", "-T", os.path.join(ctx, "files")],
                               stdout=subprocess.PIPE)
        result = subprocess.run(["docker", "build", "-t", CUDA_BUILD_IMAGE, "-"],
                                stdin=tar.stdout, capture_output=True, text=True, timeout=900)
        tar.stdout.close()
        if tar.wait() != 0 or result.returncode != 0:
            raise Failure(f"building {CUDA_BUILD_IMAGE} failed:\n{result.stderr[-3000:]}")
    log(f"{CUDA_BUILD_IMAGE}: {BASE_IMAGE} + {real} ({len(keep)} files)")


def cuda(state_dir, cli):
    require_docker()
    if not os.path.exists(os.path.join(CUDA_HOME, "bin/nvcc")):
        log(f"SKIPPED: no CUDA toolkit at {CUDA_HOME}")
        sys.exit(SKIP)
    make_cuda_build_image(state_dir)
    build(os.path.join(ROOT, "docker/Dockerfile.cuda"), "gemmd:cuda",
          [f"BUILD_IMAGE={CUDA_BUILD_IMAGE}", f"RUNTIME_IMAGE={BASE_IMAGE}"])
    libs = run(["docker", "run", "--rm", "--entrypoint", "sh", "gemmd:cuda", "-c",
                "ldd /usr/local/bin/gemm-server"]).stdout
    if not re.search(r"libcudart\.so\.13 => /usr/local/lib/gemmd/", libs) or "not found" in libs:
        raise Failure(f"gemm-server in gemmd:cuda does not load the image's libcudart:\n{libs}")
    log("gemmd:cuda's gemm-server loads libcudart.so.13 from the image")
    # No GPU here: the server must start and serve from the CPU backend.
    check_image("gemmd:cuda", cli, "cpu")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    step, state_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    try:
        if step == "setup":
            setup(state_dir)
        elif step == "cleanup":
            cleanup(state_dir)
        elif step == "cpu":
            cpu(sys.argv[3])
        elif step == "cuda":
            cuda(state_dir, sys.argv[3])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
