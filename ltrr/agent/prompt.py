"""The prompt of the multi-round router: the protocol and one descriptor line per arm.

The system message explains the protocol (reason in ``<think>`` whenever new information
arrives, call an arm as ``<search>ARM: sub-query</search>``, read ``<information>``, finish with
``<answer>`` holding only the answer) and lists the arms, one line each: name, family, cost and,
when measured, the question types it is strongest and weakest on. The user message holds the
question.

An arm's family comes from its configuration: retriever type ``bm25`` is *lexical*, ``dense``
*dense*, an arm with a reranker is *reranked* (``reranked lexical``), the no-retrieval arm
(``retriever = "none"``) is *none*; any other retriever type is named as it is.

Examples
--------
>>> arms = [{"name": "bm25", "retriever": "bm25", "cost": 1.0, "k": 3},
...         {"name": "none", "retriever": "none"}]
>>> print(describe_arm(arms[0], {"keyword": 0.61, "cloze": 0.55, "noanswer": 0.1}))
- bm25: lexical retrieval (keyword matching); cost 1; strongest on keyword (0.61) and cloze (0.55) questions; weakest on noanswer (0.10).
>>> print(describe_arm(arms[1]))
- none: no retrieval (answer from what you know); cost 0; no measured strengths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ltrr._errors import ConfigError, DataError

__all__ = [
    "FINAL_ANSWER_INSTRUCTION",
    "SYSTEM_TEMPLATE",
    "arm_family",
    "build_messages",
    "describe_arm",
    "describe_strengths",
    "system_prompt",
]

# Step 3 departs from Router-R1's prompt on purpose. Theirs (data_process/prompt_pool.py:17-19)
# states no search budget, gives no call's cost or price, and encourages calling several
# models, and the same one several times, to learn their strengths. Ours states the budget the
# loop enforces (a 135M policy cannot learn an unstated limit from a few dozen GRPO steps, and a
# search past it ends the rollout unanswered) and says to prefer a cheaper tool when it is likely
# good enough, because each arm's cost is on its descriptor line and the reward's cost term
# (`ltrr.agent.rewards`) pays for cheap correct answers; encouraging exploration would pull the
# other way. Changing either changes every committed prompt, hence every policy trained on it.
SYSTEM_TEMPLATE = """\
You answer a question by consulting retrieval tools over several steps.

How to work:
1. Reason first, inside <think> and </think>, at the start and every time new information arrives.
2. When you need knowledge you do not have, call one tool by writing <search>ARM: sub-query</search>, \
where ARM is the exact name of a tool below and the sub-query is a short, self-contained search \
query. Then stop: the results are shown to you inside <information> and </information>.
3. You may search at most {max_turns} time(s). Choose the tool that suits each sub-query; prefer a \
cheaper tool when it is likely good enough.
4. When you can answer, write the final answer inside <answer> and </answer>. Put only the answer \
there: a few words, no explanation, no sentence around it.

Tools:
{arms}"""

#: Injected (mask 0) when the search budget is spent, before the model's last turn. It holds no
#: protocol tag, so the format rules still count the model's own tags only.
FINAL_ANSWER_INSTRUCTION = (
    "\n\nNo searches are left. Think briefly if you need to, then give the final answer between "
    "the answer tags now.\n\n"
)

_FAMILY_WORDS = {
    "lexical": "lexical retrieval (keyword matching)",
    "dense": "dense retrieval (meaning similarity)",
    "none": "no retrieval (answer from what you know)",
    "packed": "several arms' passages packed together",
}
_RETRIEVER_FAMILY = {"bm25": "lexical", "dense": "dense"}


def _field(arm: Any, name: str, default: Any = None) -> Any:
    if isinstance(arm, Mapping):
        return arm.get(name, default)
    return getattr(arm, name, default)


def _check_arm(arm: Any) -> str:
    name = _field(arm, "name")
    if isinstance(arm, str) or not isinstance(name, str) or not name:
        raise ConfigError(
            "an arm must be an ltrr.retrieval.pool.Arm or a table with at least 'name' and "
            f"'retriever', got {arm!r}"[:200]
        )
    return name


def arm_family(arm: Any, retriever_types: Mapping[str, str] | None = None) -> str:
    """The family of an arm: ``lexical``, ``dense``, ``reranked <family>``, ``none``, ...

    Parameters
    ----------
    arm : Arm or mapping
        An `ltrr.retrieval.pool.Arm` or its config table (``name``, ``retriever``,
        ``reranker``).
    retriever_types : mapping of str to str, optional
        Pool retriever name -> retriever type (``{"my-index": "bm25"}``; `Pool` keeps its
        retrievers under free names). Without it the retriever name is taken as its type.

    Examples
    --------
    >>> arm_family({"name": "bm25+reg", "retriever": "bm25", "reranker": "reg"})
    'reranked lexical'
    >>> arm_family({"name": "wiki", "retriever": "wiki-e5"}, {"wiki-e5": "dense"})
    'dense'
    >>> arm_family({"name": "none", "retriever": "none"})
    'none'
    """
    _check_arm(arm)
    retriever = _field(arm, "retriever")
    if retriever in (None, "none"):
        return "none"
    if retriever == "packed":
        return "packed"
    rtype = (retriever_types or {}).get(retriever, retriever)
    family = _RETRIEVER_FAMILY.get(str(rtype), str(rtype))
    reranker = _field(arm, "reranker", "none") or "none"
    return family if reranker == "none" else f"reranked {family}"


def describe_strengths(strengths: Mapping[str, float] | None) -> str:
    """Words for an arm's mean utility per question type (measured on the design part).

    The two strongest types are named (one when there are only two), then the weakest; types
    with a missing (NaN) mean are left out.

    Examples
    --------
    >>> describe_strengths({"keyword": 0.61, "cloze": 0.55, "noanswer": 0.02, "yesno": 0.3})
    'strongest on keyword (0.61) and cloze (0.55) questions; weakest on noanswer (0.02)'
    >>> describe_strengths({"factoid": 0.4})
    'measured on factoid questions only (0.40)'
    >>> describe_strengths(None)
    'no measured strengths'
    """
    if not strengths:
        return "no measured strengths"
    if not isinstance(strengths, Mapping):
        raise DataError(f"strengths must map question type -> mean utility, got {strengths!r}"[:200])
    items = []
    for qtype, value in strengths.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise DataError(f"strength of question type {qtype!r} must be a number, got {value!r}") from None
        if not math.isnan(number):
            items.append((str(qtype), number))
    if not items:
        return "no measured strengths"
    ranked = sorted(items, key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) == 1:
        q, v = ranked[0]
        return f"measured on {q} questions only ({v:.2f})"
    if ranked[0][1] == ranked[-1][1]:
        return f"the same on every question type ({ranked[0][1]:.2f})"
    top = ranked[:2] if len(ranked) >= 3 else ranked[:1]
    best = " and ".join(f"{q} ({v:.2f})" for q, v in top)
    q, v = ranked[-1]
    return f"strongest on {best} questions; weakest on {q} ({v:.2f})"


def describe_arm(
    arm: Any,
    strengths: Mapping[str, float] | None = None,
    *,
    retriever_types: Mapping[str, str] | None = None,
    name: str | None = None,
) -> str:
    """One descriptor line: name, family, cost and measured strengths.

    An arm without measured strengths is described by its configuration alone. ``name`` shows
    the arm under another name (`ltrr.agent.presentation`); the rest of the line is built from
    the arm's configuration, which holds no arm name.

    Examples
    --------
    >>> describe_arm({"name": "dense+reg", "retriever": "dense", "reranker": "reg", "cost": 2.2},
    ...              name="arm-3")
    '- arm-3: dense retrieval (meaning similarity), reranked by reg; cost 2.2; no measured strengths.'
    """
    real = _check_arm(arm)
    name = real if name is None else name
    family = arm_family(arm, retriever_types)
    words = _FAMILY_WORDS.get(family)
    if words is None:
        if family.startswith("reranked "):
            base = family.split(" ", 1)[1]
            base_words = _FAMILY_WORDS.get(base, f"{base} retrieval")
            words = f"{base_words}, reranked by {_field(arm, 'reranker')}"
        else:
            words = f"{family} retrieval"
    cost = _field(arm, "cost")
    if cost is None:
        cost = 0.0 if family == "none" else 1.0  # Arm's own default
    return f"- {name}: {words}; cost {float(cost):g}; {describe_strengths(strengths)}."


def system_prompt(
    arms: Sequence[Any],
    strengths: Mapping[str, Mapping[str, float]] | None = None,
    *,
    max_turns: int = 3,
    retriever_types: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> str:
    """The system message: the protocol and one `describe_arm` line per arm.

    Parameters
    ----------
    arms : sequence of Arm or mapping
        The arms the model may call, in the order they are listed.
    strengths : mapping, optional
        Arm name -> (question type -> mean utility on the design part); arms missing from it
        are described by their configuration alone.
    max_turns : int
        The search budget stated to the model.
    retriever_types : mapping, optional
        See `arm_family`.
    names : mapping, optional
        Arm name -> the name it is shown under (`ltrr.agent.presentation.ArmView.names`);
        arms missing from it are shown under their own name.
    """
    if not arms:
        raise ConfigError("the router prompt needs at least one arm")
    real = [_check_arm(a) for a in arms]
    strengths = strengths or {}
    unknown = sorted(set(strengths) - set(real))
    if unknown:
        raise ConfigError(f"strengths name arm(s) {unknown} that are not among the arms {real}")
    shown = dict(names or {})
    lines = [describe_arm(a, strengths.get(n), retriever_types=retriever_types, name=shown.get(n, n))
             for a, n in zip(arms, real, strict=True)]
    return SYSTEM_TEMPLATE.format(max_turns=int(max_turns), arms="\n".join(lines))


def build_messages(
    question: str,
    arms: Sequence[Any],
    strengths: Mapping[str, Mapping[str, float]] | None = None,
    *,
    max_turns: int = 3,
    retriever_types: Mapping[str, str] | None = None,
    system_role: bool = True,
    names: Mapping[str, str] | None = None,
) -> list[dict[str, str]]:
    """The chat messages of one rollout: the `system_prompt` and the question.

    With ``system_role=False`` (chat templates without a system role) the instructions open the
    user message instead. ``names`` shows arms under other names (`system_prompt`).

    Examples
    --------
    >>> msgs = build_messages("Who painted the Mona Lisa?", [{"name": "none", "retriever": "none"}])
    >>> [m["role"] for m in msgs], msgs[1]["content"]
    (['system', 'user'], 'Question: Who painted the Mona Lisa?')
    """
    system = system_prompt(arms, strengths, max_turns=max_turns, retriever_types=retriever_types, names=names)
    user = f"Question: {question.strip()}"
    if system_role:
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return [{"role": "user", "content": f"{system}\n\n{user}"}]
