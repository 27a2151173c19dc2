"""HTTP load check: 50 concurrent search clients for 30 s against a ~10k-chunk base while an
import runs. Prints p50/p95/p99 latency, throughput and the error count.

    .venv/bin/python bench/http_load.py                 # defaults: 50 clients, 30 s, 10k chunks
    .venv/bin/python bench/http_load.py --clients 10 --seconds 5 --files 200   # a quick look

Target on the 2-core dev machine: zero errors, p99 < 250 ms. The base is BM25-only (no model
load); its corpus is generated Markdown under a temp home, added as a folder. The server is
``kb serve`` in a subprocess (``--processes N`` API processes; with N > 1 its job workers run in
one more process), so client and server do not share a GIL; the import (another folder, added
over HTTP by local path) runs in its workers while the clients search.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import httpx

WORKER = """
import signal, sys, threading
from knowbase.service import Knowledge
from knowbase.settings import load_settings
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
with Knowledge(load_settings(sys.argv[1]), start_workers=True):
    stop.wait()
"""


def vocabulary(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(n)]


def write_corpus(folder: Path, files: int, paragraphs: int, words: list[str], seed: int) -> None:
    """``files`` Markdown notes of ``paragraphs`` paragraphs (~1 chunk each at 64 tokens)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for f in range(files):
        paras = [
            " ".join(rng.choice(words) for _ in range(rng.randint(28, 36))) + "."
            for _ in range(paragraphs)
        ]
        body = f"# Note {seed}-{f}\n\n" + "\n\n".join(paras) + "\n"
        (folder / f"note_{f:05d}.md").write_text(body, encoding="utf-8")


def build_base(home: Path, corpus: Path) -> int:
    """Create the BM25 base, import ``corpus`` in this process, return its chunk count."""
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    with Knowledge(load_settings(home)) as kb:
        kb.create_base("bench", chunk_size=64, chunk_overlap=0)
        t0 = time.monotonic()
        result = kb.add("bench", [AddInput.directory(corpus)], wait=True, timeout_s=1800)
        counts = kb.counts("bench")
        chunks = sum(
            int(j.progress_details.get("chunks", 0))
            for j in kb.activity.job_tree(result.job_ids)
            if j.kind.endswith("index-documents")
        )
        print(
            f"built base: {counts} items, {chunks} chunks in {time.monotonic() - t0:.1f} s",
            flush=True,
        )
        return chunks


def _cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of a process and its descendants (Linux /proc), as ``{"all": s,
    "worker": s}``: ``kb serve --processes`` forks API processes and a job-worker process,
    and a CPU-bound server must be told from a slow client, the API from the import."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (ppid, cpu s)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stats[int(entry.name)] = (
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
        )
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, _) in stats.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)

    def is_worker(p: int) -> bool:
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return b"worker" in argv

    cpu = {p: stats[p][1] for p in tree if p in stats}
    return {"all": sum(cpu.values()), "worker": sum(c for p, c in cpu.items() if is_worker(p))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RawClient:
    """A minimal keep-alive HTTP/1.1 GET client on asyncio streams.

    httpx's async client spends ~10 ms of CPU per request here, as much as the server: with
    50 of them on two cores the bench would measure its own client. This one parses only the
    status line and Content-Length (uvicorn always sends it for JSON).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next(
            int(v)
            for k, _, v in (ln.partition(":") for ln in lines[1:])
            if k.lower() == "content-length"
        )
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def client_loop(
    host: str, port: int, words: list[str], stop_at: float, seed: int, out: dict
) -> None:
    rng = random.Random(seed)
    client = RawClient(host, port)
    try:
        while time.monotonic() < stop_at:
            query = urllib.parse.urlencode({"q": " ".join(rng.sample(words, 2)), "top_k": 10})
            t0 = time.perf_counter()
            try:
                status, body = await client.get(f"/bases/bench/search?{query}")
                ok = status == 200
                if not ok:
                    out["errors"].append(f"{status}: {body[:200]!r}")
            except (OSError, asyncio.IncompleteReadError, ValueError, StopIteration) as exc:
                ok = False
                out["errors"].append(f"{type(exc).__name__}: {exc}")
                await client.close()
                client = RawClient(host, port)
            if ok:
                out["latencies"].append(time.perf_counter() - t0)
                out["finished"].append(time.monotonic())
                out["by_connection"].setdefault(seed, []).append(out["latencies"][-1])
    finally:
        await client.close()


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[i]


async def run_load(url: str, clients: int, seconds: float, words: list[str], import_dir: Path):
    out: dict = {"latencies": [], "finished": [], "by_connection": {}, "errors": []}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        r = await client.post(
            "/bases/bench/items", json={"inputs": [{"type": "directory", "path": str(import_dir)}]}
        )
        r.raise_for_status()
        print(f"import started over HTTP: {import_dir.name}", flush=True)
        stop_at = time.monotonic() + seconds
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        await asyncio.gather(
            *(client_loop(host, port, words, stop_at, n, out) for n in range(clients))
        )
        items = (await client.get("/bases/bench/items")).json()
    return out, items


def print_timeline(
    finished: list[float], latencies: list[float], cpu: list[tuple[float, dict[str, float]]]
) -> None:
    """Per second of the run: requests done, p50, p99 and the cores the API processes and the
    job worker used. A slow second points at a pause (GC, checkpoint, an import burst); a
    uniformly long tail at queueing."""
    start = min(finished)
    seconds: dict[int, list[float]] = {}
    for t, lat in zip(finished, latencies, strict=True):
        seconds.setdefault(int(t - start), []).append(lat)
    cores: dict[int, str] = {}
    for (t0, a), (t1, b) in zip(cpu, cpu[1:], strict=False):
        worker = (b["worker"] - a["worker"]) / (t1 - t0)
        api = (b["all"] - a["all"]) / (t1 - t0) - worker
        cores[int(t1 - start)] = f"  cores: api {api:.2f} worker {worker:.2f}"
    for sec, lats in sorted(seconds.items()):
        lats.sort()
        print(
            f"  t={sec:3d}s  n={len(lats):4d}  p50 {pct(lats, 50) * 1000:6.1f}  "
            f"p99 {pct(lats, 99) * 1000:6.1f}{cores.get(sec, '')}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--files", type=int, default=1000, help="files in the base (10 chunks each)")
    ap.add_argument("--import-files", type=int, default=300, help="files imported under load")
    ap.add_argument("--processes", type=int, default=1, help="kb serve --processes (API processes)")
    ap.add_argument(
        "--worker-nice", type=int, default=None, help="kb serve --worker-nice (default: its own)"
    )
    ap.add_argument(
        "--separate-worker",
        action="store_true",
        help="kb serve --no-workers plus a kb worker process (the import leaves the API's GIL)",
    )
    ap.add_argument(
        "--timeline", action="store_true", help="also print p50/p99 for each second of the load"
    )
    ap.add_argument(
        "--home", type=Path, default=None, help="keep the home here; reused when it exists"
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kb-http-load-"))
    home = args.home or tmp / "home"
    words = vocabulary(3000, random.Random(0))
    if not (args.home and (home / "catalog.sqlite").exists()):
        write_corpus(tmp / "corpus" / "base", args.files, 10, words, seed=1)
    # a new name and new text each run: a reused home must not see it as already imported
    run_seed = int(time.time())
    import_dir = tmp / "corpus" / f"import-{run_seed}"
    write_corpus(import_dir, args.import_files, 10, words, seed=run_seed)
    if args.home and (home / "catalog.sqlite").exists():
        chunks = -1  # reused: built by an earlier run
        print(f"reusing the base in {home}", flush=True)
    else:
        chunks = build_base(home, tmp / "corpus" / "base")

    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    serve = [sys.executable, "-m", "knowbase.interfaces.cli", "serve", "--home", str(home)]
    serve += ["--port", str(port), "--allow-path", str(tmp / "corpus")]
    serve += ["--processes", str(args.processes)]
    if args.worker_nice is not None:
        serve += ["--worker-nice", str(args.worker_nice)]
    server = subprocess.Popen(serve + (["--no-workers"] if args.separate_worker else []), env=env)
    worker = (
        subprocess.Popen([sys.executable, "-c", WORKER, str(home)], env=env)
        if args.separate_worker
        else None
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/status", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        httpx.get(url + "/bases/bench/search", params={"q": words[0]}, timeout=30)  # warm
        cpu0, client0 = _cpu_seconds(server.pid), time.process_time()
        samples: list[tuple[float, dict[str, float]]] = []
        stop_sampling = threading.Event()

        def sample_cpu() -> None:  # once a second, for the timeline
            while not stop_sampling.wait(1.0):
                samples.append((time.monotonic(), _cpu_seconds(server.pid)))

        if args.timeline:
            threading.Thread(target=sample_cpu, daemon=True).start()
        out, items = asyncio.run(run_load(url, args.clients, args.seconds, words, import_dir))
        stop_sampling.set()
        server_cpu = _cpu_seconds(server.pid)
    finally:
        for proc in (server, worker):
            if proc is not None:
                proc.terminate()
                proc.wait(30)

    client_cpu = time.process_time() - client0
    lat = sorted(out["latencies"])
    imported = [i for i in items if i["data"].get("relative_path", "").startswith(import_dir.name)]
    done = sum(1 for i in imported if i["status"] == "completed")
    print(
        f"base: {chunks} chunks; {args.clients} clients for {args.seconds:.0f} s; "
        f"{args.processes} API process(es); "
        f"workers {'in a separate process' if args.separate_worker else 'by kb serve'}\n"
        f"requests ok: {len(lat)}  ({len(lat) / args.seconds:.0f}/s)\n"
        f"latency ms: p50 {pct(lat, 50) * 1000:.1f}  p95 {pct(lat, 95) * 1000:.1f}  "
        f"p99 {pct(lat, 99) * 1000:.1f}  max {(lat[-1] if lat else float('nan')) * 1000:.1f}\n"
        f"errors: {len(out['errors'])}\n"
        f"cpu s during load: server {server_cpu['all'] - cpu0['all']:.1f} (of which the job "
        f"worker {server_cpu['worker'] - cpu0['worker']:.1f}), client {client_cpu:.1f} "
        f"(wall {args.seconds:.0f})\n"
        f"import under load: {done}/{len(imported)} items completed when the clients stopped"
    )
    if args.timeline and out["finished"]:
        print_timeline(out["finished"], out["latencies"], samples)
    # Each connection stays on the API process that accepted it: uneven shares show up here.
    means = sorted(sum(v) / len(v) * 1000 for v in out["by_connection"].values())
    if means:
        print(
            f"mean latency per connection ms: min {means[0]:.0f}  "
            f"median {means[len(means) // 2]:.0f}  max {means[-1]:.0f}"
        )
    for e in out["errors"][:5]:
        print("  error:", e)


if __name__ == "__main__":
    main()
