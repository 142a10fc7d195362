"""A write the OS refuses, end to end, for each command: one line naming the file, the OS's reason and
what to do, exit 2, nothing half-written, the previous files intact, and the same command succeeding
once there is room. Writes are refused for real by the kernel (RLIMIT_FSIZE in a subprocess: a write
past the limit fails with EFBIG, as a full disk fails with ENOSPC) or, where a limit cannot single out
one writer, by an injected OSError(ENOSPC) in this process."""

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, file_hashes, metrics, run_main, sets

from mt.config import load_config
from mt.plumbing import files
from mt.plumbing.errors import WriteError
from mt.run import folder, metrics_log
from mt.training.train import train

TOO_LARGE = (
    "cannot write (File too large); the file is larger than this process may write (ulimit -f); "
    "raise the limit"
)


def mt_limited(limit: int, *args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """`python -m mt ARGS` whose files may not grow past `limit` bytes (SIGXFSZ ignored: EFBIG)."""

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mt", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        preexec_fn=cap,
        timeout=600,
    )


def one_error(result: subprocess.CompletedProcess) -> str:
    """The run's one error line (after any log lines), checked to be the last and the only one."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("mt: error: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert result.stderr.endswith(errors[0] + "\n") and "Traceback" not in result.stderr
    return errors[0].removeprefix("mt: error: ")


def no_temporaries(folder) -> bool:
    return not [p for p in folder.rglob(".*") if ".tmp" in p.name]


@pytest.mark.slow
def test_training_that_cannot_write_its_checkpoint_stops_and_resumes_once_there_is_room(run, trained):
    overrides = sets(trained[1] + ["train.max_steps=8"])
    kept = {name: (run / name).read_bytes() for name in ("last.pt", "best.pt", "card.json", "spm.model")}
    limit = (run / "last.pt").stat().st_size // 2  # the checkpoint cannot be written; the logs can
    assert max((run / n).stat().st_size for n in ("train.log", "metrics.jsonl", "config.yaml")) < limit // 4
    result = mt_limited(limit, "train", "configs/toy.yaml", "--run-dir", str(run), *overrides)
    assert one_error(result) == (
        f"training stopped at step 8, its checkpoints as they were: {run / 'last.pt'}: {TOO_LARGE}"
    )
    assert {name: (run / name).read_bytes() for name in kept} == kept and no_temporaries(run)
    again = mt_limited(resource.RLIM_INFINITY, "train", "configs/toy.yaml", "--run-dir", str(run), *overrides)
    assert again.returncode == 0, again.stderr
    assert [r["step"] for r in metrics(run) if "loss" in r][-2:] == [6, 8]  # log_every 2: resumed to the end


@pytest.mark.slow
def test_evaluate_that_cannot_write_its_results_leaves_the_run_as_it_was(run):
    before = file_hashes(run)
    result = mt_limited(200, "evaluate", "--run", str(run), "--device", "cpu", "--beam", "2")
    assert one_error(result) == f"{run / 'hyp-test-beam2.txt'}: {TOO_LARGE}"
    assert file_hashes(run) == before and no_temporaries(run)


@pytest.mark.slow
def test_translate_output_that_cannot_be_written_keeps_the_old_file(run, tmp_path):
    source, out = tmp_path / "in.de", tmp_path / "out.en"
    source.write_text("ein Hund läuft .\n" * 50)
    out.write_text("the previous translation\n")
    result = mt_limited(20, "translate", "--run", str(run), "--input", str(source), "--output", str(out))
    assert one_error(result) == f"{out}: {TOO_LARGE}"
    assert out.read_text() == "the previous translation\n" and no_temporaries(tmp_path)
    with open(tmp_path / "stdout.en", "w") as redirected:  # > stdout.en on a full disk: that file is named
        result = mt_limited(20, "translate", "--run", str(run), "--input", str(source), stdout=redirected)
    assert one_error(result) == f"{tmp_path / 'stdout.en'}: {TOO_LARGE}"


@pytest.mark.slow
def test_translate_into_a_closed_pipe_ends_quietly(run, tmp_path):
    """`mt translate ... | head -1`: the reader has gone; no traceback, no message."""
    source = tmp_path / "in.de"
    source.write_text("ein Hund läuft .\n" * 100)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "mt", "translate", "--run", str(run), "--input", str(source)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    process.stdout.close()  # before anything is written: every write meets EPIPE
    err = process.stderr.read().decode()
    assert process.wait(timeout=600) == 0 and "Traceback" not in err and "error" not in err, err


@pytest.mark.slow
def test_export_that_cannot_be_written_keeps_the_previous_export(run):
    pytest.importorskip("ctranslate2")
    assert mt_limited(resource.RLIM_INFINITY, "export", "--run", str(run)).returncode == 0
    before = file_hashes(run / "ct2")
    result = mt_limited(1000, "export", "--run", str(run))
    assert one_error(result) == f"{run / 'ct2'}: {TOO_LARGE}"
    assert file_hashes(run / "ct2") == before
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_a_report_that_cannot_be_written_keeps_the_old_one(run, tmp_path):
    out = tmp_path / "report.md"
    out.write_text("the previous report\n")
    result = mt_limited(300, "report", str(run), "--out", str(out))
    assert one_error(result) == f"{tmp_path / 'report-curves.png'}: {TOO_LARGE}"  # the plot goes first
    assert out.read_text() == "the previous report\n" and no_temporaries(tmp_path)


@pytest.mark.slow
def test_an_average_that_cannot_be_written_leaves_no_averaged_pt(tiny, tmp_path):
    run_dir = tmp_path / "run"
    train(load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=8", "train.keep_last=2"]), run_dir)
    result = mt_limited(1000, "average", "--run", str(run_dir), "--last", "2")
    assert one_error(result) == f"{run_dir / 'averaged.pt'}: {TOO_LARGE}"
    assert not (run_dir / "averaged.pt").exists() and no_temporaries(run_dir)


def failing_after(lines: int):
    """A text file opener whose files refuse (ENOSPC) every write after their first `lines` writes."""

    class Full:
        def __init__(self, file):
            self.file, self.left = file, lines

        def write(self, text):
            if self.left == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.left -= 1
            return self.file.write(text)

        def __getattr__(self, name):
            return getattr(self.file, name)

    return lambda *args, **kwargs: Full(open(*args, **kwargs))


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["metrics.jsonl", "train.log"])
def test_a_log_line_that_cannot_be_written_stops_training(tiny, tmp_path, monkeypatch, writer):
    run_dir = tmp_path / "run"
    cfg = load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=8"])
    if writer == "metrics.jsonl":
        monkeypatch.setattr(metrics_log, "open", failing_after(1), raising=False)
    else:
        monkeypatch.setattr(
            folder.RunLogHandler, "_open", lambda self: failing_after(3)(self.baseFilename, "a")
        )
    with pytest.raises(WriteError) as e:
        train(cfg, run_dir)
    assert str(e.value).startswith(
        f"{run_dir / writer}: cannot write (No space left on device); free space on "
    )
    assert not (run_dir / "last.pt").exists()  # stopped at the first refused line, before step 4's save


def refusing(code: int):
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return refuse


@pytest.mark.slow
@pytest.mark.parametrize(
    "code, fix",
    [
        (errno.EACCES, "you may not write in {run}; change its permissions or write to another folder"),
        (errno.EROFS, "{mount} is mounted read-only; write to another folder"),
    ],
)
def test_a_run_directory_that_may_not_be_written_is_one_line_and_left_as_it_was(
    run, trained, capsys, code, fix
):
    """Permissions cannot be tested for real as root (root may write anywhere): the atomic writer's
    open is refused instead, as the kernel refuses it in a read-only or foreign folder."""

    def kept():  # not the lock: it names its holder, rewritten by each training that takes it
        return {name: sha for name, sha in file_hashes(run).items() if name != "train.lock"}

    before = kept()
    mount = next(p for p in [run, *run.parents] if os.path.ismount(p))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "open", refusing(code), raising=False)
        exit_code, err = run_main(
            capsys,
            "train",
            "configs/toy.yaml",
            "--run-dir",
            str(run),
            *sets(trained[1] + ["train.max_steps=8"]),
        )
    message = f"{run / 'config.yaml'}: cannot write ({os.strerror(code)}); {fix.format(run=run, mount=mount)}"
    assert exit_code == 2 and err.endswith(f"\nmt: error: {message}\n")
    assert kept() == before and no_temporaries(run)


@pytest.mark.slow
def test_a_run_directory_that_vanishes_mid_run_stops_training_in_one_line(tiny, tmp_path, monkeypatch):
    from mt.training import train as training

    run_dir, real = tmp_path / "run", training.validate

    def validate_then_vanish(*args, **kwargs):
        shutil.rmtree(run_dir)
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "validate", validate_then_vanish)
    with pytest.raises(WriteError) as e:
        train(load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=8"]), run_dir)
    assert str(e.value) == (
        f"training stopped at step 4, its checkpoints as they were: {run_dir / 'last.pt'}: cannot write (No "
        f"such file or directory); {run_dir} no longer exists; create it again or write to another folder"
    )


def test_a_lock_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "open", refusing(errno.EROFS))
    with pytest.raises(WriteError) as e:
        with folder.locked(tmp_path):
            pass
    assert str(e.value).startswith(f"{tmp_path / 'train.lock'}: cannot write (Read-only file system); ")
