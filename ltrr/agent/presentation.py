"""Per-example arm presentations: which arms the policy is shown, in what order, under what names.

Router-R1 (Zhang, Feng & You, 2025) claims that its policy generalises to unseen arms from their
descriptors alone. A policy trained on prompts that always list the same arms, under the same
names, in the same places learns the names instead (issue 28: with ``dense+reg`` held out of SFT
and described by its configuration alone, the SFT policy called it 0 times in 150 questions).
Training therefore shows each example the arms its own way, an `ArmView`:

- the descriptor lines are listed in a shuffled order (``shuffle_arms``);
- on a share of the examples (``rename_share``) every arm gets a neutral id (``arm-3``), so
  only its descriptor line says what it is;
- on a share of the examples (``leave_out_share``) one arm, drawn at random, is left out of the
  prompt; a call to it is then rejected as a call to an unknown arm;
- on a share of the examples (``config_only_share``) one shown arm, drawn at random, is described
  by its configuration alone (family, reranker, cost; ``no measured strengths``), exactly as an
  arm held out of training is described at evaluation (`ltrr.agent.run.make_loop`), so the
  policy has seen that line, and an arm so described called where it is the best one, before
  it meets an unseen arm.

The SFT scripts then call the label-best *shown* arm by its shown name (`ltrr.agent.sft`), and
GRPO shows each question of each step its own view (`ltrr.agent.rl.make_rollouts`). The loop
(`ltrr.agent.loop.AgentLoop.with_view`) maps a shown name back to the pool arm it stands for,
so searches, costs and rewards are those of the real arms. Evaluation uses the plain view: real
names, the pool's order, every arm (`ltrr agent eval --neutral-ids` renames every arm instead,
for a policy trained with ``rename_share = 1``; ``--leave-out`` drops arms from the prompt).

A view is drawn from the run's ``seed`` and the example's key alone
(``numpy.random.default_rng([seed, 28, *key])``; SFT example ``i`` has key ``(0, i)``, GRPO
training question ``i`` at optimiser step ``s`` has key ``(1, s, i)``, evaluation question ``i``
under ``--neutral-ids`` has key ``(2, i)``), so a run's views repeat
exactly, after a resume too. Every draw is made whatever the settings, so changing one setting
leaves the other draws as they were.

A family word is a descriptor, not a name: an arm named after its family (``dense``) keeps the
word ``dense`` in its renamed line (``- arm-2: dense retrieval (meaning similarity); ...``),
because that is what the arm does.

Examples
--------
>>> view = draw_view(["bm25", "dense", "none"], seed=0, key=(0, 5), shuffle_arms=True,
...                  rename_share=1.0, leave_out_share=1.0)
>>> len(view.arms), len(view.left_out), all(n.startswith("arm-") for n in view.shown)
(2, 1, True)
>>> view.real_name(view.shown_name(view.arms[0])) == view.arms[0]
True
>>> ArmView.plain(["bm25", "none"]).names
{'bm25': 'bm25', 'none': 'none'}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ltrr._checks import check_int, check_number, is_int
from ltrr._errors import ConfigError

__all__ = ["ArmView", "NEUTRAL_NAME", "VIEW_FIELDS", "draw_view", "view_settings"]

#: A neutral id: what a renamed arm is called. No real arm may be named so when renaming is on.
NEUTRAL_NAME = re.compile(r"arm-\d+")
#: The settings of `draw_view`, fields of `ltrr.agent.sft.SFTSpec` and `ltrr.agent.grpo.GRPOSpec`.
VIEW_FIELDS = ("shuffle_arms", "rename_share", "leave_out_share", "config_only_share")
_STREAM = 28  # keeps the views' random stream apart from the run's other seeded draws


@dataclass(frozen=True)
class ArmView:
    """The arms one example shows: pool names in prompt order, their shown names, those left out.

    Parameters
    ----------
    arms : tuple of str
        The pool arms in the prompt, in the order their descriptor lines are listed.
    shown : tuple of str
        The name each of ``arms`` is shown under (the same length); empty means the real names.
    left_out : tuple of str
        Pool arms of the loop that this example does not show.
    config_only : tuple of str
        Shown arms (of ``arms``) described by their configuration alone: the prompt leaves out
        their measured strengths, as it does for an arm held out of training.

    Examples
    --------
    >>> v = ArmView(("dense", "bm25"), ("arm-1", "arm-3"), ("none",))
    >>> v.shown_name("bm25"), v.real_name("arm-1"), v.real_name("bm25"), v.renamed
    ('arm-3', 'dense', None, True)
    """

    arms: tuple[str, ...]
    shown: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    config_only: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("arms", "shown", "left_out", "config_only"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(a, str) and a for a in value):
                raise ConfigError(f"ArmView.{name} must be a sequence of non-empty names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.arms:
            raise ConfigError("an ArmView must show at least one arm")
        if self.shown and len(self.shown) != len(self.arms):
            raise ConfigError(f"ArmView.shown has {len(self.shown)} names for {len(self.arms)} arms")
        everyone = self.arms + self.left_out
        if len(set(everyone)) != len(everyone) or len(set(self.shown_names)) != len(self.arms):
            raise ConfigError(f"an ArmView's arms and names must be unique, got {self!r}")
        stray = sorted(set(self.config_only) - set(self.arms))
        if stray or len(set(self.config_only)) != len(self.config_only):
            raise ConfigError(f"ArmView.config_only must name shown arms once each, got {list(self.config_only)} "
                              f"(shown: {list(self.arms)})")

    @classmethod
    def plain(cls, arms: Iterable[str]) -> ArmView:
        """Every arm, in the given order, under its own name: what evaluation shows."""
        return cls(tuple(arms))

    @property
    def shown_names(self) -> tuple[str, ...]:
        """The names in the prompt, in its order (what a ``<search>`` may call)."""
        return self.shown or self.arms

    @property
    def names(self) -> dict[str, str]:
        """Pool arm -> shown name, for the shown arms."""
        return dict(zip(self.arms, self.shown_names, strict=True))

    @property
    def renamed(self) -> bool:
        """Whether the prompt shows some arm under a name other than its own."""
        return self.shown_names != self.arms

    def shown_name(self, arm: str) -> str:
        """The name pool arm ``arm`` is shown under; `ConfigError` when it is not shown."""
        names = self.names
        if arm not in names:
            why = "left out of" if arm in self.left_out else "not an arm of"
            raise ConfigError(f"arm {arm!r} is {why} this example's prompt (shown: {list(self.arms)})")
        return names[arm]

    def real_name(self, shown: str) -> str | None:
        """The pool arm behind a shown name; None when no shown arm has that name."""
        back = dict(zip(self.shown_names, self.arms, strict=True))
        return back.get(shown)

    def covers(self, arms: Sequence[str]) -> bool:
        """True when the view shows or leaves out exactly the arms ``arms``."""
        return set(self.arms) | set(self.left_out) == set(arms) and len(arms) == len(set(arms))


def view_settings(spec: Any) -> dict[str, Any]:
    """The `draw_view` settings held by a spec (`SFTSpec`, `GRPOSpec`): `VIEW_FIELDS`."""
    return {name: getattr(spec, name) for name in VIEW_FIELDS}


def _check(shuffle_arms: Any, shares: dict[str, Any], where: str) -> None:
    if not isinstance(shuffle_arms, bool):
        raise ConfigError(f"{where}.shuffle_arms must be true or false, got {shuffle_arms!r}")
    for name, v in shares.items():
        check_number(v, f"{where}.{name}", low=0, high=1)


def draw_view(arms: Sequence[str], *, seed: int, key: Sequence[int], shuffle_arms: bool = False,
              rename_share: float = 0.0, leave_out_share: float = 0.0,
              config_only_share: float = 0.0) -> ArmView:
    """The `ArmView` of one example, drawn from ``seed`` and ``key`` (see the module).

    Parameters
    ----------
    arms : sequence of str
        The loop's arms, in the pool's order.
    seed : int
        The run's seed.
    key : sequence of int
        The example's key (non-negative integers): ``(0, i)`` for SFT example ``i``, ``(1, step,
        i)`` for GRPO training question ``i`` at ``step``, ``(2, i)`` for evaluation question
        ``i`` under ``ltrr agent eval --neutral-ids``.
    shuffle_arms : bool
        List the shown arms in a random order (else the pool's).
    rename_share : float
        Probability that the example shows every arm under a neutral id ``arm-N`` (the ids are a
        random permutation of 1..len(arms), so neither the number nor the place says which arm).
    leave_out_share : float
        Probability that the example leaves one arm, drawn uniformly, out of the prompt (never
        the only arm).
    config_only_share : float
        Probability that the example describes one shown arm, drawn uniformly, by its
        configuration alone (`ArmView.config_only`).

    With every setting off (the defaults) the view is `ArmView.plain`.
    """
    _check(shuffle_arms, {"rename_share": rename_share, "leave_out_share": leave_out_share,
                          "config_only_share": config_only_share}, "arm view")
    arms = list(arms)
    if not arms or len(set(arms)) != len(arms):
        raise ConfigError(f"draw_view needs unique arm names, got {arms!r}")
    check_int(seed, "draw_view seed")
    key = list(key)
    if not all(is_int(k) and k >= 0 for k in key):
        raise ConfigError(f"draw_view key must be non-negative integers, got {key!r}")
    n = len(arms)
    rng = np.random.default_rng([int(seed), _STREAM, *map(int, key)])
    rename = bool(rng.random() < rename_share)
    leave = bool(rng.random() < leave_out_share) and n > 1
    out_at = int(rng.integers(n))
    order = rng.permutation(n) if shuffle_arms else np.arange(n)
    ids = rng.permutation(n) + 1
    plain = bool(rng.random() < config_only_share)  # drawn after the others: they stay as they were
    pick = float(rng.random())
    kept = [int(i) for i in order if not (leave and i == out_at)]
    # the config-only arm is drawn among the shown arms in pool order, so the order does not move it
    described = (arms[sorted(kept)[int(pick * len(kept))]],) if plain else ()
    if rename:
        clash = [a for a in arms if NEUTRAL_NAME.fullmatch(a)]
        if clash:
            raise ConfigError(f"arm(s) {clash} are named like the neutral ids (arm-N) that renaming gives; "
                              "rename them in the pool or set rename_share = 0")
    return ArmView(arms=tuple(arms[i] for i in kept),
                   shown=tuple(f"arm-{ids[i]}" for i in kept) if rename else (),
                   left_out=(arms[out_at],) if leave else (), config_only=described)
