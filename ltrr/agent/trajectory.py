"""Trajectories of the multi-round router: what was written, what was injected, and its rewards.

A `Trajectory` records one rollout (`ltrr.agent.loop.AgentLoop.rollout`): the prompt, the turns
in order (``model`` turns the policy wrote, ``injected`` turns the loop added), every search
call (valid or not, and why not), the answer, why the rollout stopped, what went wrong
(``issues``) and, for token-level backends, the exact token ids with their mask:

- ``ids``: the prompt's ids followed by each turn's ids, exactly as the model saw them (never
  re-tokenised from the text);
- ``mask``: 1 for a token the model wrote, 0 for the prompt and injected tokens.

``arms`` holds the names the prompt showed, in its order (what the format rules accept in a
``<search>``); ``shown_arms`` maps each shown name that is not the arm's own (a neutral id of
`ltrr.agent.presentation`) to the pool arm, so costs are those of the arms that ran.

SFT (loss on mask-1 tokens: `Trajectory.labels`) and GRPO (`Trajectory.response_ids`,
`Trajectory.response_mask`) read them directly. Trajectories are saved as JSONL, one per line
(`save_trajectories`, atomic), and read back with `load_trajectories`, which names the file
and line of anything malformed.

Stop reasons (`STOP_REASONS`):

- ``answered``: the model closed ``</answer>`` within its search budget;
- ``max_turns``: the search budget was spent; the loop asked for the answer and ran one last
  turn, where a search ends the rollout unanswered (``answer`` is set when the model gave one);
- ``unclosed_tag``: a turn ended (per-turn token cap or end of sequence) without closing
  ``</search>`` or ``</answer>``;
- ``token_cap``: the total token budget (the model's context) ran out;
- ``empty_question``: the question was blank; no model call was made;
- ``error``: a backend call failed for good (``error`` says why).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ltrr._checks import is_int
from ltrr._errors import DataError

__all__ = [
    "ISSUES",
    "STOP_REASONS",
    "Search",
    "Trajectory",
    "Turn",
    "load_trajectories",
    "save_trajectories",
    "score_trajectories",
]

STOP_REASONS = ("answered", "max_turns", "unclosed_tag", "token_cap", "empty_question", "error")
#: What a rollout records in ``Trajectory.issues`` (each at most once, in the order it happened).
ISSUES = ("empty_question", "invalid_search", "search_error", "obs_truncated", "max_turns",
          "search_past_budget", "malformed_answer", "unclosed_tag", "token_cap", "error")
ROLES = ("model", "injected")
#: A model turn ends at a ``search`` or ``answer`` closing tag, at the end of sequence (``eos``)
#: or at its token cap (``length``); an injected turn is an ``information`` block or the
#: ``final_instruction`` that asks for the answer.
TURN_KINDS = {"model": ("search", "answer", "eos", "length"),
              "injected": ("information", "final_instruction")}


@dataclass
class Turn:
    """One segment of the assistant output.

    Attributes
    ----------
    role : {"model", "injected"}
    text : str
        The segment's text (for a model turn, its ids decoded).
    n_tokens : int
        Its tokens (exact for token-level backends; by the local tokenizer, or estimated,
        for text-level ones).
    kind : str
        See `TURN_KINDS`.
    cached : bool
        A model turn read from the generation cache.
    """

    role: str
    text: str
    n_tokens: int
    kind: str
    cached: bool = False


@dataclass
class Search:
    """One ``<search>`` call.

    Attributes
    ----------
    arm, query : str or None, str
        As parsed from ``ARM: sub-query`` (``arm`` None when there was no prefix); a valid
        call's ``arm`` is the pool arm, also when the prompt showed it under another name
        (`Trajectory.shown_arms`).
    valid : bool
        The arm ran and its passages were injected.
    reason : str or None
        Why the call was invalid: a `ltrr.agent.rewards.SEARCH_ERRORS` name,
        ``malformed_tag`` (no ``<search>`` before ``</search>``), ``search_error: ...`` or
        ``past_budget`` (written in the final turn; it ended the rollout). An ``unknown_arm``
        or ``search_error`` call got an ``<information>None</information>`` block, as in
        Router-R1; the others got nothing.
    docids : list of str
        The injected passages, in rank order.
    injected_tokens : int
        Tokens of the ``<information>`` block (the ``None`` block of a failed call included).
    truncated : bool
        The passages were cut to ``max_obs_tokens``.
    """

    arm: str | None
    query: str
    valid: bool
    reason: str | None = None
    docids: list[str] = field(default_factory=list)
    injected_tokens: int = 0
    truncated: bool = False


@dataclass
class Trajectory:
    """One rollout of the router; see the module docstring for ``ids``, ``mask`` and stops.

    Examples
    --------
    >>> t = Trajectory(qid="q1", question="Capital of France?", prompt="Q ", prompt_tokens=2,
    ...                ids=[5, 6, 7, 8, 9], mask=[0, 0, 1, 0, 1],
    ...                turns=[Turn("model", "<think>a</think><search>bm25: x</search>", 1, "search"),
    ...                       Turn("injected", "<information>b</information>", 1, "information"),
    ...                       Turn("model", "<think>c</think><answer>Paris</answer>", 1, "answer")],
    ...                answer="Paris", stop_reason="answered")
    >>> t.model_tokens, t.injected_tokens, t.labels()
    (2, 1, [-100, -100, 7, -100, 9])
    >>> Trajectory.from_dict(t.to_dict()) == t
    True
    """

    qid: str
    question: str
    prompt: str = ""
    prompt_tokens: int = 0
    turns: list[Turn] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    answer: str | None = None
    stop_reason: str = "answered"
    issues: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    token_level: bool = True
    arms: list[str] = field(default_factory=list)
    shown_arms: dict[str, str] = field(default_factory=dict)  # shown name -> pool arm, when renamed
    model: str = ""
    seed: int = 0
    error: str | None = None
    rewards: dict[str, Any] | None = None

    # ---- views ---------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The assistant output: every turn's text in order (what `format_reward` reads)."""
        return "".join(t.text for t in self.turns)

    @property
    def model_tokens(self) -> int:
        """Tokens of the ``model`` turns: what the policy wrote."""
        return sum(t.n_tokens for t in self.turns if t.role == "model")

    @property
    def injected_tokens(self) -> int:
        """Tokens of the ``injected`` turns (``<information>`` blocks, the final instruction)."""
        return sum(t.n_tokens for t in self.turns if t.role == "injected")

    @property
    def information_tokens(self) -> int:
        """Tokens of the valid searches' ``<information>`` blocks (what the cost's token term
        counts: the ``None`` block of a failed call costs nothing, as Router-R1's failed call
        has no completion tokens)."""
        return sum(s.injected_tokens for s in self.searches if s.valid)

    @property
    def response_ids(self) -> list[int]:
        """The ids after the prompt (token-level backends)."""
        return self.ids[self.prompt_tokens:]

    @property
    def response_mask(self) -> list[int]:
        """``mask`` after the prompt, aligned with `response_ids` (token-level backends)."""
        return self.mask[self.prompt_tokens:]

    def labels(self, ignore_index: int = -100) -> list[int]:
        """``ids`` with every mask-0 token replaced by ``ignore_index`` (SFT loss targets)."""
        return [i if m else ignore_index for i, m in zip(self.ids, self.mask, strict=True)]

    def segments(self) -> list[tuple[Turn, list[int]]]:
        """Each turn with its ids, sliced from ``ids`` (token-level backends)."""
        out, at = [], self.prompt_tokens
        for turn in self.turns:
            out.append((turn, self.ids[at: at + turn.n_tokens]))
            at += turn.n_tokens
        return out

    def cost(self, arm_costs: Mapping[str, float], token_price: float = 0.0) -> float:
        """`ltrr.agent.rewards.trajectory_cost` of the valid searches and information tokens."""
        from ltrr.agent.rewards import trajectory_cost

        return trajectory_cost([s.arm for s in self.searches if s.valid and s.arm is not None], arm_costs,
                               self.information_tokens, token_price)

    # ---- persistence ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; the token counts are written for readers and checked on load."""
        d = asdict(self)
        d["model_tokens"] = self.model_tokens
        d["injected_tokens"] = self.injected_tokens
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trajectory:
        """Read `to_dict` output back; anything malformed raises `DataError` saying what."""
        if not isinstance(d, Mapping):
            raise DataError(f"a trajectory must be a JSON object, got {type(d).__name__}")
        names = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - names - {"model_tokens", "injected_tokens"})
        if unknown:
            raise DataError(f"unknown trajectory field(s) {unknown}")
        missing = [k for k in ("qid", "question", "stop_reason") if k not in d]
        if missing:
            raise DataError(f"trajectory is missing field(s) {', '.join(missing)}")
        body = {k: v for k, v in d.items() if k in names}
        try:
            body["turns"] = [Turn(**t) for t in _list(d, "turns")]
            body["searches"] = [Search(**s) for s in _list(d, "searches")]
        except TypeError as exc:
            raise DataError(f"malformed turn or search: {exc}") from None
        traj = cls(**body)
        traj.validate()
        for name in ("model_tokens", "injected_tokens"):
            if name in d and d[name] != getattr(traj, name):
                raise DataError(f"{name} is {d[name]!r} but the turns add up to {getattr(traj, name)}")
        return traj

    def validate(self) -> Trajectory:
        """Check field types and that ``ids``/``mask`` agree with the turns; returns self."""
        _typed(self, "qid", str)
        _typed(self, "question", str)
        _typed(self, "prompt", str)
        _typed(self, "token_level", bool)
        if not _count(self.prompt_tokens) or not isinstance(self.seed, int):
            raise DataError(f"prompt_tokens and seed must be integers, got {self.prompt_tokens!r} "
                            f"and {self.seed!r}")
        if self.stop_reason not in STOP_REASONS:
            raise DataError(f"stop_reason {self.stop_reason!r} is not one of {STOP_REASONS}")
        if self.answer is not None and not isinstance(self.answer, str):
            raise DataError(f"answer must be a string or null, got {self.answer!r}")
        for turn in self.turns:
            if turn.role not in ROLES or turn.kind not in TURN_KINDS[turn.role]:
                raise DataError(f"turn role/kind {turn.role!r}/{turn.kind!r} is not one of {TURN_KINDS}")
            if not isinstance(turn.text, str) or not _count(turn.n_tokens):
                raise DataError(f"a turn needs a text and n_tokens >= 0, got {turn!r}"[:200])
        for name in ("ids", "mask", "issues", "arms"):
            if not isinstance(getattr(self, name), list):
                raise DataError(f"{name} must be a list, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.shown_arms, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.shown_arms.items()):
            raise DataError(f"shown_arms must map shown names to arm names, got {self.shown_arms!r}"[:200])
        if not all(_count(i) for i in self.ids) or any(m not in (0, 1) for m in self.mask):
            raise DataError("ids must be non-negative integers and mask values 0 or 1")
        if len(self.ids) != len(self.mask):
            raise DataError(f"ids has {len(self.ids)} tokens but mask {len(self.mask)}")
        if self.token_level and self.ids:
            expected = [0] * self.prompt_tokens
            for turn in self.turns:
                expected += [int(turn.role == "model")] * turn.n_tokens
            if expected != self.mask:
                raise DataError(
                    f"mask does not match the turns: {self.prompt_tokens} prompt tokens and turns of "
                    f"{[t.n_tokens for t in self.turns]} tokens give {len(expected)} positions, "
                    f"ids has {len(self.ids)}"
                )
        return self


def _typed(obj: Any, name: str, kind: type) -> None:
    if not isinstance(getattr(obj, name), kind):
        raise DataError(f"{name} must be a {kind.__name__}, got {getattr(obj, name)!r}"[:200])


def _count(x: Any) -> bool:
    return is_int(x) and x >= 0


def _list(d: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    value = d.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise DataError(f"{name} must be a list of objects")
    return value


def save_trajectories(trajectories: Iterable[Trajectory], path: str | Path) -> Path:
    """Write trajectories as JSONL (one per line), atomically; returns the path."""
    from ltrr.data.io import write_text_atomic

    lines = [json.dumps(t.to_dict(), ensure_ascii=False, allow_nan=False) for t in trajectories]
    return write_text_atomic(path, "".join(line + "\n" for line in lines))


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a JSONL file written by `save_trajectories`.

    Raises
    ------
    DataError
        ``file:line: what is wrong`` for the first malformed line (bad JSON, not an object, a
        missing or unknown field, ids and mask that disagree with the turns).
    NotBuiltError
        When the file does not exist.
    """
    from ltrr._errors import NotBuiltError

    path = Path(path)
    if not path.is_file():
        raise NotBuiltError(f"no trajectories file at {path}")
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_dict(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            except DataError as exc:
                raise DataError(f"{path}:{lineno}: {exc}") from None
    return out


def score_trajectories(
    trajectories: Sequence[Trajectory],
    gold: Sequence[Sequence[str]] | Mapping[str, Sequence[str]],
    *,
    arm_costs: Mapping[str, float],
    normaliser: Any,
    alpha: float = 0.0,
    token_price: float = 0.0,
    metric: Any = "recall",
    correct_threshold: float = 1.0,
    reward: str = "ltrr",
) -> list[float]:
    """Score trajectories (a batch, or a GRPO group) and store the parts in ``rewards``.

    For each trajectory: `format_reward` of its text against its arms, `outcome_reward` of its
    answer, its `Trajectory.cost` turned into a cost reward by ``normaliser`` and
    `total_reward`. The cost rewards come from `CostNormaliser.score_batch`: a training-mode
    (rolling) normaliser is fed the batch's costs first, so the batch is scored on a window that
    includes it (or, with Router-R1's rule, `CostNormaliser.router_r1`, each cost just before it
    is scored); an evaluation-mode (fixed) one is only read.

    Parameters
    ----------
    trajectories : sequence of Trajectory
    gold : sequence of alias lists (aligned) or mapping of qid to alias list
    arm_costs, token_price : see `ltrr.agent.rewards.trajectory_cost`
    normaliser : CostNormaliser
        The caller's: the named reward says which rule suits it
        (`ltrr.agent.reward_options.RouterR1Reward.rolling_normaliser`, ...).
    alpha, correct_threshold : see `ltrr.agent.rewards.total_reward`
    metric : str or Metric
        See `ltrr.agent.rewards.outcome_reward`.
    reward : str
        A named reward of `ltrr.agent.reward_options.REWARDS` (``[agent] reward``): ``ltrr``
        (the parts above) or ``router-r1`` (Router-R1's released rules, for parity).

    Returns
    -------
    list of float
        The total rewards, in order. Each trajectory's ``rewards`` becomes ``{"format",
        "format_reasons", "outcome", "cost", "cost_reward", "total", "alpha", "metric"}``.
    """
    from ltrr.agent.reward_options import agent_reward

    scorer = agent_reward(reward, metric)
    trajectories = list(trajectories)
    if isinstance(gold, Mapping):
        missing = [t.qid for t in trajectories if t.qid not in gold]
        if missing:
            raise DataError(f"no gold answers for qid(s) {missing[:5]}")
        golds = [gold[t.qid] for t in trajectories]
    else:
        golds = list(gold)
        if len(golds) != len(trajectories):
            raise DataError(f"{len(trajectories)} trajectories but {len(golds)} gold alias lists")
    costs = [t.cost(arm_costs, token_price) for t in trajectories]
    cost_rewards = normaliser.score_batch(costs)
    totals = []
    for traj, aliases, cost, cost_r in zip(trajectories, golds, costs, cost_rewards.tolist(), strict=True):
        parts = scorer.score(traj.text, traj.arms, traj.answer, aliases, cost_reward=cost_r, alpha=alpha,
                             metric=metric, correct_threshold=correct_threshold, question=traj.question)
        traj.rewards = {**parts, "cost": cost, "cost_reward": cost_r, "alpha": alpha, "metric": str(metric),
                        "reward": scorer.name}
        totals.append(parts["total"])
    return totals
