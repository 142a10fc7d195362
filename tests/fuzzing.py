"""Damaged copies of valid files, and the readers they are fed to (tests/test_fuzz.py, scripts/fuzz_soak.py).

A damage is a short list of mutations drawn by hypothesis: truncation at a random offset, bit flips,
inserted random bytes, deleted spans, the whole file replaced by random bytes or emptied, the text
re-encoded (UTF-16, Latin-1, a BOM), and lines duplicated, removed or swapped. A reader is a function
`(workspace, damaged bytes) -> Outcome`: it puts the damaged file where mt reads it and runs mt on it
(the CLI in-process where that is cheap, else the reader function the CLI calls).

The verdict on an outcome: mt either succeeded or refused with exit code 2 and one line that starts
`mt: error: `, and no traceback; a refusal left every file of the run directory as it was.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from mt.cli import main
from mt.plumbing.errors import UserError

# ---- damage ------------------------------------------------------------------------------------------------

_offset = st.integers(0, 2**31)
MUTATION = st.one_of(
    st.tuples(st.just("truncate"), _offset),
    st.tuples(st.just("flip"), _offset, st.integers(0, 7)),
    st.tuples(st.just("insert"), _offset, st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), _offset, st.integers(1, 256)),
    st.tuples(st.just("random"), st.binary(max_size=512)),
    st.tuples(st.just("empty")),
    st.tuples(st.just("encode"), st.sampled_from(["utf-16", "latin-1", "utf-8-sig", "cp1252", "utf-32"])),
    st.tuples(st.just("dup_line"), _offset),
    st.tuples(st.just("drop_line"), _offset),
    st.tuples(st.just("swap_lines"), _offset, _offset),
)
DAMAGE = st.lists(MUTATION, min_size=1, max_size=4)


def mutate(data: bytes, op: tuple) -> bytes:
    kind, args, n = op[0], op[1:], max(len(data), 1)
    if kind == "truncate":
        return data[: args[0] % n]
    if kind == "flip":
        i = args[0] % n
        return data[:i] + bytes([data[i] ^ (1 << args[1])]) + data[i + 1 :] if data else data
    if kind == "insert":
        i = args[0] % (len(data) + 1)
        return data[:i] + args[1] + data[i:]
    if kind == "delete":
        i = args[0] % n
        return data[:i] + data[i + args[1] :]
    if kind == "random":
        return args[0]
    if kind == "empty":
        return b""
    if kind == "encode":
        return data.decode("utf-8", errors="replace").encode(args[0], errors="replace")
    lines = data.split(b"\n")
    i = args[0] % len(lines)
    if kind == "dup_line":
        return b"\n".join(lines[: i + 1] + lines[i:])
    if kind == "drop_line":
        return b"\n".join(lines[:i] + lines[i + 1 :])
    j = args[1] % len(lines)  # swap_lines
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def damage(data: bytes, ops: list[tuple]) -> bytes:
    for op in ops:
        data = mutate(data, op)
    return data


# ---- outcomes ----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int  # 0 ok, 2 refused; anything else (or a Python exception: "crash") fails
    err: str  # what went to stderr
    changed: list[str]  # files of the run directory that a refusal changed
    out: str = ""
    crash: str = ""  # an exception that escaped: its type and message

    def problem(self) -> str:
        """Why this outcome breaks the guarantee ("" = it keeps it)."""
        if self.crash:
            return f"crashed: {self.crash}"
        if "Traceback" in self.err:
            return "printed a traceback"
        if self.code not in (0, 2):
            return f"exit code {self.code}"
        if self.code == 2:
            errors = [line for line in self.err.splitlines() if "error:" in line]
            if len(errors) != 1 or not self.err.endswith(errors[0] + "\n") or not errors[0].startswith("mt"):
                return f"not one error line: {self.err[-300:]!r}"
            if self.changed:
                return f"a refusal changed {self.changed}"
        return ""


def file_hashes(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in ("train.log", "train.lock")
    }


def run_cli(argv: list[str], stdin: bytes = b"", watch: Path | None = None) -> Outcome:
    """`mt ARGV` in this process: exit code, stderr, stdout, and what changed in `watch`."""
    before = file_hashes(watch) if watch else {}
    err, out = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.TextIOWrapper(io.BytesIO(stdin)), out, err
    crash = ""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - what the fuzzing is looking for
        code, crash = 1, f"{type(e).__name__}: {e}"[:300]
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    after = file_hashes(watch) if watch else {}
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return Outcome(code, err.getvalue(), changed if code == 2 else [], out.getvalue(), crash)


def run_reader(fn, *args) -> Outcome:
    """A reader function called directly: a ConfigError/DataError is a refusal (exit 2, its message)."""
    try:
        fn(*args)
        return Outcome(0, "", [])
    except UserError as e:
        return Outcome(2, f"mt: error: {e}\n", [])
    except Exception as e:  # noqa: BLE001
        return Outcome(1, "", [], crash=f"{type(e).__name__}: {e}"[:300])


# ---- the readers -------------------------------------------------------------------------------------------


@dataclass
class Workspace:
    """A trained toy run and what it was made from, copied afresh for every damaged input."""

    run: Path  # the pristine run (never damaged)
    corpus: Path  # its corpus folder (data.corpus: files)
    config: Path  # a valid config (a child of a valid base config in the same folder)
    scratch: Path  # a folder emptied for every example

    def fresh(self) -> tuple[Path, Path]:
        """(a copy of the run, an empty folder) under scratch."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        run = self.scratch / "run"
        shutil.copytree(self.run, run)
        return run, self.scratch


def _train_config(config: Path, out: Path) -> Outcome:
    """`mt train CONFIG` with training itself replaced by a stand-in: the config reader is under test."""
    from unittest import mock

    finished = {"interrupted": "", "step": 0, "stopped": "", "tuning": None}
    with mock.patch("mt.training.train.train", lambda cfg, run_dir, force_new=False: finished):
        return run_cli(["train", str(config), "--run-dir", str(out)])


def config_file(ws: Workspace, data: bytes) -> Outcome:
    """A damaged config, extending a valid base config."""
    _, tmp = ws.fresh()
    shutil.copy(ws.config.with_name("base.yaml"), tmp / "base.yaml")
    (tmp / "child.yaml").write_bytes(data)
    return _train_config(tmp / "child.yaml", tmp / "out")


def base_config(ws: Workspace, data: bytes) -> Outcome:
    """A valid config whose `base:` config is damaged."""
    _, tmp = ws.fresh()
    shutil.copy(ws.config, tmp / "child.yaml")
    (tmp / "base.yaml").write_bytes(data)
    return _train_config(tmp / "child.yaml", tmp / "out")


def _scored_pair(ws: Workspace, data: bytes, compress: bool, side: int) -> Outcome:
    run, tmp = ws.fresh()
    names = ["src.de", "ref.en"]
    paths = [tmp / (name + ".gz" if compress else name) for name in names]
    originals = [(ws.corpus / "test.de").read_bytes(), (ws.corpus / "test.en").read_bytes()]
    for i, (path, original) in enumerate(zip(paths, originals)):
        if i == side:  # damaged: the text before compression or the compressed bytes themselves
            payload = data if not compress or data[:2] == b"\x1f\x8b" else gzip.compress(data, mtime=0)
        else:
            payload = gzip.compress(original, mtime=0) if compress else original
        path.write_bytes(payload)
    return run_cli(
        ["evaluate", "--run", str(run), "--src", str(paths[0]), "--ref", str(paths[1]), "--device", "cpu"],
        watch=run,
    )


def corpus_text(ws: Workspace, data: bytes) -> Outcome:
    """`mt evaluate --src --ref` on a damaged plain-text source or reference file."""
    return _scored_pair(ws, data, compress=False, side=len(data) % 2)


def corpus_gzip(ws: Workspace, data: bytes) -> Outcome:
    """The same on .gz files: damaged text compressed, or damaged compressed bytes."""
    return _scored_pair(ws, data, compress=True, side=len(data) % 2)


def training_corpus(ws: Workspace, data: bytes) -> Outcome:
    """The training side's streaming readers (BPE sample, binarizing): count_lines then iter_lines."""
    from mt.data import count_lines, iter_lines

    _, tmp = ws.fresh()
    path = tmp / ("train.de.gz" if data[:2] == b"\x1f\x8b" else "train.de")
    path.write_bytes(data)
    return run_reader(lambda: (count_lines(path), sum(1 for _ in iter_lines(path))))


def _multi30k(ws: Workspace, data: Path) -> bytes:
    """A Multi30k-style folder data/multi30k/ of two .gz files; returns the manifest that lists them."""
    import json

    folder = data / "multi30k"
    folder.mkdir(parents=True)
    files = {}
    for name, source in [("val.de.gz", "val.de"), ("val.en.gz", "val.en")]:
        payload = gzip.compress((ws.corpus / source).read_bytes(), mtime=0)
        files[name] = {"remote": name, "sha256": hashlib.sha256(payload).hexdigest()}
        (folder / name).write_bytes(payload)
    return json.dumps({"base_url": "unused/", "files": files}, indent=1).encode()


def multi30k_copy(ws: Workspace, data: bytes) -> Outcome:
    """A local Multi30k copy (MT_DATA_DIR) with one damaged file, checked against the manifest."""
    from mt.data import multi30k_dir

    _, tmp = ws.fresh()
    (tmp / "manifest.json").write_bytes(_multi30k(ws, tmp / "data"))
    (tmp / "data" / "multi30k" / "val.de.gz").write_bytes(data)
    return run_reader(lambda: multi30k_dir(str(tmp / "data"), tmp / "manifest.json"))


def multi30k_manifest(ws: Workspace, data: bytes) -> Outcome:
    """The same copy, undamaged, checked against a damaged manifest."""
    from mt.data import multi30k_dir

    _, tmp = ws.fresh()
    _multi30k(ws, tmp / "data")
    (tmp / "manifest.json").write_bytes(data)
    return run_reader(lambda: multi30k_dir(str(tmp / "data"), tmp / "manifest.json"))


def binarized_cache(ws: Workspace, data: bytes) -> Outcome:
    """The binarized training corpus's cache with a damaged meta.json: checked, and rebuilt if need be."""
    from mt.config import load_config
    from mt.tokenizer import load_tokenizer
    from mt.training.corpus import load, prepare

    _, tmp = ws.fresh()
    cfg, tokenizer = load_config(ws.config).data, load_tokenizer(ws.run / "spm.model")
    old = os.environ.get("MT_CACHE_DIR")
    os.environ["MT_CACHE_DIR"] = str(tmp / "cache")
    try:
        folder = prepare(cfg, tokenizer)
        (folder / "meta.json").write_bytes(data)
        return run_reader(lambda: len(load(prepare(cfg, tokenizer))) or 1 / 0)  # never empty
    finally:
        if old is None:
            del os.environ["MT_CACHE_DIR"]
        else:
            os.environ["MT_CACHE_DIR"] = old


def _translate_with(run: Path, name: str, data: bytes) -> Outcome:
    """`mt translate --run RUN` of one sentence, with RUN/name replaced by `data`."""
    (run / name).write_bytes(data)
    return run_cli(["translate", "--run", str(run), "--device", "cpu"], stdin=b"Ein Hund .\n", watch=run)


def spm_model(ws: Workspace, data: bytes) -> Outcome:
    """`mt translate` with a damaged DIR/spm.model (the checkpoint knows its sha256)."""
    return _translate_with(ws.fresh()[0], "spm.model", data)


def spm_model_parsed(ws: Workspace, data: bytes) -> Outcome:
    """The damaged bytes parsed as a sentencepiece model (the sha256 check above stops them earlier)."""
    from mt.tokenizer import Tokenizer

    return run_reader(lambda: Tokenizer(data, "spm.model"))


def best_checkpoint(ws: Workspace, data: bytes) -> Outcome:
    """`mt translate` with a damaged best.pt."""
    return _translate_with(ws.fresh()[0], "best.pt", data)


def last_checkpoint(ws: Workspace, data: bytes) -> Outcome:
    """Resuming from a damaged last.pt: the checks of `mt train` on a run directory, then the restore."""
    import torch

    from mt.config import read_saved_config
    from mt.model import Seq2Seq
    from mt.run.resume import restore, resume_checkpoint

    run, _ = ws.fresh()
    (run / "last.pt").write_bytes(data)
    before = file_hashes(run)

    def resume():
        cfg = read_saved_config(run / "config.yaml")
        found = resume_checkpoint(cfg, run, 1)
        if found:
            model = Seq2Seq(cfg.model, found.tokenizer.vocab_size)
            optimizer = torch.optim.Adam(model.parameters())
            restore(
                found.ckpt,
                model,
                optimizer,
                torch.amp.GradScaler("cuda", enabled=False),
                0,
                torch.device("cpu"),
            )

    outcome = run_reader(resume)
    outcome.changed = [k for k, v in file_hashes(run).items() if before.get(k) != v]
    return outcome


def kept_checkpoint(ws: Workspace, data: bytes) -> Outcome:
    """`mt average` over kept models, the newest one damaged."""
    run, _ = ws.fresh()
    newest = sorted(run.glob("ckpt-*.pt"))[-1]
    newest.write_bytes(data)
    return run_cli(["average", "--run", str(run), "--last", "2"], watch=run)


def card_json(ws: Workspace, data: bytes) -> Outcome:
    """`mt report` on a run with a damaged card.json."""
    run, tmp = ws.fresh()
    (run / "card.json").write_bytes(data)
    return run_cli(
        ["report", str(run), "--out", str(tmp / "report.md"), "--setting", "test-beam2"], watch=run
    )


def metrics_jsonl(ws: Workspace, data: bytes) -> Outcome:
    """`mt report` (and the resume checks) on a run with a damaged metrics.jsonl."""
    from mt.config import read_saved_config
    from mt.run.resume import resume_checkpoint

    run, tmp = ws.fresh()
    (run / "metrics.jsonl").write_bytes(data)
    outcome = run_cli(
        ["report", str(run), "--out", str(tmp / "report.md"), "--setting", "test-beam2"], watch=run
    )
    if outcome.problem():
        return outcome
    return run_reader(lambda: resume_checkpoint(read_saved_config(run / "config.yaml"), run, 1))


def run_config(ws: Workspace, data: bytes) -> Outcome:
    """`mt report` on a run with a damaged config.yaml (the resolved config training saved)."""
    run, tmp = ws.fresh()
    (run / "config.yaml").write_bytes(data)
    return run_cli(
        ["report", str(run), "--out", str(tmp / "report.md"), "--setting", "test-beam2"], watch=run
    )


def translate_file(ws: Workspace, data: bytes) -> Outcome:
    """`mt translate --input F` (plain or .gz by its first bytes); success means one line out per line in."""
    run, tmp = ws.fresh()
    path = tmp / ("input.de.gz" if data[:2] == b"\x1f\x8b" else "input.de")
    path.write_bytes(data)
    outcome = run_cli(["translate", "--run", str(run), "--input", str(path), "--device", "cpu"], watch=run)
    return _aligned(outcome, data)


def translate_stdin(ws: Workspace, data: bytes) -> Outcome:
    run, _ = ws.fresh()
    return _aligned(run_cli(["translate", "--run", str(run), "--device", "cpu"], stdin=data, watch=run), data)


def _aligned(outcome: Outcome, data: bytes) -> Outcome:
    if outcome.code == 0 and not outcome.crash:
        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        expected = text.count(b"\n") + (not text.endswith(b"\n") and text != b"")
        if outcome.out.count("\n") != expected:
            outcome.crash = f"{expected} input lines but {outcome.out.count(chr(10))} output lines"
    return outcome


VALID_ARGV = [
    "translate",
    "--run",
    "{run}",
    "--beam",
    "2",
    "--n-best",
    "2",
    "--length-penalty",
    "0.6",
    "--batch-tokens",
    "200",
    "--device",
    "cpu",
    "--checkpoint",
    "best",
    "--input",
    "{input}",
]


def command_line(ws: Workspace, data: bytes) -> Outcome:
    """The CLI's own arguments: a valid `mt translate` command line with its words damaged (the bytes
    are the command line, one argument a line)."""
    run, tmp = ws.fresh()
    (tmp / "in.de").write_text("Ein Hund .\nZwei Katzen .\n")
    argv = [
        a.replace("{run}", str(run)).replace("{input}", str(tmp / "in.de"))
        for a in data.decode("utf-8", errors="replace").replace("\x00", "").split("\n")
    ]
    argv[0] = "translate"  # whatever the damage: another command could train, or write outside tmp
    cwd = os.getcwd()
    os.chdir(tmp)  # an --output (or an abbreviation of it) conjured by the damage writes here
    try:
        return run_cli(argv, stdin=b"Ein Hund .\n", watch=run)
    finally:
        os.chdir(cwd)


def argv_bytes() -> bytes:
    return "\n".join(VALID_ARGV).encode()


READERS = {  # name -> (the valid bytes to damage (from a Workspace), the reader)
    "config": (lambda ws: ws.config.read_bytes(), config_file),
    "config base": (lambda ws: base_yaml("corpus").encode(), base_config),  # not the machine's own path
    "corpus text": (lambda ws: (ws.corpus / "test.de").read_bytes(), corpus_text),
    "corpus gzip": (lambda ws: gzip.compress((ws.corpus / "test.en").read_bytes(), mtime=0), corpus_gzip),
    "training corpus": (
        lambda ws: gzip.compress((ws.corpus / "train.de").read_bytes(), mtime=0),
        training_corpus,
    ),
    "multi30k copy": (lambda ws: gzip.compress((ws.corpus / "val.de").read_bytes(), mtime=0), multi30k_copy),
    "multi30k manifest": (lambda ws: _multi30k(ws, ws.fresh()[1] / "data"), multi30k_manifest),
    "binarized cache": (lambda ws: _cache_meta(ws), binarized_cache),
    "spm.model": (lambda ws: (ws.run / "spm.model").read_bytes(), spm_model),
    "spm.model (parsed)": (lambda ws: (ws.run / "spm.model").read_bytes(), spm_model_parsed),
    "best.pt": (lambda ws: (ws.run / "best.pt").read_bytes(), best_checkpoint),
    "last.pt": (lambda ws: (ws.run / "last.pt").read_bytes(), last_checkpoint),
    "ckpt-*.pt": (lambda ws: sorted(ws.run.glob("ckpt-*.pt"))[-1].read_bytes(), kept_checkpoint),
    "card.json": (lambda ws: (ws.run / "card.json").read_bytes(), card_json),
    "metrics.jsonl": (lambda ws: (ws.run / "metrics.jsonl").read_bytes(), metrics_jsonl),
    "config.yaml": (lambda ws: (ws.run / "config.yaml").read_bytes(), run_config),
    "translate file": (lambda ws: (ws.corpus / "val.de").read_bytes(), translate_file),
    "translate stdin": (lambda ws: (ws.corpus / "val.de").read_bytes(), translate_stdin),
    "command line": (lambda ws: argv_bytes(), command_line),
}


def _cache_meta(ws: Workspace) -> bytes:
    """The meta.json that `prepare` writes for the workspace's corpus and tokenizer."""
    from mt.config import load_config
    from mt.tokenizer import load_tokenizer
    from mt.training.corpus import prepare

    return (
        prepare(load_config(ws.config).data, load_tokenizer(ws.run / "spm.model")) / "meta.json"
    ).read_bytes()


def base_yaml(corpus: str | Path) -> str:
    return (
        "data:\n  corpus: files\n  dir: %s\n  max_len: 64\ntokenizer:\n  vocab_size: 200\n"
        "model:\n  d_model: 32\n  n_heads: 4\n  layers: 1\n  d_ff: 64\n"
        "train:\n  max_tokens: 400\n  threads: 1\n  device: cpu\n  lr: 0.005\n" % corpus
    )


def make_workspace(root: Path, corpus: Path) -> Workspace:
    """Train the toy run the readers start from (a few seconds): kept models, best/last, a scored test
    set; then pin what the run measured (`pin_run`), so that the files are the same on every machine."""
    from mt.config import load_config
    from mt.evaluate import evaluate_run
    from mt.training.train import train
    from mt.translator import Translator

    configs = root / "configs"
    configs.mkdir(parents=True)
    (configs / "base.yaml").write_text(base_yaml(corpus))
    (configs / "child.yaml").write_text(
        "# a child config\nbase: base.yaml\ntrain:\n  max_steps: 6\n  valid_every: 2\n"
        "  keep_last: 3\n  log_every: 2\n  tune: false\ndecode:\n  beam: 2\n"
    )
    run = root / "run"
    train(load_config(configs / "child.yaml"), run)
    evaluate_run(Translator.from_run(run, device="cpu"), "test")
    pin_run(run, {str(root): "/fuzz/workspace", str(corpus): "/fuzz/corpus"})
    return Workspace(run, corpus, configs / "child.yaml", root / "scratch")


# ---- the same bytes on every machine -----------------------------------------------------------------------


def pinned(value, paths: dict[str, str], numbers: bool = True):
    """`value` with every float the run measured (timings, losses, scores, weights) fixed, and the
    workspace's own paths named alike everywhere. `numbers=False`: paths only (a config's numbers
    are its own, not measured)."""
    import torch

    if isinstance(value, dict):
        return {k: pinned(v, paths, numbers and k != "config") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(pinned(v, paths, numbers) for v in value)
    if isinstance(value, str):
        for real, fixed in paths.items():
            value = value.replace(real, fixed)
        return value
    if numbers and type(value) is float:
        return 0.5
    if numbers and isinstance(value, torch.Tensor) and value.is_floating_point():
        return (
            ((torch.arange(value.numel()) % 7 + 1) / 8).to(value.dtype).reshape(value.shape)
        )  # exact in any dtype
    return value


def pin_run(run: Path, paths: dict[str, str]) -> None:
    """Rewrite the run's card, metrics, config and checkpoints as mt writes them, from fixed values:
    which field a damaged byte hits must not depend on the machine's speed, CPU, versions or paths."""
    import json
    import re

    import torch
    import yaml

    card = pinned(json.loads((run / "card.json").read_text()), paths)
    card["config"]["hash"] = "0" * 12
    card["code"] = {"git_commit": "0" * 40, "dirty": False}
    card["hardware"] = {
        "device": "cpu",
        "gpu": None,
        "processes": 1,
        "cpu": "a CPU",
        "cpu_count": 2,
        "threads": 1,
        "torch": "2.0.0",
    }
    for result in card["results"].values():
        for key in ("bleu_signature", "chrf_signature", "bleu_lc_signature"):
            result[key] = re.sub(r"version:[^|]*", "version:2.0.0", result[key])
    (run / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    rows = [pinned(json.loads(line), paths) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = pinned(yaml.safe_load((run / "config.yaml").read_text()), paths, numbers=False)
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path in run.glob("*.pt"):
        torch.save(pinned(torch.load(path, weights_only=True), paths), path)


# ---- structured damage -------------------------------------------------------------------------------------

OTHER_VALUES = [
    None,
    "text",
    1.5,
    -1,
    True,
    [],
    {},
]  # one of each JSON kind (and an integer below every minimum)


def _key_paths(record, descend) -> list[tuple]:
    """Every key path in `record`'s nested mappings, where `descend(path)` allows going deeper."""
    found = []
    for key, value in record.items():
        found.append((key,))
        if isinstance(value, dict) and descend((key,)):
            found += [(key, *rest) for rest in _key_paths(value, lambda p, k=key: descend((k, *p)))]
    return found


def _edited(record, path: tuple, edit):
    """A deep copy of `record` with the mapping that holds path[-1] passed to `edit(mapping, key)`."""
    import copy

    record = copy.deepcopy(record)
    holder = record
    for key in path[:-1]:
        holder = holder[key]
    edit(holder, path[-1])
    return record


def record_damages(record, descend=lambda path: True) -> list[tuple[str, object]]:
    """(what was done, the damaged record): each key dropped, renamed, and given each other kind of value."""
    cases = []
    for path in _key_paths(record, descend):
        name = ".".join(map(str, path))
        cases.append((f"drop {name}", _edited(record, path, lambda d, k: d.pop(k))))
        cases.append(
            (f"rename {name}", _edited(record, path, lambda d, k: d.__setitem__(f"{k}_x", d.pop(k))))
        )
        original = record
        for key in path:
            original = original[key]
        for value in OTHER_VALUES:
            if type(value) is not type(original) or value != original:
                cases.append(
                    (f"{name} = {value!r}", _edited(record, path, lambda d, k, v=value: d.__setitem__(k, v)))
                )
    return cases


def _truncations(data: bytes) -> list[tuple[str, bytes]]:
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    return [(f"cut after line {n}", data[:end]) for n, end in enumerate(ends[:-1], 1)]


def json_damages(data: bytes) -> list[tuple[str, bytes]]:
    import json

    record = json.loads(data)
    return [
        (what, (json.dumps(r, indent=2) + "\n").encode()) for what, r in record_damages(record)
    ] + _truncations(data)


def jsonl_damages(data: bytes) -> list[tuple[str, bytes]]:
    """Each kind of row (the first of each: a log window, a validation, ...) damaged in place."""
    import json

    rows = [json.loads(line) for line in data.decode().splitlines()]
    firsts = {}
    for i, row in enumerate(rows):
        firsts.setdefault(tuple(sorted(row)), i)
    cases = []
    for i in firsts.values():
        for what, damaged in record_damages(rows[i]):
            text = "".join(json.dumps(damaged if j == i else row) + "\n" for j, row in enumerate(rows))
            cases.append((f"line {i + 1}: {what}", text.encode()))
    return cases + _truncations(data)


def yaml_damages(data: bytes) -> list[tuple[str, bytes]]:
    import yaml

    return [
        (what, yaml.safe_dump(r, sort_keys=False).encode())
        for what, r in record_damages(yaml.safe_load(data))
    ]


def checkpoint_damages(data: bytes, deep: bool) -> list[tuple[str, bytes]]:
    """A checkpoint's metadata damaged: its top-level keys, and with `deep` its counters (progress and
    its window) too. Not the tensors, nor torch's own optimizer/scaler/RNG states, nor the config's own
    keys (mt.config's validator, covered through config.yaml)."""
    import io

    import torch

    ckpt = torch.load(io.BytesIO(data), weights_only=True)
    cases = []
    for what, damaged in record_damages(ckpt, lambda path: deep and path[0] == "progress"):
        out = io.BytesIO()
        torch.save(damaged, out)
        cases.append((what, out.getvalue()))
    return cases


STRUCTURED = {  # reader -> its file's structured damage
    "card.json": json_damages,
    "metrics.jsonl": jsonl_damages,
    "config.yaml": yaml_damages,
    "last.pt": lambda data: checkpoint_damages(data, deep=True),
    "best.pt": lambda data: checkpoint_damages(data, deep=False),
    "ckpt-*.pt": lambda data: checkpoint_damages(data, deep=False),
}
