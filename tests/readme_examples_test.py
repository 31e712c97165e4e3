#!/usr/bin/python3
"""The README's examples, run as they are written (README.md's gemm-cli session,
clients/python/README.md's Python blocks) against a gemm-server started as `./dev.sh run`
starts it (defaults), on a free loopback port.

    readme_examples_test.py SERVER CLI REPO STUBS_DIR

gemm-cli: every `$ gemm-cli ...` line of a fenced block of README.md runs (with --target
pointing at the test's server), and what it prints must match the lines shown under it,
numbers aside (times, sizes, addresses and errors differ by machine); an example whose
output shows `error:` must exit 1, the others 0. Python: the ```python blocks of
clients/python/README.md run in order, in one namespace, in a fresh interpreter (the
stubs generated into STUBS_DIR first), with the README's 127.0.0.1:50051 replaced by the
server's address. Anything that raises fails the test.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

SERVER, CLI, REPO, STUBS = sys.argv[1:5]
# What may differ between the README's run and this one: numbers (times, sizes, addresses,
# errors) and the server instance's 16 hex digits.
VARIABLE = r"\b[0-9a-f]{16}\b|\d[0-9.e+-]*"
ANY_VALUE = r"[0-9a-f.e+-]+"


def start_server():
    log = tempfile.NamedTemporaryFile(prefix="readme_server_", suffix=".log", delete=False)
    process = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0",
                                "--metrics_port", "-1", "--backend", "cpu"],
                               stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while True:
        with open(log.name) as f:
            text = f.read()
        m = re.search(r"event=server_started .*grpc=[0-9.]+:(\d+)", text)
        if m:
            return process, f"127.0.0.1:{m.group(1)}"
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit(f"gemm-server did not start:\n{text}")
        time.sleep(0.02)


def fenced_blocks(path, language=None):
    """The fenced code blocks of a markdown file (of `language` when given)."""
    blocks, current, lang = [], None, None
    with open(path) as f:
        for line in f:
            fence = re.match(r"^```(\w*)\s*$", line)
            if fence and current is None:
                current, lang = [], fence.group(1)
            elif fence:
                if language is None or lang == language:
                    blocks.append(current)
                current = None
            elif current is not None:
                current.append(line.rstrip("\n"))
    return blocks


def pattern(expected_line):
    """A shown output line as a regex: every number may differ, the rest must not."""
    parts = re.split(VARIABLE, expected_line)
    return "^" + ANY_VALUE.join(re.escape(p) for p in parts) + "$"


def cli_examples(address, workdir):
    failures, ran = [], 0
    for block in fenced_blocks(os.path.join(REPO, "README.md")):
        i = 0
        while i < len(block):
            if not block[i].startswith("$ gemm-cli "):
                i += 1
                continue
            command = block[i][2:]
            expected = []
            i += 1
            while i < len(block) and not block[i].startswith("$ "):
                if block[i].strip():
                    expected.append(block[i])
                i += 1
            args = shlex.split(command)
            run = subprocess.run([CLI] + args[1:] + ["--target", address], cwd=workdir,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
            ran += 1
            got = [line for line in run.stdout.splitlines() if line.strip()]
            want_rc = 1 if any(line.startswith("error:") for line in expected) else 0
            problems = []
            if run.returncode != want_rc:
                problems.append(f"exit status {run.returncode}, expected {want_rc}")
            if len(got) != len(expected):
                problems.append(f"{len(got)} lines, the README shows {len(expected)}")
            for want, line in zip(expected, got):
                if not re.match(pattern(want), line):
                    problems.append(f"  README: {want}\n  got:    {line}")
            if problems:
                failures.append(f"$ {command}\n" + "\n".join(problems) + "\n--- output:\n" +
                                run.stdout)
    return ran, failures


def python_examples(address, workdir):
    blocks = fenced_blocks(os.path.join(REPO, "clients", "python", "README.md"), "python")
    script = "\n\n".join("\n".join(b) for b in blocks).replace("127.0.0.1:50051", address)
    path = os.path.join(workdir, "readme_examples.py")
    with open(path, "w") as f:
        f.write(script)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"),
               GEMMD_PROTO_DIR=STUBS, PYTHONWARNINGS="error::DeprecationWarning")
    run = subprocess.run([sys.executable, path], cwd=workdir, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600)
    return len(blocks), ([] if run.returncode == 0 else
                         [f"the Python README's blocks failed:\n{run.stdout}"])


def main():
    subprocess.run([os.path.join(REPO, "clients", "python", "generate.sh"), STUBS], check=True,
                   stdout=subprocess.DEVNULL)
    process, address = start_server()
    failures = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            ran, f = cli_examples(address, workdir)
            print(f"README.md: {ran} gemm-cli examples")
            failures += f
            blocks, f = python_examples(address, workdir)
            print(f"clients/python/README.md: {blocks} Python blocks")
            failures += f
    finally:
        process.terminate()
        process.wait(timeout=60)
    if ran == 0:
        failures.append("no gemm-cli example found in README.md")
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
