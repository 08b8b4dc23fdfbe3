"""Choosing each row's next token: constraint masks, forced tokens, greedy argmax or Gumbel-max sampling.

Used by :class:`brrm.backends.transformers.decode.Decoder`; one row's choice never depends on the other rows of its
batch.
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

import torch

from brrm.backends.transformers.bitmask import apply as _apply_mask

if TYPE_CHECKING:
    from brrm.backends.transformers.rows import Row


def choose(stop_ids: Set[int], active: list[Row], logits: torch.Tensor, temperature: float, top_p: float,
           bitmask: torch.Tensor | None, top_k: int = 0) -> list[int]:
    """Apply constraints row by row, then pick tokens (greedy: one argmax over the batch).

    Pattern rows are checked lazily when that is exact: the token is picked from the unmasked
    distribution and, only if the grammar rejects it, picked again from the masked one. For greedy
    decoding this is the masked argmax; for sampling with top_p = 1 it is rejection sampling, whose
    result is distributed exactly as sampling from the masked distribution, p(t) / p(allowed). Most
    free-text steps then cost no mask at all. With top_p < 1 or a top_k the mask is applied first.
    """
    cut = top_p < 1.0 or top_k > 0
    finite = (~(torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1)).tolist()
    forced: dict[int, int] = {}
    lazy: list[int] = []
    for j, row in enumerate(active):
        if not finite[j]:
            row.finish, row.error = "error", "non-finite logits from the model"
            continue
        if row.state is not None:
            f = _constrain(stop_ids, row, logits[j:j + 1], bitmask if cut else None)
            if f is not None:
                forced[j] = f
            elif row.state.kind == "pattern" and not cut:
                lazy.append(j)
    picked = _pick(active, logits, temperature, top_p, forced, finite, top_k)
    _repick_rejected(active, logits, picked, lazy, bitmask, temperature, top_p, top_k)
    return [forced.get(j, picked[j]) for j in range(len(active))]


def _repick_rejected(active: list[Row], logits: torch.Tensor, picked: list[int], lazy: list[int],
                     bitmask: torch.Tensor | None, temperature: float, top_p: float, top_k: int) -> None:
    """Pick again, under its grammar mask, every lazy row whose token its grammar rejects (in place in
    ``picked``). The step's rejected rows are masked in one call (``[rows, words]`` bitmask, each row written by its
    own guide): the mask is exact, so each row's token is what it would be masked alone."""
    rejected = [j for j in lazy if not active[j].state.guide.accepts_tokens([picked[j]])]  # type: ignore[union-attr]
    if not rejected:
        return
    assert bitmask is not None  # lazy rows are pattern rows of a masked step
    masks = bitmask.new_empty((len(rejected), bitmask.shape[1]))
    for r, j in enumerate(rejected):
        active[j].state.write_mask(masks[r:r + 1])  # type: ignore[union-attr]
    masked = logits[rejected]
    _apply_mask(masked, masks)
    for r, j in enumerate(rejected):
        picked[j] = _pick_row(masked[r], temperature, top_p, active[j], top_k)


def _pick(active: list[Row], logits: torch.Tensor, temperature: float, top_p: float, forced: dict[int, int],
          finite: list[bool], top_k: int = 0) -> list[int]:
    """Each row's token (0 for forced and failed rows, whose choice is made elsewhere).

    Sampling without a top-p or top-k cut perturbs and compares every sampled row in one call: each row's noise is
    its own (:func:`_noise`), and the scale, the sum and the argmax are exact per element, so a row's token is the
    same bits it would be alone (:func:`_pick_row` says why Gumbel-max)."""
    if temperature == 0:
        return logits.argmax(dim=-1).tolist()
    for row in active:
        row.noise = None
    sampled = [j for j in range(len(active)) if j not in forced and finite[j]]
    out = [0] * len(active)
    if top_p < 1.0 or 0 < top_k < logits.shape[-1]:
        for j in sampled:
            out[j] = _pick_row(logits[j], temperature, top_p, active[j], top_k)
    elif sampled:
        noise = torch.stack([_noise(active[j], logits.shape[-1]) for j in sampled])
        picked = (logits[sampled].double() / temperature + noise).argmax(dim=-1).tolist()
        for j, tok in zip(sampled, picked, strict=True):
            out[j] = tok
    return out


def _noise(row: Row, vocab: int) -> torch.Tensor:
    """The row's Gumbel(0, 1) noise ``[vocab]`` (float64) for this step, drawn from its own seeded generator once
    per step (a re-pick under a grammar mask reuses it)."""
    if row.noise is None:
        u = torch.rand(vocab, generator=row.generator, dtype=torch.float64)
        row.noise = -torch.log(-torch.log(u.clamp(min=1e-300, max=1.0 - 1e-16)))
    return row.noise


def _pick_row(logits_row: torch.Tensor, temperature: float, top_p: float, row: Row, top_k: int = 0) -> int:
    """Greedy argmax, or a sample by the Gumbel-max trick with the row's own noise for this step.

    argmax(logits / T + g), g ~ Gumbel(0, 1) from the row's seeded generator, is an exact sample of softmax(logits /
    T) (restricted to the top_k most likely tokens, ties at the k-th kept, then to the top-p nucleus when top_p < 1:
    transformers' TopK- and TopPLogitsWarper order). Unlike inverse-CDF sampling, which a float32 cumulative sum
    over the whole vocabulary makes sensitive to rounding in every probability, it changes only when the two best
    perturbed logits are within rounding of each other, so batch shapes that move logits by 1e-8 keep the same
    tokens. A re-pick under a grammar mask reuses the step's noise: the argmax over the allowed tokens is an exact
    sample of the masked distribution.
    """
    if temperature == 0:
        return int(logits_row.argmax())
    noise = _noise(row, logits_row.shape[-1])
    scaled = logits_row.double() / temperature
    if 0 < top_k < scaled.shape[-1]:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k).values[-1], float("-inf"))
    if top_p < 1.0:
        probs = torch.softmax(scaled, dim=-1)
        sorted_p, order = probs.sort(descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p
        scaled = scaled.clone()
        scaled[order[drop]] = float("-inf")
    return int(torch.argmax(scaled + noise))


def _constrain(stop_ids: Set[int], row: Row, logits_row: torch.Tensor, bitmask: torch.Tensor | None) -> int | None:
    """Mask one row's logits for its program (patterns only when ``bitmask`` is given); returns a forced
    token or None."""
    st = row.state
    assert st is not None
    forced = st.forced()
    if forced is not None:
        return forced
    if st.kind == "choice":
        ids = list(st.choice_ids())
        raw = logits_row[0, ids].clone()
        extra: tuple[float, ...] = (float(logits_row[0].max()),) if st.choice_with_max() else ()
        if st.choice_top():
            k = min(st.choice_top(), logits_row.shape[-1])
            extra += tuple(float(x) for x in logits_row[0].topk(k).values)
        row.choice_logits.append(tuple(float(x) for x in raw) + extra)
        logits_row.fill_(float("-inf"))
        logits_row[0, ids] = raw
    elif bitmask is not None and st.write_mask(bitmask):
        _apply_mask(logits_row, bitmask)
    elif st.banned_stop():
        for s in stop_ids:
            logits_row[0, s] = float("-inf")
    return None
