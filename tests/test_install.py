"""`pip install .` (not editable) gives a working mt: the corpus manifest and `mt serve`'s page travel
as package data, and downloads go to a cache folder instead of the (absent) source tree."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_non_editable_install_finds_its_manifest(tmp_path):
    source = tmp_path / "source"  # a copy, so that building leaves no files in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mt", source / "mt", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = (
        "import json, mt, mt.data as d; print(mt.__file__); "
        "print(len(json.loads(d.MANIFEST.read_text())['files'])); print(d.downloads_dir())"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(site / "mt" / "__init__.py"), "6", str(tmp_path / "cache" / "mt")]
    assert sorted(p.name for p in (site / "mt" / "serving" / "static").iterdir()) == [
        "app.js",
        "index.html",
        "style.css",
    ]  # mt serve's page
