"""Issue 104: a run's greedy, beam 5, n-best and seeded sampling hypotheses (texts and scores) on a split,
written as JSON, so that two checkouts' searches can be compared byte for byte:

    cd /tmp && PYTHONPATH=/path/to/checkout python /path/to/checkout/scripts/experiments/bitwise_search.py \
        --run runs/multi30k --split test --out before.json
    cmp before.json after.json

Through the Python API only (`Translator.nbest`), which both sides of a refactoring keep.
"""

import argparse
import json

from mt.data import load_split
from mt.translator import Translator

SETTINGS = {
    "greedy": {"beam": 1},
    "beam5": {"beam": 5, "length_penalty": 1.0},
    "nbest5": {"beam": 5, "n_best": 5, "length_penalty": 1.0},
    "sample": {"sample": "topk:10", "seed": 3, "n_best": 2},
    "tuned": {},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    translator = Translator.from_run(args.run, device="cpu")
    src, _ = load_split(translator.config.data, args.split)
    found = {name: translator.nbest(src, **options) for name, options in SETTINGS.items()}
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(
            {name: [[[t, repr(s)] for t, s in line] for line in lines] for name, lines in found.items()}, out
        )


if __name__ == "__main__":
    main()
