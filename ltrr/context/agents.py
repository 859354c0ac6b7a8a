"""The multi-agent QA loop of context routing (RCR-Router, Liu et al., 2025).

Three agents share one structured `Memory` and answer a question in ``T`` rounds
(``[context] rounds``, at most 3). In each round:

1. The **Planner** (role ``planner``, stage ``plan``) splits the question into at most
   ``max_subquestions`` sub-questions, one per line (`parse_subquestions`; when no line parses,
   the question itself is the only sub-question). The plan becomes a ``plan`` item.
2. The **Searcher** (role ``searcher``, stage ``search``), for each sub-question: a trained
   router ranks the arms (`RoutedSearch`) and the top arm's passages become ``passage`` items
   (source: the arm); the Searcher then answers the sub-question from its context, and that
   answer becomes a ``fact`` whose ``key`` is the sub-question, so a later round's answer to the
   same sub-question replaces it (the replacement is logged in ``Memory.log``).
3. The **Answerer** (role ``answerer``, stage ``answer``) composes the final answer from its
   context: a ``message`` item. The last round's answer is the loop's answer.

Every agent makes one LLM call per round (the Searcher one per sub-question) through the run's
(cached) generator. The Searcher and the Answerer go through the run's answer template and its
fallback (`ltrr.generation.answer_with_fallback`), the context items as its documents; the
Planner's prompt is `plan_messages`. An agent's output enters the memory through `Memory.update`
as soon as it is written, so the Searcher reads this round's passages and the Answerer this
round's facts, and the memory after a round is the updated memory the next round reads:
near-duplicates (embedding cosine >= ``dedup_threshold``; the same text when there are no
embeddings) are dropped, and a newer fact, plan or answer replaces the older one of the same
key. Embeddings come from the pool's embedding source (`PoolEmbedder`): the stored passage
vectors, the encoder's query side for other text; without one, items carry none.

What each call reads is chosen by a **strategy** (registry `strategies`; it and the settings,
`LoopSpec`, live in `ltrr.packing.strategies`) from the memory, within the agent's budget
``B_i = base_budget + offset_i`` (`allocate_budget`):

- ``full-context``: the whole memory, no budget.
- ``static``: a fixed slice: the item kinds in the order of the role's stage priorities, within
  a kind the most recent first, cut where the next item would pass the budget; no importance.
- ``rcr-oneshot``: `importance` (the goal, the current sub-question or the question, gives the
  similarity signal, and its content words join the role's keywords), then the ``[context]
  selector`` within the budget; one round only.
- ``rcr-iterative``: the same, over ``T`` rounds, the memory updated after each.

A budget smaller than every item gives an empty context: the call reads nothing, and the turn
records why (`Turn.empty_reason`). A context longer than the model's window is still cut by the
prompt builder (`Turn.truncated`), which a budget of the window's size avoids.

Examples
--------
>>> from ltrr.generation.base import Generation, Generator
>>> class Echo(Generator):
...     backend, identity = "echo", "echo-1"
...     def generate(self, prompts, params=None):
...         return [Generation(text="Paris", prompt_tokens=10) for _ in prompts]
>>> search = lambda q: ("bm25", [("d1", "Paris is the capital of France.")])
>>> loop = ContextLoop(Echo(), search=search, strategy="rcr-iterative", spec=LoopSpec(rounds=2))
>>> res = loop.answer("What is the capital of France?")
>>> res.answer, res.rounds, res.prompt_tokens()
('Paris', 2, 60)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ltrr._errors import ConfigError, LtrrError
from ltrr.context.memory import Memory
from ltrr.packing.items import MemoryItem
from ltrr.packing.select import Role, allocate_budget
from ltrr.packing.strategies import AGENTS, MAX_ROUNDS, STRATEGIES, LoopSpec, Strategy, strategies

__all__ = ["AGENTS", "MAX_ROUNDS", "STRATEGIES", "Agent", "Answerer", "ContextLoop", "LoopSpec", "Planner", "PoolEmbedder",
           "QuestionResult", "RoutedSearch", "Searcher", "Strategy", "Turn", "parse_subquestions", "plan_messages",
           "pool_embedder", "strategies"]


# ---- prompts ----------------------------------------------------------------------------------
PLAN_INSTRUCTION = ("Split the question into at most {n} simpler sub-questions whose answers together answer it. "
                    "Write one sub-question per line and nothing else.")
# A line's bullet: dashes and dots; a number ("1.", "(2)", "3:", not the "3" of "3.5"); a letter
# followed by ")" or by "." and a space, unless another initial follows ("a) ", "b. ", but not the
# "J." of "J. K. Rowling" or the "U." of "U.S."); "Sub-question 2:"; "Q1:", "Q 2)" or "Q:" (not
# the "Q-" of "Q-learning").
_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d+[.):](?!\d)|\(?[a-z]\)|[a-z]\.(?=\s)(?!\s+[a-z]\.)"
                     r"|sub-?question\s*\d*\s*[:.)-]|q\s*\d+\s*[:.)-]|q:)\s*", re.I)


def plan_messages(question: str, notes: Sequence[str], max_subquestions: int) -> list[dict[str, str]]:
    """The Planner's chat prompt: its context as numbered notes, the instruction, the question."""
    parts = []
    if notes:
        parts.append("Notes:\n" + "\n".join(f"Note {i}: {' '.join(t.split())}" for i, t in enumerate(notes, 1)))
    parts.append(PLAN_INSTRUCTION.format(n=max_subquestions))
    parts.append(f"Question: {question.strip()}\nSub-questions:")
    return [{"role": "user", "content": "\n\n".join(parts)}]


def parse_subquestions(text: str, question: str, max_subquestions: int) -> list[str]:
    """Sub-questions from the Planner's output: one per line, bullets and numbers stripped.

    A line with several questions is split after each ``?``; headers (a line ending in ``:``),
    lines of fewer than two words and repeats are dropped; at most ``max_subquestions`` are
    kept. With none left, the question itself is the only sub-question.

    Examples
    --------
    >>> parse_subquestions("1. Who wrote Hamlet?\\n- When was he born?", "q", 3)
    ['Who wrote Hamlet?', 'When was he born?']
    >>> parse_subquestions("unknown", "Who wrote Hamlet?", 3)
    ['Who wrote Hamlet?']
    """
    out: list[str] = []
    seen: set[str] = set()
    for line in (text or "").splitlines():
        for part in re.split(r"(?<=\?)\s+", line.strip()):
            s = _BULLET.sub("", part).strip().strip("\"'`").strip()
            if not s or (s.endswith(":") and "?" not in s) or len(s.split()) < 2:
                continue
            key = " ".join(s.split()).casefold()
            if key not in seen:
                seen.add(key)
                out.append(s)
    return out[:max_subquestions] or [question.strip()]


# ---- embeddings and search --------------------------------------------------------------------
class PoolEmbedder:
    """Embeddings of memory items from a pool's `EmbeddingSource`.

    Passages get the source's (stored) document vectors; other text (facts, plans, answers,
    goals) the source encoder's query side, cached per text.
    """

    def __init__(self, source):
        self.source = source

    def passages(self, docids: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Passage embeddings, one row per docid: the source's vectors (``texts`` encode the rest).

        Parameters
        ----------
        docids : sequence of str
            The passages' document ids, looked up in the source's stored vectors.
        texts : sequence of str
            The passages' texts, one per docid, encoded for a docid the source has not stored.

        Returns
        -------
        numpy.ndarray
            ``(len(docids), dim)`` float64.
        """
        return np.asarray(self.source.get([str(d) for d in docids], list(texts)), dtype=np.float64)

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of other text (facts, plans, answers, goals) by the encoder's query side.

        Each distinct text is encoded once per embedder and cached.

        Returns
        -------
        numpy.ndarray
            ``(len(texts), dim)`` float64, one row per text, in order.
        """
        cache = self.__dict__.setdefault("_cache", {})
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        if missing:
            from ltrr.embed import get_encoder

            cache.update(zip(missing, get_encoder(self.source.encoder_name).encode_queries(missing), strict=True))
        return np.asarray([cache[t] for t in texts], dtype=np.float64)


def pool_embedder(pool) -> PoolEmbedder | None:
    """A `PoolEmbedder` over ``pool.embedding_source()``, or None when the pool has none."""
    try:
        return PoolEmbedder(pool.embedding_source())
    except (LtrrError, ImportError, OSError):
        return None


class RoutedSearch:
    """The Searcher's tool: a routed question's top arm and that arm's passages.

    ``pipeline`` is a `ltrr.routers.RoutedPipeline` (or anything whose ``route(question)``
    returns a `ltrr.routers.pipeline.Routed`); the passages are the top arm's rows of the pool
    search it ran, in rank order. The no-retrieval arm has none.
    """

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __call__(self, question: str) -> tuple[str, list[tuple[str, str]]]:
        routed = self.pipeline.route(question)
        arm = routed.arm
        if routed.results is None or len(routed.results) == 0:
            return arm, []
        rows = routed.arm_passages(arm)
        return arm, list(zip(rows["docid"].astype(str), rows["text"].astype(str), strict=True))


# ---- results ----------------------------------------------------------------------------------
@dataclass
class Turn:
    """One LLM call of an agent: what it could read, what it read, what it cost."""

    agent: str
    round: int
    goal: str
    budget: int | None
    candidates: int
    selected: list[str] = field(default_factory=list)
    selected_tokens: int = 0
    prompt_tokens: int = 0
    empty_reason: str | None = None
    truncated: int = 0  # items the prompt builder cut to fit the model's window
    output: str | None = None
    error: str | None = None
    # the generator's own seconds for this call, as recorded when it was made: a cache hit
    # carries the latency of the call it replays, so strategies that share calls compare fairly
    generation_s: float = 0.0


@dataclass
class QuestionResult:
    """The loop's answer to one question, its turns and its final memory."""

    question: str
    strategy: str
    answer: str | None
    rounds: int
    turns: list[Turn]
    memory: Memory
    runtime_s: float
    subquestions: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    error: str | None = None

    def prompt_tokens(self, agent: str | None = None) -> int:
        """Prompt tokens of every call (of ``agent``'s calls), as the generator counted them."""
        return sum(t.prompt_tokens for t in self.turns if agent is None or t.agent == agent)

    def generation_s(self) -> float:
        """The generator's seconds over every call, cache hits counted at their recorded latency."""
        return float(sum(t.generation_s for t in self.turns))

    @property
    def empty_turns(self) -> list[Turn]:
        """Turns whose memory had items but whose context was empty (the budget's doing)."""
        return [t for t in self.turns if t.empty_reason]

    def to_row(self) -> dict:
        """The result as one row of `ltrr.context.agents_eval.compare_strategies`'s table.

        ``runtime_s`` (wall time) is left out: a table must be the same on every run of the same
        config and seed, so wall time is kept apart (``agents_timings.json``).
        """
        empty = self.empty_turns
        return {"strategy": self.strategy, "rounds": self.rounds, "answer": self.answer, "error": self.error,
                **{f"prompt_tokens_{a}": self.prompt_tokens(a) for a in AGENTS},
                "prompt_tokens": self.prompt_tokens(), "generation_s": self.generation_s(),
                "subquestions": "\n".join(self.subquestions), "arms": "|".join(self.arms),
                "empty_contexts": len(empty),
                "empty_note": f"{empty[0].agent} r{empty[0].round}: {empty[0].empty_reason}" if empty else "",
                "memory_items": len(self.memory), "memory_log": "\n".join(self.memory.log),
                "turns": json.dumps([asdict(t) for t in self.turns], sort_keys=True)}


# ---- the agents -------------------------------------------------------------------------------
class _Episode:
    """One question's run of the loop: the shared memory, the turns, and the agents' helpers."""

    def __init__(self, loop: ContextLoop, question: str, strategy: Strategy, spec: LoopSpec, template, params):
        self.loop, self.question, self.strategy = loop, question, strategy
        self.spec, self.template, self.params = spec, template, params
        exact = getattr(loop.generator, "exact_token_counts", False)  # the generator's tag (a wrapper's: its model's)
        self.memory = Memory(token_source="tokenizer" if exact else "estimate")
        self.turns: list[Turn] = []
        self.round = 0
        self.subquestions: list[str] = []
        self.arms: list[str] = []
        self.answer: str | None = None
        self.error: str | None = None
        self.routes: dict[str, tuple[str, list[tuple[str, str]]]] = {}

    def count(self, text: str) -> int:
        cache = self.loop.__dict__.setdefault("_tokens", {})
        if text not in cache:
            cache[text] = int(self.loop.generator.count_tokens(text))
        return cache[text]

    def route(self, question: str) -> tuple[str, list[tuple[str, str]]]:
        if question not in self.routes:
            self.routes[question] = self.loop.search(question)
        return self.routes[question]

    def write(self, kind: str, texts: Sequence[str], *, prefix: str, source: str, keys=None,
              docids: Sequence[str] | None = None) -> list[MemoryItem]:
        emb = self.loop.embedder
        embed = None
        if emb is not None:
            embed = (lambda ts: emb.passages(docids, ts)) if docids is not None else emb.texts
        items = Memory.make_items(texts, kind=kind, source=source, round=self.round, count_tokens=self.count,
                                  embed=embed, prefix=prefix, keys=keys)
        return self.memory.update(items, dedup_threshold=self.spec.dedup_threshold)

    def goal_embedding(self, goal: str):
        if not self.strategy.scored or self.loop.embedder is None or self.spec.weights.similarity <= 0:
            return None
        return self.loop.embedder.texts([goal])[0].tolist()


class Agent:
    """An agent: a role, a task stage, and one turn per round (`act`)."""

    name = "agent"
    stage = "plan"

    def __init__(self, role: Role):
        self.role = role

    def read(self, ep: _Episode, goal: str) -> tuple[list[MemoryItem], Turn]:
        """The context of a call (the strategy's choice within the role's budget) and its turn."""
        spec, strat = ep.spec, ep.strategy
        budget = allocate_budget(spec.base_budget, self.role) if strat.budgeted else None
        items = list(ep.memory.items)
        chosen = strat.choose(items, role=self.role, stage=self.stage, budget=budget, round=ep.round, goal=goal,
                              goal_embedding=ep.goal_embedding(goal), spec=spec)
        turn = Turn(self.name, ep.round, goal, budget, len(items), [it.id for it in chosen],
                    sum(it.tokens for it in chosen))
        if items and not chosen:
            turn.empty_reason = (f"the budget of {budget} tokens is smaller than every memory item"
                                 if all(it.tokens > (budget or 0) for it in items)
                                 else f"nothing selected within the budget of {budget} tokens")
        ep.turns.append(turn)
        return chosen, turn

    def respond(self, ep: _Episode, question: str, chosen: Sequence[MemoryItem], turn: Turn) -> str | None:
        """Answer ``question`` from ``chosen`` through the run's template (with its fallback)."""
        from ltrr.generation import answer_with_fallback

        loop = ep.loop
        res = answer_with_fallback(loop.generator, ep.template, question, [it.text for it in chosen] or None,
                                   ep.params, max_prompt_tokens=loop.max_prompt_tokens)
        turn.prompt_tokens, turn.output, turn.error = res.prompt_tokens, res.answer, res.error
        turn.truncated = res.n_truncated_passages
        turn.generation_s = float(sum(g.latency_s for g in res.generations))
        return res.answer if res.ok else None

    def act(self, ep: _Episode) -> None:  # pragma: no cover - abstract
        """Take this agent's turn of the episode's current round.

        Reads a context from the episode's memory (`read`), makes the agent's LLM call(s), and
        writes what it produced into the memory and the episode's state. Subclasses implement it.

        Parameters
        ----------
        ep : _Episode
            The question being answered: its memory, round, turns and the loop's settings.
        """
        raise NotImplementedError


class Planner(Agent):
    """Splits the question into sub-questions; writes the ``plan`` item."""

    name, stage = "planner", "plan"

    def act(self, ep: _Episode) -> None:
        """Plan the round: set ``ep.subquestions`` and write them as one ``plan`` item.

        Notes that do not fit the model's window (or ``max_prompt_tokens``) are dropped from the
        end, each counted in the turn's ``truncated``; a failed call plans the question itself.
        """
        from ltrr.generation.prompts import count_prompt_tokens

        loop, n = ep.loop, ep.spec.max_subquestions
        chosen, turn = self.read(ep, ep.question)
        notes = [it.text for it in chosen]
        limit = int(loop.generator.context_length) - int(ep.params.max_new_tokens)
        limit = min(limit, loop.max_prompt_tokens) if loop.max_prompt_tokens else limit
        msgs = plan_messages(ep.question, notes, n)
        while notes and count_prompt_tokens(loop.generator, msgs) > limit:  # the model's window
            notes.pop()
            turn.truncated += 1
            msgs = plan_messages(ep.question, notes, n)
        gen = loop.generator.generate([msgs], ep.params)[0]
        turn.prompt_tokens, turn.output, turn.error = int(gen.prompt_tokens), gen.text, gen.error
        turn.generation_s = float(gen.latency_s)
        ep.subquestions = parse_subquestions(gen.text, ep.question, n) if gen.ok else [ep.question]
        ep.write("plan", ["\n".join(ep.subquestions)], prefix=f"r{ep.round}-plan", source=self.name, keys=["plan"])


class Searcher(Agent):
    """Routes each sub-question, stores the top arm's passages, answers it as a ``fact``."""

    name, stage = "searcher", "search"

    def act(self, ep: _Episode) -> None:
        """Route each sub-question, write its passages, then its answer as a ``fact`` item.

        The chosen arm of each sub-question is appended to ``ep.arms``; a failed answer writes no
        fact.
        """
        for j, subq in enumerate(ep.subquestions):
            arm, docs = ep.route(subq)
            ep.arms.append(arm)
            if docs:
                ep.write("passage", [t for _, t in docs], prefix=f"r{ep.round}-s{j}-passage", source=arm,
                         docids=[d for d, _ in docs])
            chosen, turn = self.read(ep, subq)
            answer = self.respond(ep, subq, chosen, turn)
            if answer:
                ep.write("fact", [f"Q: {subq}\nA: {answer}"], prefix=f"r{ep.round}-s{j}-fact", source=self.name,
                         keys=[subq])


class Answerer(Agent):
    """Composes the final answer from its context; writes a ``message`` item."""

    name, stage = "answerer", "answer"

    def act(self, ep: _Episode) -> None:
        """Answer the question: set ``ep.answer`` and ``ep.error``, and write a ``message`` item.

        A failed call leaves ``ep.answer`` None and writes nothing.
        """
        chosen, turn = self.read(ep, ep.question)
        ep.answer = self.respond(ep, ep.question, chosen, turn)
        ep.error = turn.error
        if ep.answer:
            ep.write("message", [ep.answer], prefix=f"r{ep.round}-answer", source=self.name, keys=["answer"])


class ContextLoop:
    """Planner, Searcher and Answerer over one shared memory, under one context strategy.

    Parameters
    ----------
    generator : Generator
        The LLM (the run's `CachedGenerator`: every call goes through the cache).
    search : callable
        ``search(question) -> (arm, [(docid, text), ...])``: the Searcher's tool, usually
        `RoutedSearch` over a trained `LTRRouter`.
    strategy : str
        A name in `strategies`.
    spec : LoopSpec, optional
        Budgets, rounds, roles, selector and importance weights (defaults: `LoopSpec()`).
    template : str or PromptTemplate
        The answer template of the Searcher and the Answerer.
    params : DecodingParams, optional
        Decoding parameters of every call (default: the template's).
    embedder : PoolEmbedder, optional
        Item and goal embeddings (None: no similarity signal; duplicates by equal text).
    max_prompt_tokens : int, optional
        A cap on every prompt, below the model's window.

    Examples
    --------
    See the module docstring.
    """

    def __init__(self, generator, *, search: Callable[[str], tuple[str, list[tuple[str, str]]]],
                 strategy: str = "rcr-iterative", spec: LoopSpec | None = None, template="short_answer",
                 params=None, embedder: PoolEmbedder | None = None, max_prompt_tokens: int | None = None):
        self.generator = generator
        self.search = search
        self.strategy = strategy
        self.spec = spec
        self.template = template
        self.params = params
        self.embedder = embedder
        self.max_prompt_tokens = max_prompt_tokens

    def answer(self, question: str) -> QuestionResult:
        """Run the rounds for ``question``; the last round's Answerer gives the answer."""
        from ltrr.generation import load_template

        strat = strategies.get(self.strategy)
        spec = (self.spec or LoopSpec()).validate()
        template = load_template(self.template)
        params = self.params or template.default_params()
        agents = [Planner(spec.role("planner")), Searcher(spec.role("searcher")), Answerer(spec.role("answerer"))]
        if not isinstance(question, str) or not question.strip():
            raise ConfigError(f"the question must be a non-empty string, got {question!r}")
        t0 = time.perf_counter()
        ep = _Episode(self, question.strip(), strat, spec, template, params)
        rounds = strat.rounds(spec.rounds)
        for r in range(1, rounds + 1):
            ep.round = r
            for agent in agents:
                agent.act(ep)
        return QuestionResult(question=ep.question, strategy=strat.name, answer=ep.answer, rounds=rounds,
                              turns=ep.turns, memory=ep.memory, runtime_s=time.perf_counter() - t0,
                              subquestions=list(ep.subquestions), arms=ep.arms, error=ep.error)
