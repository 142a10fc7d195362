"""Corpus metrics: every score that evaluation, validation, the run card and `mt report` show, each
with its sacreBLEU signature, on sacreBLEU's 0-100 scale. A new metric is one entry in METRICS.

Each is scored on cased, detokenized text against one or more reference streams, line-aligned with
the hypotheses (and the sources, for a metric that reads them). A result stores KEY and KEY_signature
for every metric; validation logs val_KEY, `train.best_metric` may follow any headline one, and `mt
report` tests the significance of the headline ones only, each in its own direction. sacreBLEU is
imported when a metric is made, so that the config can name the metrics without loading it.

BLEU's tokenizer (eval.bleu_tokenize) is the target language's (mt.plumbing.script.bleu_tokenizer)
unless the config names one; every BLEU signature shows it (tok:zh).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable

from mt.plumbing.script import words

if TYPE_CHECKING:
    from sacrebleu.metrics.base import Metric as SacreMetric


class RepeatedNgrams:
    """The lines whose translation repeats a word n-gram ("the the the", a phrase repeated up to the
    length limit): degenerate output, counted so that nobody has to read for it. Words are
    mt.plumbing.script's: in Chinese or Japanese text, characters. sacreBLEU's interface:
    `corpus_score(...).score` and `get_signature()`."""

    def __init__(self, n: int):
        self.n = n

    def corpus_score(
        self, hypotheses: list[str], references: list[list[str]], sources=None
    ) -> SimpleNamespace:
        return SimpleNamespace(score=float(sum(repeats(words(line), self.n) for line in hypotheses)))

    def get_signature(self) -> str:
        return f"lines|words|n:{self.n}"


def repeats(tokens: list, n: int) -> bool:
    """Whether some n-gram of `tokens` occurs twice."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def bleu(tokenize: str, **options) -> SacreMetric:
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize, **options)


def chrf() -> SacreMetric:
    from sacrebleu.metrics import CHRF

    return CHRF()


@dataclass(frozen=True)
class Metric:
    key: str  # the result's field (its signature: KEY_signature); validation logs val_KEY
    label: str  # how a report names it
    make: Callable[[str], SacreMetric]  # a fresh sacreBLEU metric (they keep state), or one of its shape,
    # given BLEU's tokenizer (the metrics that tokenize words read it)
    headline: bool = True  # validated, may pick best.pt, tested for significance in `mt report`
    note: str = ""  # what a report says beside a metric that is not a headline
    higher_is_better: bool = True  # its direction: report's verdicts and train.best_metric follow it
    reads_sources: bool = False  # its corpus_score takes sources= (the lines translated) too
    always: bool = False  # every result mt has written holds it; a result written before a later
    # metric existed lacks that one, and stays readable


METRICS = (
    Metric("bleu", "BLEU", bleu, always=True),  # 13a for most languages: what WMT and the papers report
    Metric("chrf", "chrF", lambda tokenize: chrf(), always=True),
    # lower-cased BLEU, to set beside papers that report lower-cased scores
    Metric(
        "bleu_lc",
        "BLEU lc",
        lambda tokenize: bleu(tokenize, lowercase=True),
        False,
        "lower-cased, not the headline",
    ),
    Metric(
        "repeated_4grams",
        "rep. 4-gram lines",
        lambda tokenize: RepeatedNgrams(4),
        False,
        "lines that repeat a word 4-gram",
        higher_is_better=False,
    ),
)
HEADLINE = tuple(m for m in METRICS if m.headline)
BY_KEY = {m.key: m for m in METRICS}
# The headline of the headlines, named here once: what tune chooses by, the report stars, the training
# log calls best, the curves plot, and train.best_metric follows unless told otherwise.
PRIMARY = BY_KEY["bleu"]
BEST_METRICS = (*(m.key for m in HEADLINE), "loss")  # what train.best_metric may follow: val loss or a score


def best_of(rows: list, score: Callable = lambda row: row[PRIMARY.key]) -> list:
    """The rows with the best PRIMARY score (`score(row)`), in its direction: ties share it."""
    top = (max if PRIMARY.higher_is_better else min)(map(score, rows))
    return [row for row in rows if score(row) == top]


def improves(key: str, score: float, best: float | None) -> bool:
    """Whether `score` of the metric `key` (or "loss", lower better) beats `best` (None: nothing yet)."""
    if best is None:
        return True
    higher = BY_KEY[key].higher_is_better if key != "loss" else False
    return score > best if higher else score < best


def label(key: str) -> str:
    """How a message names the metric `key` (or "loss")."""
    return BY_KEY[key].label if key in BY_KEY else key


def corpus_scores(
    hypotheses: list[str],
    *references: list[str],
    tokenize: str,
    sources: list[str] | None = None,
    metrics: tuple[Metric, ...] = (),
) -> dict:
    """Each metric's corpus score and signature, the sentence count, and the length ratio
    (hypothesis / reference tokens, BLEU's count, in `tokenize`'s tokens). Each of `references` is one
    reference stream; `sources` (line-aligned) go to the metrics that read them, which are left out
    without them; `tokenize` is BLEU's tokenizer, always named (`bleu_tokenizer` of the target language,
    a run's `config.bleu_tokenize`): 13a would score Chinese by whole sentences. `metrics`: these only
    (default: every one of METRICS, read at the call)."""
    scores, signatures, ratio = {}, {}, None
    for metric in metrics or METRICS:
        if metric.reads_sources and sources is None:
            continue
        scorer = metric.make(tokenize)
        given = {"sources": sources} if metric.reads_sources else {}
        result = scorer.corpus_score(hypotheses, list(references), **given)
        scores[metric.key] = result.score
        signatures[f"{metric.key}_signature"] = str(scorer.get_signature())
        if metric.key == "bleu":
            ratio = result.sys_len / max(result.ref_len, 1)
    return {**scores, **signatures, "sentences": len(hypotheses), "length_ratio": ratio}
