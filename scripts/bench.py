"""Prints start-up, memory and throughput figures of target/release/skill-runner."""

import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "skill-runner")
DURATION = os.environ.get("BENCH_DURATION", "10s")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp, port, skills=True):
    skills_dir = os.path.join(tmp, "skills")
    if skills and not os.path.exists(skills_dir):
        shutil.copytree(os.path.join(ROOT, "skills"), skills_dir)
    env = dict(os.environ, PORT=str(port), SKILL_RUNNER_DATA_DIR=os.path.join(tmp, "data"),
               SKILL_RUNNER_SKILLS_DIR=skills_dir, LOG_LEVEL="warn")
    env.pop("SKILL_RUNNER_BIND", None)
    return subprocess.Popen([BINARY], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def wait_ready(port, path="/v1/skills", limit=10.0):
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        try:
            if get(port, path) == 200:
                return True
        except OSError:
            time.sleep(0.001)
    return False


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def startup(runs=20):
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            t0 = time.perf_counter()
            proc = start(tmp, port)
            ok = wait_ready(port)
            elapsed = (time.perf_counter() - t0) * 1000
            proc.terminate()
            proc.wait()
            if ok:
                times.append(elapsed)
    times.sort()
    print(f"start-up to first 200 (GET /v1/skills, empty database, {len(times)} runs): "
          f"median {statistics.median(times):.1f} ms, min {times[0]:.1f} ms, max {times[-1]:.1f} ms "
          f"(target <= 100 ms; Python anchor 2.3 s)")


def wrk(port, path, connections):
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{DURATION}", "--latency",
                          f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return (float(rps.group(1)) if rps else 0.0, lat.get("50", "?"), lat.get("99", "?"),
            int(non2xx.group(1)) if non2xx else 0)


def load():
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start(tmp, port)
        wait_ready(port)
        time.sleep(1)
        print(f"idle RSS: {rss_kib(proc.pid) / 1024:.1f} MiB (target <= 20 MB; Python anchor 86 MB)")
        if not shutil.which("wrk"):
            print("throughput: skipped (wrk not installed)")
        else:
            for path, note in [("/v1/system/ping", "floor: 204, no body"),
                               ("/v1/skills", "target >= 20,000 req/s; anchor 787 req/s")]:
                for conns in (16, 64):
                    rps, p50, p99, bad = wrk(port, path, conns)
                    extra = f", {bad} non-2xx" if bad else ""
                    print(f"GET {path}, {conns} connections: {rps:,.0f} req/s, p50 {p50}, p99 {p99}{extra} ({note})")
            print(f"RSS after load: {rss_kib(proc.pid) / 1024:.1f} MiB (target <= 60 MB)")
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    print(f"machine: {os.cpu_count()} cores; wrk duration {DURATION} per point")
    startup()
    load()
