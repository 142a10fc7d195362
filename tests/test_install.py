"""A wheel of this checkout is a working mt: every package under mt/ is in it with the package data (the
corpus manifest, `mt serve`'s page), and installed into an environment that cannot see the checkout (no
editable finder, no checkout on sys.path), it trains the toy config, translates, evaluates and exports
from another folder, as a user who ran `pip install .` would."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[1]
PAGE = ["app.js", "index.html", "style.css"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel .` builds, from a copy so that building leaves no files in the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mt", source / "mt", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-w", str(tmp / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    (built,) = (tmp / "dist").glob("mt-*.whl")
    return built


def python_folders() -> list[Path]:
    """Every folder under mt/ that holds Python files, relative to the checkout."""
    return sorted(
        {p.parent.relative_to(ROOT) for p in (ROOT / "mt").rglob("*.py") if "__pycache__" not in p.parts}
    )


def test_the_wheel_holds_every_package_and_its_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in python_folders():
        sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob("*.py")}
        assert sources <= names, f"{folder}: missing from the wheel: {sorted(sources - names)}"
        assert f"{folder.as_posix()}/__init__.py" in names, f"{folder} is not a package in the wheel"
    assert {"mt/multi30k.json", *(f"mt/serving/static/{name}" for name in PAGE)} <= names


def isolated_environment(where: Path) -> Path:
    """A virtual environment with mt's dependencies but not mt: a .pth line adds a folder of links to
    this interpreter's site-packages less mt's own entries (its editable finder and dist-info). A folder
    that a .pth line adds is not scanned for .pth files, so no editable finder can run from it."""
    env, deps = where / "env", where / "deps"
    venv.EnvBuilder(with_pip=False).create(env)
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name != "mt" and not entry.name.startswith(("__editable__", "mt-")):
            (deps / entry.name).symlink_to(entry)
    purelib = subprocess.run(
        [env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "mt-dependencies.pth").write_text(f"{deps}\n")
    return env


# run in the environment: where mt is imported from, the subpackages it cannot find, where downloads
# go, and the files of the page that `mt serve` serves
PROBE = """
import importlib.util, mt, mt.data, mt.serving.app
print(mt.__file__)
print(*[m for m in ("mt.run", "mt.ct2", "mt.generated", "mt.serving") if importlib.util.find_spec(m) is None])
print(mt.data.downloads_dir())
print(*sorted(p.name for p in mt.serving.app.PAGE.iterdir()))
"""


def test_a_wheel_installed_apart_trains_translates_evaluates_and_exports(wheel, tmp_path):
    env = isolated_environment(tmp_path)
    pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet"]
    subprocess.run(
        [*pip, "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=300
    )
    user = tmp_path / "user"  # another folder, holding only the config
    user.mkdir()
    shutil.copy(ROOT / "configs" / "toy.yaml", user / "toy.yaml")
    outside = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    outside |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": f"{env / 'bin'}:{outside['PATH']}"}

    def run(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            args, cwd=user, env=outside, input=stdin, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stderr[-3000:]}"
        return done.stdout

    where, missing, downloads, page = run("python", "-c", PROBE).split("\n")[:4]
    assert Path(where).is_relative_to(env) and missing == ""  # mt is the wheel's, whole
    assert downloads == str(tmp_path / "cache" / "mt") and page.split() == PAGE
    assert run("mt", "--version").startswith("mt 0.1.0")
    overrides = [f"--set={o}" for o in [*TINY_MODEL, "train.max_steps=4", "train.tune=false"]]
    run("mt", "train", "toy.yaml", "--run-dir", "runs/toy", *overrides)
    assert (
        len(run("mt", "translate", "--run", "runs/toy", stdin="Ein Hund .\n\nZwei Männer .\n").splitlines())
        == 3
    )
    run("mt", "evaluate", "--run", "runs/toy", "--split", "test")
    assert (user / "runs/toy/eval-test.json").is_file()
    if importlib.util.find_spec("ctranslate2"):  # the environment sees this interpreter's packages
        run("mt", "export", "--run", "runs/toy")
        assert (user / "runs/toy/ct2/model.bin").is_file()
