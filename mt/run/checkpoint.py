"""What a checkpoint holds, and writing, loading, checking and averaging checkpoints.

    last.pt, best.pt    model, Adam, grad scaler, counters (`Progress`), RNG states, config, vocab size,
                        and the sha256 of the spm.model it was trained with
    ckpt-STEP.pt        the model at a validation (train.keep_last): weights, config, counters
    averaged.pt         the fp32 mean of the last kept models (train.average_last, `mt average`)

A checkpoint holds only tensors, numbers, strings and lists/dicts of them, so it loads with
`torch.load(weights_only=True)`, and it is replaced atomically (mt.plumbing.files), so a crash never leaves a
half-written one. Loading checks what it reads and turns every damage into a one-line RunDirError.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import logging
import pickle
import random
from pathlib import Path
from typing import Protocol

import torch

from mt.config import RunConfig, config_from_dict, config_to_dict
from mt.model import Seq2Seq
from mt.plumbing.config_yaml import apply_overrides, config_differences
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.files import write_bytes
from mt.run.progress import Checkpoint, Progress, current_progress
from mt.run.records import problem
from mt.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def resumable_keys(cls: type = None, prefix: str = "") -> tuple[str, ...]:
    """The keys (train.max_steps, decode, ...) whose fields are marked RESUMABLE: what a resumed run,
    or a checkpoint averaged with another of its run, may differ in."""
    keys = []
    for f in dataclasses.fields(cls or RunConfig):
        if f.metadata.get("resumable"):
            keys.append(prefix + f.name)
        elif dataclasses.is_dataclass(f.default):  # a section: its own fields
            keys += resumable_keys(type(f.default), f"{f.name}.")
    return tuple(keys)


RESUMABLE_KEYS = resumable_keys()  # what a resumed run may change (mt.config's RESUMABLE fields)


def rng_state(device: torch.device) -> dict:
    """This process's random state: Python's, torch's CPU generator, and its own GPU's (not every
    visible GPU's, so that a run resumes on a host with fewer GPUs)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and isinstance(state.get("cuda"), torch.Tensor):  # absent when trained on CPU
        torch.cuda.set_rng_state(state["cuda"], device)


class TrainingState(Protocol):
    """What last.pt and best.pt save of a training run (mt.training.session's Session is one)."""

    cfg: RunConfig
    model: Seq2Seq
    tokenizer: Tokenizer
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress


def save_checkpoint(path: Path, state: TrainingState, rng_states: list[dict]) -> None:
    """Write a checkpoint atomically; `rng_states` holds one state per process, in rank order."""
    ckpt = {
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scaler": state.scaler.state_dict(),
        "config": config_to_dict(state.cfg),
        "vocab_size": state.model.vocab_size,
        "tokenizer_sha256": state.tokenizer.sha256,
        "progress": dataclasses.asdict(state.progress),
        "rng": rng_states,
    }
    write_torch(path, ckpt)


def write_torch(path: Path, obj: dict) -> None:
    """torch.save, made in memory and written with the atomic writer: torch's zip writer turns a full
    disk into "unexpected pos"; written as bytes, the OS's error reaches mt.plumbing.files.write_failure."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes(path, buffer.getbuffer())


def keep_model(
    run_dir: Path, cfg: RunConfig, model: Seq2Seq, tokenizer: Tokenizer, progress: Progress, keep: int
) -> None:
    """DIR/ckpt-STEP.pt: the model (weights, config, progress; no optimizer) at this validation; only
    the `keep` newest stay (train.keep_last)."""
    write_torch(
        run_dir / f"ckpt-{progress.step:07d}.pt",
        {
            "model": model.state_dict(),
            "config": config_to_dict(cfg),
            "vocab_size": model.vocab_size,
            "tokenizer_sha256": tokenizer.sha256,
            "progress": dataclasses.asdict(progress),
        },
    )
    for old in kept_models(run_dir)[:-keep]:
        old.unlink()


def kept_models(run_dir: Path) -> list[Path]:
    """DIR/ckpt-*.pt, oldest first."""
    return sorted(run_dir.glob("ckpt-*.pt"))


def average_models(paths: list[Path]) -> dict:
    """A checkpoint whose weights are the fp32 mean of `paths`' weights, with the first's config;
    checkpoints of different configs (beyond RESUMABLE_KEYS) are refused with a one-line error."""
    ckpts = [load_checkpoint(p) for p in paths]
    first = ckpts[0]
    # compared as typed configs: a key newer than a checkpoint takes its default
    configs = [config_to_dict(stored_config(ckpt, path)) for ckpt, path in zip(ckpts, paths)]
    for path, ckpt, config in zip(paths[1:], ckpts[1:], configs[1:]):
        diff = config_differences(configs[0], config, ignore=RESUMABLE_KEYS)
        if diff or ckpt["vocab_size"] != first["vocab_size"] or ckpt["model"].keys() != first["model"].keys():
            what = ", ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in diff.items()) or "other weights"
            raise RunDirError(
                f"{path}: another config than {paths[0]} ({what}); average checkpoints of one run"
            )
    mean = {
        k: torch.stack([c["model"][k].float() for c in ckpts]).mean(0).to(v.dtype)
        for k, v in first["model"].items()
    }
    return {
        "model": mean,
        "config": first["config"],
        "vocab_size": first["vocab_size"],
        "tokenizer_sha256": first["tokenizer_sha256"],
        "averaged": [str(p) for p in paths],
    }


def write_average(run_dir: Path, last: int) -> Path:
    """DIR/averaged.pt from the `last` newest DIR/ckpt-*.pt (`mt average`, train.average_last)."""
    kept = kept_models(run_dir)
    if len(kept) < last:
        raise RunDirError(
            f"{run_dir}: {len(kept)} kept checkpoints (ckpt-*.pt), fewer than the {last} to average; "
            f"set train.keep_last >= {last} and validate more often or train longer"
        )
    write_torch(run_dir / "averaged.pt", average_models(kept[-last:]))
    log.info("wrote %s: the mean of %s", run_dir / "averaged.pt", ", ".join(p.name for p in kept[-last:]))
    return run_dir / "averaged.pt"


def is_torch_zip(path: Path) -> bool:
    """Whether the file starts as torch.save's zip archive does (the only format mt writes)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:  # a folder, unreadable
        return False


def load_checkpoint(path: str | Path) -> dict:
    """Load with weights_only=True: a pickle that names any code (a crafted file) is refused unrun."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(
            f"{path}: no checkpoint; train first with `mt train CONFIG --run-dir {path.parent}`"
        )
    damaged = RunDirError(f"{path}: damaged or not a checkpoint; delete it or train again")
    if not is_torch_zip(path):  # else torch's legacy reader decides, and its error differs by version
        raise damaged
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise RunDirError(
            f"{path}: refused: it holds objects other than tensors and plain data, which could "
            f"run code; only load checkpoints written by mt"
        ) from None
    except Exception:  # noqa: BLE001 - truncated or damaged inside
        raise damaged from None
    if isinstance(ckpt, dict) and "progress" in ckpt:
        ckpt["progress"] = current_progress(ckpt["progress"])
    found = problem(Checkpoint, ckpt)  # its metadata: every key mt reads, of the kind mt writes
    if found:
        raise RunDirError(f"{path}: damaged or not an mt checkpoint ({found}); delete it or train again")
    ckpt["separate_qkv"] = fuse_self_attention(ckpt["model"])  # written before the fused projection
    return ckpt


def fuse_self_attention(state: dict[str, torch.Tensor]) -> bool:
    """Rename a state dict written before self-attention's fused projection in place: each self_attn's
    q_proj and kv_proj rows, concatenated in that order (Q, then K, then V), are its qkv_proj, the same
    function with the same numbers; the keys keep their places. Returns whether there were any."""
    separate = [k[: -len("q_proj.weight")] for k in state if k.endswith("self_attn.q_proj.weight")]
    if not separate:
        return False
    renamed = {}
    for key, value in state.items():
        prefix, _, kind = key.rpartition(".")
        attention = prefix.rpartition(".")[0] + "."
        if attention not in separate or prefix.endswith("out_proj"):
            renamed[key] = value
        elif prefix.endswith(".q_proj"):
            renamed[f"{attention}qkv_proj.{kind}"] = torch.cat([value, state[f"{attention}kv_proj.{kind}"]])
    state.clear()
    state.update(renamed)
    return True


def fuse_adam_state(state: dict, model: Seq2Seq) -> dict:
    """Adam's state (`optimizer.state_dict()`, one parameter group) saved while self-attention had
    q_proj and kv_proj, for `model`'s fused qkv_proj: the parameters' order then was today's with each
    qkv_proj's (weight, bias) standing for q_proj's and kv_proj's (weight, bias, weight, bias), and
    Adam's moments, elementwise, concatenate as the weights do."""
    # as mt.training.session.learner
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    old = []
    for name in names:
        if name.endswith("self_attn.qkv_proj.weight"):
            old += [
                name.replace("qkv_proj.weight", f"{p}.{k}")
                for p in ("q_proj", "kv_proj")
                for k in ("weight", "bias")
            ]
        elif not name.endswith("self_attn.qkv_proj.bias"):
            old.append(name)
    index, moments = {name: i for i, name in enumerate(old)}, {}
    for i, name in enumerate(names):
        parts = [name.replace("qkv_proj", p) for p in ("q_proj", "kv_proj")] if "qkv_proj" in name else [name]
        found = [state["state"].get(index[part]) for part in parts]
        if all(found):
            moments[i] = {
                k: torch.cat([f[k] for f in found]) if found[0][k].dim() else found[0][k] for k in found[0]
            }
    (group,) = state["param_groups"]
    return {"state": moments, "param_groups": [{**group, "params": list(range(len(names)))}]}


def stored_config(ckpt: dict, path: Path, overrides: list[str] = (), decode: dict | None = None) -> RunConfig:
    """The checkpoint's config (keys newer than the checkpoint take their defaults), its decode section
    replaced by `decode` where given (the run's own: `folder.run_decoding`), with `overrides`."""
    try:
        config_from_dict(copy.deepcopy(ckpt["config"]))
    except ConfigError as e:  # written by another version of mt, or edited
        raise RunDirError(f"{path}: stored config is invalid: {e}") from None
    raw = copy.deepcopy(ckpt["config"])
    if decode is not None:
        raw["decode"] = copy.deepcopy(decode)
    return config_from_dict(apply_overrides(raw, list(overrides)))


def build_model(ckpt: dict, cfg: RunConfig, path: str | Path) -> Seq2Seq:
    """The checkpoint's weights in a model built from `cfg`; a mismatch is a one-line ConfigError."""
    model = Seq2Seq(cfg.model, ckpt["vocab_size"], ckpt["model"].get("output.ids"))
    expected, found = model.state_dict(), ckpt["model"]
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    reshaped = [k for k in expected if k in found and found[k].shape != expected[k].shape]
    problems = (
        ([f"{len(missing)} missing, e.g. {missing[0]}"] if missing else [])
        + ([f"{len(extra)} unexpected, e.g. {extra[0]}"] if extra else [])
        + (
            [
                f"{len(reshaped)} of another shape, e.g. {reshaped[0]} {tuple(found[reshaped[0]].shape)} "
                f"instead of {tuple(expected[reshaped[0]].shape)}"
            ]
            if reshaped
            else []
        )
    )
    if problems:
        raise RunDirError(
            f"{path}: weights do not fit the model its config describes ({'; '.join(problems)}); "
            f"the checkpoint comes from an incompatible config"
        )
    model.load_state_dict(found)
    return model
