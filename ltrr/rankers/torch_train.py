"""Training loop shared by the torch rankers (`ltrr.rankers.neural`, `ltrr.rankers.transformer`).

Rows are trained in batches of whole query groups; the losses work on padded
``(n_groups, max_len)`` score and label matrices. torch is imported only inside functions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ltrr._errors import DataError

__all__ = ["LOSSES", "make_batches", "train_loop"]

# The rankers' docs name this logger for the per-epoch losses that ``verbose`` shows.
logger = logging.getLogger("ltrr.rankers.neural")


def make_batches(
    groups: list[np.ndarray], budget: int, rng: np.random.Generator
) -> list[list[np.ndarray]]:
    """Shuffle whole groups and pack them into batches of at most ``budget`` rows.

    A batch always holds at least one whole group, so a group larger than the budget forms a
    batch of its own.
    """
    batches: list[list[np.ndarray]] = []
    current: list[np.ndarray] = []
    rows = 0
    for g in rng.permutation(len(groups)):
        grp = groups[g]
        if current and rows + len(grp) > budget:
            batches.append(current)
            current, rows = [], 0
        current.append(grp)
        rows += len(grp)
    if current:
        batches.append(current)
    return batches


def _pad(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a batch, group after group, and its ``(n_groups, max_len)`` mask."""
    mask = np.zeros((len(groups), max(len(g) for g in groups)), dtype=bool)
    for i, g in enumerate(groups):
        mask[i, : len(g)] = True
    return np.concatenate(groups), mask


# ---- losses on padded (n_groups, max_len) score and label matrices ------------------------
def pointwise_loss(s, y, mask, **_):
    """Mean squared error over the real (unpadded) rows."""
    return ((s - y) ** 2)[mask].mean()


def ranknet_loss(s, y, mask, **_):
    """RankNet: mean of ``log(1 + exp(-(s_i - s_j)))`` over pairs of one group with
    ``y_i > y_j``; None when the batch has no such pair."""
    import torch

    pairs = (y[:, :, None] > y[:, None, :]) & mask[:, :, None] & mask[:, None, :]
    if not bool(pairs.any()):
        return None
    diff = s[:, :, None] - s[:, None, :]
    return torch.nn.functional.softplus(-diff[pairs]).mean()


def listnet_loss(s, y, mask, temperature: float = 1.0, **_):
    """ListNet: mean over groups of the cross-entropy between ``softmax(y / temperature)``
    and ``softmax(s)``, both over the group's real rows."""
    import torch

    neg_inf = torch.tensor(float("-inf"), dtype=s.dtype, device=s.device)
    target = torch.softmax(torch.where(mask, y / temperature, neg_inf), dim=1)
    logp = torch.log_softmax(torch.where(mask, s, neg_inf), dim=1)
    # padded positions have target 0 and log-probability -inf; zero them before multiplying
    return -(target * torch.where(mask, logp, torch.zeros_like(logp))).sum(dim=1).mean()


LOSSES: dict[str, Callable] = {
    "pointwise": pointwise_loss,
    "pairwise": ranknet_loss,
    "listwise": listnet_loss,
}


def train_loop(
    module,
    forward: Callable,
    groups: list[np.ndarray],
    y: np.ndarray,
    *,
    est: Any,
    objective: str,
    seed: int,
    device,
    scheduler_factory: Callable | None = None,
) -> list[float]:
    """Optimise ``module`` with AdamW on batches of whole groups; return per-epoch mean losses.

    ``forward(rows)`` returns the scores of row indices ``rows`` as a 1-D tensor. ``est``
    supplies ``n_epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``, ``verbose``
    (and ``temperature`` for the listwise loss).
    """
    import torch

    loss_fn = LOSSES[objective]
    extra = {"temperature": float(est.temperature)} if objective == "listwise" else {}
    # fused: torch's fused AdamW takes the square root with the CPU's own instruction (correctly
    # rounded, so the same bits on every CPU), where the default single-tensor AdamW takes MKL's vector
    # sqrt, which is not correctly rounded on an AMD EPYC (15% of values one ulp off) and is on an
    # Intel Xeon: measured, the FFNs trained differently by CPU vendor (ltrr._cpu). On the EPYC the
    # fused step equals the single-tensor one with a correctly rounded sqrt bit for bit.
    optimiser = torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad],
        lr=float(est.learning_rate),
        weight_decay=float(est.weight_decay),
        fused=torch.device(device).type in ("cpu", "cuda") or None,
    )
    rng = np.random.default_rng(seed)
    # Batches of all epochs are drawn up front so a learning-rate schedule knows the step count.
    plan = [make_batches(groups, int(est.batch_size), rng) for _ in range(int(est.n_epochs))]
    scheduler = scheduler_factory(optimiser, sum(map(len, plan))) if scheduler_factory else None
    y_t = torch.as_tensor(y, dtype=torch.float32, device=device)
    curve: list[float] = []
    module.train()
    for epoch, batches in enumerate(plan):
        total, n_losses = 0.0, 0
        for batch in batches:
            rows, mask_np = _pad(batch)
            mask = torch.as_tensor(mask_np, device=device)
            scores = forward(rows)
            s = scores.new_zeros(mask.shape).masked_scatter(mask, scores)
            yy = y_t.new_zeros(mask.shape).masked_scatter(
                mask, y_t[torch.as_tensor(rows, device=device)]
            )
            loss = loss_fn(s, yy, mask, **extra)
            if loss is not None:  # None: every query of the batch has tied labels
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach())
                n_losses += 1
            if scheduler is not None:
                scheduler.step()
        curve.append(total / max(n_losses, 1))
        if not math.isfinite(curve[-1]):
            raise DataError(
                f"{type(est).__name__}: training diverged at epoch {epoch + 1} (loss "
                f"{curve[-1]}); lower learning_rate"
            )
        logger.log(
            logging.INFO if est.verbose else logging.DEBUG,
            "%s epoch %d/%d: loss %.6f",
            type(est).__name__,
            epoch + 1,
            est.n_epochs,
            curve[-1],
        )
    module.eval()
    return curve
