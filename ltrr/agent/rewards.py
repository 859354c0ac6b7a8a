"""Rewards of a multi-round routing trajectory (Router-R1, Zhang, Feng & You, 2025).

A trajectory is scored by three parts, combined hierarchically by `total_reward`:

- `format_reward`: 0 when the assistant output follows the protocol (``<think>`` reasoning,
  ``<search>ARM: sub-query</search>`` calls each followed by an ``<information>`` block, one
  final ``<answer>``), -1 otherwise, with the name of every rule it breaks.
- `outcome_reward`: how well the answer matches the gold aliases, by a metric of ltrr's
  registry (``recall`` by default; the best alias counts, as in labelling).
- the cost reward: `trajectory_cost` (arm costs plus injected tokens at a price) turned into a
  reward in [0, 1] by a `CostNormaliser` (high when cheap).

Everything here is a pure function of plain values (numpy only), so a trainer, an evaluator and
a test compute the same numbers.

This is the ``"ltrr"`` reward of ``[agent] reward``; ``"router-r1"`` reproduces Router-R1's
released rules for parity (`ltrr.agent.reward_options`, whose `LtrrReward` says why ours differs:
tags nested in order, a query that may hold a colon or its arm's name, any registry metric as
the outcome, the cost counted only for a correct answer). Both name an arm by `resolve_arm`, the
rule the loop runs a search by.

Examples
--------
>>> text = "<think>I need a fact.</think><search>bm25: capital of Australia</search>"
>>> text += "<information>Canberra is the capital.</information>"
>>> text += "<think>Found it.</think><answer>Canberra</answer>"
>>> format_reward(text, arms=["bm25", "none"])
(0.0, [])
>>> outcome_reward("Canberra", ["Canberra"])
1.0
>>> cost = trajectory_cost(["bm25"], {"bm25": 1.0}, injected_tokens=100, token_price=0.001)
>>> round(cost, 3)
1.1
>>> norm = CostNormaliser.fixed(0.0, 2.0)
>>> total_reward(0.0, 1.0, norm.cost_reward(cost), alpha=0.2)
0.89
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ltrr._checks import check_int, check_number, is_finite
from ltrr._errors import ConfigError, DataError
from ltrr.agent.costs import CostNormaliser

__all__ = [
    "TAGS",
    "FORMAT_RULES",
    "SEARCH_ERRORS",
    "CostNormaliser",
    "format_reward",
    "outcome_reward",
    "parse_search",
    "resolve_arm",
    "total_reward",
    "trajectory_cost",
]

#: The protocol's tags, in the order the rules name them.
TAGS = ("think", "search", "information", "answer")
#: Why a ``<search>`` call is not valid (`parse_search`); `format_reward` reports them with a
#: ``search_`` prefix.
SEARCH_ERRORS = ("no_arm", "several_arms", "unknown_arm", "empty_query")
#: Every rule `format_reward` checks, by its stable short name, in the order it reports them.
FORMAT_RULES = (
    "unbalanced_tags",
    "nested_tags",
    "empty_think",
    "answer_count",
    "no_think",
    "search_information_mismatch",
    "bad_start",
    "bad_end",
    *(f"search_{e}" for e in SEARCH_ERRORS),
)
_TAG = re.compile(r"<(/?)(" + "|".join(TAGS) + r")>")


def _blocks(text: str, tag: str) -> list[str]:
    """Contents of the well-formed ``<tag>...</tag>`` blocks (non-greedy, left to right)."""
    return re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S)


def resolve_arm(name: str, arms: Iterable[str]) -> str | None:
    """The arm of ``arms`` that ``name`` calls: the one spelled exactly so, else the one arm equal
    to it ignoring case; None when there is none, or when several differ only by case.

    The loop runs a search by this rule and both format rules (`format_reward`,
    `ltrr.agent.reward_options.router_r1_format`) accept an arm by it, so a call that ran is never
    punished as unknown, nor one that did not run rewarded. Router-R1 lower-cases the name both
    when routing (``router_r1/llm_agent/route_service.py:173``) and in its format check
    (``verl/trainer/main_ppo.py:76``); their model names never differ only by case, so refusing
    such an ambiguity departs from them only where they cannot go.

    Examples
    --------
    >>> resolve_arm("BM25", ["bm25", "dense"])
    'bm25'
    >>> resolve_arm("Dense", ["dense", "DENSE"]) is None  # two arms match ignoring case
    True
    >>> resolve_arm("DENSE", ["dense", "DENSE"])  # an exact match comes first
    'DENSE'
    """
    names = [a for a in arms if isinstance(a, str)]
    if name in names:
        return name
    folded = name.lower()
    hits = [a for a in names if a.lower() == folded]
    return hits[0] if len(hits) == 1 else None


def parse_search(content: str, arms: Iterable[str]) -> tuple[str | None, str, str | None]:
    """Split the content of a ``<search>`` block into ``(arm, sub-query, error)``.

    The content must be ``ARM: sub-query``: one prefix naming an arm of ``arms`` (`resolve_arm`:
    its exact spelling, or the one arm equal to it ignoring case), a colon, a non-empty
    sub-query. ``arm`` is the arm of ``arms`` when one is named (as written otherwise).
    ``error`` is None for a valid call, else one of `SEARCH_ERRORS`: ``no_arm`` (no ``ARM:``
    prefix), ``several_arms`` (the sub-query itself starts with another ``ARM:`` prefix),
    ``unknown_arm``, ``empty_query``. A colon inside the sub-query is kept (``bm25: film: the
    matrix`` searches ``film: the matrix``).

    Examples
    --------
    >>> parse_search(" bm25: who painted the Mona Lisa ", ["bm25", "dense"])
    ('bm25', 'who painted the Mona Lisa', None)
    >>> parse_search("BM25: Mona Lisa", ["bm25", "dense"])
    ('bm25', 'Mona Lisa', None)
    >>> parse_search("google: Mona Lisa", ["bm25"])
    ('google', 'Mona Lisa', 'unknown_arm')
    >>> parse_search("bm25: dense: Mona Lisa", ["bm25", "dense"])
    ('bm25', 'dense: Mona Lisa', 'several_arms')
    >>> parse_search("Mona Lisa", ["bm25"])
    (None, 'Mona Lisa', 'no_arm')
    """
    names = list(arms)
    content = content.strip()
    if ":" not in content:
        return None, content, "no_arm"
    arm, query = (part.strip() for part in content.split(":", 1))
    if not arm:
        return None, query, "no_arm"
    named = resolve_arm(arm, names)
    if ":" in query and resolve_arm(query.split(":", 1)[0].strip(), names) is not None:
        return named or arm, query, "several_arms"
    if named is None:
        return arm, query, "unknown_arm"
    if not query:
        return named, query, "empty_query"
    return named, query, None


def format_reward(text: str, arms: Iterable[str]) -> tuple[float, list[str]]:
    """Check the assistant output of a trajectory against the protocol.

    Parameters
    ----------
    text : str
        Everything after the prompt: what the model wrote and what the loop injected
        (``Trajectory.text``).
    arms : iterable of str
        The arm names a ``<search>`` may call.

    Returns
    -------
    score : float
        0.0 when every rule holds, -1.0 otherwise.
    reasons : list of str
        The names (`FORMAT_RULES`) of the broken rules, each once, in `FORMAT_RULES` order:

        - ``unbalanced_tags``: a closing tag without its opening tag, or a tag left open
          (``think``, ``search``, ``information``, ``answer``);
        - ``nested_tags``: a tag opened inside another;
        - ``empty_think``: a ``<think></think>`` with nothing but whitespace inside;
        - ``answer_count``: not exactly one ``<answer>``;
        - ``no_think``: no ``<think>`` at all;
        - ``search_information_mismatch``: as many ``<search>`` as ``<information>`` fails;
        - ``bad_start`` / ``bad_end``: the output (whitespace stripped) does not start with
          ``<think>`` / end with ``</answer>``;
        - ``search_no_arm``, ``search_several_arms``, ``search_unknown_arm``,
          ``search_empty_query``: a search block that `parse_search` rejects.

    Examples
    --------
    >>> format_reward("<think>easy</think><answer>Paris</answer>", ["bm25"])
    (0.0, [])
    >>> format_reward("<answer>Paris</answer><answer>Rome</answer>", ["bm25"])
    (-1.0, ['answer_count', 'no_think', 'bad_start'])
    """
    arms = list(arms)
    broken: set[str] = set()
    stack: list[str] = []
    opened = dict.fromkeys(TAGS, 0)
    for m in _TAG.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if closing:
            if stack and stack[-1] == tag:
                stack.pop()
            else:
                broken.add("unbalanced_tags")
                if tag in stack:  # close what was opened, so one slip is not reported twice
                    del stack[len(stack) - 1 - stack[::-1].index(tag):]
        else:
            if stack:
                broken.add("nested_tags")
            stack.append(tag)
            opened[tag] += 1
    if stack:
        broken.add("unbalanced_tags")
    if any(not b.strip() for b in _blocks(text, "think")):
        broken.add("empty_think")
    if opened["answer"] != 1:
        broken.add("answer_count")
    if opened["think"] == 0:
        broken.add("no_think")
    if opened["search"] != opened["information"]:
        broken.add("search_information_mismatch")
    stripped = text.strip()
    if not stripped.startswith("<think>"):
        broken.add("bad_start")
    if not stripped.endswith("</answer>"):
        broken.add("bad_end")
    for content in _blocks(text, "search"):
        error = parse_search(content, arms)[2]
        if error:
            broken.add(f"search_{error}")
    reasons = [r for r in FORMAT_RULES if r in broken]
    return (-1.0 if reasons else 0.0), reasons


def outcome_reward(
    answer: str | None,
    gold_aliases: Sequence[str],
    metric: Any = "recall",
    *,
    question: str = "",
) -> float:
    """Score an answer against its gold aliases with a metric of `ltrr.metrics`.

    Parameters
    ----------
    answer : str or None
        The text inside ``<answer>``; None (no answer) scores 0.
    gold_aliases : sequence of str
        Accepted answers; the best-scoring alias counts, as in labelling.
    metric : str or Metric
        A metric name or text form of the registry (``recall``, ``em``, ``f1``, ``contains``,
        ``semsim``, ``bem``); judge metrics (``ac``, ``aqs``) are refused: a reward is computed
        for every rollout and must not call an LLM.
    question : str
        Passed to the metric (lexical metrics ignore it).

    Returns
    -------
    float
        The metric's score, in its range ([0, 1] for ``recall``).

    Examples
    --------
    >>> outcome_reward("Leonardo", ["Leonardo da Vinci", "Leonardo"])
    1.0
    >>> outcome_reward("Leonardo", ["Leonardo da Vinci"])
    0.3333333333333333
    >>> outcome_reward(None, ["Paris"])
    0.0
    """
    from ltrr.metrics import Metric, parse_metric, validate_inputs

    m = parse_metric(metric) if isinstance(metric, str) else metric
    if not isinstance(m, Metric):
        raise ConfigError(f"outcome_reward metric must be a metric name or Metric, got {metric!r}")
    if m.needs_judge:
        raise ConfigError(
            f"outcome_reward cannot use the judge metric {str(m)!r} (an LLM call per rollout); "
            "use recall, em, f1, contains, semsim or bem"
        )
    validate_inputs([question], [answer or ""], [gold_aliases])
    if answer is None:
        return 0.0
    return float(m.score(question, answer, list(gold_aliases)))


def trajectory_cost(
    searches: Sequence[str],
    arm_costs: Mapping[str, float],
    injected_tokens: int,
    token_price: float = 0.0,
) -> float:
    """The cost of a trajectory, in the pool's arm-cost units.

    ``sum(arm_costs[arm] for arm in searches) + injected_tokens * token_price``: an arm's cost
    is its relative cost in the pool (`ltrr.retrieval.pool.Arm.cost`, 1.0 for a retrieving arm
    by default, 0.0 for ``none``) and ``token_price`` is the cost, in those same units, of one
    token the loop injects into the context (the ``<information>`` blocks the model reads).

    This departs from Router-R1 on purpose. Their call costs the *called model's* completion
    tokens times *its own* price per million tokens (``router_r1/llm_agent/route_service.py:129``,
    ``int(completion_tokens) * API_PRICE_1M_TOKENS[LLM_NAME]``), because their arms are LLMs
    billed per generated token. Our arms are retrievers: a search costs the same whether it
    returns one passage or three (a fixed cost per arm, set in the pool), and what grows with the
    passages is the reading the *policy* does, priced once for every arm by ``token_price``
    because the same policy reads every block. A failed call (an unknown arm, a search error)
    costs nothing, as their failed call does (0 completion tokens).

    Parameters
    ----------
    searches : sequence of str
        The arm of each valid search, in order (an invalid call runs no arm and costs nothing).
    arm_costs : mapping of str to float
        Cost of each arm (``Pool.costs``).
    injected_tokens : int
        Tokens injected by the loop.
    token_price : float
        Cost units per injected token (>= 0).

    Examples
    --------
    >>> trajectory_cost(["bm25", "dense", "bm25"], {"bm25": 1.0, "dense": 2.0}, 0)
    4.0
    >>> trajectory_cost([], {}, injected_tokens=500, token_price=0.002)
    1.0
    """
    if isinstance(searches, str):
        raise DataError("searches must be a list of arm names, got one string; wrap it in a list")
    if not is_finite(token_price) or token_price < 0:
        raise ConfigError(f"token_price must be a finite number >= 0, got {token_price!r}")
    check_int(injected_tokens, "injected_tokens", low=0, error=DataError)
    total = 0.0
    for arm in searches:
        if arm not in arm_costs:
            raise ConfigError(
                f"no cost for arm {arm!r}; arm_costs has: {', '.join(sorted(map(str, arm_costs)))}"
            )
        total += float(arm_costs[arm])
    return total + int(injected_tokens) * float(token_price)


def total_reward(
    format_score: float,
    outcome: float,
    cost_reward: float,
    alpha: float,
    *,
    correct_threshold: float = 1.0,
) -> float:
    """Combine the reward parts hierarchically.

    A bad format (``format_score < 0``) gives -1 and nothing else counts. Otherwise the reward is
    ``(1 - alpha) * outcome``, plus ``alpha * cost_reward`` only when the answer is correct,
    that is ``outcome >= correct_threshold``: a cheap wrong answer earns nothing for being cheap.

    Parameters
    ----------
    format_score : float
        From `format_reward` (0 or -1).
    outcome : float
        From `outcome_reward`.
    cost_reward : float
        From `CostNormaliser.cost_reward`, in [0, 1].
    alpha : float
        Weight of the cost term, in [0, 1].
    correct_threshold : float
        The outcome from which an answer counts as correct; the default 1.0 means full recall
        (every token of some gold alias is in the answer).

    Examples
    --------
    >>> total_reward(-1.0, 1.0, 1.0, alpha=0.5)
    -1.0
    >>> total_reward(0.0, 1.0, 0.5, alpha=0.5)
    0.75
    >>> total_reward(0.0, 0.5, 1.0, alpha=0.5)  # not correct: the cost term does not count
    0.25
    """
    check_number(alpha, "alpha", low=0, high=1)
    for name, value in (("format_score", format_score), ("outcome", outcome),
                        ("cost_reward", cost_reward), ("correct_threshold", correct_threshold)):
        if not is_finite(value):
            raise DataError(f"total_reward: {name} must be a finite number, got {value!r}")
    if format_score < 0:
        return -1.0
    reward = (1.0 - alpha) * float(outcome)
    if outcome >= correct_threshold:
        reward += alpha * float(cost_reward)
    return reward
