"""Decoding speed of a trained run, cached against uncached, in one process on the same inputs.

    python scripts/bench_decode.py --run runs/multi30k --split test --beam 5
    python scripts/bench_decode.py --run runs/multi30k --beam 5 --engine ctranslate2 --compute-type int8

Prints one JSON line: sentences, beam, seconds, sentences_per_s, tokens_per_s (output pieces, eos
included, per second), BLEU, and the same timing for decoding that re-runs the decoder over the whole
prefix at every step (uncached_seconds, speedup_vs_uncached). Tokenization and batching are inside
the timed part, model loading is not. The decoding flags are `mt translate`'s, but that --beam is 1,
--engine torch and --compute-type default unless given (not the run's decode section). The search
asks for text only, as `mt translate` does for the 1-best (CTranslate2's greedy then computes no
scores); --with-scores asks for the scores too, as an n-best list or the HTTP API does. With --mbr or
--rerank the line adds the whole choice's time (chosen_seconds, chosen_sentences_per_s, chosen_bleu) and
its ratio to the search alone (the beam that makes the pool, timed above; --skip-uncached saves time):

    python scripts/bench_decode.py --run runs/multi30k --beam 5 --mbr chrf --mbr-samples 8 --skip-uncached
"""

from __future__ import annotations

import argparse
import json

import torch
from measure import decoding_flags, open_run, scores, split_of, timed

from mt.ct2.engine import Ct2Model
from mt.run.names import evaluation_name
from mt.translate import SearchRequest, search_lines, text_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--split", default="test", choices=["test", "val"])
    parser.add_argument("--skip-uncached", action="store_true")
    parser.add_argument("--with-scores", action="store_true", help="ask the engine for scores too")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--ct2-threads", help="ctranslate2's layout TRANSLATORSxTHREADS, e.g. 1x2 (default: 2x1)"
    )
    # split_sentences: search_lines decodes each line whole
    decoding_flags(parser, skip=("n_best", "split_sentences"), beam=1, engine="torch", compute_type="default")
    args = parser.parse_args()
    torch_threads = torch.get_num_threads()  # before CTranslate2 sets OpenMP's for its translators
    translator = open_run(args.run, args, device=args.device)
    tokenizer, model, device, decode = (
        translator.tokenizer,
        translator.searcher,
        translator.device,
        translator.decode,
    )
    if args.ct2_threads:
        layout = tuple(int(n) for n in args.ct2_threads.split("x"))
        model = Ct2Model(model.folder, translator.model, tokenizer, decode, device, layout)
    src, ref = split_of(translator, args.split)

    def search(lines: list[str], use_cache: bool = True) -> list:
        searched = model if args.with_scores else text_only(model)
        return search_lines(
            SearchRequest(searched, tokenizer, lines), decode, use_cache=use_cache
        )  # on the model's device

    timed(lambda: search(src[:50]), device)  # warm up allocator and kernels
    seconds, found = timed(lambda: search(src), device)
    hyps = [h[0].tokens for h in found]
    result = {
        "run": args.run,
        "split": args.split,
        "sentences": len(src),
        "beam": decode.beam,
        "engine": decode.engine,
        "compute_type": decode.compute_type,
        "batch_tokens": decode.batch_tokens,
        "with_scores": args.with_scores,
        "device": str(device),
        "threads": torch_threads if decode.engine == "torch" else "x".join(map(str, model.threads)),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(src) / seconds, 1),
        "tokens_per_s": round(sum(len(h) + 1 for h in hyps) / seconds, 1),
        "bleu": scores(tokenizer.decode(hyps), ref, translator)["bleu"],
    }
    if not args.skip_uncached and decode.engine == "torch":
        uncached_seconds, uncached = timed(lambda: search(src, use_cache=False), device)
        result.update(
            {
                "uncached_seconds": round(uncached_seconds, 3),
                "speedup_vs_uncached": round(uncached_seconds / seconds, 2),
                "uncached_same_output": [h[0].tokens for h in uncached] == hyps,
            }
        )
    if decode.mbr or decode.rerank:
        result.update(chosen_timing(translator, src, ref, seconds))
    print(json.dumps(result), flush=True)


def chosen_timing(translator, src: list[str], ref: list[str], search_seconds: float) -> dict:
    """With --mbr or --rerank: the whole choice (the pool's search, samples, utilities or the reverse
    runs' scores) timed on the same lines, beside the search alone that the rest of the line times."""
    seconds, hyps = timed(lambda: translator.translate(src), translator.device)
    return {
        "chosen": evaluation_name("", translator.decode),
        "chosen_seconds": round(seconds, 3),
        "chosen_sentences_per_s": round(len(src) / seconds, 1),
        "chosen_bleu": scores(hyps, ref, translator)["bleu"],
        "chosen_vs_search": round(seconds / search_seconds, 2),
    }


if __name__ == "__main__":
    main()
