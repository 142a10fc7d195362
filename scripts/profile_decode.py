"""Where a decoding step's time goes: torch.profiler over a whole split, ops grouped by kind.

    python scripts/profile_decode.py --run runs/multi30k --beam 5

Prints one JSON line: wall seconds (under the profiler), decoder steps, rows decoded (the sum over
steps of the batch rows a step computes), ms per step, and the split of that time into matmuls,
attention, top-k, log-softmax, cache copies, other tensor ops and Python (wall time no op accounts
for). Then, with --table, torch's own top-20 table of ops by self CPU time. The decoding flags are
`mt translate`'s search options (torch on the CPU), but that --beam is 5 unless given.
"""

from __future__ import annotations

import argparse
import json

from measure import decoding_flags, open_run, split_of, timed
from torch.profiler import ProfilerActivity, profile

from mt.translate import SearchRequest, search_lines

KINDS = {  # profiler op name -> kind; ops not listed are "other ops"
    "matmul": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",),
    "top-k": ("aten::topk", "aten::sort", "aten::max"),
    "log-softmax": ("aten::_log_softmax", "aten::logsumexp"),
    "cache copies": (
        "aten::cat",
        "aten::index_select",
        "aten::index",
        "aten::gather",
        "aten::copy_",
        "aten::index_put_",
        "aten::index_copy_",
        "aten::repeat_interleave",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--split", default="test", choices=["test", "val"])
    parser.add_argument("--table", action="store_true")
    # what the profiler times is fixed: torch's ops, each line decoded whole
    decoding_flags(parser, skip=("n_best", "engine", "compute_type", "split_sentences"), beam=5)
    args = parser.parse_args()
    translator = open_run(args.run, args, engine="torch", device="cpu")
    tokenizer, model = translator.tokenizer, translator.model
    src, _ = split_of(translator, args.split)
    search_lines(
        SearchRequest(model, tokenizer, src[:50]), translator.decode
    )  # warm up allocator and kernels
    steps, rows = [0], [0]
    decode = model.decode

    def counted(tgt_in, *rest, **kw):
        steps[0] += 1
        rows[0] += tgt_in.size(0)
        return decode(tgt_in, *rest, **kw)

    def profiled() -> profile:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            search_lines(SearchRequest(model, tokenizer, src), translator.decode)
        return prof

    model.decode = counted
    wall, prof = timed(profiled)
    self_ms = {e.key: e.self_cpu_time_total / 1000 for e in prof.key_averages()}
    split = {kind: sum(self_ms.get(op, 0.0) for op in ops) for kind, ops in KINDS.items()}
    split["other ops"] = sum(self_ms.values()) - sum(split.values())
    split["python"] = 1000 * wall - sum(self_ms.values())
    print(
        json.dumps(
            {
                "beam": translator.decode.beam,
                "wall_s": round(wall, 2),
                "steps": steps[0],
                "rows": rows[0],
                "ms_per_step": round(1000 * wall / steps[0], 2),
                "split_ms_per_step": {k: round(v / steps[0], 2) for k, v in split.items()},
                "split_percent": {k: round(100 * v / (1000 * wall), 1) for k, v in split.items()},
            }
        )
    )
    if args.table:
        print(
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=45)
        )


if __name__ == "__main__":
    main()
