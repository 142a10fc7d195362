"""Search over a trained model: batched greedy decoding and beam search, both on the KV cache.

Works on id tensors only; text, tokenization and batching of lines live in `evaluate`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mt.model import KVCache, Seq2Seq
from mt.tokenizer import BOS, EOS, PAD


@dataclass
class Hypothesis:
    tokens: list[int]   # without bos and eos
    score: float        # log-probability / length penalty: what beams are ranked by
    logprob: float      # total log-probability, eos included when it was emitted


def max_output_lengths(src_mask: Tensor, a: float, b: int, limit: int) -> Tensor:
    """Per-sentence output limit a * source length + b, capped by the position table: (B,) long."""
    return (a * src_mask.sum(1) + b).long().clamp(max=limit - 1)


@torch.inference_mode()
def greedy_decode(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float = 1.5,
                  max_len_b: int = 10, use_cache: bool = True) -> list[Hypothesis]:
    """Batched greedy search; each sentence stops at eos or at its own length limit.

    Finished sentences leave the batch (once a quarter of it has finished), so later steps compute
    mostly the ones still running.

    Args:
        src: (B, S) ids, src_mask: (B, S) bool.
        use_cache: False re-runs the decoder over the whole prefix each step (reference/benchmark).
    Returns:
        B hypotheses; score = logprob (greedy does not normalise by length).
    """
    memory = model.encode(src, src_mask)                                    # (B, S, D)
    cache = KVCache(len(model.decoder)) if use_cache else None
    limits = max_output_lengths(src_mask, max_len_a, max_len_b, model.cfg.max_positions)  # (B,)
    rows = torch.arange(src.size(0), device=src.device)                    # input row of each active row
    tokens = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)  # (B, 1)
    logprob = torch.zeros(src.size(0), device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    results: list[Hypothesis | None] = [None] * src.size(0)
    for t in range(1, int(limits.max()) + 1):
        step_in = tokens[:, -1:] if use_cache else tokens                   # (b, 1) or (b, t)
        logits, cache = model.decode(step_in, memory, src_mask, cache)    # (b, 1|t, V)
        last = logits[:, -1].float()                                        # (b, V)
        best, next_token = last.max(dim=-1)                                 # (b,) each
        logprob += (best - torch.logsumexp(last, dim=-1)).masked_fill(finished, 0.0)  # log-softmax of the best
        tokens = torch.cat([tokens, next_token.masked_fill(finished, PAD)[:, None]], dim=1)  # (b, t + 1)
        newly_done = ~finished & ((next_token == EOS) | (limits <= t))     # (b,)
        for i in newly_done.nonzero().flatten().tolist():
            lp = float(logprob[i])
            results[int(rows[i])] = Hypothesis(_strip(tokens[i, 1:].tolist()), lp, lp)
        finished |= newly_done
        if finished.all():
            break
        if 4 * int(finished.sum()) >= finished.numel():  # compact only now and then: it copies the cache
            keep = (~finished).nonzero().flatten()                          # (b',)
            rows, tokens, logprob, limits, finished = rows[keep], tokens[keep], logprob[keep], limits[keep], finished[keep]
            memory, src_mask = memory[keep], src_mask[keep]
            if cache is not None:
                cache.reorder(keep)
    return results


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
    """Search state of the B running sentences x K beams, flattened to B*K rows.

    Done sentences leave the state at the next `advance`; `sentence` maps rows back to the input.
    """

    def __init__(self, B: int, K: int, limits: Tensor, alpha: float, device: torch.device):
        self.B, self.K, self.alpha, self.limits = B, K, alpha, limits         # limits (B,)
        self.sentence = list(range(B))                                       # input index of each sentence
        self.tokens = torch.full((B * K, 1), BOS, dtype=torch.long, device=device)  # (B*K, t)
        self.scores = torch.full((B, K), float("-inf"), device=device)       # (B, K) summed log-probs
        self.scores[:, 0] = 0.0  # all beams start identical: expand only the first
        self.finished: list[list[Hypothesis]] = [[] for _ in range(B)]      # by input index
        self.done = torch.zeros(B, dtype=torch.bool, device=device)

    def candidates(self, lprobs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """lprobs (B*K, V) -> the 2K best (score, beam, token) per sentence, each (B, 2K)."""
        V = lprobs.size(-1)
        total = (self.scores.view(-1, 1) + lprobs).view(self.B, self.K * V)  # (B, K*V)
        top, flat = total.topk(2 * self.K, dim=1)                           # (B, 2K)
        return top, flat // V, flat % V

    def finish(self, top: Tensor, beam: Tensor, token: Tensor, t: int) -> None:
        """Move eos candidates ranked within the top K (and all beams at the limit) to `finished`."""
        in_top_k = torch.arange(2 * self.K, device=top.device) < self.K      # (2K,)
        at_limit = self.limits <= t                                          # (B,)
        final = ((token == EOS) | at_limit[:, None]) & in_top_k & (top > float("-inf"))  # (B, 2K)
        for b, j in final.nonzero().tolist():
            row = b * self.K + int(beam[b, j])
            ended = bool(token[b, j] == EOS)
            ids = self.tokens[row, 1:].tolist() + ([] if ended else [int(token[b, j])])
            logprob = float(top[b, j])
            score = logprob / length_penalty(len(ids) + ended, self.alpha)
            self.finished[self.sentence[b]].append(Hypothesis(ids, score, logprob))
        full = torch.tensor([len(self.finished[i]) >= self.K for i in self.sentence], device=top.device)
        self.done = at_limit | full

    def advance(self, top: Tensor, beam: Tensor, token: Tensor) -> Tensor:
        """Keep the K best non-eos candidates of each running sentence; drop done sentences.

        Returns the rows (B'*K,) of the old B*K layout that the new rows come from.
        """
        alive = (~self.done).nonzero().flatten()                            # (B',)
        top, beam, token = top[alive], beam[alive], token[alive]            # (B', 2K) each
        rank = torch.where(token == EOS, 2 * self.K, 0) + torch.arange(2 * self.K, device=top.device)  # (B', 2K)
        keep = rank.topk(self.K, dim=1, largest=False).indices              # (B', K) first K non-eos
        rows = (beam.gather(1, keep) + self.K * alive[:, None]).view(-1)    # (B'*K,)
        self.tokens = torch.cat([self.tokens[rows], token.gather(1, keep).view(-1, 1)], dim=1)  # (B'*K, t+1)
        self.scores = top.gather(1, keep)                                   # (B', K)
        self.limits, self.done = self.limits[alive], self.done[alive]
        self.sentence = [self.sentence[i] for i in alive.tolist()]
        self.B = alive.numel()
        return rows


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam: int = 5, max_len_a: float = 1.5,
                max_len_b: int = 10, alpha: float = 1.0, n_best: int = 1,
                use_cache: bool = True) -> list[list[Hypothesis]]:
    """Batched beam search on the KV cache, over a flattened (B*K) batch.

    Each step ranks 2K candidates per sentence so that hypotheses ending in eos do not starve the
    beam; a sentence is done once it has K finished hypotheses or reaches a*S+b tokens.
    Hypotheses are ranked by log-probability / length_penalty(length including eos, alpha).

    Args:
        src: (B, S) ids, src_mask: (B, S) bool.
        use_cache: False re-runs the decoder over the whole prefix each step (reference/benchmark).
    Returns:
        for each sentence, its n_best hypotheses, best first.
    """
    B, K = src.size(0), beam
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)         # (B*K, S, D)
    mask = src_mask.repeat_interleave(K, dim=0)                               # (B*K, S)
    limits = max_output_lengths(src_mask, max_len_a, max_len_b, model.cfg.max_positions)  # (B,)
    beams = _Beams(B, K, limits, alpha, src.device)
    cache = KVCache(len(model.decoder)) if use_cache else None
    for t in range(1, int(limits.max()) + 1):
        step_in = beams.tokens[:, -1:] if use_cache else beams.tokens            # (B*K, 1) or (B*K, t)
        logits, cache = model.decode(step_in, memory, mask, cache)              # (B*K, 1|t, V)
        lprobs = torch.log_softmax(logits[:, -1].float(), dim=-1)               # (B*K, V)
        top, beam_idx, token = beams.candidates(lprobs)
        beams.finish(top, beam_idx, token, t)
        if beams.done.all():
            break
        B_before = beams.B
        rows = beams.advance(top, beam_idx, token)
        dropped = beams.B < B_before  # beams of one sentence share its memory: only then does it move
        if dropped:
            memory, mask = memory[rows], mask[rows]
        if cache is not None:
            cache.reorder(rows, cross=dropped)
    return [sorted(f, key=lambda h: -h.score)[:n_best] for f in beams.finished]
