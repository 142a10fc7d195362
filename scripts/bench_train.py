"""Training throughput, measured so that rows can be compared: source+target non-pad tokens/s of `mt train`'s
update for every (config, precision, switch, model) row, each run in a process of its own.

    python scripts/bench_train.py configs/base.yaml configs/multi30k.yaml --repeats 3 \\
        [--precisions fp32 bf16] [--models mt reference] [--switches eager compile] [--device cuda] \\
        [--steps 40] [--profile] [--probe] [--set key=value]

How a row is timed: the config's bench corpus (the sentences of the first --steps batches of an epoch,
made once here and shared by every row) is planned into an epoch of token-budget batches; every batch
shape of that epoch gets one untimed update (warming caches, cuDNN plans and compiled graphs), then
the whole epoch is timed as `mt train` runs it: batches padded and (on a GPU) pinned by the prefetch
thread of mt.batching.BatchStream, `train.accumulate` batches an update, mt.training.step.train_step. Rows run
in alternating order (A B C, C B A, ...) --repeats times; the table gives each row's median, its
min-max and spread ((max - min) / median).

`--models reference` adds the same step on torch.nn.Transformer with the same sizes (scripts/reference.py):
mt / reference is the table's `vs ref`. Model FLOPs (6 per multiply-add of every matmul a token passes
through, attention included, forward and backward) over time is `TFLOP/s`; `MFU` divides it by the
GPU's dense peak at that precision where this script knows the GPU, and `of probe` by `--probe`'s
matmuls of the model's own shapes at that precision. `--profile` runs, in processes of their own, the
aten ops and casts of one update and (CUDA) the share of an update's wall time the GPU is busy.

Precisions default to those the device runs natively (an emulated one measures the emulation). A
corpus: synthetic config (configs/base.yaml) needs no download and no tokenizer: its ids are drawn by
mt.generated.synthetic.piece_pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # mt from this checkout, installed or not

from train_profile import family_table, labelled, op_families  # noqa: E402

import mt.training.loss  # noqa: E402
from mt.batching import Pairs  # noqa: E402
from mt.config import load_config  # noqa: E402
from mt.devices import native_precisions, resolve_device, set_precision  # noqa: E402
from mt.generated import synthetic  # noqa: E402
from mt.model import Seq2Seq  # noqa: E402
from mt.output_pieces import target_pieces  # noqa: E402
from mt.training import corpus  # noqa: E402
from mt.training.compute import forward_multiply_adds  # noqa: E402
from mt.training.epochs import BatchStream, epoch_plan, widened  # noqa: E402
from mt.training.step import inverse_sqrt_lr, train_step  # noqa: E402

# dense tensor-core (fp32: CUDA-core) peaks in TFLOP/s, from NVIDIA's data sheets; by device name
PEAKS = {
    "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
    "H100": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
}
# compile: torch.compile(model, dynamic=True); layers: each encoder and decoder layer compiled alone
# (dynamic=True), the embeddings, the output projection and the loss eager; loss: the model eager, the
# label-smoothed loss (mt.training.loss.label_smoothed_loss, forward and backward) compiled; cudnn: SDPA
# may use cuDNN; bf16w (bf16 rows, issue 94's casts lever, not in mt): no autocast, the update computed by
# a bf16 copy of the model, refreshed from the fp32 weights once an update; its gradients cast to fp32 for
# Adam's step
SWITCHES = ["eager", "compile", "layers", "loss", "cudnn", "bf16w"]


def bench_pairs(cfg, steps: int) -> tuple[Pairs, int, torch.Tensor]:
    """The sentences of the first `steps` batches of epoch 1, the vocabulary size, and the pieces of
    the whole corpus's targets (model.output_pieces: target), as `mt train` counts them."""
    if cfg.data.corpus == "synthetic":
        vocab_size = cfg.tokenizer.vocab_size
        n = max(1000, steps * cfg.train.max_tokens // 40)  # ~60 tokens a pair: more than enough
        pairs = Pairs.of(*synthetic.piece_pairs(n, vocab_size, cfg.train.seed))
    else:
        tokenizer, total, _ = corpus.learn_tokenizer(cfg)  # what `mt train` does: BPE, binarized pairs
        pairs = corpus.training_pairs(cfg.data, corpus.prepare(cfg.data, tokenizer, total))
        vocab_size = tokenizer.vocab_size
    plan = epoch_plan(pairs, cfg.train.max_tokens, cfg.train.seed, 1)
    rows = torch.cat([plan.rows(j) for j in range(min(steps, len(plan)))])
    return pairs.subset(rows), vocab_size, target_pieces([pairs.tgt], vocab_size)


def build(cfg, row: dict, vocab_size: int, pieces: torch.Tensor, device: torch.device):
    """The row's model, its optimizer and grad scaler, as mt.training.session.learner makes them."""
    torch.manual_seed(cfg.train.seed)
    if row["model"] == "reference":
        from reference import ReferenceSeq2Seq

        model = ReferenceSeq2Seq(cfg.model, vocab_size)
    else:
        model = Seq2Seq(cfg.model, vocab_size, pieces if cfg.model.output_pieces == "target" else None)
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98), eps=1e-9, fused=True)
    if row["switch"] == "compile":
        model = torch.compile(model, dynamic=True)
    elif row["switch"] == "layers":
        for layer in [*model.encoder, *model.decoder]:
            layer.compile(dynamic=True)
    elif row["switch"] == "loss":  # batch_loss looks the function up at each call: this process only
        mt.training.loss.label_smoothed_loss = torch.compile(
            mt.training.loss.label_smoothed_loss, dynamic=True
        )
    set_precision(device, row["precision"])  # as `mt train`: cuDNN's attention off ...
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(row["switch"] == "cudnn")  # ... unless that is the switch
    scaler = torch.amp.GradScaler("cuda", enabled=row["precision"] == "fp16")
    return model, optimizer, scaler


def warm(step, pairs: Pairs, stream: BatchStream) -> float:
    """One update on each batch shape of epoch 1; returns the seconds spent."""
    start, plan, seen = time.perf_counter(), stream.plan(1), set()
    for j in range(len(plan)):
        batch = widened(pairs.batch(plan.rows(j)), *stream.pad_to)
        shape = (*batch.src.shape, batch.tgt_in.size(1))
        if shape not in seen:
            seen.add(shape)
            step([batch.pin_memory() if stream.pin else batch])
    return time.perf_counter() - start


def child(row: dict) -> dict:
    """Time one row (in this process): warm every shape, then epoch 1 as `mt train` runs it."""
    cfg = load_config(row["config"], row["sets"])
    cfg = replace(cfg, train=replace(cfg.train, precision=row["precision"]))
    device = resolve_device(row["device"])
    saved = torch.load(row["pairs"])
    pairs, vocab_size = Pairs.of(*saved["pairs"]), saved["vocab_size"]
    model, optimizer, scaler = build(cfg, row, vocab_size, saved["target_pieces"], device)
    stream = BatchStream.training(pairs, cfg, device)
    calls = iter(range(10**9))

    def step(batches):
        lr = inverse_sqrt_lr(next(calls) + 1, cfg.train.lr, cfg.train.warmup_steps)
        return train_step(model, optimizer, batches, cfg.train, lr, scaler=scaler, device=device)

    if row["switch"] == "bf16w":
        if row["precision"] != "bf16":
            return {"error": "bf16w is a bf16 row"}
        step = bf16_weights_step(model, optimizer, cfg.train, calls)

    if row.get("profile"):  # labelled while warming too: a compiled model then has no cause to recompile
        with labelled():
            warm(step, pairs, stream)
            return profile(step, pairs, stream, device)
    warm_s = warm(step, pairs, stream)
    plan, position, tokens, updates = stream.plan(1), (1, 0), 0, 0
    start = time.perf_counter()
    while position[1] < len(plan) and position[0] == 1:
        batches, *position = stream.take(*position, cfg.train.accumulate)
        stats = step(batches)  # its one host sync per update ends the update's GPU work too
        tokens, updates = tokens + stats.tokens, updates + 1
    seconds = time.perf_counter() - start
    output_size = getattr(model, "output_size", vocab_size)  # the reference scores every piece
    flops = (
        2 * 3 * forward_multiply_adds(cfg.model, output_size, pairs.src_len, pairs.tgt_len)
    )  # 2 FLOPs each
    return {
        "tokens_per_s": tokens / seconds,
        "tflops": flops / seconds / 1e12,
        "updates": updates,
        "seconds": seconds,
        "warm_s": warm_s,
        "last_loss_per_token": stats.loss / max(stats.target_tokens, 1),
        "peak_gpu_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        **compiled(),
    }


def bf16_weights_step(model, optimizer, cfg, calls):
    """Issue 94's casts lever, measured before it is built into mt: the forward and backward run on a bf16
    copy of `model` with no autocast (attention in fp32, as mt runs it on a CPU), the copy refreshed from
    the fp32 weights before each update and its gradients cast to fp32 for the optimizer: one cast of
    each weight each way an update, none per use."""
    import copy

    import mt.model
    from mt.training.step import StepStats, batch_loss

    shadow = copy.deepcopy(model).to(torch.bfloat16)
    plain_attend = mt.model.attend

    def attend(q, k, v, mask, dropout_p, causal):  # torch's bf16 SDPA is slow on CPUs: fp32, as mt does
        if q.dtype != torch.bfloat16:
            return plain_attend(q, k, v, mask, dropout_p, causal)
        return plain_attend(q.float(), k.float(), v.float(), mask, dropout_p, causal).to(torch.bfloat16)

    mt.model.attend = attend
    pairs_of = list(zip(shadow.parameters(), model.parameters()))

    def step(batches):
        lr = inverse_sqrt_lr(next(calls) + 1, cfg.lr, cfg.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.no_grad():
            for low, high in pairs_of:
                low.copy_(high)
        weight, total, tokens = 1 / sum(b.ntokens for b in batches), torch.zeros(2, dtype=torch.float64), 0
        for batch in batches:
            loss, nll = batch_loss(shadow, batch, cfg.label_smoothing)
            (loss * weight).backward()
            total += torch.stack([loss.detach(), nll.detach()]).double()
            tokens += batch.ntokens + int(batch.src_mask.sum())
        for low, high in pairs_of:
            high.grad, low.grad = low.grad.float(), None
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm or math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum, nll_sum = total.tolist()
        return StepStats(loss_sum, nll_sum, sum(b.ntokens for b in batches), tokens, True, False, False)

    return step


def compiled() -> dict:
    """What torch.compile made in this process: graphs (a recompile is one more), and graph breaks."""
    from torch._dynamo.utils import counters

    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
    }


def profile(step, pairs: Pairs, stream: BatchStream, device: torch.device) -> dict:
    """aten ops and casts (aten._to_copy) of one update; then, over five updates, the GPU-busy share
    (CUDA) or the share of the wall time each op family takes (CPU: scripts/train_profile.py)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func.overloadpacket)] = self.ops.get(str(func.overloadpacket), 0) + 1
            return func(*args, **(kwargs or {}))

    batches, _, _ = stream.take(1, 0, 6)
    # the families first: the counting mode below dispatches every op in Python, which torch.compile's
    # guards see (a compiled model counts as eager)
    found = {"families": op_families(step, batches[1:])} if device.type == "cpu" else {}
    with Count() as counted:
        step(batches[:1])
    found |= {"aten_ops": sum(counted.ops.values()), "casts": counted.ops.get("aten._to_copy", 0)}
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for batch in batches[1:]:
                step([batch])
            torch.cuda.synchronize(device)
            wall_us = (time.perf_counter() - start) * 1e6
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        found["gpu_busy"] = round(sum(e.time_range.elapsed_us() for e in kernels) / wall_us, 3)  # one stream
    return found


def probe(row: dict) -> dict:
    """TFLOP/s of the model's own matmuls at the row's precision: (tokens of a batch, D) times each weight
    shape (q/k/v, output, feed-forward in and out, vocabulary), each timed for about 0.2 s."""
    cfg = load_config(row["config"], row["sets"])
    device, precision, m = resolve_device(row["device"]), row["precision"], cfg.model
    set_precision(device, precision)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    M, D, F = cfg.train.max_tokens, m.d_model, m.d_ff
    shapes = [(D, 3 * D), (D, D), (D, F), (F, D), (D, row["vocab_size"])]
    flops = seconds = 0.0
    for k, n in shapes:
        a, b = torch.randn(M, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        repeats, spent = 1, 0.0
        while spent < 0.2:
            repeats *= 2
            start = time.perf_counter()
            for _ in range(repeats):
                a @ b
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            spent = time.perf_counter() - start
        flops, seconds = flops + 2 * M * k * n * repeats, seconds + spent
    return {"probe_tflops": flops / seconds / 1e12}


def run_child(row: dict, seconds: float) -> dict:
    """`row` measured in a fresh process; its result, or {"error": ...} naming what went wrong."""
    cmd = [sys.executable, __file__, "--child", json.dumps(row)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"over {seconds:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def peak(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((p[precision] for key, p in PEAKS.items() if key in name), None)


def summary(row: dict, results: list[dict], extra: dict, device: torch.device) -> dict:
    """A row's median, min-max and spread over its repeats, with its FLOP rates."""
    ok = [r for r in results if "tokens_per_s" in r]
    keys = ("config", "precision", "switch", "model")
    if not ok:
        return {**{k: row[k] for k in keys}, "error": results[-1].get("error")}
    rates, last = [r["tokens_per_s"] for r in ok], ok[-1]
    median, tflops = statistics.median(rates), statistics.median(r["tflops"] for r in ok)
    top = peak(device, row["precision"])
    return {
        **{k: row[k] for k in keys},
        "tokens_per_s": round(median, 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "spread": round((max(rates) - min(rates)) / median, 4),
        "repeats": len(rates),
        "updates": last["updates"],
        "warm_s": round(last["warm_s"], 1),
        "graphs": last.get("graphs"),
        "graph_breaks": last.get("graph_breaks"),
        "tflops": float(f"{tflops:.4g}"),  # significant digits: a tiny model runs at 0.000x
        "mfu": None if top is None else round(tflops / top, 4),
        "of_probe": round(tflops / extra["probe_tflops"], 4) if "probe_tflops" in extra else None,
        "peak_gpu_gib": last["peak_gpu_gib"] and round(last["peak_gpu_gib"], 2),
        **{k: extra[k] for k in ("aten_ops", "casts", "gpu_busy", "families") if k in extra},
    }


COLUMNS = (
    "config precision switch model tokens/s min-max spread vs-ref TFLOP/s MFU of-probe ops casts GPU-busy "
    "warm-s graphs"
)


def table(rows: list[dict]) -> str:
    """The summaries as markdown, with mt / reference where both models ran."""
    ref = {(r["config"], r["precision"], r["switch"]): r for r in rows if r.get("model") == "reference"}
    lines = ["| " + " | ".join(COLUMNS.split()) + " |", "|---" * len(COLUMNS.split()) + "|"]
    for r in rows:
        cells = [Path(r["config"]).stem, r["precision"], r["switch"], r["model"]]
        if "error" in r:
            lines.append("| " + " | ".join(cells + [r["error"]]) + " |")
            continue
        other = ref.get((r["config"], r["precision"], r["switch"]))
        against = other is not None and other is not r and "error" not in other  # not the reference itself
        vs = f"{r['tokens_per_s'] / other['tokens_per_s']:.2f}" if against else ""
        cells += [
            f"{r['tokens_per_s']:,.0f}",
            f"{r['min']:,.0f}-{r['max']:,.0f}",
            f"{100 * r['spread']:.1f}%",
            vs,
        ]
        cells += [r["tflops"], r["mfu"], r["of_probe"], r.get("aten_ops"), r.get("casts"), r.get("gpu_busy")]
        cells += [r["warm_s"], r.get("graphs")]
        lines.append("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def rows_of(args, device: torch.device, folder: Path) -> list[dict]:
    """Every (config, precision, switch, model) row, each config's bench corpus saved for its children."""
    rows = []
    for i, path in enumerate(args.configs):
        cfg = load_config(path, args.set)
        pairs, vocab_size, pieces = bench_pairs(cfg, args.steps)
        saved = folder / f"pairs{i}.pt"
        # int32: torch 2.4 cannot pickle uint16 tensors (the bench's few thousand pairs: no memory to save)
        arrays = tuple(t.int() for t in (pairs.src, pairs.tgt, pairs.src_len, pairs.tgt_len))
        torch.save({"pairs": arrays, "vocab_size": vocab_size, "target_pieces": pieces}, saved)
        for precision in args.precisions or native_precisions(device):
            for switch in args.switches:
                for model in args.models:
                    rows.append(
                        {
                            **{"config": path, "sets": args.set, "device": str(device)},
                            **{"precision": precision, "switch": switch, "model": model},
                            **{"pairs": str(saved), "vocab_size": vocab_size},
                        }
                    )
    return rows


def measure(args, rows: list[dict], device: torch.device) -> list[dict]:
    """Each row --repeats times in alternating order, then its profile and probe processes; summaries."""
    deadline = time.monotonic() + 60 * args.minutes

    def within_deadline(row: dict) -> dict:
        left = deadline - time.monotonic()
        return run_child(row, min(args.child_seconds, left)) if left > 1 else {"error": "out of --minutes"}

    results: list[list[dict]] = [[] for _ in rows]
    for repeat in range(args.repeats):
        order = range(len(rows)) if repeat % 2 == 0 else reversed(range(len(rows)))
        for i in order:
            results[i].append(within_deadline(rows[i]))
            print(json.dumps({**rows[i], **results[i][-1]}), file=sys.stderr, flush=True)
    summaries, probes = [], {}
    for row, found in zip(rows, results):
        extra = within_deadline({**row, "profile": True}) if args.profile else {}
        key = (row["config"], row["precision"])
        if args.probe and key not in probes:
            probes[key] = within_deadline({**row, "probe": True})
        summaries.append(summary(row, found, {**extra, **probes.get(key, {})}, device))
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*")
    parser.add_argument("--precisions", nargs="+", help="default: those the device runs natively")
    parser.add_argument("--switches", nargs="+", default=["eager"], choices=SWITCHES)
    parser.add_argument("--models", nargs="+", default=["mt"], choices=["mt", "reference"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="batches in the bench corpus's epoch")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--profile", action="store_true", help="ops, casts and GPU-busy share, apart")
    parser.add_argument("--probe", action="store_true", help="matmuls of the model's shapes, apart")
    parser.add_argument("--minutes", type=float, default=30.0, help="bounds the whole bench")
    parser.add_argument("--child-seconds", type=float, default=600.0, help="bounds each process")
    parser.add_argument("--out", help="also write the summaries here as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row = json.loads(args.child)
        print(json.dumps(probe(row) if row.get("probe") else child(row)))
        return
    device = resolve_device(args.device)
    print(json.dumps({"device": str(device), "native_precisions": native_precisions(device)}), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        summaries = measure(args, rows_of(args, device, Path(folder)), device)
    for s in summaries:
        print(json.dumps(s), flush=True)
    print(table(summaries))
    print(family_table(summaries))
    if args.out:
        Path(args.out).write_text(json.dumps(summaries, indent=1) + "\n")


if __name__ == "__main__":
    main()
