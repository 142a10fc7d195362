"""Seeds: every seed mt derives from a config's seed (train.seed, decode.seed), by one rule.

`derived_seed(seed, *keys)` folds the keys into the seed, each step `h * 1_000_003 + key`, and keeps the
result below 2**63 (torch's generators take a signed 64-bit seed). torch's CPU generator (mt19937) keeps
a seed's low 32 bits only; 1_000_003 is prime and odd, so within one step keys that differ by less than
2**32 give different low bits, and two seeds from different keys collide only by chance.

The keys, by who draws: binarizing's BPE-dropout (2 * chunk + side), an epoch's batch order (epoch),
a length group's ties within an epoch (the epoch's seed, group), sampling (line, part, draw), a
torchrun rank's dropout masks (rank).
"""

from __future__ import annotations

STEP = 1_000_003  # prime: a key's step moves every bit above its own


def derived_seed(seed: int, *keys: int) -> int:
    """`seed` with `keys` folded in (see the module's docstring); with no keys, `seed` itself."""
    for key in keys:
        seed = seed * STEP + key
    return seed % 2**63
