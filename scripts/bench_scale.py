"""How `mt train` scales with the corpus: memory and start-up time for N training pairs.

    python scripts/bench_scale.py 1000000 [--nproc 2]

Builds a `files` corpus of N pairs by repeating Multi30k's training pairs (val/test: Multi30k's),
then runs `mt train configs/multi30k.yaml` for 50 updates twice: a first start (BPE on its sample,
binarizing into a fresh cache folder) and a restart (resuming the run, the cache reused). Prints one
JSON line: peak RSS of the processes over 50 MB (the largest, their sum, each: with torchrun the
launcher is one of them), the machine's peak memory in use beyond its level at the start (page cache
not counted), seconds from process start to the first update, disk used by the binarized corpus, and
tokens/s over the 50 updates.
With --nproc 2 the runs go through torchrun.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from mt.config import DataConfig
from mt.data import load_split, multi30k_dir

ROOT = Path(__file__).resolve().parents[1]


def make_corpus(n: int, folder: Path) -> None:
    """train.{de,en}: n pairs cycling through Multi30k's; val and test: Multi30k's own files."""
    if (folder / "train.en").exists() and sum(1 for _ in open(folder / "train.en", "rb")) == n:
        return
    folder.mkdir(parents=True, exist_ok=True)
    de, en = load_split(DataConfig(), "train")
    for lang, lines in (("de", de), ("en", en)):
        with open(folder / f"train.{lang}", "w", encoding="utf-8") as f:
            for line in itertools.islice(itertools.cycle(lines), n):
                f.write(line + "\n")
    source = multi30k_dir()
    for split, stem in (("val", "val"), ("test", "test2016")):
        for lang in ("de", "en"):
            shutil.copy(source / f"{stem}.{lang}.gz", folder / f"{split}.{lang}.gz")


def process_tree_rss(pid: int) -> dict[int, int]:
    """Resident set size in bytes of `pid` and its descendants, from /proc."""
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        rss = next(
            (int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0
        )
        found[p] = rss
        todo += [int(c) for c in children]
    return found


def machine_used() -> int:
    """Bytes of memory in use on the machine (MemTotal - MemAvailable), page cache not counted."""
    info = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
    }
    return info["MemTotal"] - info["MemAvailable"]


def run_train(cmd: list[str], env: dict, run_dir: Path, steps_before: int) -> dict:
    """Run one training command; sample the process tree's RSS; time the first new metrics row."""
    metrics = run_dir / "metrics.jsonl"
    baseline, machine_peak = machine_used(), 0
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak: dict[int, int] = {}
    peak_sum, first_step = 0, None
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    while proc.poll() is None:
        tree = process_tree_rss(proc.pid)
        training = {p: r for p, r in tree.items() if r > 50 * 2**20}  # python processes, not the shell
        for p, r in training.items():
            peak[p] = max(peak.get(p, 0), r)
        peak_sum = max(peak_sum, sum(training.values()))
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
    return {
        "peak_rss_mb": round(max(peak.values()) / 2**20),
        "peak_rss_sum_mb": round(peak_sum / 2**20),
        "peak_rss_each_mb": sorted(round(r / 2**20) for r in peak.values()),
        "machine_peak_mb": round(machine_peak / 2**20),
        "processes": len(peak),
        "first_step_s": round(first_step, 1) if first_step else None,
        "tokens_per_s": round(sum(speed) / len(speed)) if speed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", type=int)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--work", default="/tmp/mt-scale", help="folder for the corpus, cache and runs")
    args = parser.parse_args()
    work = Path(args.work)
    corpus = work / f"corpus-{args.pairs}"
    make_corpus(args.pairs, corpus)
    cache, run_dir = work / f"cache-{args.pairs}-{args.nproc}", work / f"run-{args.pairs}-{args.nproc}"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ, MT_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    launcher = (
        [sys.executable, "-m", "mt"]
        if args.nproc == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={args.nproc}",
            "-m",
            "mt",
        ]
    )
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
        "--set",  # the corpus repeats Multi30k's pairs: data.clean would keep 29k of them
        "data.clean.duplicates=false",
    ]
    first = run_train(launcher + common + ["--set", "train.max_steps=50"], env, run_dir, 0)
    restart = run_train(launcher + common + ["--set", "train.max_steps=60"], env, run_dir, 50)
    disk = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    print(
        json.dumps(
            {
                "pairs": args.pairs,
                "processes": args.nproc,
                "first_start": first,
                "restart": restart,
                "binarized_mb": round(disk / 2**20, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
