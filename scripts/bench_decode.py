"""Decoding speed of a trained run, cached against uncached, in one process on the same inputs.

    python scripts/bench_decode.py --run runs/multi30k --split test --beam 5
    python scripts/bench_decode.py --run runs/multi30k --beam 5 --engine ctranslate2 --compute-type int8

Prints one JSON line: sentences, beam, seconds, sentences_per_s, tokens_per_s (output pieces, eos
included, per second), BLEU, and the same timing for decoding that re-runs the decoder over the whole
prefix at every step (uncached_seconds, speedup_vs_uncached). Tokenization and batching are inside
the timed part, model loading is not.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from mt.ct2 import Ct2Model
from mt.data import load_split
from mt.metrics import corpus_scores
from mt.translate import search_lines
from mt.translator import Translator


def timed(model, tokenizer, lines, cfg, device: torch.device, use_cache: bool) -> tuple[float, list]:
    start = time.perf_counter()
    found = search_lines(model, tokenizer, lines, cfg, device, use_cache=use_cache)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--split", default="test", choices=["test", "val"])
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--batch-tokens", type=int)
    parser.add_argument("--skip-uncached", action="store_true")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"])
    parser.add_argument("--compute-type", default="default", help="ctranslate2's, e.g. int8")
    parser.add_argument(
        "--ct2-threads", help="ctranslate2's layout TRANSLATORSxTHREADS, e.g. 1x2 (default: 2x1)"
    )
    args = parser.parse_args()
    torch_threads = torch.get_num_threads()  # before CTranslate2 sets OpenMP's for its translators
    translator = Translator.from_run(
        args.run,
        engine=args.engine,
        device=args.device,
        beam=args.beam,
        compute_type=args.compute_type,
        batch_tokens=args.batch_tokens,
    )
    cfg, tokenizer, model, device = (
        translator.config,
        translator.tokenizer,
        translator.searcher,
        translator.device,
    )
    decode = translator.decode
    if args.ct2_threads:
        layout = tuple(int(n) for n in args.ct2_threads.split("x"))
        model = Ct2Model(model.folder, translator.model, tokenizer, decode, device, layout)
    src, ref = load_split(cfg.data, args.split)
    timed(model, tokenizer, src[:50], decode, device, True)  # warm up allocator and kernels
    seconds, found = timed(model, tokenizer, src, decode, device, True)
    hyps = [h[0].tokens for h in found]
    result = {
        "run": args.run,
        "split": args.split,
        "sentences": len(src),
        "beam": args.beam,
        "engine": args.engine,
        "compute_type": args.compute_type,
        "batch_tokens": decode.batch_tokens,
        "device": str(device),
        "threads": torch_threads if args.engine == "torch" else "x".join(map(str, model.threads)),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(src) / seconds, 1),
        "tokens_per_s": round(sum(len(h) + 1 for h in hyps) / seconds, 1),
        "bleu": round(corpus_scores(tokenizer.decode(hyps), ref)["bleu"], 2),
    }
    if not args.skip_uncached and args.engine == "torch":
        uncached_seconds, uncached = timed(model, tokenizer, src, decode, device, False)
        result.update(
            {
                "uncached_seconds": round(uncached_seconds, 3),
                "speedup_vs_uncached": round(uncached_seconds / seconds, 2),
                "uncached_same_output": [h[0].tokens for h in uncached] == hyps,
            }
        )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
