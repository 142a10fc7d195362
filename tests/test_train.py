"""mt/training/train.py: the training loop and what stops it, as README promises: max_steps, max_minutes (wall
clock summed over restarts), patience on validation BLEU, a non-finite loss (the update skipped) and a
diverging one (TrainingError, exit code 1), Ctrl-C once (checkpoint, exit 130) and twice (at once, no
traceback)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import metrics, sets, weights

import mt.run.metrics_log
import mt.training.session
import mt.training.step
import mt.training.train
from mt.cli import main
from mt.config import load_config
from mt.run.metrics_log import read_metrics
from mt.tokenizer import Tokenizer
from mt.training.train import TrainingError, train

ROOT = Path(__file__).resolve().parents[1]


def step_of(path: Path) -> int:
    return torch.load(path, weights_only=True)["progress"]["step"]


def slow_clock(monkeypatch) -> None:
    """A fake clock for mt.training.train that advances 10 s in every update and stands still otherwise."""
    now = [1000.0]
    monkeypatch.setattr(mt.training.train, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    real = mt.training.train.train_step

    def slow_step(*args, **kwargs):
        now[0] += 10.0
        return real(*args, **kwargs)

    monkeypatch.setattr(mt.training.train, "train_step", slow_step)


@pytest.fixture
def ten_seconds_an_update(monkeypatch):
    slow_clock(monkeypatch)


def test_max_minutes_stops_at_the_first_update_past_the_budget_and_counts_across_restarts(
    tmp_path, tiny, ten_seconds_an_update
):
    def cfg(minutes):
        return load_config(ROOT / "configs/toy.yaml", tiny + [f"train.max_minutes={minutes}"])

    first = train(cfg(0.5), tmp_path / "run")
    assert (first["step"], first["stopped"], first["elapsed_s"]) == (3, "reached train.max_minutes=0.5", 30.0)
    second = train(cfg(1.0), tmp_path / "run")  # resumes with 30 s already spent
    assert (second["step"], second["stopped"], second["elapsed_s"]) == (
        6,
        "reached train.max_minutes=1.0",
        60.0,
    )
    assert [(r["step"], r["elapsed_s"]) for r in metrics(tmp_path / "run") if "loss" in r] == [
        (2, 20.0),
        (4, 40.0),
        (6, 60.0),
    ]


def test_a_run_the_time_cap_stops_says_it_is_not_the_configs_model(
    tmp_path, tiny, ten_seconds_an_update, caplog
):
    cfg = load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_minutes=0.5", "train.max_steps=20"])
    result = train(cfg, tmp_path / "run")
    assert (result["step"], result["stopped"]) == (3, "reached train.max_minutes=0.5")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "train.max_minutes=0.5 stopped training at step 3 of its budget, train.max_steps=20 (15%): this is "
        "not the model the config names (the schedule is set for the whole budget); run the same command "
        "with --set train.max_minutes=0 to resume and finish it"
    ]
    caplog.clear()
    finished = load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_minutes=0", "train.max_steps=20"])
    assert train(finished, tmp_path / "run")["stopped"] == "reached train.max_steps=20"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_run_the_time_cap_stopped_finishes_as_the_model_its_config_names(tmp_path, tiny, monkeypatch):
    """The schedule follows the step, never the clock: a slow machine (10 s an update) that the cap
    stops at step 3, resumed without the cap, makes the learning rates, losses and weights of a run
    never capped."""
    sets = tiny + ["train.schedule=linear", "train.max_steps=8", "train.warmup_steps=2"]
    config = lambda minutes: load_config(ROOT / "configs/toy.yaml", sets + [f"train.max_minutes={minutes}"])  # noqa: E731
    assert train(config(0), tmp_path / "whole")["step"] == 8
    slow_clock(monkeypatch)
    assert train(config(0.5), tmp_path / "slow")["step"] == 3
    assert train(config(0), tmp_path / "slow")["step"] == 8
    curve = lambda run: [(r["step"], r["lr"], r["loss"]) for r in metrics(run) if "loss" in r]  # noqa: E731
    assert curve(tmp_path / "whole") == curve(tmp_path / "slow")
    assert curve(tmp_path / "slow")[-1][1] == 0.0  # the linear decay ends with the budget
    a, b = weights(tmp_path / "whole" / "last.pt"), weights(tmp_path / "slow" / "last.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def scripted_validations(losses):
    """A stand-in for mt.training.train's validate: these val losses in turn (BLEU 10 throughout)."""
    losses = iter(losses)

    def scripted(model, val, tokenizer, cfg, device):
        loss = next(losses)
        return {
            "val_loss": loss,
            "val_nll": loss,
            "val_ppl": 2.7,
            "val_bleu": 10.0,
            "val_chrf": 50.0,
            "valid_beam": 1,
            "bleu_signature": "scripted",
        }

    return scripted


def test_val_loss_above_its_lowest_for_three_validations_is_called_overfitting(
    tmp_path, tiny, monkeypatch, caplog
):
    # validations at steps 2, 4, ..., 14: 2.1 stays above 2.0 once, then 1.9 at step 8 is the lowest and the
    # three after it stay above: one warning, at step 14
    monkeypatch.setattr(
        mt.training.train, "validate", scripted_validations([3.0, 2.0, 2.1, 1.9, 2.2, 2.3, 2.4])
    )
    reads = []
    for module in (mt.run.metrics_log, mt.training.train):  # wherever the loop might read it from
        monkeypatch.setattr(
            module, "read_metrics", lambda path: reads.append(path) or read_metrics(path), raising=False
        )
    train(
        load_config(ROOT / "configs/toy.yaml", tiny + ["train.valid_every=2", "train.max_steps=14"]),
        tmp_path / "run",
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "val loss 2.400 has stayed above its lowest, 1.900 at step 8, for 3 validations (6 updates): the "
        "model is overfitting the training pairs; more regularisation (model.dropout) or a smaller budget "
        "(train.max_steps) would do better"
    ]
    assert reads == []  # the log keeps its val losses: metrics.jsonl is not read again at each validation


def test_patience_stops_after_validations_without_a_bleu_gain(tmp_path, tiny, monkeypatch):
    bleu = iter([10.0, 12.0, 11.0, 12.0, 9.0, 30.0])  # validations at steps 2, 4, 6, 8, 10, 12

    def scripted(model, val, tokenizer, cfg, device):
        return {
            "val_loss": 1.0,
            "val_nll": 1.0,
            "val_ppl": 2.7,
            "val_bleu": next(bleu),
            "val_chrf": 50.0,
            "valid_beam": 1,
            "bleu_signature": "scripted",
        }

    monkeypatch.setattr(mt.training.train, "validate", scripted)
    run = tmp_path / "run"
    result = train(
        load_config(ROOT / "configs/toy.yaml", tiny + ["train.valid_every=2", "train.patience=3"]), run
    )
    # 12 at step 4 is the best; 11, 12 (no gain: not higher) and 9 are three validations without a gain
    assert (result["step"], result["best_bleu"], result["best_step"]) == (10, 12.0, 4)
    assert result["stopped"] == "no val BLEU gain in 3 validations (train.patience)"
    assert step_of(run / "best.pt") == 4 and step_of(run / "last.pt") == 10
    card = json.loads((run / "card.json").read_text())["training"]
    assert (card["best_step"], card["best_val_bleu"], card["stopped"]) == (4, 12.0, result["stopped"])
    assert [r["val_bleu"] for r in metrics(run) if "val_bleu" in r] == [10.0, 12.0, 11.0, 12.0, 9.0]


def test_best_metric_chrf_picks_best_pt_and_stops_by_chrf(tmp_path, tiny, monkeypatch):
    scores = iter([(10.0, 50.0), (12.0, 49.0), (11.0, 53.0), (13.0, 52.0), (14.0, 51.0), (9.0, 60.0)])

    def scripted(model, val, tokenizer, cfg, device):
        bleu, chrf = next(scores)  # validations at steps 2, 4, 6, 8, 10, 12
        return {
            "val_loss": 1.0,
            "val_nll": 1.0,
            "val_ppl": 2.7,
            "val_bleu": bleu,
            "val_chrf": chrf,
            "valid_beam": 1,
            "bleu_signature": "scripted",
        }

    monkeypatch.setattr(mt.training.train, "validate", scripted)
    run = tmp_path / "run"
    sets = ["train.valid_every=2", "train.patience=2", "train.best_metric=chrf"]
    result = train(load_config(ROOT / "configs/toy.yaml", tiny + sets), run)
    # chrF 53 at step 6 is the best; BLEU rises after it, but 52 and 51 are two validations without a gain
    assert (result["step"], result["best_step"]) == (10, 6)
    assert result["stopped"] == "no val chrF gain in 2 validations (train.patience)"
    assert step_of(run / "best.pt") == 6
    card = json.loads((run / "card.json").read_text())["training"]
    assert (card["best_metric"], card["best_val_chrf"], card["best_val_bleu"]) == ("chrf", 53.0, 11.0)


def test_diverging_loss_exits_with_code_1_through_the_cli(tmp_path, tiny, monkeypatch, capsys):
    real, updates = mt.training.step.batch_loss, []

    def diverging(model, batch, eps):
        updates.extend([1] if model.training else [])
        loss, nll = real(model, batch, eps)
        return (loss * float("inf"), nll) if len(updates) > 4 and model.training else (loss, nll)

    monkeypatch.setattr(mt.training.step, "batch_loss", diverging)
    run = tmp_path / "run"
    args = ["train", "configs/toy.yaml", "--run-dir", str(run)]
    for item in tiny + [
        "train.max_steps=50",
        "train.valid_every=100",
        "train.save_every=4",
        "train.max_nonfinite=2",
    ]:
        args += ["--set", item]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"mt: error: the loss was not finite in 2 updates in a row after step 4 "
        f"(train.max_nonfinite); {run}/last.pt is untouched; lower train.lr or check "
        f"the data"
    )
    assert step_of(run / "last.pt") == 4 and "Traceback" not in err


SLOW_UPDATES = (  # mt with a 1 s sleep in every training forward pass, during which MARKER exists
    "import os, signal, sys, time\n"
    # as in a terminal, whatever the test runner inherited (a background shell job ignores SIGINT)
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "import mt.training.step as T\n"
    "real = T.batch_loss\n"
    "def slow(model, batch, eps):\n"
    "    if model.training:\n"
    "        open(os.environ['MARKER'], 'w').close(); time.sleep(1.0); os.remove(os.environ['MARKER'])\n"
    "    return real(model, batch, eps)\n"
    "T.batch_loss = slow\n"
    "from mt.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.slow
def test_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path, tiny):
    run = tmp_path / "run"
    args = ["train", "configs/toy.yaml", "--run-dir", str(run)]
    for item in tiny + [
        "train.max_steps=1000",
        "train.valid_every=1000",
        "train.log_every=1",
        "train.save_every=2",
    ]:
        args += ["--set", item]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_UPDATES, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MARKER": str(tmp_path / "in-update")},
    )
    deadline = time.time() + 300
    while not (
        (run / "metrics.jsonl").exists()
        and (run / "metrics.jsonl").read_text().count("\n") >= 3
        and (tmp_path / "in-update").exists()  # a signal now lands mid-update, whatever the machine's pace
    ):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # the first Ctrl-C waits for the update to finish; the second does not
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == (
        "mt: interrupted; files are written whole or not at all, so every checkpoint is intact"
    )
    assert "Traceback" not in stderr and "resume with" not in stderr  # it did not take the checkpoint path
    last = step_of(run / "last.pt")
    assert last >= 2 and last % 2 == 0 and not (run / ".last.pt.tmp").exists()


@pytest.mark.parametrize("when", ["update", "validation"])
def test_a_stop_in_the_last_update_or_the_final_validation_stops_the_run(
    tmp_path, tiny, monkeypatch, capsys, when
):
    """Issue 80: SIGTERM during the last update or the final validation, which the loop does not read
    again, ends the run as a stop at any other update does (exit 143, the resume line, no tuning)
    rather than being dropped; the same command then validates where it had not, tunes and finishes."""
    run = tmp_path / "run"
    settings = tiny + ["train.max_steps=6", "train.valid_every=100", "train.tune=true"]
    args = ["train", str(ROOT / "configs/toy.yaml"), "--run-dir", str(run), *sets(settings)]
    real_loss, real_validate, updates = mt.training.step.batch_loss, mt.training.train.validate, []

    def loss(model, batch, eps):
        updates.extend([1] if model.training else [])
        if len(updates) == 6 and model.training:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_loss(model, batch, eps)

    def validate(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_validate(*args, **kwargs)

    if when == "update":
        monkeypatch.setattr(mt.training.step, "batch_loss", loss)
    else:
        monkeypatch.setattr(mt.training.train, "validate", validate)
    assert main(args) == 143
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("mt: training stopped by SIGTERM at step 6; resume with: mt train ")
    card = json.loads((run / "card.json").read_text())
    assert card["training"]["stopped"] == "SIGTERM" and "tuning" not in card
    assert step_of(run / "last.pt") == 6
    assert [r["step"] for r in metrics(run) if "val_bleu" in r] == ([6] if when == "validation" else [])
    monkeypatch.undo()
    assert main(args) == 0
    card = json.loads((run / "card.json").read_text())
    assert (
        card["training"]["stopped"] == "reached train.max_steps=6"
        and card["tuning"]["checkpoint"] == "best.pt"
    )
    assert [r["step"] for r in metrics(run) if "val_bleu" in r] == [6]


def test_nonfinite_loss_skips_the_update(tmp_path, monkeypatch, tiny_config):
    real, calls = mt.training.step.batch_loss, []

    def flaky(model, batch, eps):
        calls.extend([1] if model.training else [])  # validation computes losses too
        loss, nll = real(model, batch, eps)
        return (loss * float("nan"), nll) if len(calls) == 5 and model.training else (loss, nll)  # 3rd update

    monkeypatch.setattr(mt.training.step, "batch_loss", flaky)
    run = tmp_path / "run"
    result = train(tiny_config("train.max_steps=6", "train.accumulate=2"), run)
    assert result["step"] == 6 and len(calls) == 14  # 7 updates tried, 6 made
    skipped = [r for r in metrics(run) if "skipped_update" in r]
    assert skipped == [{"step": 2, "skipped_update": "non-finite", "nonfinite_total": 1}]
    assert all(torch.isfinite(w).all() for w in weights(run / "last.pt").values())


def test_diverging_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, tiny_config):
    real, calls = mt.training.step.batch_loss, []

    def diverging(model, batch, eps):
        calls.extend([1] if model.training else [])
        loss, nll = real(model, batch, eps)
        return (
            (loss * float("inf"), nll) if len(calls) > 8 and model.training else (loss, nll)
        )  # after 4 updates

    monkeypatch.setattr(mt.training.step, "batch_loss", diverging)
    run = tmp_path / "run"
    with pytest.raises(TrainingError) as e:
        train(tiny_config("train.max_steps=50", "train.save_every=4", "train.max_nonfinite=3"), run)
    assert str(e.value) == (
        f"the loss was not finite in 3 updates in a row after step 4 (train.max_nonfinite); "
        f"{run}/last.pt is untouched; lower train.lr or check the data"
    )
    assert torch.load(run / "last.pt", weights_only=True)["progress"]["step"] == 4
    assert len([r for r in metrics(run) if "skipped_update" in r]) == 3


def test_bpe_dropout_trains_on_its_views_and_validates_on_plain_pieces(tmp_path, tiny_config, monkeypatch):
    streams, validations = [], []
    real_stream, real_validation = (
        mt.training.session.BatchStream.training,
        mt.training.session.make_validation,
    )

    def stream(corpus, *args):
        streams.append(corpus)
        return real_stream(corpus, *args)

    def validation(src, ref, tokenizer, model, max_tokens):
        args = (src, ref, tokenizer, model, max_tokens)
        validations.append((real_validation(*args), args))
        return validations[-1][0]

    monkeypatch.setattr(mt.training.session.BatchStream, "training", stream)
    monkeypatch.setattr(mt.training.session, "make_validation", validation)
    result = train(
        tiny_config("train.max_steps=4", "data.bpe_dropout=0.2", "data.bpe_views=3"), tmp_path / "run"
    )
    (views,), ((used, args),) = streams, validations
    assert result["step"] == 4 and len(views) == 3
    assert len({tuple(view.src.tolist()) for view in views}) == 3  # three samples of the pairs
    after = real_validation(*args)  # validation encodes plainly, before and after sampling ran
    assert [b.src.tolist() for b in used.batches] == [b.src.tolist() for b in after.batches]
    assert [b.src.tolist() for b in used.batches] == [
        b.src.tolist() for b in real_validation(args[0], args[1], Tokenizer(args[2].proto), *args[3:]).batches
    ]


@pytest.mark.parametrize("native", [False, True])
def test_precision_auto_is_saved_as_asked_and_carded_as_it_ran(tiny_config, tmp_path, monkeypatch, native):
    """config.yaml keeps `auto` (a resume on another CPU decides again); the card says what ran."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    run = tmp_path / "run"
    train(tiny_config("train.max_steps=2", "train.precision=auto"), run)
    assert json.loads((run / "card.json").read_text())["precision"] == ("bf16" if native else "fp32")
    assert "  precision: auto\n" in (run / "config.yaml").read_text()


def test_a_resume_on_a_cpu_without_bf16_decides_auto_again_and_says_so(
    tiny_config, tmp_path, monkeypatch, caplog
):
    """train.precision: auto trained in bf16, resumed where the CPU lacks it: fp32 from there on, one
    warning that names both and the step, and the card names both parts; resuming again on the same CPU
    adds nothing."""
    native = {"bf16": True}
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native["bf16"], raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    run = tmp_path / "run"
    train(tiny_config("train.max_steps=2", "train.precision=auto"), run)
    native["bf16"] = False
    train(tiny_config("train.max_steps=3", "train.precision=auto"), run)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "the updates so far ran in bf16; this device runs train.precision fp32: updates from step 3 run in "
        "fp32, so this run is the model of neither precision (--set train.precision=bf16 keeps one)"
    ]
    assert json.loads((run / "card.json").read_text())["precision"] == "bf16 to step 2, then fp32"
    caplog.clear()
    train(tiny_config("train.max_steps=4", "train.precision=auto"), run)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert json.loads((run / "card.json").read_text())["precision"] == "bf16 to step 2, then fp32"


def test_both_directions_trains_on_the_reversed_pairs_too(tiny_config, tmp_path):
    """With data.both_directions an epoch holds twice the pairs, and a target-only output layer scores
    the source side's pieces too (they are targets now)."""
    once = train(tiny_config("train.max_steps=40"), tmp_path / "once")
    both = train(tiny_config("train.max_steps=40", "data.both_directions=true"), tmp_path / "both")
    assert (once["epoch"], both["epoch"]) == (3, 2)  # an epoch of 15 updates, then of 30
    run = tmp_path / "pieces"
    train(tiny_config("train.max_steps=1", "data.both_directions=true", "model.output_pieces=target"), run)
    one_way = tmp_path / "one-way"
    train(tiny_config("train.max_steps=1", "model.output_pieces=target"), one_way)
    assert len(weights(run / "last.pt")["output.ids"]) > len(weights(one_way / "last.pt")["output.ids"])


def test_each_log_window_hands_the_heaps_free_pages_back(tmp_path, tiny, monkeypatch):
    """mt.plumbing.memory: the loop trims glibc's heap once a log window, on every rank."""
    calls = []
    monkeypatch.setattr(mt.training.train, "release_freed_memory", lambda: calls.append(1))
    cfg = load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=6", "train.log_every=2"])
    train(cfg, tmp_path / "run")
    assert len(calls) == 3


def test_the_heap_is_trimmed_where_the_c_library_is_glibc():
    import platform

    from mt.plumbing.memory import release_freed_memory

    assert release_freed_memory() == (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc")
