"""The shared prompt prefix's KV cache, for continuing many rollouts of one fixed model.

Every rollout of an evaluation starts with the same system prompt (the protocol and one line per
arm, some 600 tokens for the demo's seven arms) and differs only from the question on. Without a
cache, each model turn prefills its whole context again: in a GRPO step on the CPU, 16 rollouts
decoded 2,334 tokens and prefilled 33,627 (`benchmarks/results/agent_grpo_demo_agent/`).
`PrefixCache` keeps the key/value cache of the longest prefix that the calls so far share (at
least ``min_tokens``), and each continuation starts from a copy of it, so only the rest of its
context is prefilled: the pattern of transformers' prefix reuse (a deep copy of a prompt's cache
passed to ``generate``).

Measured on 8 test questions of demo-agent with the committed SFT policy (greedy, one core,
after a warm-up pass, the two modes alternated): 85.8 and 88.8 s with the cache against 113.4 and
109.6 s without (22% less), and all 8 trajectories had the same token ids (17 continuations
started from the cached 560-token prefix). The tokens come out the same, but the logits are not
bit for bit those of a full prefill (within 4e-5: the prefix's keys and values come from another
matrix shape), so a cache is only for a model whose weights do
not change, one rollout at a time: `ltrr agent eval` and the RFT baseline's sampling turn it on;
a GRPO run never does (its model changes every step, and its first steps were sampled without),
and it is off unless a caller turns it on.

Examples
--------
>>> common_prefix([1, 2, 3, 4], [1, 2, 9])
2
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

__all__ = ["PrefixCache", "common_prefix"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """The KV cache of the longest prefix shared by the calls so far (module docstring).

    Parameters
    ----------
    min_tokens : int
        A shared prefix shorter than this is not cached (its prefill costs little).
    """

    def __init__(self, min_tokens: int = 64):
        self.min_tokens = int(min_tokens)
        self.ids: list[int] = []      # the cached prefix
        self.cache: Any = None        # its key/value cache
        self.argument = ""            # the name generate takes it under (the model's transformers version)
        self._last: list[int] = []    # the previous call's ids, until a prefix is cached
        self.hits = self.builds = 0

    def kwargs(self, model: Any, ids: list[int], device: Any) -> dict[str, Any]:
        """``generate`` keyword arguments that start ``ids`` from a copy of the cached prefix
        (empty when no usable prefix is shared); learns the shared prefix as calls come.

        A call sharing at least ``min_tokens`` with the cached prefix starts from it (the prefix
        cut back to what they share, when that is shorter). Otherwise the call is remembered, and
        the next call sharing ``min_tokens`` with it caches their common prefix: so an
        evaluation's one system prompt is cached once, and a sampling run whose prompts change
        per question (arms shuffled or renamed per question) caches each question's prompt for
        its samples and turns."""
        cut = len(ids) - 1  # at least one token of the call is fed to the model
        n = min(common_prefix(self.ids, ids), cut)
        if n < self.min_tokens:
            n = min(common_prefix(self._last, ids), cut)
            if n < self.min_tokens:
                self._last = list(ids)
                return {}
        if n != len(self.ids):
            self._build(model, ids[:n], device)
        self.hits += 1
        return {self.argument: copy.deepcopy(self.cache)}

    def _build(self, model: Any, prefix: list[int], device: Any) -> None:
        import torch

        x = torch.tensor([prefix], dtype=torch.long, device=device if device is not None else model.device)
        with torch.inference_mode():
            out = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=True)
        cache = out.get("cache")
        self.cache = out.get("past_key_values") if cache is None else cache
        self.ids, self._last = list(prefix), []
        self.argument = _cache_argument(model)  # once per build, not per call
        self.builds += 1


def _cache_argument(model: Any) -> str:
    """The name under which this transformers version's models take a key/value cache."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
