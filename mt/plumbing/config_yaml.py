"""A config's YAML as plain mappings: the file read with its `base:` chain, and the `--set` overrides
applied, before mt.config types and checks them; and two such mappings flattened and compared.
Errors name the file, line or flag to fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mt.plumbing.errors import ConfigError

# What users of JoeyNMT and fairseq call some of our keys: "did you mean" hints for them.
ALIASES = {
    "learning_rate": "lr",
    "lr_warmup": "warmup_steps",
    "warmup": "warmup_steps",
    "batch_size": "max_tokens",
    "max_update": "max_steps",
    "beam_size": "beam",
    "nbest": "n_best",
    "num_layers": "layers",
    "hidden_size": "d_model",
    "embedding_dim": "d_model",
    "num_heads": "n_heads",
    "ff_size": "d_ff",
    "lenpen": "length_penalty",
    "alpha": "length_penalty",
    "update_freq": "accumulate",
}


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.path=value, e.g. train.lr=5e-4")
    key, text = item.split("=", 1)
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        value = text
    return key.strip().split("."), value


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply `key.path=value` strings to a raw config mapping (values parsed as YAML scalars)."""
    for item in overrides:
        keys, value = parse_override(item)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: '{k}' is not a section")
        node[keys[-1]] = value
    return raw


def read_yaml(path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config ({e})") from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, most control characters)
        raise ConfigError(
            f"{path}: character {e.position + 1} ({e.character!r}) is not allowed in YAML; save the "
            f"config as plain UTF-8 text"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} is not valid YAML ({getattr(e, 'problem', e)})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of sections, got {type(raw).__name__}")
    return raw


def merge(base: dict, child: dict) -> dict:
    """`child` on top of `base`, section by section."""
    merged = dict(base)
    for key, value in child.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = merge(merged[key], value) if both else value
    return merged


def read_with_bases(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """The file's mapping merged over the mappings of its `base:` chain."""
    if path.resolve() in chain:
        raise ConfigError(f"{path}: base: configs extend each other in a loop")
    raw = read_yaml(path)
    base = raw.get("base", "")
    if not base:
        return raw
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a path to another config, got {type(base).__name__}")
    base_path = path.parent / base
    inherited = read_with_bases(base_path, chain + (path.resolve(),))
    inherited.pop("name", None)
    return {**merge(inherited, raw), "base": str(base_path)}


def flatten(raw: dict, prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}."""
    flat = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        flat.update(flatten(value, path + ".") if isinstance(value, dict) else {path: value})
    return flat


def config_differences(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """{"key.path": (old value, new value)} for keys whose values differ; a key or section in
    `ignore` ("train.max_steps", "decode") is skipped. Keys missing on one side count as None."""
    a, b = flatten(old), flatten(new)
    skip = lambda key: any(key == i or key.startswith(i + ".") for i in ignore)  # noqa: E731
    return {
        k: (a.get(k), b.get(k))
        for k in sorted(set(a) | set(b), key=list({**a, **b}).index)
        if not skip(k) and a.get(k) != b.get(k)
    }
