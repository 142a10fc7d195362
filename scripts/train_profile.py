"""Where an update's CPU time goes, by op family: the table `bench_train.py --profile` prints.

A helper of scripts/bench_train.py, not a script. torch.profiler records a few updates; each op's self
time goes to the family of its outermost op that names one: a forward aten op (`aten::addmm` is a
matmul, `aten::layer_norm` a norm), a backward node (`AddmmBackward0`, `NativeLayerNormBackward0`), the
optimizer's own record (`Optimizer.step#Adam.step`), or a label this file puts around mt's dropout, its
loss and the gradient clip for the profile only. Allocation (`aten::empty*`) is counted apart wherever
it happens, and so are casts: a change of dtype (`aten::_to_copy`, autocast's casts of inputs and
weights, and their backward `ToCopyBackward0`) is `casts` inside whatever op asked for it. What the
profiler does not see, the Python and dispatch between ops, is the updates' wall time less the time of
every top-level op: `python`. Under torch.compile the fused kernels record no op of their own: their
time is the compiled region's own, `compiled`, while the matmuls inside it (extern calls) are still
`matmul`.

The backward of dropout's multiply is an ordinary `MulBackward0`, counted under `elementwise` with the
residual adds, ReLU and the views.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Callable

import torch
from torch.autograd.profiler import record_function

import mt.model
import mt.training.loss

FAMILIES = [
    "matmul",
    "attention",
    "norms",
    "loss",
    "dropout",
    "embedding",
    "optimizer",
    "grad clip",
    "elementwise",
    "compiled",
    "casts",
    "allocation",
    "python",
]
RULES = [  # (pattern on an op, record or backward node name, family): the first match wins
    (r"SmoothedCrossEntropy", "loss"),
    (r"^Optimizer\.(step|zero_grad)", "optimizer"),
    (r"^aten::(linear|addmm|mm|bmm|matmul)$|^(Addmm|Mm|Bmm|Linear)Backward", "matmul"),
    (r"scaled_dot_product|ScaledDotProduct", "attention"),
    (r"layer_norm|LayerNorm", "norms"),
    (r"embedding|Embedding", "embedding"),
]
COMPILED = re.compile(r"^(Torch-Compiled Region|CompiledFunction|## Call CompiledFxGraph)")
LABELS = {"mt.training.loss": "loss", "mt.dropout": "dropout", "mt.grad_clip": "grad clip"}
ALLOCATION = re.compile(r"^aten::(empty|empty_like|empty_strided|resize_)$")
CASTS = re.compile(r"^aten::(_to_copy|to)$|^ToCopyBackward")
BACKWARD = "autograd::engine::evaluate_function: "


def family_of(name: str) -> str | None:
    """The family an op, record or backward node names, or None where it names none."""
    name = name.removeprefix(BACKWARD)
    if name in LABELS:
        return LABELS[name]
    for pattern, family in RULES:
        if re.search(pattern, name):
            return family
    return None


def in_cast(event) -> bool:
    """Whether `event` is, or runs inside, a change of dtype (autocast's casts and their backward)."""
    while event is not None:
        if CASTS.match(event.name.removeprefix(BACKWARD)):
            return True
        event = event.cpu_parent
    return False


def outermost_family(event) -> str:
    """The family of the outermost op above (or at) `event` that names one; else `compiled` inside a
    compiled region, `elementwise` outside."""
    chain = []
    while event is not None:
        chain.append(event.name.removeprefix(BACKWARD))
        event = event.cpu_parent
    if found := next((f for name in reversed(chain) if (f := family_of(name))), None):
        return found
    return "compiled" if any(COMPILED.match(name) for name in chain) else "elementwise"


@contextlib.contextmanager
def labelled():
    """mt's dropout, its loss and the gradient clip run inside records named for their families."""

    def wrap(function: Callable, label: str) -> Callable:
        def inside(*args, **kwargs):
            with record_function(label):
                return function(*args, **kwargs)

        return inside

    patched = [
        (mt.model.Dropout, "forward", "mt.dropout"),
        (mt.training.loss, "label_smoothed_loss", "mt.training.loss"),
        (torch.nn.utils, "clip_grad_norm_", "mt.grad_clip"),
    ]
    originals = [getattr(owner, name) for owner, name, _ in patched]
    for (owner, name, label), original in zip(patched, originals):
        setattr(owner, name, wrap(original, label))
    try:
        yield
    finally:
        for (owner, name, _), original in zip(patched, originals):
            setattr(owner, name, original)


def op_families(step: Callable, batches: list) -> dict[str, float]:
    """Share of the wall time of one update per batch in `batches` that each family takes (CPU). Call it
    inside `labelled()`, entered before the model's first update (a compiled model would recompile)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for batch in batches:
            step([batch])
        wall_us = (time.perf_counter() - start) * 1e6
    spent = dict.fromkeys(FAMILIES, 0.0)
    events = prof.events()
    for event in events:
        if ALLOCATION.match(event.name):
            family = "allocation"
        else:
            family = "casts" if in_cast(event) else outermost_family(event)
        spent[family] += event.self_cpu_time_total
    top_level = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    spent["python"] = max(0.0, wall_us - top_level)
    return {family: round(us / wall_us, 4) for family, us in spent.items()}


def family_table(summaries: list[dict]) -> str:
    """The rows that have a profile, as markdown: each family's share of the update, in percent."""
    rows = [s for s in summaries if "families" in s]
    if not rows:
        return ""
    lines = ["| row | " + " | ".join(FAMILIES) + " |", "|---" * (len(FAMILIES) + 1) + "|"]
    for s in rows:
        config = s["config"].rsplit("/", 1)[-1].removesuffix(".yaml")
        name = f"{config} {s['precision']} {s['switch']} {s['model']}"
        shares = [f"{100 * s['families'][f]:.1f}" for f in FAMILIES]
        lines.append(f"| {name} | " + " | ".join(shares) + " |")
    return "\n".join(lines)
