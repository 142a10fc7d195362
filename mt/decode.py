"""Search over a trained model: batched greedy decoding and beam search, both on the KV cache, with
forced target prefixes; sampling (`Sampler`) and ensembles (`Ensemble`) on the same loops.

Works on id tensors only; text, tokenization and batching of lines live in mt.translate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from mt.config import BOS, EOS, PAD
from mt.decode_config import DecodeConfig
from mt.ensemble import Ensemble
from mt.model import Seq2Seq
from mt.plumbing.seeds import derived_seed
from mt.score_filters import Step, score_filters


@dataclass
class Hypothesis:
    tokens: list[int]  # without bos and eos
    score: float  # log-probability / length penalty: what beams are ranked by
    logprob: float  # total log-probability, eos included when it was emitted
    ended: bool = True  # eos was written (False: cut at the length limit; the penalty counts no eos)


@dataclass
class Sources:
    """A batch a search translates: src (B, S) ids, mask (B, S) bool, and prefix (B, P), the target
    pieces each output starts with (PAD past each one's end; `force_prefix`), or None."""

    src: Tensor
    mask: Tensor
    prefix: Tensor | None = None


def prefix_limits(limits: Tensor, prefix: Tensor | None, b: int, cap: int) -> Tensor:
    """Output limits (B,) that leave room for a forced prefix and b pieces after it."""
    if prefix is None:
        return limits
    return torch.maximum(limits, ((prefix != PAD).sum(1) + b).clamp(max=cap - 1))


def output_limits(src_mask: Tensor, prefix: Tensor | None, cfg: DecodeConfig, positions: int) -> Tensor:
    """Each sentence's output length limit (B,): a * S + b (cfg.max_len_a, cfg.max_len_b), within the
    model's positions, made room for its forced prefix."""
    lengths = (cfg.max_len_a * src_mask.sum(1) + cfg.max_len_b).long().clamp(max=positions - 1)  # (B,)
    return prefix_limits(lengths, prefix, cfg.max_len_b, positions)


class Sampler:
    """Draws each row's next token from the model's distribution at `temperature`, kept to the top k
    pieces (topk:K) or to the fewest whose probability reaches p (topp:P). Each input sentence has its
    own seeded generator, so what it draws does not depend on the batch it is decoded in."""

    def __init__(self, spec: str, temperature: float, seeds: list[int]):
        kind, _, value = spec.partition(":")
        self.k, self.p = (int(value), 1.0) if kind == "topk" else (0, float(value))
        self.temperature = temperature
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def __call__(self, scores: Tensor, rows: Tensor) -> Tensor:
        """scores (b, V) -> a token per row (b,); rows (b,): each row's input sentence."""
        scores = scores / self.temperature
        if self.k:
            kth = scores.topk(min(self.k, scores.size(-1)), dim=-1).values[:, -1:]  # (b, 1)
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.p < 1.0:
            ranked, order = scores.sort(dim=-1, descending=True)  # (b, V) each
            probs = torch.softmax(ranked, dim=-1)
            ranked = ranked.masked_fill(probs.cumsum(-1) - probs >= self.p, float("-inf"))  # past p
            scores = torch.full_like(scores, float("-inf")).scatter(1, order, ranked)
        probs = torch.softmax(scores, dim=-1).cpu()  # (b, V)
        drawn = [
            torch.multinomial(probs[i], 1, generator=self.generators[r]) for i, r in enumerate(rows.tolist())
        ]
        return torch.cat(drawn).to(scores.device)


def argmax(scores: Tensor, rows: Tensor) -> Tensor:
    return scores.argmax(dim=-1)


@torch.inference_mode()
def greedy_decode(
    model: Seq2Seq | Ensemble,
    sources: Sources,
    cfg: DecodeConfig = DecodeConfig(),
    use_cache: bool = True,
    choose: Callable[[Tensor, Tensor], Tensor] = argmax,
) -> list[Hypothesis]:
    """Batched greedy search; each sentence stops at eos or at its own length limit.

    Finished sentences leave the batch (once a quarter of it has finished), so later steps compute
    mostly the ones still running. A step is a fixed run of tensor operations and one host sync.

    Args:
        sources: the batch and its forced prefixes.
        cfg: the length limit (max_len_a, max_len_b) and the score filters (`score_filters`); the rest
            is `search`'s to read.
        use_cache: False re-runs the decoder over the whole prefix each step (reference/benchmark).
        choose: (scores (b, V), input rows (b,)) -> next tokens (b,): argmax, or a `Sampler`.
    Returns:
        B hypotheses; score = logprob (greedy does not normalise by length).
    """
    src, src_mask, prefix = sources.src, sources.mask, sources.prefix
    B, device, filters = src.size(0), src.device, score_filters(cfg, prefix)
    memory = model.encode(src, src_mask)  # (B, S, D)
    cache = model.new_cache() if use_cache else None
    limits = output_limits(src_mask, prefix, cfg, model.cfg.max_positions)  # (B,)
    steps = int(limits.max())
    # (B, 1 + steps) by input row
    out_tokens = torch.full((B, steps + 1), PAD, dtype=torch.long, device=device)
    out_tokens[:, 0] = BOS
    out_logprob = torch.zeros(B, device=device)
    rows = torch.arange(B, device=device)  # input row of each active row
    tokens, logprob = out_tokens.clone(), out_logprob.clone()  # of the active rows
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(1, steps + 1):
        step_in = tokens[:, t - 1 : t] if use_cache else tokens[:, :t]  # (b, 1) or (b, t)
        logits, cache = model.decode(step_in, memory, src_mask, cache)  # (b, 1|t, V')
        last, mask = filters(model.to_pieces(logits[:, -1]).float(), Step(t, tokens[:, 1:t], rows))  # (b, V)
        next_token = choose(last if mask is None else last + mask, rows)  # (b,)
        best = last.gather(1, next_token[:, None]).squeeze(1)  # (b,)
        logprob += (best - torch.logsumexp(last, dim=-1)).masked_fill(finished, 0.0)  # its log-softmax
        tokens[:, t] = next_token.masked_fill(finished, PAD)
        finished |= (next_token == EOS) | (limits <= t)
        n_finished = int(finished.sum())  # the step's one host sync
        if n_finished == finished.numel():
            break
        if 4 * n_finished >= finished.numel():  # compact only now and then: it copies the cache
            out_tokens[rows], out_logprob[rows] = tokens, logprob
            keep = (~finished).nonzero().flatten()  # (b',)
            rows, tokens, logprob, limits, finished = (
                rows[keep],
                tokens[keep],
                logprob[keep],
                limits[keep],
                finished[keep],
            )
            memory, src_mask = memory[keep], src_mask[keep]
            if cache is not None:
                cache.reorder(keep, keep)
    out_tokens[rows], out_logprob[rows] = tokens, logprob
    return [
        Hypothesis(_strip(ids), lp, lp, EOS in ids)
        for ids, lp in zip(out_tokens[:, 1:].tolist(), out_logprob.tolist())
    ]


def _strip(ids: list[int]) -> list[int]:
    """Ids up to (not including) the first eos or pad."""
    for i, t in enumerate(ids):
        if t in (EOS, PAD):
            return ids[:i]
    return ids


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT (Wu et al. 2016): ((5 + length) / 6) ** alpha; alpha = 0 ranks by raw log-probability."""
    return ((5 + length) / 6) ** alpha


class _Beams:
    """Search state of the B running sentences x k beams, flattened to B*k rows, in tensors.

    The first step has one beam per sentence (k = 1): all K beams would start identical. From then
    on k = K. Finished hypotheses are kept per input sentence, in the order they finished; done
    sentences leave the running state at the next `advance`, `sentence` maps rows back to the input.
    """

    def __init__(self, B: int, K: int, limits: Tensor, alpha: float, device: torch.device):
        self.K, self.k, self.alpha, self.limits = K, 1, alpha, limits  # limits (B,)
        self.steps = int(limits.max())
        self.sentence = torch.arange(B, device=device)  # (B,) input index of each sentence
        # (B*k, 1 + steps)
        self.tokens = torch.full((B, self.steps + 1), PAD, dtype=torch.long, device=device)
        self.tokens[:, 0] = BOS
        self.scores = torch.zeros(B, 1, device=device)  # (B, k) summed log-probs
        self.done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
        # finished hypotheses by input sentence: fewer than K before a step, at most K more in it,
        # and slot 2K takes the writes of candidates that did not finish
        self.n_finished = torch.zeros(B, dtype=torch.long, device=device)  # (B,)
        self.fin_tokens = torch.full((B, 2 * K + 1, self.steps), PAD, dtype=torch.long, device=device)
        self.fin_logprob = torch.zeros(B, 2 * K + 1, device=device)
        # tokens, eos not counted
        self.fin_length = torch.zeros(B, 2 * K + 1, dtype=torch.long, device=device)
        # eos counted: the penalty's length
        self.fin_step = torch.zeros(B, 2 * K + 1, dtype=torch.long, device=device)

    def candidates(self, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """lprobs (B*k, V) -> the 2K best (score, beam, token) per sentence, each (B, 2K)."""
        V = lprobs.size(-1)
        total = (self.scores.view(-1, 1) + lprobs).view(-1, self.k * V)  # (B, k*V)
        top, flat = total.topk(min(2 * self.K, self.k * V), dim=1)  # (B, 2K)
        return top, flat // V, flat % V

    def finish(self, top: Tensor, beam: Tensor, token: Tensor, t: int) -> None:
        """Store eos candidates ranked within the top K (and all beams at the limit) as finished."""
        B, W = top.shape
        in_top_k = torch.arange(W, device=top.device) < self.K  # (2K,)
        at_limit = self.limits <= t  # (B,)
        ended = token == EOS  # (B, 2K)
        final = (ended | at_limit[:, None]) & in_top_k & (top > float("-inf"))  # (B, 2K)
        n_finished = self.n_finished[self.sentence]  # (B,)
        slot = torch.where(final, n_finished[:, None] + final.cumsum(1) - 1, 2 * self.K)  # (B, 2K)
        rows = beam + self.k * torch.arange(B, device=top.device)[:, None]  # (B, 2K)
        # (B, 2K, t)
        ids = torch.cat([self.tokens[rows, 1:t], token.masked_fill(ended, PAD)[..., None]], dim=2)
        sentence = self.sentence[:, None]  # (B, 1)
        self.fin_tokens[:, :, :t][sentence, slot] = ids
        self.fin_logprob[sentence, slot] = top
        self.fin_length[sentence, slot] = t - ended.long()
        self.fin_step[sentence, slot] = t
        n_finished = n_finished + final.sum(1)
        self.n_finished[self.sentence] = n_finished
        self.done = at_limit | (n_finished >= self.K)

    def advance(self, top: Tensor, beam: Tensor, token: Tensor, alive: Tensor, t: int) -> Tensor:
        """Keep the K best non-eos candidates of each running sentence; drop done sentences.

        alive: (B',) the sentences not done. Returns the rows (B'*K,) of the old B*k layout that the
        new rows come from.
        """
        top, beam, token = top[alive], beam[alive], token[alive]  # (B', 2K) each
        W = top.size(1)
        rank = torch.where(token == EOS, W, 0) + torch.arange(W, device=top.device)  # (B', 2K)
        keep = rank.topk(self.K, dim=1, largest=False).indices  # (B', K) first K non-eos
        rows = (beam.gather(1, keep) + self.k * alive[:, None]).view(-1)  # (B'*K,)
        self.tokens = self.tokens[rows]  # (B'*K, 1 + steps)
        self.tokens[:, t] = token.gather(1, keep).view(-1)
        self.scores = top.gather(1, keep)  # (B', K)
        self.limits, self.sentence = self.limits[alive], self.sentence[alive]
        self.k = self.K
        return rows

    def hypotheses(self, n_best: int) -> list[list[Hypothesis]]:
        """The n_best finished hypotheses of each input sentence, best first (ties: first finished)."""
        found = []
        for n, ids, length, step, logprob in zip(
            self.n_finished.tolist(),
            self.fin_tokens.tolist(),
            self.fin_length.tolist(),
            self.fin_step.tolist(),
            self.fin_logprob.tolist(),
        ):
            hyps = [
                Hypothesis(
                    ids[j][: length[j]],
                    logprob[j] / length_penalty(step[j], self.alpha),
                    logprob[j],
                    ended=step[j] > length[j],
                )
                for j in range(n)
            ]
            found.append(sorted(hyps, key=lambda h: -h.score)[:n_best])
        return found


@torch.inference_mode()
def beam_search(
    model: Seq2Seq | Ensemble,
    sources: Sources,
    cfg: DecodeConfig = DecodeConfig(beam=5),
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Batched beam search on the KV cache, over a flattened (B*K) batch whose K rows of a sentence
    share its memory.

    Each step ranks 2K candidates per sentence so that hypotheses ending in eos do not starve the
    beam; a sentence is done once it has K finished hypotheses or reaches a*S+b tokens.
    Hypotheses are ranked by log-probability / length_penalty(length including eos, cfg.length_penalty).
    A step is a fixed run of tensor operations and one host sync.

    Args:
        sources: the batch and its forced prefixes.
        cfg: beam (K), n_best, length_penalty, the length limit (max_len_a, max_len_b) and the score
            filters (`score_filters`).
        use_cache: False re-runs the decoder over the whole prefix each step (reference/benchmark).
    Returns:
        for each sentence, its cfg.n_best hypotheses, best first.
    """
    src, src_mask, prefix = sources.src, sources.mask, sources.prefix
    filters = score_filters(cfg, prefix)
    memory = model.encode(src, src_mask)  # (B, S, D): shared by the beams
    limits = output_limits(src_mask, prefix, cfg, model.cfg.max_positions)  # (B,)
    beams = _Beams(src.size(0), cfg.beam, limits, cfg.length_penalty, src.device)
    cache = model.new_cache() if use_cache else None
    for t in range(1, beams.steps + 1):
        step_in = beams.tokens[:, t - 1 : t] if use_cache else beams.tokens[:, :t]  # (B*k, 1) or (B*k, t)
        logits, cache = model.decode(step_in, memory, src_mask, cache)  # (B*k, 1|t, V')
        # (B*k,) each row's input sentence, which only a forced prefix reads
        rows = beams.sentence.repeat_interleave(beams.k) if prefix is not None else None
        scores, mask = filters(model.to_pieces(logits[:, -1]).float(), Step(t, beams.tokens[:, 1:t], rows))
        lprobs = torch.log_softmax(scores, dim=-1)  # (B*k, V)
        top, beam_idx, token = beams.candidates(lprobs if mask is None else lprobs + mask)
        beams.finish(top, beam_idx, token, t)
        alive = (~beams.done).nonzero().flatten()  # the step's one host sync
        if alive.numel() == 0:
            break
        dropped = alive.numel() < beams.done.numel()
        rows = beams.advance(top, beam_idx, token, alive, t)
        if dropped:
            memory, src_mask = memory[alive], src_mask[alive]
        if cache is not None:
            cache.reorder(rows, alive if dropped else None)
    return beams.hypotheses(cfg.n_best)


def search(
    model: Seq2Seq | Ensemble,
    sources: Sources,
    cfg: DecodeConfig,
    use_cache: bool = True,
    seeds: list[int] | None = None,
) -> list[list[Hypothesis]]:
    """The one entry to decoding: cfg.n_best hypotheses per sentence of `sources`, by greedy search
    when cfg.beam == 1 (drawing tokens instead where cfg.sample, each sentence from its own seed in
    `seeds`), else by beam search, all within cfg's length limit; each starting with its forced prefix
    where one is given."""
    if cfg.beam == 1:
        B = sources.src.size(0)
        seeds = seeds if seeds is not None else [derived_seed(cfg.seed, i) for i in range(B)]
        choose = Sampler(cfg.sample, cfg.temperature, seeds) if cfg.sample else argmax
        return [[h] for h in greedy_decode(model, sources, cfg, use_cache, choose)]
    return beam_search(model, sources, cfg, use_cache)
