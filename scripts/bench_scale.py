"""How `mt train` scales with the corpus: memory, start-up time and binarizing speed for N pairs of
WMT-length lines.

    python scripts/bench_scale.py 450000 4500000 45000000 [--nproc 2] [--reuse-cache]

For each N, builds (once) a `files` corpus of N pairs shaped like WMT's (`make_corpus`: Multi30k's
training pairs joined k at a time, a median near 25 words a side and a tail past data.max_len), then
runs `mt train configs/multi30k.yaml` for 50 updates twice: a first start (BPE on its sample,
binarizing into an empty cache folder) and a restart (resuming the run, the cache reused). Prints one
JSON line per N: BPE-learning and binarizing time (from the log), sentencepiece's own encode rate on
the same machine (one thread and all cores, the run's spm.model on 200k of the corpus's pairs), the
cache's bytes a piece and a pair, and for each start the peak memory not backed by files (RssAnon,
summed over the process tree), the peak RSS (each process, the largest and their sum), the machine's
memory in use beyond its level at the start (page cache not counted), seconds to the end of the
first update, and tokens/s over the updates.

--nproc 2 runs both starts through torchrun; --reuse-cache keeps a cache folder an earlier run of
the same N built, so that the first start is BPE learning and the cache check (torchrun at 45M pairs
without binarizing them again).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from mt.config import DataConfig
from mt.data import load_split, multi30k_dir

ROOT = Path(__file__).resolve().parents[1]

# pairs of Multi30k joined into one line, and how often: Multi30k's English lines have 12 words at the
# median, so mostly 2 or 3 gives WMT's ~25; the tail (up to 14 joined, ~170 words) reaches past
# data.max_len; single pairs are rare, as data.clean removes most of them as duplicates
JOINED = {1: 10, 2: 54, 3: 19, 4: 9, 5: 4, 6: 2, 8: 1.2, 10: 0.5, 14: 0.3}
BLOCK = 100_000


def make_corpus(n: int, folder: Path) -> None:
    """train.{de,en}: n WMT-length pairs, each k random Multi30k training pairs joined by a space (k
    drawn from JOINED; each block of 100,000 lines seeded by its number, so a smaller corpus is the first
    lines of a larger one); val and test: Multi30k's own files. Built beside and renamed into place, so
    a half-written corpus is never used."""
    if (folder / "train.en").exists():
        return
    building = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    de, en = load_split(DataConfig(), "train")
    ks = torch.tensor(list(JOINED))
    with open(building / "train.de", "w", encoding="utf-8") as f_de, open(building / "train.en", "w") as f_en:
        for block, start in enumerate(range(0, n, BLOCK)):
            rng = torch.Generator().manual_seed(82_000 + block)
            size = min(BLOCK, n - start)
            k = ks[torch.multinomial(torch.tensor(list(JOINED.values())), size, True, generator=rng)]
            rows = torch.randint(len(de), (int(k.sum()),), generator=rng).split(k.tolist())
            rows = [row.tolist() for row in rows]
            f_de.write("".join(" ".join([de[i] for i in row]) + "\n" for row in rows))
            f_en.write("".join(" ".join([en[i] for i in row]) + "\n" for row in rows))
    source = multi30k_dir()
    for split, stem in (("val", "val"), ("test", "test2016")):
        for lang in ("de", "en"):
            shutil.copy(source / f"{stem}.{lang}.gz", building / f"{split}.{lang}.gz")
    os.replace(building, folder)


def words_median(path: Path, lines: int = 100_000) -> int:
    counts = sorted(len(line.split()) for line in itertools.islice(open(path, encoding="utf-8"), lines))
    return counts[len(counts) // 2]


def process_tree(pid: int) -> dict[int, tuple[int, int]]:
    """(RSS, RssAnon) in bytes of `pid` and its descendants (started by any of their threads), from /proc."""
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = [
                c for t in Path(f"/proc/{p}/task").iterdir() for c in (t / "children").read_text().split()
            ]
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        kb = [int(fields.get(key, "0 kB").split()[0]) * 1024 for key in ("VmRSS", "RssAnon")]
        found[p] = (kb[0], kb[1])
        todo += [int(c) for c in children]
    return found


def machine_used() -> int:
    """Bytes of memory in use on the machine (MemTotal - MemAvailable), page cache not counted."""
    info = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
    }
    return info["MemTotal"] - info["MemAvailable"]


def log_seconds(lines: list[str], start: str, end: str) -> int | None:
    """Seconds between the first log line holding `start` and the first after it holding `end`
    (the log's HH:MM:SS timestamps)."""

    def at(line: str) -> int:
        h, m, s = map(int, line[:8].split(":"))
        return h * 3600 + m * 60 + s

    stamped = [line for line in lines if re.match(r"\d\d:\d\d:\d\d ", line)]
    begin = next((i for i, line in enumerate(stamped) if start in line), None)
    if begin is None:
        return None
    finish = next((line for line in stamped[begin:] if end in line), None)
    return None if finish is None else (at(finish) - at(stamped[begin])) % 86400


def run_train(cmd: list[str], env: dict, run_dir: Path, steps_before: int) -> dict:
    """Run one training command; sample the process tree's memory; time the first new metrics row."""
    metrics = run_dir / "metrics.jsonl"
    baseline, machine_peak = machine_used(), 0
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak: dict[int, tuple[int, int]] = {}
    peak_sum = peak_anon = 0
    first_step = None
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    while proc.poll() is None:
        tree = {p: m for p, m in process_tree(proc.pid).items() if m[0] > 50 * 2**20}  # not the shell
        for p, (rss, anon) in tree.items():
            old = peak.get(p, (0, 0))
            peak[p] = (max(old[0], rss), max(old[1], anon))
        peak_sum = max(peak_sum, sum(m[0] for m in tree.values()))
        peak_anon = max(peak_anon, sum(m[1] for m in tree.values()))
        machine_peak = max(machine_peak, machine_used() - baseline)
        if first_step is None and metrics.exists():
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            if any(r.get("step", 0) > steps_before for r in rows if "loss" in r):
                first_step = time.perf_counter() - start
        time.sleep(0.05)
    reader.join()
    if proc.returncode:
        sys.exit("training failed:\n" + "".join(stderr[-20:]))
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    speed = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > steps_before]
    mb = lambda b: round(b / 2**20)  # noqa: E731
    return {
        "anon_mb": mb(peak_anon),
        "anon_each_mb": sorted(mb(m[1]) for m in peak.values()),
        "peak_rss_mb": mb(max(m[0] for m in peak.values())),
        "peak_rss_sum_mb": mb(peak_sum),
        "peak_rss_each_mb": sorted(mb(m[0]) for m in peak.values()),
        "machine_peak_mb": mb(machine_peak),
        "processes": len(peak),
        "first_update_s": round(first_step, 1) if first_step else None,
        "tokens_per_s": round(sum(speed) / len(speed)) if speed else None,
        "bpe_s": log_seconds(stderr, "run directory", "joint BPE learned"),
        "binarize_s": log_seconds(stderr, "binarizing the training pairs", "training pairs; removed"),
    }


def encode_rate(model: Path, corpus: Path, pairs: int = 200_000) -> dict:
    """sentencepiece's own encode rate (pairs/s, both sides) on the corpus's first `pairs` lines: one
    thread, and as many as the machine's cores (its batched encode's threads)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    sides = [
        list(itertools.islice(open(corpus / f"train.{lang}", encoding="utf-8"), pairs))
        for lang in ("de", "en")
    ]
    rates = {}
    for threads in (1, os.cpu_count()):
        start = time.perf_counter()
        for lines in sides:
            sp.encode(lines, num_threads=threads)
        rates[f"spm_pairs_per_s_{threads}_threads"] = round(pairs / (time.perf_counter() - start))
    return rates


def cache_bytes(cache: Path) -> dict:
    """The binarized folder's bytes, a piece and a pair (meta.json's counts)."""
    folder = next(p for p in cache.iterdir() if (p / "meta.json").exists())
    meta = json.loads((folder / "meta.json").read_text())
    sizes = {name: f["bytes"] for name, f in meta["files"].items()}
    itemsize = 2 if meta["ids_dtype"] == "torch.uint16" else 4
    pieces = (sizes["src.ids"] + sizes["tgt.ids"]) // itemsize
    per_pair = sum(b for name, b in sizes.items() if not name.endswith(".ids"))
    return {
        "cache_mb": round(sum(sizes.values()) / 2**20, 1),
        "cache_pairs": meta["pairs"],
        "cache_bytes_a_piece": round((sizes["src.ids"] + sizes["tgt.ids"]) / pieces, 2),
        "cache_other_bytes_a_pair": round(per_pair / meta["pairs"], 2),
    }


def bench(n: int, nproc: int, reuse_cache: bool, work: Path) -> dict:
    corpus = work / f"corpus-{n}"
    make_corpus(n, corpus)
    cache, run_dir = work / f"cache-{n}", work / f"run-{n}-{nproc}"
    if not reuse_cache:
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ, MT_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    launcher = [sys.executable] + (torchrun if nproc > 1 else []) + ["-m", "mt"]
    common = [
        "train",
        "configs/multi30k.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "data.corpus=files",
        "--set",
        f"data.dir={corpus}",
        "--set",
        "train.log_every=1",
        "--set",
        "train.valid_every=1000000",
        "--set",
        "train.max_minutes=0",
    ]
    first = run_train(launcher + common + ["--set", "train.max_steps=50"], env, run_dir, 0)
    restart = run_train(launcher + common + ["--set", "train.max_steps=60"], env, run_dir, 50)
    return {
        "pairs": n,
        "processes": nproc,
        "words_median_en": words_median(corpus / "train.en"),
        **cache_bytes(cache),
        **encode_rate(run_dir / "spm.model", corpus),
        "first_start": first,
        "restart": restart,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", type=int, nargs="+")
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--reuse-cache", action="store_true", help="keep the cache an earlier run built")
    parser.add_argument("--work", default="/tmp/mt-scale", help="folder for the corpora, caches and runs")
    args = parser.parse_args()
    for n in args.pairs:
        print(json.dumps(bench(n, args.nproc, args.reuse_cache, Path(args.work))), flush=True)


if __name__ == "__main__":
    main()
