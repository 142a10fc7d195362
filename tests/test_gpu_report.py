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
            "0.5",
            "--bench-steps",
            "3",
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
    rows = found["bench"]["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]  # tf32 and fp16 are CUDA's
    assert all(r["tokens_per_s"] > 0 and r["seconds_per_epoch"] > 0 and r["gpu_busy"] is None for r in rows)
    assert found["train"]["steps"] > 0 and set(found["train"]["test"]) == {"test", "test-beam5"}
    assert found["train"]["decode"]["beam5"]["sentences"] == 500
    assert found["resume"]["same_count"] and found["resume"]["max_abs_loss_diff"] == 0.0  # exact on a CPU
    text = (tmp_path / "report.md").read_text()
    assert all(f"## {name} (ok" in text for name in parts) and "| tiny | fp32 |" in text
