"""The GPU kit: one command that runs and measures every CUDA path of mt and writes report.json and
report.md (every figure, with the command that produced it and the versions).

    python scripts/gpu_report.py --out gpu-report                        # every part, one call
    python scripts/gpu_report.py --out R --parts env gpu-tests bench cpu-suite   # a first 10-minute call,
    python scripts/gpu_report.py --out R --parts train resume                    # then a second (merged)
    python scripts/gpu_report.py --device cpu --tiny --minutes 2 --out /tmp/kit  # CPU: the kit itself works

Parts (a part that fails is recorded with its error, and the next one runs):
  env        GPU, driver, torch, CUDA and cuDNN versions; the precisions the device runs natively
  gpu-tests  `pytest -m gpu`, pass/fail per test
  bench      scripts/bench_train.py over every config, in each precision the device runs natively (or
             --precisions), mt and the torch.nn.Transformer reference, eager (and on CUDA compiled), each
             row in processes of its own, repeated: tokens/s and spread, mt / reference, TFLOP/s and
             MFU, a matmul probe, ops and casts an update, the share of an update the GPU is busy
  train      `mt train` of --train-config (configs/multi30k-gpu.yaml) for a share of --minutes, `mt evaluate`
             on test (greedy and beam 5), scripts/bench_decode.py (sentences/s greedy and beam 5)
  resume     a run stopped halfway and resumed against one trained straight (losses); greedy outputs
             of the trained model on the CPU against the device
  cpu-suite  the CPU test suite with CUDA hidden, on this machine's own torch

--tiny swaps the Multi30k configs for the generated toy corpus and a tiny model, for a CPU check.
--minutes bounds the whole kit: a command still running when it is spent is cut, and its part fails
saying so; the train part gets 40% of it (or --train-minutes), the bench part 40% of what is left
when it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # mt from this checkout, installed or not (the GPU machine)

sys.path.insert(0, str(ROOT / "scripts"))
from bench_train import table as bench_table  # noqa: E402

from mt.run.card import read_card  # noqa: E402

PARTS = ["env", "gpu-tests", "bench", "train", "resume", "cpu-suite"]
CONFIGS = ["configs/base.yaml", "configs/multi30k.yaml", "configs/multi30k-gpu.yaml"]
GPU_CONFIG = "configs/multi30k-gpu.yaml"
TINY_CONFIG = "configs/tiny.yaml"
TINY = ["train.log_every=2", "train.valid_every=10"]


class Kit:
    """The options, the device, and the report being written."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.out = args, Path(args.out).resolve()
        self.deadline = time.monotonic() + 60 * args.minutes
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / "report.json"
        self.report = json.loads(path.read_text()) if path.exists() else {"parts": {}, "commands": []}
        self.configs = [TINY_CONFIG] if args.tiny else CONFIGS
        self.train_config = TINY_CONFIG if args.tiny else args.train_config
        self.sets = (TINY if args.tiny else []) + [f"train.device={args.device}"] + args.set

    def run(
        self, cmd: list[str], seconds: float, env: dict | None = None, log: Path | None = None
    ) -> subprocess.CompletedProcess:
        """A command from the repository root (mt importable), its line and wall time recorded; with `log`,
        its output goes there as it comes, so that a command cut by its timeout leaves what it printed."""
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})}
        seconds = min(seconds, self.left())
        if seconds < 5:
            raise RuntimeError(f"--minutes {self.args.minutes} spent before `{' '.join(cmd)}`")
        start = time.perf_counter()
        if log is None:
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds)
        else:
            with open(log, "w") as out:
                done = subprocess.run(
                    cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=seconds
                )
            done.stdout, done.stderr = log.read_text(), ""
        self.report["commands"].append(
            {"cmd": " ".join(cmd), "rc": done.returncode, "seconds": round(time.perf_counter() - start, 1)}
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"`{' '.join(cmd)}` exited {done.returncode}: {' | '.join(tail)}")
        return done

    def left(self) -> float:
        """Seconds of --minutes left."""
        return self.deadline - time.monotonic()

    def mt(self, *args: str, seconds: float = 600) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "-m", "mt", *args], seconds)

    def save(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.report, indent=1) + "\n")
        (self.out / "report.md").write_text(markdown(self.report))


def set_flags(sets) -> list[str]:
    """key.path=value overrides as `--set` flags."""
    return [flag for s in sets for flag in ("--set", s)]


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def part_env(kit: Kit) -> dict:
    import torch

    from mt.devices import native_precisions, resolve_device
    from mt.run.provenance import cpu_name

    device = resolve_device(kit.args.device)
    found = {
        "device": str(device),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "native_precisions": native_precisions(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        found.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            found["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except OSError:
            found["driver"] = "nvidia-smi not found"
    return found


def junit_outcomes(path: Path) -> dict[str, str]:
    """test id -> passed / failed: first line / skipped: reason, from pytest's JUnit XML."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        found = [child for child in case if child.tag in ("failure", "error", "skipped")]
        message = (found[0].get("message") or "").splitlines()[:1] if found else []
        outcomes[name] = f"{found[0].tag}: {message[0] if message else ''}".strip() if found else "passed"
    return outcomes


def pytest_part(kit: Kit, selection: list[str], name: str, seconds: float, env: dict | None = None) -> dict:
    xml = kit.out / f"{name}.xml"
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd += ["--durations=10"]  # -v and the log: each test's name and outcome as it ends
    try:
        kit.run(cmd + selection, seconds, env, log=kit.out / f"{name}.log")
    except RuntimeError:  # failures are in the XML; a run that wrote none is the error itself
        if not xml.exists():
            raise
    outcomes = junit_outcomes(xml)
    counts = {
        k: sum(v.startswith(k) for v in outcomes.values()) for k in ("passed", "failed", "error", "skipped")
    }
    return {"counts": counts, "tests": outcomes}


def part_gpu_tests(kit: Kit) -> dict:
    return pytest_part(kit, ["-m", "gpu", "tests/test_gpu.py"], "gpu-tests", 420)


def part_cpu_suite(kit: Kit) -> dict:
    """The suite as CI runs it, on this machine's torch, with CUDA hidden (version skew shows here), and
    with CI's 2 threads (the suite's tiny models gain nothing from more: with torch's default of 16 on
    the H100 machine, 57% of the suite ran in 440 s, where CI's 2 cores run all of it in about 5 minutes)."""
    env = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}
    return pytest_part(kit, ["-m", "not gpu"], "cpu-suite", 540, env=env)


def part_bench(kit: Kit) -> dict:
    """scripts/bench_train.py over every config: mt and the reference, eager and (CUDA) compiled."""
    from mt.devices import resolve_device

    on_cuda = resolve_device(kit.args.device).type == "cuda"
    out = kit.out / "bench.json"
    cmd = [sys.executable, "scripts/bench_train.py", *kit.configs, "--steps", str(kit.args.bench_steps)]
    cmd += ["--device", kit.args.device, "--models", "mt", "reference", "--profile", "--probe"]
    cmd += [
        "--repeats",
        str(kit.args.bench_repeats),
        "--minutes",
        str(0.4 * kit.left() / 60),
        "--out",
        str(out),
    ]
    cmd += ["--switches", "eager", "compile"] if on_cuda else []
    cmd += ["--precisions", *kit.args.precisions] if kit.args.precisions else []
    kit.run(cmd + set_flags(s for s in kit.sets if not s.startswith("train.device=")), 3600)
    return {"rows": json.loads(out.read_text())}


def part_train(kit: Kit) -> dict:
    """Train --train-config for a share of the budget, then score and time decoding of its test set."""
    share = kit.args.train_minutes or 0.4 * kit.args.minutes
    run, minutes = kit.out / "runs" / "train", max(0.2, min(share, (kit.left() - 120) / 60))
    # a share of the budget, timed: the cap stops it; its test is scored at beams 1 and 5 as they are
    sets = kit.sets + [f"train.max_minutes={minutes}", "train.tune=false"]
    kit.mt(
        "train",
        kit.train_config,
        "--run-dir",
        str(run),
        *set_flags(sets),
        seconds=60 * minutes + 300,
    )
    card = read_card(run)  # checked, as mt report reads it
    found = {
        "config": kit.train_config,
        "minutes": minutes,
        "steps": card["training"]["steps"],
        "epochs": card["training"]["epochs"],
        "tokens_per_s": card["training"]["tokens_per_s"],
        "best_val_bleu": card["training"]["best_val_bleu"],
        "test": {},
        "decode": {},
    }
    for beam in (1, 5):
        kit.mt(
            "evaluate", "--run", str(run), "--split", "test", "--beam", str(beam), "--device", kit.args.device
        )
        key = "test" if beam == 1 else "test-beam5"
        result = read_card(run)["results"][key]
        found["test"][key] = {"bleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2)}
        timing = json_lines(
            kit.run(
                [
                    sys.executable,
                    "scripts/bench_decode.py",
                    "--run",
                    str(run),
                    "--beam",
                    str(beam),
                    "--skip-uncached",
                    "--device",
                    kit.args.device,
                ],
                300,
            ).stdout
        )[-1]
        found["decode"][f"beam{beam}"] = {k: timing[k] for k in ("sentences", "seconds", "sentences_per_s")}
    return found


def metrics_losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


def part_resume(kit: Kit) -> dict:
    """Toy runs: 2N steps straight against N, stopped, then resumed to 2N; and the trained model's
    greedy translations on the CPU against the device (when the train part ran)."""
    steps, base = (
        20,
        [
            "data.corpus=toy",
            *TINY,
            f"train.device={kit.args.device}",
            "train.log_every=2",
            "train.valid_every=10",
            "model.dropout=0.1",
            "train.tune=false",  # the losses are what is compared: no beam sweep after each piece
        ],
    )
    runs = kit.out / "runs"
    for name, budgets in (("straight", [2 * steps]), ("resumed", [steps, 2 * steps])):
        for budget in budgets:
            sets = base + [f"train.max_steps={budget}"]
            kit.mt("train", TINY_CONFIG, "--run-dir", str(runs / name), *set_flags(sets))
    straight, resumed = metrics_losses(runs / "straight"), metrics_losses(runs / "resumed")
    found = {
        "steps": 2 * steps,
        "losses": len(straight),
        "same_count": len(straight) == len(resumed),
        "max_abs_loss_diff": max(abs(a - b) for a, b in zip(straight, resumed)),
    }
    trained = runs / "train"
    if (trained / "best.pt").exists() and kit.args.device != "cpu":
        from mt.config import read_saved_config
        from mt.data import load_split

        lines = load_split(read_saved_config(trained / "config.yaml").data, "test")[0][:300]
        (runs / "lines.src").write_text("".join(line + "\n" for line in lines))
        out = {
            d: kit.mt(
                "translate", "--run", str(trained), "--input", str(runs / "lines.src"), "--device", d
            ).stdout
            for d in ("cpu", kit.args.device)
        }
        cpu, dev = out["cpu"].splitlines(), out[kit.args.device].splitlines()
        found["cpu_vs_device_same_lines"] = f"{sum(a == b for a, b in zip(cpu, dev))} of {len(cpu)}"
    return found


PART_FUNCTIONS = {
    "env": part_env,
    "gpu-tests": part_gpu_tests,
    "bench": part_bench,
    "train": part_train,
    "resume": part_resume,
    "cpu-suite": part_cpu_suite,
}


def markdown(report: dict) -> str:
    """report.md: one section per part, its figures as tables or lines."""
    out = ["# GPU kit report", ""]
    for name in PARTS:
        part = report["parts"].get(name)
        if part is None:
            continue
        out += [f"## {name} ({part['status']}, {part['seconds']} s)", ""]
        if part["status"] != "ok":
            out += [f"    {part['error']}", ""]
            continue
        found = part["result"]
        if name == "bench":
            out += [bench_table(found["rows"]), ""]
        elif "tests" in found:
            out += [f"{found['counts']}", ""] + [
                f"- `{t}`: {o}"
                for t, o in found["tests"].items()
                if name == "gpu-tests" or not o.startswith(("passed", "skipped"))
            ]
        else:
            out += [f"- {k}: {json.dumps(v)}" for k, v in found.items()]
        out.append("")
    out += ["## Commands", ""] + [
        f"- `{c['cmd']}` (rc {c['rc']}, {c['seconds']} s)" for c in report["commands"]
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for report.json, report.md and the runs")
    parser.add_argument("--parts", nargs="+", default=PARTS, choices=PARTS)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--minutes", type=float, default=25.0, help="bounds the whole kit")
    parser.add_argument(
        "--train-minutes", type=float, help="the train part's budget (default 40%% of --minutes)"
    )
    parser.add_argument("--train-config", default=GPU_CONFIG, help="what the train part trains")
    parser.add_argument("--bench-steps", type=int, default=40)
    parser.add_argument("--bench-repeats", type=int, default=3)
    parser.add_argument(
        "--precisions", nargs="+", help="bench these (default: those the device runs natively)"
    )
    parser.add_argument("--tiny", action="store_true", help="the toy corpus and a tiny model (a CPU check)")
    parser.add_argument("--set", action="append", default=[], help="key.path=value for every config")
    kit = Kit(parser.parse_args())
    for name in kit.args.parts:
        start = time.perf_counter()
        try:
            part = {"status": "ok", "result": PART_FUNCTIONS[name](kit)}
        except Exception as e:  # noqa: BLE001 - recorded; the next part runs
            part = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000]}
        kit.report["parts"][name] = {**part, "seconds": round(time.perf_counter() - start, 1)}
        kit.save()
        print(f"{name}: {part['status']} ({kit.report['parts'][name]['seconds']} s)", flush=True)
    return int(any(kit.report["parts"][n]["status"] != "ok" for n in kit.args.parts))


if __name__ == "__main__":
    sys.exit(main())
