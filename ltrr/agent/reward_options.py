"""The named rewards ``[agent] reward`` chooses between, and Router-R1's released rules.

Two rewards score a trajectory, found by name in `REWARDS` (an `ltrr._registry.Registry`):

- ``"ltrr"`` (the default): ours, `ltrr.agent.rewards` (`LtrrReward`);
- ``"router-r1"``: the rules of Router-R1's released reward code (ulab-uiuc/Router-R1 at commit
  801a240, read there and written anew here; `RouterR1Reward`), for parity runs.

Router-R1's rules, and where each comes from in their code:

- format (`router_r1_format`), from ``format_reward`` in ``verl/trainer/main_ppo.py``: -1 or 0;
  blocks are found by one non-greedy pattern over the four tags, so a block swallows what is
  nested in it; tags are balanced by *count* (not order); a ``<think>`` whose stripped content is
  empty **or the placeholder** ``...`` is punished; a ``<search>`` must hold exactly one ``:``,
  a non-empty query, neither template placeholder (``llm-name``, ``your-query``) and a query that
  does not contain its own arm's name; its arm must be a candidate of the pool.
- outcome (`squad_f1`, `squad_em`, `normalize_answer`), from ``f1_score``, ``em_check`` and
  ``normalize_answer`` in ``verl/utils/reward_score/qa_em.py``: SQuAD normalisation (lowercase,
  punctuation removed, articles removed, whitespace collapsed), the best alias counts, F1 is 0
  when either side is ``yes``/``no``/``noanswer`` and they differ; the answer is the *last*
  ``<answer>`` block of the text (``extract_solution``).
- total (`router_r1_total`), from ``compute_score_em`` (``state == "train"``) in the same file:
  -1 for a bad format; else ``(score + format) * (1 - alpha) + cost * alpha`` when the score is
  above 0 (F1 > 0, or an exact match for EM), and ``score + format`` (that is 0) otherwise.

Examples
--------
>>> text = "<think>Need a fact.</think><search>bm25: capital of Australia</search>"
>>> text += "<information>Canberra is the capital.</information><answer>Canberra</answer>"
>>> router_r1_format(text, ["bm25"])
(0.0, [])
>>> router_r1_format(text.replace("Need a fact.", "..."), ["bm25"])
(-1.0, ['placeholder_think'])
>>> RouterR1Reward().outcome(text, ["the Canberra"], "em")
1.0
>>> REWARDS.get("router-r1")().total(0.0, 0.5, cost_reward=1.0, alpha=0.5)
0.75
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ltrr._checks import check_number
from ltrr._errors import ConfigError
from ltrr._registry import Registry
from ltrr.agent.rewards import resolve_arm

__all__ = [
    "REWARDS",
    "ROUTER_R1_FORMAT_RULES",
    "LtrrReward",
    "RouterR1Reward",
    "agent_reward",
    "normalize_answer",
    "router_r1_format",
    "router_r1_total",
    "squad_em",
    "squad_f1",
]

#: Named rewards: ``[agent] reward`` is one of these names.
REWARDS: Registry[type] = Registry("agent reward")

#: Router-R1's format rules by short name, in the order their ``format_reward`` checks them.
#: The first two end the check (their early returns); the others are all reported.
ROUTER_R1_FORMAT_RULES = (
    "no_tag_block",  # no <tag>...</tag> block at all
    "unbalanced_tags",  # as many opening as closing tags, per tag, by count
    "placeholder_think",  # a <think> whose stripped content is "" or "..."
    "nested_tags",  # a tag inside a matched block
    "answer_count",  # not exactly one <answer> block
    "no_think",  # no <think> block
    "search_information_mismatch",  # as many <search> as <information> blocks
    "bad_start",  # the stripped text does not start with <think>
    "bad_end",  # ... or does not end with its last </answer>
    "search_colons",  # a <search> without exactly one ":"
    "search_empty_query",
    "search_placeholder",  # "llm-name" or "your-query" left from the prompt's template
    "search_arm_in_query",  # the query contains its own arm's name
    "search_unknown_arm",
)
_TAGS = ("search", "answer", "think", "information")
_BLOCK = re.compile(r"<(search|answer|think|information)>(.*?)</\1>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_MARKS = tuple(f"<{t}>" for t in _TAGS) + tuple(f"</{t}>" for t in _TAGS)
_PUNCTUATION = frozenset(string.punctuation)


def router_r1_format(text: str, arms: Iterable[str]) -> tuple[float, list[str]]:
    """Router-R1's format reward: ``(0.0, [])`` when every rule holds, else ``(-1.0, reasons)``.

    ``reasons`` are names of `ROUTER_R1_FORMAT_RULES`. Their code lower-cases the arm
    (``verl/trainer/main_ppo.py:76``) and checks it with its LLM pool's fuzzy name table
    (``check_llm_name``); here an arm is valid when `ltrr.agent.rewards.resolve_arm` finds it
    among ``arms`` (its exact spelling, or the one arm equal to it ignoring case), the rule the
    loop runs a search by, so this check and the loop agree on every call.

    Examples
    --------
    >>> router_r1_format("<think>...</think><answer>Paris</answer>", ["bm25"])
    (-1.0, ['placeholder_think'])
    >>> ok = "<think>a</think><search>bm25: q</search><information>x</information><answer>A</answer>"
    >>> router_r1_format(ok, ["BM25"])
    (0.0, [])
    >>> router_r1_format(ok.replace("bm25: q", "bm25: bm25 q"), ["bm25"])
    (-1.0, ['search_arm_in_query'])
    """
    names = [str(a) for a in arms]
    blocks = _BLOCK.findall(text)
    if not blocks:
        return -1.0, ["no_tag_block"]
    if any(text.count(f"<{t}>") != text.count(f"</{t}>") for t in _TAGS):
        return -1.0, ["unbalanced_tags"]
    broken: set[str] = set()
    counts = Counter(tag for tag, _ in blocks)
    for tag, raw in blocks:
        content = raw.strip()
        if tag == "search":
            broken.update(_search_errors(content, names))
        elif tag == "think" and content in ("", "..."):
            broken.add("placeholder_think")
        if any(mark in content for mark in _MARKS):
            broken.add("nested_tags")
    if counts["answer"] != 1:
        broken.add("answer_count")
    if counts["think"] == 0:
        broken.add("no_think")
    if counts["search"] != counts["information"]:
        broken.add("search_information_mismatch")
    stripped = text.strip()
    if not stripped.startswith("<think>"):
        broken.add("bad_start")
    if stripped.rfind("</answer>") + len("</answer>") != len(stripped):
        broken.add("bad_end")
    reasons = [r for r in ROUTER_R1_FORMAT_RULES if r in broken]
    return (-1.0 if reasons else 0.0), reasons


def _search_errors(content: str, names: list[str]) -> list[str]:
    """Why a stripped ``<search>`` content breaks Router-R1's rules (``[]`` when it does not)."""
    if content.count(":") != 1:
        return ["search_colons"]
    arm, query = (part.strip() for part in content.split(":"))
    errors = []
    if not query:
        errors.append("search_empty_query")
    lowered = content.lower()
    if "llm-name" in lowered or "your-query" in lowered:
        errors.append("search_placeholder")
    # their check against copying the template: an empty arm name is "in" every query too
    if arm.lower() in query.lower():
        errors.append("search_arm_in_query")
    if resolve_arm(arm, names) is None:
        errors.append("search_unknown_arm")
    return errors


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, punctuation removed, articles removed, whitespace collapsed.

    Examples
    --------
    >>> normalize_answer("  The  Eiffel-Tower, Paris! ")
    'eiffeltower paris'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_f1(answer: str, aliases: Sequence[str]) -> float:
    """Best token F1 of ``answer`` over ``aliases`` after `normalize_answer`.

    A ``yes``/``no``/``noanswer`` on either side scores 0 unless both sides are equal.

    Examples
    --------
    >>> squad_f1("the Eiffel Tower", ["Eiffel Tower in Paris"])
    0.6666666666666666
    >>> squad_f1("yes", ["yes sir"])
    0.0
    """
    best = 0.0
    pred = normalize_answer(answer)
    for alias in [aliases] if isinstance(aliases, str) else aliases:
        gold = normalize_answer(alias)
        if (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")) and pred != gold:
            continue
        same = sum((Counter(pred.split()) & Counter(gold.split())).values())
        if same:
            precision, recall = same / len(pred.split()), same / len(gold.split())
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def squad_em(answer: str, aliases: Sequence[str]) -> float:
    """1.0 when ``answer`` equals some alias after `normalize_answer`, else 0.0.

    Examples
    --------
    >>> squad_em("The Beatles.", ["beatles"])
    1.0
    """
    aliases = [aliases] if isinstance(aliases, str) else aliases
    return float(any(normalize_answer(answer) == normalize_answer(a) for a in aliases))


def router_r1_total(format_score: float, score: float, cost_reward: float, alpha: float) -> float:
    """Router-R1's total: -1 for a bad format, the cost term only when ``score > 0``.

    Examples
    --------
    >>> router_r1_total(-1.0, 1.0, 1.0, alpha=0.5)
    -1.0
    >>> router_r1_total(0.0, 0.0, 1.0, alpha=0.5)
    0.0
    >>> router_r1_total(0.0, 0.5, 0.2, alpha=0.5)
    0.35
    """
    check_number(alpha, "alpha", low=0, high=1)
    if format_score == -1.0:
        return -1.0
    if score == 0:
        return score + format_score
    return (score + format_score) * (1.0 - alpha) + cost_reward * alpha


@REWARDS.register("ltrr")
class LtrrReward:
    """Our reward (`ltrr.agent.rewards`); why it departs from Router-R1's on purpose:

    - format: tags must nest properly *in order* (theirs balances counts only); a ``<think>`` of
      ``...`` passes, and a query may contain its arm's name (``bm25+reg: bm25 ranking``) or a
      colon (``bm25: film: The Matrix``): a small policy warmed up by SFT is not tempted to copy
      a template, an arm's name can be a fair query word, and punishing those would only thin
      the reward signal. A search names its arm as theirs does and as the loop runs it
      (`ltrr.agent.rewards.resolve_arm`: exactly, or the one arm equal to it ignoring case);
    - outcome: any registry metric (``recall`` by default, so a long correct answer is not
      penalised as SQuAD F1 penalises it);
    - cost: counted only for a *correct* answer (``outcome >= correct_threshold``), so a cheap,
      half-right answer earns nothing for being cheap; theirs counts it for any F1 above 0;
    - cost normaliser: `ltrr.agent.rewards.CostNormaliser`'s defaults (no square root, the
      step rule when the window has no spread, a batch entering the window at once); the
      class says why.

    The issue comparing them (28) measured 93.3% agreement of the format rules.
    """

    name = "ltrr"

    def check(self, metric: Any) -> None:
        """Nothing to check: `ltrr.agent.rewards.outcome_reward` checks the metric when used."""

    def rolling_normaliser(self, window: int) -> Any:
        """The training (rolling) cost normaliser of this reward: ltrr's defaults."""
        from ltrr.agent.rewards import CostNormaliser

        norm = CostNormaliser(window=window)
        norm._validate()
        return norm

    def fixed_normaliser(self, costs: Iterable[float]) -> Any:
        """The evaluation (fixed) cost normaliser: 5th/95th percentiles of ``costs``."""
        from ltrr.agent.rewards import CostNormaliser

        return CostNormaliser.from_costs(costs)

    def score(self, text: str, arms: Sequence[str], answer: str | None, aliases: Sequence[str], *,
              cost_reward: float, alpha: float, metric: Any = "recall", correct_threshold: float = 1.0,
              question: str = "") -> dict[str, Any]:
        """``{"format", "format_reasons", "outcome", "total"}`` of one trajectory."""
        from ltrr.agent.rewards import format_reward, outcome_reward, total_reward

        fmt, reasons = format_reward(text, arms)
        outcome = outcome_reward(answer, aliases, metric, question=question)
        total = total_reward(fmt, outcome, cost_reward, alpha, correct_threshold=correct_threshold)
        return {"format": fmt, "format_reasons": reasons, "outcome": outcome, "total": total}


@REWARDS.register("router-r1")
class RouterR1Reward:
    """Router-R1's released reward (see the module): their format rules, SQuAD F1 or EM of the
    last ``<answer>`` block, and ``(score + format) * (1 - alpha) + cost * alpha`` when the score
    is above 0. ``[agent] metric`` must be ``f1`` or ``em``: their ``RewardManager`` defaults to
    ``f1`` (``verl/trainer/main_ppo.py:191``) but their released training script sets
    ``reward_metric="em"`` (``train.sh:79``), so ``em`` reproduces their runs.
    ``correct_threshold`` is not used.

    The cost reward comes from the caller's `ltrr.agent.rewards.CostNormaliser`; the stages
    build it with `rolling_normaliser` (training: Router-R1's rule, `CostNormaliser.router_r1`)
    and `fixed_normaliser` (evaluation). Their validation scores with the same rolling buffer as
    training (one module-level ``buffer``, ``main_ppo.py:44``, fed by both reward managers); our
    evaluation keeps fixed bounds from the design part, under their square root and 0.5 rule,
    so that a question's score does not depend on the questions scored before it.
    """

    name = "router-r1"
    metrics = ("f1", "em")

    def check(self, metric: Any) -> None:
        """Refuse a metric their code has no rule for."""
        if str(metric) not in self.metrics:
            raise ConfigError(f'[agent] reward = "router-r1" scores with metric "f1" or "em" (their '
                              f'reward_metric), got metric = {str(metric)!r}; set [agent] metric = "em" '
                              f'(their train.sh) or "f1" (their RewardManager\'s default)')

    def rolling_normaliser(self, window: int = 1000) -> Any:
        """The training cost normaliser: `ltrr.agent.rewards.CostNormaliser.router_r1` (the
        square root of each cost, 5th-95th percentiles of the last ``window``, 0.5 without
        spread, one cost at a time)."""
        from ltrr.agent.rewards import CostNormaliser

        return CostNormaliser.router_r1(window)

    def fixed_normaliser(self, costs: Iterable[float]) -> Any:
        """The evaluation cost normaliser: 5th/95th percentiles of the square roots of
        ``costs``, 0.5 when they do not differ (see the class on why fixed)."""
        from ltrr.agent.rewards import CostNormaliser

        return CostNormaliser.from_costs(costs, transform="sqrt", no_spread=0.5)

    def outcome(self, text: str, aliases: Sequence[str], metric: Any = "f1") -> float:
        """SQuAD F1 or EM of the last ``<answer>`` block (0 without one)."""
        self.check(metric)
        found = _ANSWER.findall(text)
        if not found:
            return 0.0
        answer = found[-1].strip()
        return squad_f1(answer, aliases) if str(metric) == "f1" else squad_em(answer, aliases)

    def total(self, format_score: float, outcome: float, *, cost_reward: float, alpha: float) -> float:
        """`router_r1_total`."""
        return router_r1_total(format_score, outcome, cost_reward, alpha)

    def score(self, text: str, arms: Sequence[str], answer: str | None, aliases: Sequence[str], *,
              cost_reward: float, alpha: float, metric: Any = "f1", correct_threshold: float = 1.0,
              question: str = "") -> dict[str, Any]:
        """``{"format", "format_reasons", "outcome", "total"}``; ``answer`` is re-read from
        ``text`` (their last-block rule), ``correct_threshold`` and ``question`` are unused."""
        fmt, reasons = router_r1_format(text, arms)
        outcome = self.outcome(text, aliases, metric)
        return {"format": fmt, "format_reasons": reasons, "outcome": outcome,
                "total": self.total(fmt, outcome, cost_reward=cost_reward, alpha=alpha)}


def agent_reward(agent: Mapping[str, Any] | str = "ltrr", metric: Any = None) -> Any:
    """The named reward of an ``[agent]`` table (or a name), checked against its metric.

    An unknown name raises `ConfigError` naming the choices.

    Examples
    --------
    >>> agent_reward({"reward": "router-r1", "metric": "f1"}).name
    'router-r1'
    """
    if isinstance(agent, Mapping):
        name = agent.get("reward", "ltrr")
        metric = agent.get("metric", "recall") if metric is None else metric
    else:
        name = agent
    reward = REWARDS.get(name)()
    reward.check("recall" if metric is None else metric)
    return reward
