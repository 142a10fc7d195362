"""Choosing a line's translation among candidates, after the search: minimum Bayes risk
(decode.mbr) and reranking by a model trained the other way (decode.rerank).

Both start from one pool per line: the beam's K finished hypotheses (K = decode.beam), and for MBR
also decode.mbr_samples translations drawn at decode.mbr_temperature (each line's draws seeded by
decode.seed and the line alone, as `--sample` draws are).

- MBR (Eikema & Aziz 2020; Freitag et al. 2022): each candidate's expected utility is its mean
  sentence chrF (or BLEU) against every member of the pool as a pseudo-reference, duplicates counted;
  the highest wins. The utility matrix is sacreBLEU's sentence score for every pair at once: the
  n-grams are sacreBLEU's own (`extract_all_char_ngrams`, its BLEU tokenizer), their matches one
  tensor operation per order (`matches`), so it equals `sacrebleu.sentence_chrf` / `sentence_bleu`.
- Reranking (the noisy channel of Yee et al. 2019, without a language model): each candidate y of a
  source x is ranked by log p(y|x) / length_penalty(|y| + 1, alpha) + weight * log p(x|y) / (|x| + 1):
  the beam's own score (|y| + 1: eos counted where written; a hypothesis cut at the length limit has
  none) plus the reverse runs' mean log-probability per source piece (eos counted), teacher-forced over
  all of a call's candidates at once (`mt score`'s path). Weight 0 ranks as the beam does, score for
  score. The reverse term is not divided by y's length penalty, as Yee et al.'s 1/|y| divides the
  sum: log p(x|y) is negative and longer candidates explain more of x, so that division rewards length
  twice (on Multi30k val it made every weight translate longer than the beam at the same length
  penalty: docs/decoding-choices).

The pools and the choice need only the core and `mt score`'s scoring: `mt tune --mbr --rerank RUN`
(mt.training.tuning) chooses among them on val, and decode.rerank's runs are opened where runs are
(mt.run.folder.open_reverse).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable

import torch

from mt.decode import length_penalty
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.rescoring.score import score_pairs
from mt.tokenizer import Tokenizer
from mt.translate import SearchRequest, as_written, search_lines, source_parts

CHRF_ORDER, CHRF_BETA, BLEU_ORDER = 6, 2, 4  # sacreBLEU's defaults: chrF (not chrF++) and BLEU
Reverse = list[tuple[Tokenizer, Seq2Seq]]  # the reverse runs' tokenizers and models


@dataclass
class Candidate:
    text: str
    logprob: float  # log p(y | x) under the forward model, eos included
    pieces: int  # the length its beam's length penalty counted: its pieces, and eos where written


def candidate_pool(src: SearchRequest, decode: DecodeConfig) -> list[list[Candidate]]:
    """Each line's candidates: its beam's hypotheses, then its MBR samples (`decode`'s pool)."""
    found = beam_pool(src, decode)
    if decode.mbr_samples:
        found = [beamed + sampled for beamed, sampled in zip(found, sample_pool(src, decode))]
    return found


def beam_pool(src: SearchRequest, decode: DecodeConfig) -> list[list[Candidate]]:
    """Each line's beam's decode.beam hypotheses, best first (greedy's one where decode.beam is 1)."""
    return _candidates(src, replace(decode, n_best=decode.beam, mbr="", mbr_samples=0, rerank=""))


def sample_pool(src: SearchRequest, decode: DecodeConfig) -> list[list[Candidate]]:
    """Each line's decode.mbr_samples draws at decode.mbr_temperature, in the order drawn (the first k
    of n draws are the k draws: each draw has its own seed)."""
    draw = replace(
        decode,
        beam=1,
        n_best=decode.mbr_samples,
        sample="topp:1",
        temperature=decode.mbr_temperature,
        mbr="",
        mbr_samples=0,
        rerank="",
    )
    return _candidates(src, draw)


def _candidates(src: SearchRequest, decode: DecodeConfig) -> list[list[Candidate]]:
    tokenizer, prefixes = src.tokenizer, src.prefixes
    found = search_lines(src, decode)
    pool = []
    for i, hyps in enumerate(found):
        texts = tokenizer.decode([h.tokens for h in hyps])
        texts = as_written(texts, [prefixes[i]] * len(texts), tokenizer) if prefixes else texts
        pool.append([Candidate(t, h.logprob, len(h.tokens) + h.ended) for t, h in zip(texts, hyps)])
    return pool


def matches(grams: list[Counter]) -> torch.Tensor:
    """(N, N) float64: the n-grams candidate i shares with candidate j (clipped counts), for N
    candidates' n-gram counts of one order."""
    vocab = {g: k for k, g in enumerate({g for counts in grams for g in counts})}
    counts = torch.zeros(len(grams), len(vocab), dtype=torch.float64)  # (N, G)
    for i, c in enumerate(grams):
        counts[i, [vocab[g] for g in c]] = torch.tensor(list(c.values()), dtype=torch.float64)
    return torch.minimum(counts[:, None], counts[None]).sum(-1)  # (N, N)


def chrf_matrix(texts: list[str]) -> torch.Tensor:
    """(N, N): sentence chrF of text i against text j as its reference (sacrebleu.sentence_chrf)."""
    from sacrebleu.metrics.helpers import extract_all_char_ngrams

    grams = [extract_all_char_ngrams(t, CHRF_ORDER) for t in texts]
    factor, eps = CHRF_BETA**2, 1e-16
    prec_sum = rec_sum = order = 0
    for n in range(CHRF_ORDER):
        matched = matches([g[n] for g in grams])  # (N, N)
        total = torch.tensor([sum(g[n].values()) for g in grams], dtype=torch.float64)  # (N,)
        hyp, ref = total[:, None], total[None, :]
        both = (hyp > 0) & (ref > 0)  # (N, N): the order counts (sacreBLEU's effective order)
        prec_sum = prec_sum + torch.where(both, matched / hyp.clamp(min=1), 0.0)
        rec_sum = rec_sum + torch.where(both, matched / ref.clamp(min=1), 0.0)
        order = order + both.double()
    prec, rec = prec_sum / order.clamp(min=1), rec_sum / order.clamp(min=1)  # 0 where no order counts
    f = (1 + factor) * prec * rec / (factor * prec + rec).clamp(min=eps)
    return 100 * torch.where(prec + rec > 0, f, 0.0)


def bleu_matrix(texts: list[str], tokenize: str) -> torch.Tensor:
    """(N, N): sentence BLEU of text i against text j as its reference (sacrebleu.sentence_bleu: exp
    smoothing, effective order, with the run's BLEU tokenizer)."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize=tokenize)
    words = [metric._preprocess_segment(t).split() for t in texts]
    length = torch.tensor([len(w) for w in words], dtype=torch.float64)  # (N,)
    logs, zero_orders = (torch.zeros(len(texts), len(texts), dtype=torch.float64) for _ in range(2))  # (N, N)
    any_match = torch.zeros_like(logs, dtype=torch.bool)
    for n in range(1, BLEU_ORDER + 1):
        matched = matches([Counter(tuple(w[i : i + n]) for i in range(len(w) - n + 1)) for w in words])
        total = (length - n + 1).clamp(min=0)[:, None]  # (N, 1): the hypothesis's n-grams
        zero_orders = zero_orders + ((matched == 0) & (total > 0))
        precision = torch.where(matched > 0, matched, 1 / 2**zero_orders) * 100 / total.clamp(min=1)
        logs = logs + torch.where(total > 0, precision.log(), 0.0)
        any_match |= matched > 0
    order = length.clamp(max=BLEU_ORDER).clamp(min=1)[:, None]  # (N, 1): effective order
    hyp, ref = length[:, None], length[None, :]
    brevity = torch.where(hyp < ref, (1 - ref / hyp.clamp(min=1)).exp(), 1.0)
    return torch.where(any_match & (hyp > 0), brevity * (logs / order).exp(), 0.0)


def expected_utilities(texts: list[str], utility: str, tokenize: str) -> list[float]:
    """Each candidate's mean utility against the whole pool (duplicates count as often as they occur;
    each distinct text is scored once)."""
    distinct = Counter(texts)
    unique = list(distinct)
    weights = torch.tensor([distinct[t] for t in unique], dtype=torch.float64)  # (U,)
    matrix = chrf_matrix(unique) if utility == "chrf" else bleu_matrix(unique, tokenize)  # (U, U)
    expected = dict(zip(unique, ((matrix @ weights) / weights.sum()).tolist()))
    return [expected[t] for t in texts]


def reverse_logprobs(
    reverse: Reverse, pool: list[list[Candidate]], lines: list[str], decode: DecodeConfig
) -> list[list[float]]:
    """log p(x | y) / (|x| + 1) of each candidate y given its line x (per piece of x, eos counted), the
    mean over the reverse models; -inf where a pair is longer than a reverse model's positions. Lines
    with one candidate are not scored (0)."""
    pairs = [(i, j) for i, cands in enumerate(pool) if len(cands) > 1 for j in range(len(cands))]
    found = [[0.0] * len(cands) for cands in pool]
    if not pairs:
        return found
    total = torch.zeros(len(pairs), dtype=torch.float64)
    lines_scored = sorted({i for i, _ in pairs})  # the lines with more than one candidate
    for tokenizer, model in reverse:
        src = tokenizer.encode([pool[i][j].text for i, j in pairs])
        encoded = dict(zip(lines_scored, tokenizer.encode_target([lines[i] for i in lines_scored])))
        tgt = [encoded[i] for i, _ in pairs]  # each line encoded once
        limit = model.cfg.max_positions - 1
        fits = [k for k in range(len(pairs)) if max(len(src[k]), len(tgt[k])) <= limit]
        device = next(model.parameters()).device
        results = score_pairs(model, [src[k] for k in fits], [tgt[k] for k in fits], decode, device)
        logprob = torch.full((len(pairs),), float("-inf"), dtype=torch.float64)
        logprob[fits] = torch.tensor(
            [s.logprob / len(s.token_logprobs) for s in results], dtype=torch.float64
        )
        total += logprob / len(reverse)
    for (i, j), value in zip(pairs, total.tolist()):
        found[i][j] = value
    return found


def channel_scores(
    pool: list[list[Candidate]], backward: list[list[float]], weight: float, alpha: float
) -> list[list[float]]:
    """Reranking's score of each candidate (see the module's docstring); weight 0 leaves out the reverse
    term even where it is -inf (a pair longer than the reverse model's positions), as the beam ranks."""
    return [
        [
            c.logprob / length_penalty(c.pieces, alpha) + (weight * b if weight else 0.0)
            for c, b in zip(cands, back)
        ]
        for cands, back in zip(pool, backward)
    ]


def ranked(
    pool: list[list[Candidate]], scores: list[list[float]], n_best: int
) -> list[list[tuple[str, float]]]:
    """Each line's n_best (text, score), highest first (ties: the earlier candidate, the beam's first)."""
    found = []
    for cands, line_scores in zip(pool, scores):
        order = sorted(range(len(cands)), key=lambda j: -line_scores[j])[:n_best]
        found.append([(cands[j].text, line_scores[j]) for j in order])
    return found


def choose(
    pool: list[list[Candidate]], lines: list[str], decode: DecodeConfig, reverse: Reverse, tokenize: str
) -> list[list[tuple[str, float]]]:
    """Each line's n_best candidates by decode.mbr's expected utility or decode.rerank's score."""
    if decode.mbr:
        scores = [expected_utilities([c.text for c in cands], decode.mbr, tokenize) for cands in pool]
    else:
        backward = reverse_logprobs(reverse, pool, lines, decode)
        scores = channel_scores(pool, backward, decode.rerank_weight, decode.length_penalty)
    return ranked(pool, scores, decode.n_best)


def chosen_search(nbest: bool, reverse: Reverse, tokenize: str) -> Callable:
    """A search with translate_lines' arguments (a SearchRequest, a DecodeConfig) that chooses each
    line's translation among its pool (decode.mbr, decode.rerank), answering as translate_nbest does
    where `nbest`, else as translate_lines. A line longer than the model takes is chosen for part by
    part (`line_parts`), as the search translates it, and its parts' choices joined with a space (the
    search joins the parts' pieces, so a part whose translation starts mid-word reads as a word of its
    own): its one hypothesis, scores summed."""

    def search(request: SearchRequest, decode: DecodeConfig):
        owner, parts, part_prefixes = line_parts(request)
        pool = candidate_pool(replace(request, lines=parts, prefixes=part_prefixes), decode)
        found = joined(choose(pool, parts, decode, reverse, tokenize), owner, len(request.lines))
        return found if nbest else [line[0][0] for line in found]

    return search


def line_parts(src: SearchRequest) -> tuple[list[int], list[str], list[str] | None]:
    """(the line of each part, the parts as text, each part's prefix: its line's for the first) of
    lines cut into parts as the search cuts them (mt.translate.source_parts); an empty line has none."""
    owner, pieces = source_parts(src)
    firsts = [j == 0 or owner[j - 1] != i for j, i in enumerate(owner)]
    prefixes = [src.prefixes[i] if first else "" for i, first in zip(owner, firsts)] if src.prefixes else None
    return owner, src.tokenizer.decode(pieces), prefixes


def joined(
    found: list[list[tuple[str, float]]], owner: list[int], lines: int
) -> list[list[tuple[str, float]]]:
    """Each line's n-best from its parts' (`owner`: each part's line): a line of one part keeps its
    list, a line of several gets their best joined with a space and their scores summed, an empty line
    one empty translation scored 0."""
    by_line: list[list[list[tuple[str, float]]]] = [[] for _ in range(lines)]
    for i, part in zip(owner, found):
        by_line[i].append(part)
    for i, parts in enumerate(by_line):
        if len(parts) != 1:
            by_line[i] = [
                [(" ".join(p[0][0] for p in parts), sum(p[0][1] for p in parts))] if parts else [("", 0.0)]
            ]
    return [parts[0] for parts in by_line]
