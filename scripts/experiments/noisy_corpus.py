"""How well data.clean finds noise: Multi30k's training pairs with noise of each kind injected at seeded
random places, written as a `files` corpus, binarized as `mt train` does, and the removed pairs compared
with what was injected.

    python scripts/experiments/noisy_corpus.py OUT --tokenizer runs/multi30k/spm.model \
        [--each 300] [--leaks 100]

OUT gets {train,val,test}.{de,en} (val and test: Multi30k's own) and injected.tsv (line, kind). Kinds:
duplicate (a pair repeated after its first place), empty (one side empty or blank), copy (the English
side on both sides), swapped (the sides exchanged: English source, German target), ratio (the target
three targets long) and leak (a test2016 pair). Prints one JSON line: per kind, injected and removed;
clean pairs removed; and the removed count per rule (as a run's card shows it). Set MT_CACHE_DIR to
keep the binarized folder out of the shared cache.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from mt.config import DataConfig
from mt.data import load_split
from mt.tokenizer import load_tokenizer
from mt.training import corpus

KINDS = ("duplicate", "empty", "copy", "swapped", "ratio")


def noise(kind: str, rng: random.Random, de: list[str], en: list[str], before: int) -> tuple[str, str]:
    """A noisy pair of `kind`; a duplicate repeats one of the first `before` clean pairs."""
    i = rng.randrange(len(de))
    if kind == "duplicate":
        j = rng.randrange(max(before, 1))
        return de[j], en[j]
    if kind == "empty":
        return (de[i], rng.choice(["", "  "])) if rng.random() < 0.5 else (rng.choice(["", " \t"]), en[i])
    if kind == "copy":
        return en[i], en[i]
    if kind == "swapped":
        return en[i], de[i]
    return de[i], " ".join(en[rng.randrange(len(en))] for _ in range(3))


def build(out: Path, each: int, leaks: int, seed: int) -> list[tuple[int, str]]:
    """Write the noisy corpus; returns (line number, kind) of each injected pair."""
    cfg = DataConfig()
    de, en = load_split(cfg, "train")
    test_de, test_en = load_split(cfg, "test")
    rng = random.Random(seed)
    kinds = [k for k in KINDS for _ in range(each)] + ["leak"] * leaks
    total = len(de) + len(kinds)
    places = sorted(rng.sample(range(total), len(kinds)))
    rng.shuffle(kinds)
    noisy_at = dict(zip(places, kinds))
    pairs, injected, clean = [], [], iter(zip(de, en))
    leaked = iter(rng.sample(range(len(test_de)), leaks))
    for line in range(total):
        kind = noisy_at.get(line)
        if kind is None:
            pairs.append(next(clean))
            continue
        if kind == "leak":
            t = next(leaked)
            pairs.append((test_de[t], test_en[t]))
        else:
            pairs.append(noise(kind, rng, de, en, line - len(injected)))
        injected.append((line + 1, kind))
    out.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate(("de", "en")):
        (out / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
        for split, stem in (("val", "val"), ("test", "test")):
            lines = load_split(cfg, split)[side]
            (out / f"{stem}.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (out / "injected.tsv").write_text("".join(f"{n}\t{k}\n" for n, k in injected))
    return injected


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--tokenizer", required=True, help="an spm.model (a Multi30k run's)")
    p.add_argument("--each", type=int, default=300, help="pairs injected of each kind but leaks")
    p.add_argument("--leaks", type=int, default=100, help="test2016 pairs injected")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    injected = dict(build(args.out, args.each, args.leaks, args.seed))
    folder = corpus.prepare(DataConfig(corpus="files", dir=str(args.out)), load_tokenizer(args.tokenizer))
    removed = {int(n): rule for n, rule in (line.split("\t") for line in (folder / "removed.tsv").open())}
    meta = json.loads((folder / "meta.json").read_text())
    by_kind = {
        kind: {
            "injected": n,
            "removed": sum(1 for line, k in injected.items() if k == kind and line in removed),
        }
        for kind, n in Counter(injected.values()).items()
    }
    clean_total = meta["pairs"] + meta["dropped"] - len(injected)
    clean_removed = Counter(rule.strip() for line, rule in removed.items() if line not in injected)
    found = sum(k["removed"] for k in by_kind.values())
    report = {
        "injected": len(injected),
        "injected_removed": found,
        "injected_removed_pct": round(100 * found / len(injected), 2),
        "clean": clean_total,
        "clean_removed": sum(clean_removed.values()),
        "clean_removed_pct": round(100 * sum(clean_removed.values()) / clean_total, 3),
        "clean_removed_by_rule": dict(clean_removed),
        "by_kind": by_kind,
        "removed_by_rule": meta["removed"],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
