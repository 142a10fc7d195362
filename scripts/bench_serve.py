"""Load test of `mt serve`: the server on loopback, N concurrent clients sending test2016 lines for a
bounded time, against `mt translate` on the same lines.

    python scripts/bench_serve.py --run runs/multi30k-best --clients 1 8 32 --seconds 60 [--beam 5]

First `mt translate --run RUN --input test.de` runs as its own process (its wall time, loading
included), then what it does once loaded (`translate_nbest`) is timed in this process: the
sentences/s the server is compared with. Then `mt serve` starts on a free loopback
port; every client is a thread with one keep-alive connection that posts `--lines-per-request` lines
at a time (each client starts at its own place in the test set and wraps around) until the time is
up. Each level reports requests/s, sentences/s, p50/p99 latency and errors (any non-200 answer, or
one whose translations do not line up with the request's lines), the mean lines per decoding call
the server made, and the ceiling that many lines in flight set: `translate_nbest` in this process on
groups of clients x lines-per-request lines (decoding 32 lines at a time is slower per line than
decoding a whole sorted file). One full pass over the test set
through the server is also compared line by line with `mt translate`'s output.

Prints a Markdown table and writes --out (JSON). Run nothing else meanwhile: 2 cores are shared by
the clients, the server and its decoding thread. The decoding flags are `mt serve`'s, given alike to
`mt translate`, the server and the in-process timings (--engine torch unless given).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from measure import as_flags, decoding_flags, decoding_given, open_run, timed

from mt.config import read_saved_config
from mt.data import load_split


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(conn: http.client.HTTPConnection, lines: list[str]) -> tuple[int, dict]:
    conn.request("POST", "/translate", json.dumps({"lines": lines}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def baseline(run: str, lines: list[str], flags: list[str]) -> tuple[float, list[str]]:
    """`mt translate` as a user runs it: (wall seconds, model loading included; its output lines)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "test.de"
        src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        command = [sys.executable, "-m", "mt", "translate", "--run", run, "--input", str(src), *flags]
        seconds, done = timed(lambda: subprocess.run(command, capture_output=True, text=True, check=True))
        return seconds, done.stdout.split("\n")[:-1]


def client(port: int, lines: list[str], start: int, per_request: int, deadline: float, out: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    i = start
    while time.perf_counter() < deadline:
        batch = [lines[(i + j) % len(lines)] for j in range(per_request)]
        i += per_request
        t = time.perf_counter()
        try:
            status, body = post(conn, batch)
            ok = status == 200 and len(body["translations"]) == len(batch)
        except (OSError, http.client.HTTPException, ValueError):
            ok, conn = False, http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        out.append((time.perf_counter() - t, len(batch), ok))
    conn.close()


def in_process(run: str, lines: list[str], size: int, args: argparse.Namespace) -> float:
    """Sentences/s of `Translator.nbest` (what `mt translate` does once loaded) on consecutive groups
    of `size` lines, in this process, without HTTP: with size = all lines, `mt translate`'s rate; with
    the lines the clients keep in flight, the most the server could do with the batches it can form."""
    translator = open_run(run, args, device="cpu")
    seconds, _ = timed(lambda: [translator.nbest(lines[i : i + size]) for i in range(0, len(lines), size)])
    return len(lines) / seconds


def batches(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/health")
    return json.loads(conn.getresponse().read())["batches"]


def level(port: int, lines: list[str], clients: int, seconds: float, per_request: int) -> dict:
    results: list[list] = [[] for _ in range(clients)]
    rounds = batches(port)
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    threads = [
        threading.Thread(
            target=client, args=(port, lines, c * len(lines) // clients, per_request, deadline, results[c])
        )
        for c in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    rounds = batches(port) - rounds
    done = sorted(r for rs in results for r in rs)
    latencies = [r[0] for r in done]
    pct = lambda q: latencies[min(int(q * len(latencies)), len(latencies) - 1)] * 1000  # noqa: E731
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": len(done),
        "requests_per_s": round(len(done) / elapsed, 2),
        "sentences_per_s": round(sum(r[1] for r in done if r[2]) / elapsed, 2),
        "p50_ms": round(pct(0.50), 1),
        "p99_ms": round(pct(0.99), 1),
        "errors": sum(not r[2] for r in done),
        "lines_per_batch": round(sum(r[1] for r in done) / max(rounds, 1), 1),
    }


def start_server(run: str, port: int, flags: list[str]) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mt",
            "serve",
            "--run",
            run,
            "--port",
            str(port),
            "--max-queue",
            "4096",
            *flags,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"mt serve did not start: {server.stderr.read()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--lines-per-request", type=int, default=1)
    parser.add_argument("--out", default="bench_serve.json")
    decoding_flags(parser, engine="torch")
    args = parser.parse_args()
    flags = as_flags(decoding_given(args))  # for `mt translate` and `mt serve`
    cfg = read_saved_config(Path(args.run) / "config.yaml")
    lines = load_split(cfg.data, "test")[0]
    wall, reference = baseline(args.run, lines, flags)
    # noisy: the mean time of two
    rate = 2 / sum(1 / in_process(args.run, lines, len(lines), args) for _ in range(2))
    translate = {
        "sentences": len(lines),
        "wall_s": round(wall, 2),
        "decode_s": round(len(lines) / rate, 2),
        "sentences_per_s": round(rate, 2),
        "sentences_per_s_with_load": round(len(lines) / wall, 2),
    }
    ceiling = {
        n: round(in_process(args.run, lines, n * args.lines_per_request, args), 2) for n in args.clients
    }
    port = free_port()
    server = start_server(args.run, port, flags)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        served = [
            t["translation"]
            for i in range(0, len(lines), 256)
            for t in post(conn, lines[i : i + 256])[1]["translations"]
        ]
        same = sum(a == b for a, b in zip(served, reference))
        levels = [
            {
                **level(port, lines, n, args.seconds, args.lines_per_request),
                "in_process_sentences_per_s": ceiling[n],
            }
            for n in args.clients
        ]
    finally:
        server.terminate()
        server.wait(30)
    result = {
        "run": args.run,
        "beam": args.beam or cfg.decode.beam,
        "engine": args.engine,
        "lines_per_request": args.lines_per_request,
        "cpu_threads": os.cpu_count(),
        "mt_translate": translate,
        "identical_to_mt_translate": f"{same} of {len(lines)}",
        "levels": levels,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"mt translate: {translate['sentences_per_s']} sentences/s decoding "
        f"({translate['sentences']} lines in "
        f"{translate['decode_s']} s; the whole command {translate['wall_s']} s with start-up and loading); "
        f"server output identical on {same} of {len(lines)} lines"
    )
    print(
        "| clients | requests/s | sentences/s | vs mt translate | p50 ms | p99 ms | errors | lines/batch | "
        "in-process, same lines in flight |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in levels:
        print(
            f"| {r['clients']} | {r['requests_per_s']} | {r['sentences_per_s']} | "
            f"{r['sentences_per_s'] / translate['sentences_per_s']:.0%} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['errors']} | {r['lines_per_batch']} | {r['in_process_sentences_per_s']} "
            f"({r['sentences_per_s'] / r['in_process_sentences_per_s']:.0%}) |"
        )


if __name__ == "__main__":
    main()
