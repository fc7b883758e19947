"""Prints start-up, memory, throughput and job figures of target/release/skill-runner (or of the
binary BENCH_BINARY names, to compare two builds)."""

import concurrent.futures
import http.client
import json
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
BINARY = os.environ.get("BENCH_BINARY") or os.path.join(ROOT, "target", "release", "skill-runner")
DURATION = os.environ.get("BENCH_DURATION", "10s")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SH_SKILL = {
    "SKILL.md": "---\nname: sh-echo\n---\n# sh-echo\n",
    "run.sh": "#!/bin/sh\ncat >/dev/null\necho '{\"ok\": true}'\n",
    "assets/runner.json": json.dumps({
        "id": "sh-echo", "version": "1.0.0", "execution_modes": ["auto"],
        "entrypoint": {"script": ["sh", "run.sh"]},
        "schemas": {"input": "assets/input.schema.json", "parameter": "assets/parameter.schema.json",
                    "output": "assets/output.schema.json"}}),
    "assets/input.schema.json": json.dumps(
        {"type": "object", "properties": {"n": {"type": "integer", "x-input-source": "inline"}}}),
    "assets/parameter.schema.json": json.dumps({"type": "object"}),
    "assets/output.schema.json": json.dumps({"type": "object", "required": ["ok"]}),
}


def python_skill(name, script, parameter_schema, output_key):
    """A `script` skill running Python `script`, whose output must hold `output_key`."""
    return {
        "SKILL.md": f"---\nname: {name}\n---\n# {name}\n",
        "run.py": script,
        "assets/runner.json": json.dumps({
            "id": name, "version": "1.0.0", "execution_modes": ["auto"],
            "entrypoint": {"script": ["python3", "run.py"]},
            "schemas": {"input": "assets/input.schema.json",
                        "parameter": "assets/parameter.schema.json",
                        "output": "assets/output.schema.json"}}),
        "assets/input.schema.json": json.dumps({"type": "object"}),
        "assets/parameter.schema.json": json.dumps(parameter_schema),
        "assets/output.schema.json": json.dumps({"type": "object", "required": [output_key]}),
    }


# A script that prints `bursts` lines of about 1 KiB, 10 ms apart, and reports its own duration.
TALKER_SKILL = python_skill(
    "talker",
    "import json, sys, time\nreq = json.load(sys.stdin)\n"
    "time.sleep(req['parameter'].get('wait', 0))\nt0 = time.monotonic()\n"
    "for i in range(req['parameter']['bursts']):\n"
    "    sys.stdout.write(f'burst {i} t={time.time():.6f} ' + 'wärme ✓ ' * 100 + '\\n')\n"
    "    sys.stdout.flush()\n"
    "    time.sleep(0.01)\n"
    "print(json.dumps({'elapsed_ms': (time.monotonic() - t0) * 1000}))\n",
    {"type": "object"}, "elapsed_ms")

# Leaves what `parameter.mode` says in its artifacts (a FIFO, a 3 GiB sparse file), or floods
# its stdout: the soak's hostile runs.
HOSTILE_SKILL = python_skill(
    "hostile",
    "import json, os, sys\np = json.load(sys.stdin)['parameter']\n"
    "os.makedirs('artifacts', exist_ok=True)\n"
    "if p['mode'] == 'fifo':\n    os.mkfifo('artifacts/pipe')\n"
    "elif p['mode'] == 'sparse':\n    open('artifacts/big.bin', 'wb').truncate(3 << 30)\n"
    "elif p['mode'] == 'flood':\n    line = 'x' * 1023 + '\\n'\n"
    "    for _ in range(64 * 1024):\n        sys.stdout.write(line)\n"
    "elif p['mode'] == 'wide':\n    line = 'x' * ((2 << 20) - 1) + '\\n'\n"
    "    for _ in range(15):\n        sys.stdout.write(line)\n"
    "print(json.dumps({'mode': p['mode']}))\n",
    {"type": "object", "required": ["mode"]}, "mode")


def start(tmp, port, skills=True, env_extra=None):
    skills_dir = os.path.join(tmp, "skills")
    if skills and not os.path.exists(skills_dir):
        shutil.copytree(os.path.join(ROOT, "skills"), skills_dir)
        for name, files in (("sh-echo", SH_SKILL), ("talker", TALKER_SKILL),
                            ("hostile", HOSTILE_SKILL)):
            for rel, text in files.items():
                path = os.path.join(skills_dir, name, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    env = dict(os.environ, PORT=str(port), SKILL_RUNNER_DATA_DIR=os.path.join(tmp, "data"),
               SKILL_RUNNER_SKILLS_DIR=skills_dir, LOG_LEVEL="warn",
               # Confined turns may read the interpreter the python skills run with (pyenv
               # installs it under the home folder, outside the system paths).
               SKILL_RUNNER_SANDBOX_READ_PATHS=os.path.realpath(sys.base_prefix))
    env.update(env_extra or {})
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


def wrk(port, path, connections, script=None, key=None):
    extra = ["-s", script] if script else []
    if key:
        extra += ["-H", f"Authorization: Bearer {key}"]
    threads = min(2, connections)
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{DURATION}", "--latency", *extra,
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
        fresh = rss_kib(proc.pid) / 1024
        # A node that answered nothing for 10 s drops its code pages within 5 s (src/idle.rs).
        time.sleep(16)
        print(f"idle RSS: {rss_kib(proc.pid) / 1024:.1f} MiB after 17 s without requests, "
              f"{fresh:.1f} MiB 1 s after its readiness check (target <= 20 MB; Python anchor 86 MB)")
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


class Client:
    """One keep-alive connection."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method, path, body=None):
        headers = {"content-type": "application/json"} if body is not None else {}
        payload = json.dumps(body) if body is not None else None
        try:
            self.conn.request(method, path, body=payload, headers=headers)
            resp = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The service closes a keep-alive connection left idle past its header timeout
            # (30 s, SKILL_RUNNER_HEADER_TIMEOUT_SECONDS), as during the wrk runs: reconnect.
            self.conn.close()
            self.conn.request(method, path, body=payload, headers=headers)
            resp = self.conn.getresponse()
        data = resp.read()
        return resp.status, (json.loads(data) if data else None)


def create(client, n, **extra):
    status, body = client.call("POST", "/v1/jobs", {"skill_id": "sh-echo", "engine": "script",
                                                    "input": {"n": n}, **extra})
    return status, body


def wait_done(client, rid, interval=0.0005):
    while True:
        _, body = client.call("GET", f"/v1/jobs/{rid}")
        if body["status"] in ("succeeded", "failed", "canceled"):
            return body["status"]
        time.sleep(interval)


def cpu_seconds(pid):
    """utime + stime and cutime + cstime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def forkserver_of(pid):
    """The forkserver the service `pid` started (it appears with the first turn)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                forkserver = b"forkserver" in f.read()
        except OSError:
            continue
        if ppid == pid and forkserver:
            return int(entry)
    return None


def ended_runs(conn):
    """Runs the node behind `conn` (an `http.client` connection) has ended, by status, from
    its `/metrics`."""
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        # Closed by the service after its header timeout while the burst ran: reconnect.
        conn.close()
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    ended = {}
    for line in text.splitlines():
        if line.startswith("skill_runner_runs_ended_total{"):
            status = re.search(r'status="([a-z_]+)"', line).group(1)
            ended[status] = ended.get(status, 0) + int(float(line.rsplit(" ", 1)[1]))
    return ended


def burst(ports, total, first_n):
    """Creates `total` distinct `sh-echo` jobs (inputs `first_n`...) over 8 connections, the
    connections spread over `ports` in turn, and waits until the nodes have ended them all;
    returns the seconds from the first create to the last end, and the request ids by port.

    The client shares the two cores with what it measures, so it stays small: one thread,
    requests pipelined 25 deep on each connection (HTTP/1.1); then the status of the last run
    made on each connection is polled every 20 ms, and once those have ended, each node's
    `/metrics` (costlier to read) says when all have. Until 2026-11-27 eight Python threads
    each sent one request at a time and then polled every run's status in turn every 10 ms:
    about 0.5 ms of the cores per job, against about 0.1 ms now."""
    connections, depth = 8, 25
    socks = [socket.create_connection(("127.0.0.1", ports[k % len(ports)])) for k in range(connections)]
    watchers = [http.client.HTTPConnection("127.0.0.1", p, timeout=30) for p in ports]
    before = [sum(ended_runs(w).values()) for w in watchers]

    def request(k, n):
        body = json.dumps({"skill_id": "sh-echo", "engine": "script", "input": {"n": n},
                           "runtime_options": {"no_cache": True}})
        return (f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{ports[k % len(ports)]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()

    # Built before the clock starts; the answers are read as bytes and parsed after it stops.
    per = total // connections
    rounds = [(count, [b"".join(request(k, first_n + k + (start + i) * connections)
                                for i in range(count)) for k in range(connections)])
              for start in range(0, per, depth) for count in [min(depth, per - start)]]
    answers = [bytearray() for _ in socks]
    t0 = time.perf_counter()
    for count, batches in rounds:
        for sock, batch in zip(socks, batches):
            sock.sendall(batch)
        for sock, answer in zip(socks, answers):
            expected = answer.count(b"HTTP/1.1 ") + count
            # Each answer's body ends its message (`request_id` comes before its end).
            while answer.count(b"HTTP/1.1 ") < expected or not answer.endswith(b"}"):
                answer += sock.recv(1 << 16)
    last = [re.findall(rb'"request_id":"([^"]+)"', bytes(a[-2000:]))[-1].decode() for a in answers]
    for k, rid in enumerate(last):
        wait_done(Client(ports[k % len(ports)]), rid, interval=0.02)
    while sum(sum(ended_runs(w).values()) for w in watchers) - sum(before) < per * connections:
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    for sock in socks:
        sock.close()
    for w in watchers:
        w.close()
    made = {p: [] for p in ports}
    for k, answer in enumerate(answers):
        statuses = re.findall(rb"HTTP/1.1 (\d{3})", answer)
        rids = re.findall(rb'"request_id":"([^"]+)"', answer)
        assert len(statuses) == len(rids) == per and set(statuses) <= {b"200", b"201", b"202"}, \
            (len(statuses), len(rids), set(statuses))
        made[ports[k % len(ports)]].extend(r.decode() for r in rids)
    return elapsed, made


def all_succeeded(made):
    for port, rids in made.items():
        client = Client(port)
        for rid in rids:
            assert wait_done(client, rid) == "succeeded", rid


def finished_rate(port, pid, total=2000):
    """Creates `total` distinct jobs and waits for all of them ([`burst`]); returns jobs/s and
    the CPU per job in ms of the service and of the forkserver's leaders with what they ran
    (the skill's sh and cat included)."""
    client = Client(port)
    if forkserver_of(pid) is None:
        # One turn first: the forkserver starts with it.
        assert wait_done(client, create(client, 1)[1]["request_id"]) == "succeeded"
    forkserver = forkserver_of(pid)
    service0 = sum(cpu_seconds(pid))
    turns0 = cpu_seconds(forkserver)[1] if forkserver else 0.0
    elapsed, made = burst([port], total, 10_000)
    service = (sum(cpu_seconds(pid)) - service0) * 1000 / total
    turns = (cpu_seconds(forkserver)[1] - turns0) * 1000 / total if forkserver else float("nan")
    all_succeeded(made)
    return total / elapsed, service, turns


def alternated(measure):
    """For the data dir on disk and (where there is one) on tmpfs: `measure(port, pid)` of a
    fresh service with every barrier and of one with SKILL_RUNNER_SANDBOX=off, the two
    alternated twice in one run; yields each place with its figures by mode (`on`, `off`)."""
    places = [("disk", None)] + ([("tmpfs", "/dev/shm")] if os.path.isdir("/dev/shm") else [])
    for place, parent in places:
        figures = {"on": [], "off": []}
        for _ in range(2):
            for mode in ("off", "on"):
                with tempfile.TemporaryDirectory(dir=parent) as tmp:
                    port = free_port()
                    proc = start(tmp, port, env_extra={
                        "SKILL_RUNNER_MAX_QUEUE_SIZE": "100000",
                        "SKILL_RUNNER_SANDBOX": "auto" if mode == "on" else "off"})
                    try:
                        wait_ready(port)
                        figures[mode].append(measure(port, proc.pid))
                    finally:
                        proc.terminate()
                        proc.wait()
        yield place, figures


def program_cpu_ms(runs=400):
    """The CPU in ms of the sh-echo skill's own program per job, run as a turn runs it (`sh
    run.sh`, the request on stdin) but without the service: what a job costs at the least, so
    `cores / it` is the most jobs the machine can finish a second (the limit)."""
    import resource
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "run.sh"), "w") as f:
            f.write(SH_SKILL["run.sh"])
        request = json.dumps({"input": {"n": 1}, "parameter": {}}).encode()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(runs):
            subprocess.run(["sh", "run.sh"], cwd=tmp, input=request, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return used * 1000 / runs


def cost_of_a_job(total=1500):
    """Contained sh jobs against the machine's limit: the programs' own CPU per job measured
    here first, then finished jobs/s as a fraction of the limit and the service's and the
    leaders' CPU per job as multiples of the programs', with every barrier and with none, the
    data dir on disk and on tmpfs, the modes alternated (twice each) in one run."""
    program = program_cpu_ms()
    cores = os.cpu_count()
    limit = cores * 1000 / program
    print(f"the programs' own CPU per sh job: {program:.2f} ms, so {cores} cores finish at most "
          f"{limit:,.0f} jobs/s (the limit)")
    rates = {}
    for place, figures in alternated(lambda port, pid: finished_rate(port, pid, total)):
        for mode, label in (("on", "every barrier"), ("off", "no barrier (SKILL_RUNNER_SANDBOX=off)")):
            rate = statistics.mean(f[0] for f in figures[mode])
            service = statistics.mean(f[1] for f in figures[mode])
            leaders = statistics.mean(f[2] for f in figures[mode]) - program
            rates[(place, mode)] = rate
            print(f"  data dir on {place}, {label}: {rate:,.0f} jobs/s = {rate / limit:.2f} of the "
                  f"limit (goal >= 0.5 with every barrier); service CPU per job {service:.2f} ms = "
                  f"{service / program:.2f}x the programs' (goal <= 0.5x); leaders {leaders:.2f} ms = "
                  f"{leaders / program:.2f}x")
        kept = rates[(place, "on")] / rates[(place, "off")]
        print(f"  data dir on {place}: the barriers keep {kept:.2f} of the barrier-free rate "
              f"(goal >= 0.9)")


def sequential(client, total=200):
    """create -> succeeded of `total` distinct jobs, one at a time, in ms each."""
    latencies = []
    for n in range(total):
        t0 = time.perf_counter()
        _, body = create(client, n)
        assert wait_done(client, body["request_id"]) == "succeeded"
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def jobs():
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start(tmp, port, env_extra={"SKILL_RUNNER_MAX_QUEUE_SIZE": "100000"})
        wait_ready(port)
        client = Client(port)

        # create -> succeeded, one job at a time (the engine process alone: sh startup).
        latencies = sequential(client)
        t0 = time.perf_counter()
        for _ in range(50):
            subprocess.run(["sh", "-c", "cat >/dev/null; echo '{\"ok\": true}'"], input=b"{}",
                           stdout=subprocess.DEVNULL)
        sh_ms = (time.perf_counter() - t0) * 1000 / 50
        print(f"create -> succeeded, /bin/sh skill, sequential ({len(latencies)} jobs): "
              f"p50 {statistics.median(latencies):.1f} ms, p99 {pct(latencies, 99):.1f} ms; "
              f"the sh process alone takes {sh_ms:.1f} ms (target p50 <= 20 ms above it; anchor p50 320 ms)")

        # cache hit: the same request again.
        _, body = create(client, 0)
        hits = []
        for _ in range(300):
            t0 = time.perf_counter()
            status, body = create(client, 0)
            hits.append((time.perf_counter() - t0) * 1000)
            assert body["cache_hit"], body
        print(f"cache hit, create -> cache_hit:true ({len(hits)} requests): p50 {statistics.median(hits):.2f} ms, "
              f"p99 {pct(hits, 99):.2f} ms (target p50 <= 5 ms)")

        rate, service, turns = finished_rate(port, proc.pid)
        print(f"finished jobs/s, /bin/sh skill, 2000 jobs created by 8 clients, data dir on disk: "
              f"{rate:,.0f} jobs/s (CPU per job: service {service:.1f} ms, turn leader + sh "
              f"{turns:.1f} ms; {os.cpu_count()} cores; target >= 300; anchor ~3)")

        if shutil.which("wrk"):
            # Status polls of an active run (one printing a line every 10 ms), against the
            # same server's floor.
            _, body = client.call("POST", "/v1/jobs", {"skill_id": "talker", "engine": "script",
                                                        "parameter": {"bursts": 5000}})
            rid = body["request_id"]
            while client.call("GET", f"/v1/jobs/{rid}")[1]["status"] != "running":
                time.sleep(0.01)
            floor, _, _, _ = wrk(port, "/v1/system/ping", 16)
            for conns in (16, 64):
                rps, p50, p99, bad = wrk(port, f"/v1/jobs/{rid}", conns)
                ratio = f", {rps / floor:.2f} of ping's {floor:,.0f} req/s" if conns == 16 else ""
                print(f"GET /v1/jobs/{{id}} (status poll of a running run), {conns} connections: "
                      f"{rps:,.0f} req/s, p50 {p50}, p99 {p99}{ratio} (target >= 0.5 of ping at 16; "
                      f"anchor 424/392 req/s)")
            still = client.call("GET", f"/v1/jobs/{rid}")[1]["status"]
            assert still == "running", f"the polled run ended meanwhile ({still})"
            client.call("POST", f"/v1/jobs/{rid}/cancel")
            print(f"RSS after job load: {rss_kib(proc.pid) / 1024:.1f} MiB (target <= 60 MB)")
        proc.terminate()
        proc.wait()

    # The cost of a job against the machine's limit, with and without barriers, on disk and
    # on tmpfs.
    cost_of_a_job()

    if not shutil.which("wrk"):
        return
    # Create rate and the 429 bound: distinct creates as fast as wrk sends them.
    lua = os.path.join(tempfile.gettempdir(), "skill-runner-create.lua")
    def creates(skill_and_input):
        with open(lua, "w") as f:
            f.write('local n = 0\n'
                    'request = function()\n'
                    '  n = n + 1\n'
                    '  local body = string.format(\'{"skill_id":' + skill_and_input + ','
                    '"runtime_options":{"no_cache":true}}\', n + math.random(1, 1000000000))\n'
                    '  return wrk.format("POST", "/v1/jobs", {["Content-Type"] = "application/json"}, body)\n'
                    'end\n')
        return lua

    sh = creates('"sh-echo","engine":"script","input":{"n":%d}')
    for queue, note in [("1000000", "unbounded for the measurement"), ("128", "default bound: 429 beyond it")]:
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            proc = start(tmp, port, env_extra={"SKILL_RUNNER_MAX_QUEUE_SIZE": queue})
            wait_ready(port)
            rps, p50, p99, bad = wrk(port, "/v1/jobs", 16, sh)
            print(f"POST /v1/jobs, 16 connections, queue {queue} ({note}): {rps:,.0f} req/s, p50 {p50}, "
                  f"p99 {p99}, {bad} answered 429 (target >= 1,000 accepted req/s, p99 <= 20 ms)")
            proc.terminate()
            proc.wait()
    # The store's part alone: every slot holds a turn that outlasts the measurement, so each
    # create only joins the queue (no turn starts or ends meanwhile).
    queued = creates('"talker","engine":"script","parameter":{"bursts":100000,"n":%d}')
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start(tmp, port, env_extra={"SKILL_RUNNER_MAX_QUEUE_SIZE": "1000000"})
        wait_ready(port)
        rps, p50, p99, _ = wrk(port, "/v1/jobs", 16, queued)
        print(f"POST /v1/jobs, 16 connections, every slot busy (the queue only grows): {rps:,.0f} req/s, "
              f"p50 {p50}, p99 {p99}")
        proc.terminate()
        proc.wait()


def barriers():
    """The per-turn cost of the barriers: the same /bin/sh jobs with every barrier (Landlock,
    pid and network namespaces, no capabilities, seccomp, cgroups) and with
    SKILL_RUNNER_SANDBOX=off, measured alternately in one run, with the data dir on disk and
    (where there is one) on tmpfs, which takes the file system's share out of both."""
    def measure(port, pid):
        latencies = sequential(Client(port))
        return statistics.median(latencies), finished_rate(port, pid)[0]

    for place, figures in alternated(measure):
        print(f"data dir on {place}:")
        for mode, label in (("off", "SKILL_RUNNER_SANDBOX=off (no barrier)"),
                            ("on", "every barrier (default)")):
            p50s, rates = [f[0] for f in figures[mode]], [f[1] for f in figures[mode]]
            print(f"  {label}: create -> succeeded p50 {' / '.join(f'{v:.1f}' for v in p50s)} ms, "
                  f"finished sh jobs/s {' / '.join(f'{v:,.0f}' for v in rates)}")
        added = (statistics.mean(f[0] for f in figures["on"])
                 - statistics.mean(f[0] for f in figures["off"]))
        print(f"  barriers add {added:.1f} ms to create -> succeeded p50 (target < 5 ms; "
              f"finished jobs/s target >= 300 with them)")


BURST = re.compile(rb"burst (\d+) t=(\d+\.\d+)")


def subscribe(port, rid, count):
    """Opens `count` event streams of one run on non-blocking sockets and reads them all to
    `end`; returns how many saw `end` and the lag of each burst each stream received (from the
    skill's write to its arrival here, in ms)."""
    import resource
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1024), hard))
    sel = selectors.DefaultSelector()
    request = f"GET /v1/jobs/{rid}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    tails, seen, lags, ended = {}, {}, [], 0
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(request)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        tails[sock], seen[sock] = b"", -1
    while len(sel.get_map()):
        for key, _ in sel.select(timeout=30):
            sock = key.fileobj
            data = sock.recv(65536)
            now = time.time()
            done = not data
            if data:
                window = tails[sock] + data
                for burst, at in BURST.findall(window):
                    if int(burst) > seen[sock]:
                        seen[sock] = int(burst)
                        lags.append((now - float(at)) * 1000)
                done = b"event: end" in window
                tails[sock] = window[-64:]
            if done:
                ended += 1
                sel.unregister(sock)
                sock.close()
    return ended, lags


def sse():
    """A run printing 200 bursts over 2 s, watched by 0, 500 and 1,000 event streams (opened
    before its first burst): its own duration, how many streams reached `end`, each burst's lag
    from write to arrival, and the service's peak RSS while streaming."""
    import threading
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start(tmp, port)
        wait_ready(port)
        client = Client(port)

        def run(subscribers):
            # The first burst waits until every stream is open: the lag is then the stream's
            # own, not the time its client took to connect.
            parameter = {"bursts": 200, "wait": 3 if subscribers else 0}
            _, body = client.call("POST", "/v1/jobs", {"skill_id": "talker", "parameter": parameter,
                                                       "runtime_options": {"no_cache": True}})
            rid = body["request_id"]
            peak, stop = [rss_kib(proc.pid)], threading.Event()

            def sample():
                while not stop.is_set():
                    peak.append(rss_kib(proc.pid))
                    time.sleep(0.02)
            sampler = threading.Thread(target=sample)
            sampler.start()
            ended, lags = subscribe(port, rid, subscribers) if subscribers else (0, [])
            assert wait_done(client, rid) == "succeeded"
            stop.set()
            sampler.join()
            _, result = client.call("GET", f"/v1/jobs/{rid}/result")
            return result["result"]["data"]["elapsed_ms"], ended, lags, max(peak)

        print(f"idle RSS before streaming: {rss_kib(proc.pid) / 1024:.1f} MiB")
        for subscribers in (0, 500, 1000):
            runs = [run(subscribers) for _ in range(3)]
            own = statistics.median(r[0] for r in runs)
            line = (f"run with 200 output bursts, {subscribers} SSE subscribers: the script's own duration "
                    f"median {own:,.0f} ms (2,000 ms of it sleeping)")
            if subscribers:
                lags = [lag for r in runs for lag in r[2]]
                line += (f"; {min(r[1] for r in runs)} of {subscribers} streams reached `end` in every run; "
                         f"burst lag p50 {pct(lags, 50):.1f} ms, p99 {pct(lags, 99):.1f} ms "
                         f"({len(lags):,} bursts seen, the reading client on the same cores)")
            line += f"; service peak RSS {max(r[3] for r in runs) / 1024:.1f} MiB"
            print(line, flush=True)
        proc.terminate()
        proc.wait()


PY_ECHO = """import json, sys
text = json.load(sys.stdin)["input"]["text"]
print(json.dumps({"success": True, "data": {"echoed": text}, "error": None}))
"""


def invoke():
    """POST /skills/{id}:invoke: the in-process echo and a cli:python echo, next to the floor."""
    if not shutil.which("wrk"):
        print("invoke: skipped (wrk not installed)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        cli = os.path.join(tmp, "cli")
        os.makedirs(cli)
        with open(os.path.join(cli, "pyecho.py"), "w") as f:
            f.write(PY_ECHO)
        lua = os.path.join(tmp, "invoke.lua")
        with open(lua, "w") as f:
            f.write('wrk.method = "POST"\nwrk.body = \'{"input": {"text": "hello"}}\'\n'
                    'wrk.headers["Content-Type"] = "application/json"\n')
        port = free_port()
        proc = start(tmp, port, env_extra={"OPENSKILL_CLI_DIR": cli,
                                           "OPENSKILL_ALLOWED_ROOT": os.path.join(tmp, "files")})
        wait_ready(port)
        for conns in (1, 16):
            rps, p50, p99, _ = wrk(port, "/v1/system/ping", conns)
            print(f"floor GET /v1/system/ping, {conns} conn: {rps:,.0f} req/s, p50 {p50}, p99 {p99}")
            for skill, note in (("echo", "inproc"), ("pyecho", "cli:python, one python3 per call")):
                rps, p50, p99, bad = wrk(port, f"/skills/{skill}:invoke", conns, lua)
                extra = f", {bad} non-2xx" if bad else ""
                print(f"invoke {skill} ({note}), {conns} conn: {rps:,.0f} req/s, p50 {p50}, p99 {p99}{extra}")
        print(f"RSS after invoke load: {rss_kib(proc.pid) / 1024:.1f} MiB")
        runs = []
        for _ in range(20):
            t0 = time.perf_counter()
            subprocess.run(["python3", os.path.join(cli, "pyecho.py")], input=b'{"input": {"text": "hello"}}',
                           capture_output=True, check=True)
            runs.append((time.perf_counter() - t0) * 1000)
        print(f"floor of cli:python: the same script run directly, median {statistics.median(runs):.1f} ms per run")
        proc.terminate()
        proc.wait()


with open(os.path.join(ROOT, "tests", "fixtures", "schema_bomb.json")) as f:
    SCHEMA_BOMB = json.load(f)


def surface(seconds=int(os.environ.get("BENCH_SOAK_SECONDS", "120"))):
    """Normal sh jobs alongside the attacks on the service's own surface, for `seconds`: FIFO,
    huge and flooded-log runs read back many times over, silent sockets by the hundred, requests
    for another Host, 60 event streams that never read a run printing 15 lines of 2 MiB (30 MiB,
    within the soak's 32 MiB log cap) beside 10 history readers, 200 bodies trickled a byte
    every 5 s. Reports whether every normal job succeeded, the health check's latency and the
    service's largest RSS (targets: every job, p99 <= 50 ms, <= 128 MiB). A full disk and a
    failing database are left out: the service refuses every job then, by design (their tests
    are in tests/service)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start(tmp, port, env_extra={
            "SKILL_RUNNER_MAX_QUEUE_SIZE": "100000", "SKILL_RUNNER_RUN_MAX_LOG_MB": "32",
            "SKILL_RUNNER_RUN_FILE_MB": "4096", "SKILL_RUNNER_SERVE_MAX_MB": "64",
            "SKILL_RUNNER_HEADER_TIMEOUT_SECONDS": "5"})
        wait_ready(port)
        stop = time.monotonic() + seconds
        counts = {}
        pings, rss = [], []

        def count(key):
            counts[key] = counts.get(key, 0) + 1

        def normal():
            client, n = Client(port), 0
            while time.monotonic() < stop:
                n += 1
                _, body = create(client, 50_000 + n, runtime_options={"no_cache": True})
                count("normal " + wait_done(client, body["request_id"], interval=0.01))

        def hostile():
            client = Client(port)
            while time.monotonic() < stop:
                for mode in ("fifo", "sparse", "flood"):
                    _, body = client.call("POST", "/v1/jobs", {"skill_id": "hostile",
                                                               "parameter": {"mode": mode}})
                    rid = body["request_id"]
                    count(f"hostile {mode} " + wait_done(client, rid, interval=0.01))
                    for path in ("/artifacts/artifacts/pipe", "/artifacts/artifacts/big.bin",
                                 "/bundle", "/chat/history", "/logs") * 5:
                        client.conn.request("GET", f"/v1/jobs/{rid}{path}")
                        answer = client.conn.getresponse()
                        answer.read()
                        count(f"read {path.rsplit('/', 1)[-1]} {answer.status}")

        def sockets():
            while time.monotonic() < stop:
                held = []
                for _ in range(500):
                    try:
                        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                    except OSError:
                        count("idle socket refused")
                count("idle sockets opened")
                time.sleep(6)
                for s in held:
                    s.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/v1/jobs/x", headers={"Host": "evil.example"})
                count(f"rebinding {conn.getresponse().status}")
                conn.close()
                status, _ = Client(port).call("POST", "/v1/tools:validate", {"definition": {
                    "name": "bomb", "description": "When it must be refused.",
                    "input_schema": SCHEMA_BOMB}})
                count(f"schema bomb {status}")

        def streams():
            client = Client(port)
            _, body = client.call("POST", "/v1/jobs", {"skill_id": "hostile",
                                                       "parameter": {"mode": "wide"}})
            rid = body["request_id"]
            count("wide run " + wait_done(client, rid, interval=0.05))
            while time.monotonic() < stop:
                held = []
                for path in ("chat", "chat?cursor=0", "events?cursor=0") * 20:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(f"GET /v1/jobs/{rid}/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                              .encode())
                    held.append(s)
                count("unread streams opened")

                def history(_):
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    conn.request("GET", f"/v1/jobs/{rid}/chat/history")
                    answer = conn.getresponse()
                    answer.read()
                    conn.close()
                    return answer.status

                with concurrent.futures.ThreadPoolExecutor(10) as readers:
                    for status in readers.map(history, range(10)):
                        count(f"history page {status}")
                time.sleep(5)
                for s in held:
                    s.close()

        def tricklers():
            body = b"x" * (10 << 20)
            while time.monotonic() < stop:
                held = []
                for _ in range(200):
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(b"POST /v1/skill-packages/install HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Type: multipart/form-data; boundary=b\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body))
                    held.append(s)
                count("trickled bodies started")
                for _ in range(6):
                    time.sleep(5)
                    for s in held:
                        try:
                            s.send(b"x")
                        except OSError:
                            pass
                # Cut: the service answered and closed, or reset; still open: nothing to read.
                for s in held:
                    s.setblocking(False)
                    try:
                        s.recv(4096)
                        count("trickled body cut")
                    except BlockingIOError:
                        count("trickled body still open after 30 s")
                    except OSError:
                        count("trickled body cut")
                    s.close()

        def pinger():
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    status = get(port, "/v1/system/ping")
                except OSError:
                    status = "error"
                pings.append(((time.perf_counter() - t0) * 1000, status))
                rss.append(rss_kib(proc.pid))
                time.sleep(0.05)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for future in [pool.submit(f) for f in (normal, normal, hostile, hostile, sockets,
                                                    streams, tricklers, pinger)]:
                future.result()
        proc.terminate()
        proc.wait()
    latencies = sorted(ms for ms, _ in pings)
    failed_pings = sum(1 for _, status in pings if status != 204)
    normal_total = sum(v for k, v in counts.items() if k.startswith("normal"))
    print(f"surface soak, {seconds} s: {normal_total} normal sh jobs, "
          f"{counts.get('normal succeeded', 0)} succeeded (every one must)")
    for key in sorted(k for k in counts if not k.startswith("normal")):
        print(f"  {key}: {counts[key]}")
    print(f"  ping: {len(pings)} tries, {failed_pings} not 204; p50 {pct(latencies, 50):.1f} ms, "
          f"p99 {pct(latencies, 99):.1f} ms (target <= 50), max {latencies[-1]:.1f} ms")
    quarters = " / ".join(f"{rss[min(len(rss) - 1, len(rss) * q // 4)] / 1024:.0f}"
                          for q in (1, 2, 3, 4))
    print(f"  service RSS: max {max(rss) / 1024:.0f} MiB (target <= 128); at each quarter of the "
          f"soak {quarters} MiB")


def spread_rate(ports, total=2000):
    """Creates `total` distinct jobs spread over the nodes at `ports` and waits for all of them
    ([`burst`]); returns jobs/s."""
    elapsed, made = burst(ports, total, 20_000)
    all_succeeded(made)
    return total / elapsed


def across_nodes(shared, ports):
    """Two nodes: a run's output watched by 100 streams through the node not running it (the
    relay) and by 100 through the one running it, burst lag p50 / p99 of each; and the time a
    cancel sent through the other node takes to answer (it answers once the turn is gone),
    over 10 runs."""
    def running_on(client, parameter):
        _, body = client.call("POST", "/v1/jobs", {"skill_id": "talker", "parameter": parameter,
                                                   "runtime_options": {"no_cache": True}})
        rid = body["request_id"]
        while True:
            _, status = client.call("GET", f"/v1/jobs/{rid}")
            if status["status"] == "running":
                break
            time.sleep(0.005)
        while True:
            held = [n for n in range(2) if os.path.isdir(
                os.path.join(shared, f"node{n}", "data", "runs", status["run_id"]))]
            if held:
                return rid, held[0]
            time.sleep(0.005)

    client = Client(ports[0])
    rid, holder = running_on(client, {"bursts": 200, "wait": 3})
    lags = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        watched = {name: pool.submit(subscribe, ports[n], rid, 100)
                   for name, n in (("relayed", 1 - holder), ("direct", holder))}
        for name, future in watched.items():
            ended, lags[name] = future.result()
            assert ended == 100, f"{name}: {ended} of 100 streams ended"
    assert wait_done(client, rid) == "succeeded"
    cancels = []
    for _ in range(10):
        rid, holder = running_on(client, {"bursts": 1, "wait": 30})
        other = Client(ports[1 - holder])
        t0 = time.perf_counter()
        status, body = other.call("POST", f"/v1/jobs/{rid}/cancel")
        cancels.append((time.perf_counter() - t0) * 1000)
        assert status == 200 and body["status"] == "canceled", body
    return (f"; 100 streams through the other node (relayed) / the running one: burst lag p50 "
            f"{pct(lags['relayed'], 50):.1f} / {pct(lags['direct'], 50):.1f} ms, p99 "
            f"{pct(lags['relayed'], 99):.1f} / {pct(lags['direct'], 99):.1f} ms; cancel through "
            f"the other node answered in p50 {statistics.median(cancels):.0f} ms, "
            f"max {max(cancels):.0f} ms (10 runs)")


def cluster():
    """Nodes on PostgreSQL: one node on SQLite, one on PostgreSQL and two sharing one PostgreSQL
    database (a throw-away cluster from scripts/postgres.sh, on this machine), each measured by
    create -> succeeded p50 (200 jobs, one at a time, on the first node) and finished /bin/sh
    jobs/s (2,000 jobs from 8 clients spread over the nodes). The nodes share the machine's two
    cores, so two nodes here measure the coordination's cost, not added capacity."""
    with tempfile.TemporaryDirectory() as pg:
        os.chmod(pg, 0o711)
        url = subprocess.run(["bash", os.path.join(ROOT, "scripts/postgres.sh"), "start",
                              os.path.join(pg, "cluster")],
                             check=True, capture_output=True, text=True).stdout.strip()
        try:
            for label, nodes, store in (("1 node, SQLite", 1, None), ("1 node, PostgreSQL", 1, "pg"),
                                        ("2 nodes, one PostgreSQL database", 2, "pg")):
                env = {"SKILL_RUNNER_MAX_QUEUE_SIZE": "100000"}
                if store:
                    name = f"bench_{nodes}_{os.getpid()}"
                    subprocess.run(["psql", url, "-q", "-c", f"CREATE DATABASE {name}"], check=True,
                                   capture_output=True)
                    env["SKILL_RUNNER_DATABASE_URL"] = url.replace("/postgres?", f"/{name}?")
                with tempfile.TemporaryDirectory() as shared:
                    procs, ports = [], []
                    for n in range(nodes):
                        tmp = os.path.join(shared, f"node{n}")
                        os.makedirs(tmp)
                        if n > 0:
                            env["SKILL_RUNNER_SKILLS_DIR"] = os.path.join(shared, "node0", "skills")
                        port = free_port()
                        procs.append(start(tmp, port, skills=n == 0,
                                           env_extra=dict(env, SKILL_RUNNER_NODE_ID=f"node-{n}")))
                        wait_ready(port)
                        ports.append(port)
                    latencies = sequential(Client(ports[0]))
                    rate = spread_rate(ports)
                    across = across_nodes(shared, ports) if nodes == 2 else ""
                    for proc in procs:
                        proc.terminate()
                        proc.wait()
                print(f"{label}: create -> succeeded p50 {statistics.median(latencies):.1f} ms, "
                      f"p99 {pct(latencies, 99):.1f} ms; finished sh jobs/s {rate:,.0f}{across}")
        finally:
            subprocess.run(["bash", os.path.join(ROOT, "scripts/postgres.sh"), "stop",
                            os.path.join(pg, "cluster")], check=False)


def runlist(total=100_000, samples=300):
    """The run list with `total` runs in the store: the console's page and the API's list,
    unfiltered, filtered, searched and deep in the pages, each asked `samples` times."""
    import random
    import sqlite3
    import uuid
    tmp = tempfile.mkdtemp(prefix="bench-runlist-")
    port = free_port()
    # A year's retention: the seeded runs must outlive the start-up clean-up.
    keep = {"SKILL_RUNNER_RUN_RETENTION_SECONDS": str(365 * 86400),
            "SKILL_RUNNER_FAILED_RUN_RETENTION_SECONDS": str(365 * 86400)}
    try:
        proc = start(tmp, port, env_extra=keep)
        wait_ready(port)
        proc.terminate()
        proc.wait()
        rng = random.Random(7)
        now = time.time()
        engines = ["script", "codex", "claude", "opencode", "gemini"]
        statuses = ["succeeded"] * 90 + ["failed"] * 8 + ["canceled"] * 2
        stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + \
            f".{int(t % 1 * 1e6):06d}Z"
        requests, runs = [], []
        for n in range(total):
            created = now - (total - n) * (29 * 86400 / total)
            rid, run_id = str(uuid.UUID(int=rng.getrandbits(128), version=4)), f"run-{n}"
            skill, engine = f"skill-{n % 20:02d}", engines[n % len(engines)]
            status = statuses[rng.randrange(len(statuses))]
            c, f = stamp(created), stamp(created + 2 + rng.random() * 30)
            requests.append((rid, "job", skill, engine, "{}", "{}", "{}", "{}", "done", run_id, 0,
                             c, f, f"10.0.{n % 7}.{n % 200}"))
            runs.append((run_id, rid, skill, engine, f"/skills/{skill}", status,
                         None if status == "succeeded" else "SKILL_FAILED", "[]", c, f, c, f, 1))
        db = sqlite3.connect(os.path.join(tmp, "data", "skill_runner.db"))
        db.executemany("INSERT INTO runs (run_id, request_id, skill_id, engine, skill_dir, status, "
                       "error_code, warnings, created_at, updated_at, started_at, finished_at, turn) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", runs)
        db.executemany("INSERT INTO requests (request_id, kind, skill_id, engine, engine_options, "
                       "input, parameter, runtime_options, upload_state, run_id, cache_hit, "
                       "created_at, updated_at, client_address) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", requests)
        db.commit()
        middle_id, = db.execute("SELECT request_id FROM requests ORDER BY created_at DESC "
                                "LIMIT 1 OFFSET ?", (total // 2,)).fetchone()
        db.close()
        proc = start(tmp, port, env_extra=keep)
        wait_ready(port)
        found = json.loads(urllib_get(port, f"/v1/management/runs?limit=1&q={middle_id}"))
        assert found["runs"], "a seeded request is listed"
        queries = [
            ("console page /ui/runs (50 rows)", "/ui/runs"),
            ("API, newest 50", "/v1/management/runs?limit=50"),
            ("API, status=failed", "/v1/management/runs?limit=50&status=failed"),
            ("API, status=running (none)", "/v1/management/runs?limit=50&status=running"),
            ("API, one skill", "/v1/management/runs?limit=50&skill_id=skill-07"),
            ("API, one engine + status", "/v1/management/runs?limit=50&engine=codex&status=canceled"),
            ("API, search by id start", f"/v1/management/runs?limit=50&q={middle_id[:8]}"),
            ("API, search matching nothing", "/v1/management/runs?limit=50&q=zzzz"),
            ("console, filtered to a skill, last 7 days", "/ui/runs?skill_id=skill-03&within=7d"),
        ]
        # A page half-way down, reached by its cursor.
        walk = json.loads(urllib_get(port, "/v1/management/runs?limit=1000"))
        cursor = walk["next_cursor"]
        for _ in range(total // 2 // 1000 - 1):
            cursor = json.loads(urllib_get(port, f"/v1/management/runs?limit=1000&cursor={cursor}"))["next_cursor"]
        queries.append(("API, page 50,001-50,050 by cursor",
                        f"/v1/management/runs?limit=50&cursor={cursor}"))
        print(f"run list with {total:,} runs in the store (SQLite on disk), {samples} requests each:")
        for label, path in queries:
            times = []
            for _ in range(samples):
                t0 = time.perf_counter()
                urllib_get(port, path)
                times.append((time.perf_counter() - t0) * 1000)
            print(f"  {label}: p50 {statistics.median(times):.1f} ms, p99 {pct(times, 99):.1f} ms")
        proc.terminate()
        proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def urllib_get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {body[:200]!r}")
        return body
    finally:
        conn.close()


def tenants(rounds=int(os.environ.get("BENCH_ROUNDS", "5"))):
    """The cost of keys and tenants: creates and status polls by a tenant's key against the same
    points without keys, measured alternately on fresh services (one open, one with keys, one
    whose tenant has a runs_per_minute quota, so each create counts its minute). One slot, held
    by a run printing a line every 10 ms: the creates only queue, so no turn of an earlier point
    loads the later ones."""
    if not shutil.which("wrk"):
        print("tenants: skipped (wrk not installed)")
        return
    lua = os.path.join(tempfile.gettempdir(), "skill-runner-tenant-create.lua")
    with open(lua, "w") as f:
        # wrk.headers holds the key given with -H; a headers table of its own would drop it.
        f.write('local n = 0\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                'request = function()\n'
                '  n = n + 1\n'
                '  local body = string.format(\'{"skill_id":"sh-echo","engine":"script","input":{"n":%d},'
                '"runtime_options":{"no_cache":true}}\', n + math.random(1, 1000000000))\n'
                '  return wrk.format("POST", "/v1/jobs", nil, body)\n'
                'end\n')
    env = {"SKILL_RUNNER_MAX_QUEUE_SIZE": "10000000", "SKILL_RUNNER_MAX_CONCURRENT": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {}
        for name in ("open", "keyed", "quotas"):
            root = os.path.join(tmp, name)
            os.makedirs(root)
            port = free_port()
            servers[name] = (port, start(root, port, env_extra=env), root)
        for port, _, _ in servers.values():
            wait_ready(port)
        keys = {"open": None}
        for name, quotas in (("keyed", {}), ("quotas", {"runs_per_minute": 100000000})):
            port, _, root = servers[name]
            admin = subprocess.run([BINARY, "keys", "create", "--role", "admin", "--name", "bench"],
                                   env=dict(os.environ, SKILL_RUNNER_DATA_DIR=os.path.join(root, "data")),
                                   capture_output=True, text=True, check=True).stdout.strip()
            time.sleep(1.1)  # each node reads whether keys are in force once a second
            client = Client(port)
            client.conn.request("POST", "/v1/management/tenants",
                                body=json.dumps({"name": "bench", "quotas": quotas}),
                                headers={"content-type": "application/json",
                                         "authorization": f"Bearer {admin}"})
            tenant = json.loads(client.conn.getresponse().read())["tenant_id"]
            client.conn.request("POST", f"/v1/management/tenants/{tenant}/keys",
                                body=json.dumps({"role": "submit", "name": "bench"}),
                                headers={"content-type": "application/json",
                                         "authorization": f"Bearer {admin}"})
            keys[name] = json.loads(client.conn.getresponse().read())["key"]
        running = {}
        for name, (port, _, _) in servers.items():
            client = Client(port)
            headers = {"content-type": "application/json"}
            if keys[name]:
                headers["authorization"] = f"Bearer {keys[name]}"
            client.conn.request("POST", "/v1/jobs", body=json.dumps(
                {"skill_id": "talker", "engine": "script", "parameter": {"bursts": 100000}}), headers=headers)
            rid = json.loads(client.conn.getresponse().read())["request_id"]
            while True:
                client.conn.request("GET", f"/v1/jobs/{rid}", headers=headers)
                if json.loads(client.conn.getresponse().read())["status"] == "running":
                    break
                time.sleep(0.01)
            running[name] = rid
        figures = {name: {"create": [], "poll": []} for name in servers}
        for _ in range(rounds):
            for name, (port, _, _) in servers.items():
                rps, _, p99, bad = wrk(port, f"/v1/jobs/{running[name]}", 16, key=keys[name])
                assert bad == 0, (name, bad)
                figures[name]["poll"].append((rps, p99))
                rps, _, p99, bad = wrk(port, "/v1/jobs", 16, lua, key=keys[name])
                assert bad == 0, (name, bad)
                figures[name]["create"].append((rps, p99))
        for point in ("poll", "create"):
            base = statistics.median(r for r, _ in figures["open"][point])
            for name in servers:
                rates = [r for r, _ in figures[name][point]]
                print(f"tenants, {'GET /v1/jobs/{id} (status poll)' if point == 'poll' else 'POST /v1/jobs'}, "
                      f"16 connections, {name}: {', '.join(f'{r:,.0f}' for r in rates)} req/s "
                      f"(median {statistics.median(rates) / base:.2f} of open), p99 "
                      f"{', '.join(p for _, p in figures[name][point])} (goal >= 0.90 of open)")
        for _, proc, _ in servers.values():
            proc.terminate()
            proc.wait()
        # Turns still ending may write into the run folders being removed.
        time.sleep(1)


# Sends `n` requests like a model call (1 KiB of JSON, a key in `Authorization`) on one
# keep-alive HTTPS connection through the turn's proxy, and reports each one's latency.
MODEL_CLIENT = """import http.client, json, os, ssl, sys, time, urllib.parse
p = json.load(sys.stdin)['parameter']
proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])
ctx = ssl.create_default_context(cafile=os.environ.get('SSL_CERT_FILE'))
ctx.load_verify_locations(cadata=p['ca'])
conn = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=30)
conn.set_tunnel('localhost', p['port'])
body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'x' * 1000}]})
headers = {'Authorization': 'Bearer ' + os.environ.get('T', 'sk-lent-key'),
           'Content-Type': 'application/json'}
lat = []
for _ in range(p['n']):
    t0 = time.perf_counter()
    conn.request('POST', '/v1/chat/completions', body=body, headers=headers)
    conn.getresponse().read()
    lat.append((time.perf_counter() - t0) * 1000)
print(json.dumps({'lat': lat}))
"""


def model_server(cert, key):
    """An HTTPS stand-in for a model endpoint on a free loopback port, answering a short
    completion on keep-alive connections; returns its port and the keys it was sent."""
    import http.server
    import ssl
    import threading
    seen = set()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the
        # second until the client's delayed ACK (40 ms).
        disable_nagle_algorithm = True

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.add(self.headers.get("authorization", ""))
            answer = b'{"choices": [{"message": {"content": "ok"}}]}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], seen


def test_ca(tmp):
    """A CA and a certificate for localhost it signed (openssl), as file paths."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    ca, ca_key = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "ca.key")
    leaf, leaf_key = os.path.join(tmp, "leaf.pem"), os.path.join(tmp, "leaf.key")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=bench CA")
    csr = os.path.join(tmp, "leaf.csr")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", leaf_key, "-out", csr, "-subj", "/CN=localhost")
    ext = os.path.join(tmp, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", leaf, "-days", "2", "-extfile", ext)
    return ca, leaf, leaf_key


def cpu_ns(pid):
    """Nanoseconds `pid`'s threads have run (schedstat), finer than cpu_seconds' ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def secrets(rounds=int(os.environ.get("BENCH_ROUNDS", "3")), n=2000):
    """What holding a secret at the egress costs a model call: the same keep-alive HTTPS
    requests from a turn to a loopback model stand-in, through a plain CONNECT tunnel (the turn
    holds the key and does its own TLS) and through the proxy's termination (the turn holds a
    placeholder; the proxy re-encrypts and puts the key in), alternately in one run."""
    with tempfile.TemporaryDirectory() as tmp:
        ca, leaf, leaf_key = test_ca(tmp)
        with open(ca) as f:
            ca_pem = f.read()
        model_port, seen = model_server(leaf, leaf_key)
        host = f"localhost:{model_port}"
        schema = {"type": "object", "required": ["n"]}
        skills = os.path.join(tmp, "skills")
        for name, bound in (("model-lent", False), ("model-held", True)):
            files = python_skill(name, MODEL_CLIENT, schema, "lat")
            runner = json.loads(files["assets/runner.json"])
            runner["network"] = {"allow": [host]}
            if bound:
                runner["secrets"] = ["T"]
            files["assets/runner.json"] = json.dumps(runner)
            for rel, text in files.items():
                path = os.path.join(skills, name, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
        port = free_port()
        proc = start(tmp, port, env_extra={"SKILL_RUNNER_EGRESS_ALLOW": host,
                                           "SKILL_RUNNER_EGRESS_CA_BUNDLE": ca})
        wait_ready(port)
        client = Client(port)
        client.call("POST", "/v1/management/secrets",
                    {"name": "T", "value": "sk-bench-real-key", "hosts": [host]})
        figures = {"model-lent": ([], []), "model-held": ([], [])}
        for _ in range(rounds):
            for name in ("model-lent", "model-held"):
                before = cpu_ns(proc.pid)
                status, body = client.call("POST", "/v1/jobs", {
                    "skill_id": name, "engine": "script",
                    "parameter": {"n": n, "port": model_port, "ca": ca_pem},
                    "runtime_options": {"no_cache": True}})
                rid = body["request_id"]
                if wait_done(client, rid, interval=0.05) != "succeeded":
                    sys.exit(f"{name} failed: {client.call('GET', f'/v1/jobs/{rid}')[1]}")
                cpu = (cpu_ns(proc.pid) - before) / 1e9
                _, result = client.call("GET", f"/v1/jobs/{rid}/result")
                lat = result["result"]["data"]["lat"][10:]
                figures[name][0].append(statistics.median(lat))
                figures[name][1].append(cpu * 1000 / n)
        proc.terminate()
        proc.wait()
        assert "Bearer sk-bench-real-key" in seen, "the proxy put the key in"
        for name, label in (("model-lent", "CONNECT tunnel, key lent to the turn"),
                            ("model-held", "TLS terminated, key put in by the proxy")):
            p50s, cpus = figures[name]
            print(f"  {label}: request p50 {' / '.join(f'{v:.2f}' for v in p50s)} ms, "
                  f"service CPU per request {' / '.join(f'{v:.3f}' for v in cpus)} ms")
        added = statistics.median(figures["model-held"][0]) - statistics.median(figures["model-lent"][0])
        cpu_added = statistics.median(figures["model-held"][1]) - statistics.median(figures["model-lent"][1])
        print(f"  holding the key adds {added:.2f} ms per model request at p50 (goal <= 2 ms) and "
              f"{cpu_added:.3f} ms of service CPU per request")


def receiver():
    """A webhook receiver on loopback: the arrival time of each run's first delivery, by request
    id (the signature is checked by the tests; here only the arrivals count)."""
    import http.server
    import threading
    arrived = {}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            now = time.perf_counter()
            rid = json.loads(body)["data"]["request_id"]
            with lock:
                arrived.setdefault(rid, now)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, arrived


def webhooks():
    """create -> webhook received of `sh` jobs, and finished jobs/s with a webhook beside none,
    in one run."""
    server, arrived = receiver()
    hook_port = server.server_address[1]
    rates = {}
    for label, hooked in (("off", False), ("on", True)):
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            proc = start(tmp, port, env_extra={
                "SKILL_RUNNER_MAX_QUEUE_SIZE": "100000",
                "SKILL_RUNNER_WEBHOOK_ALLOW": f"127.0.0.1:{hook_port}"})
            wait_ready(port)
            client = Client(port)
            if hooked:
                status, made = client.call("POST", "/v1/webhooks", {
                    "url": f"http://127.0.0.1:{hook_port}/hook", "events": ["run.succeeded"]})
                assert status == 200, made
                latencies = []
                for n in range(200):
                    t0 = time.perf_counter()
                    _, body = create(client, 10_000_000 + n)
                    rid = body["request_id"]
                    while rid not in arrived:
                        time.sleep(0.0002)
                    latencies.append((arrived[rid] - t0) * 1000)
                print(f"create -> webhook received, /bin/sh skill, sequential ({len(latencies)} "
                      f"jobs): p50 {statistics.median(latencies):.1f} ms, "
                      f"p99 {pct(latencies, 99):.1f} ms")
            before = len(arrived)
            t0 = time.perf_counter()
            rate, service, turns = finished_rate(port, proc.pid)
            if hooked:
                # Every run's delivery, after the runs themselves.
                while len(arrived) - before < 2000:
                    time.sleep(0.01)
                    assert time.perf_counter() - t0 < 120, "deliveries stalled"
                print(f"  all 2000 deliveries received {time.perf_counter() - t0:.1f} s after "
                      f"the first create")
            rates[label] = rate
            print(f"finished jobs/s with webhooks {label}: {rate:,.0f} jobs/s (CPU per job: "
                  f"service {service:.1f} ms, turn leader + sh {turns:.1f} ms)")
            proc.terminate()
            proc.wait()
    server.shutdown()
    print(f"  with a webhook, {rates['on'] / rates['off']:.2f} of the jobs/s without one")


SECTIONS = {"startup": startup, "load": load, "jobs": jobs, "barriers": barriers, "sse": sse,
            "invoke": invoke, "surface": surface, "cluster": cluster, "runlist": runlist,
            "tenants": tenants, "secrets": secrets, "webhooks": webhooks}

if __name__ == "__main__":
    if not os.path.exists(BINARY):
        sys.exit("build first: cargo build --release")
    chosen = sys.argv[1:] or list(SECTIONS)
    unknown = [c for c in chosen if c not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    print(f"machine: {os.cpu_count()} cores; wrk duration {DURATION} per point")
    for name in chosen:
        SECTIONS[name]()
