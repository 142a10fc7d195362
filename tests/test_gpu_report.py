"""The GPU kit (scripts/gpu_report.py) runs end to end on the CPU, so that the day a GPU is lent the
script itself is known to work: every part but the CPU suite (this suite), on a tiny toy setup."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_kit_runs_on_the_cpu(tmp_path):
    parts = ["env", "gpu-tests", "bench", "train", "resume"]
    done = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_report.py",
            "--device",
            "cpu",
            "--tiny",
            "--minutes",
            "10",  # the kit's budget: 4 ran out in its resume part while the CPU was shared
            "--train-minutes",
            "0.2",
            "--bench-steps",
            "3",
            "--bench-repeats",
            "2",
            "--out",
            str(tmp_path),
            "--parts",
            *parts,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert {name: part["status"] for name, part in report["parts"].items()} == dict.fromkeys(parts, "ok")
    found = {name: part["result"] for name, part in report["parts"].items()}
    assert found["env"]["device"] == "cpu" and found["env"]["native_precisions"][0] == "fp32"
    assert found["gpu-tests"]["counts"]["skipped"] == len(found["gpu-tests"]["tests"]) > 0  # no CUDA here
    rows, native = found["bench"]["rows"], found["env"]["native_precisions"]  # only those unless asked
    assert [(r["precision"], r["model"]) for r in rows] == [
        (p, m) for p in native for m in ("mt", "reference")
    ]
    assert all(r["repeats"] == 2 and r["min"] <= r["tokens_per_s"] <= r["max"] for r in rows)
    assert all(
        r["tflops"] > 0 and r["of_probe"] > 0 and r["casts"] >= 0 and "gpu_busy" not in r for r in rows
    )
    assert found["train"]["steps"] > 0 and set(found["train"]["test"]) == {"test", "test-beam5"}
    assert found["train"]["decode"]["beam5"]["sentences"] == 500
    assert found["resume"]["same_count"] and found["resume"]["max_abs_loss_diff"] == 0.0  # exact on a CPU
    text = (tmp_path / "report.md").read_text()
    assert all(f"## {name} (ok" in text for name in parts) and "| tiny | fp32 | eager | mt |" in text
