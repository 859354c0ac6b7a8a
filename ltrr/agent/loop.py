"""The rollout of the multi-round router (Router-R1, Zhang, Feng & You, 2025).

`AgentLoop.rollout` answers one question:

1. The chat (the system prompt of `ltrr.agent.prompt` and the question) is rendered with the
   model's chat template and its generation prompt; those ids are the prompt (mask 0).
2. The model continues the sequence until its text closes ``</search>`` or ``</answer>``
   (stop strings), ends its sequence, or writes ``max_new_tokens`` tokens; its ids are kept as
   they came (mask 1).
3. A closed ``<search>ARM: sub-query</search>`` that names an arm (`ltrr.agent.rewards.resolve_arm`:
   its exact name, or the one arm equal to it ignoring case, as Router-R1 lower-cases it) with a
   non-empty query runs the arm (``search(arm, query, k)``); its passages, cut to
   ``max_obs_tokens`` tokens, are injected as ``<information>...</information>`` (mask 0). A
   call to an unknown arm, or one whose search raises an ltrr error, injects
   ``<information>None</information>`` (mask 0), as Router-R1 does for an unknown model or a
   failed request (``router_r1/llm_agent/generation.py:403-417``), and is recorded as invalid.
   A call without an ``ARM:`` prefix, with an empty query, naming two arms, or with a malformed
   tag injects nothing, as Router-R1 injects nothing for its invalid routes (``generation.py:
   418-423``), and is recorded. Every call, valid or not, counts towards ``max_turns``. A loop
   with an arm presentation (`AgentLoop.with_view`) lists the arms in the view's order under its
   shown names, maps a shown name back to the pool arm it stands for, and rejects a left-out arm
   as unknown.

   The call is parsed by `ltrr.agent.rewards.parse_search`, which departs from Router-R1's
   ``split(":")`` (``route_service.py:173-174``) where that split is an accident of the string
   operation: a query with a colon (``bm25: film: The Matrix``) runs whole here, theirs runs
   only ``film``; a second arm prefix (``bm25: dense: q``) and an empty arm (``: q``) run
   nothing and inject nothing here, where theirs runs ``bm25`` on ``dense`` and answers ``: q``
   with ``None``; their template placeholders (``LLM-Name``, ``Your-Query``) mean nothing in our
   prompt, so an arm of that name is unknown and such a query runs. Router-R1's format rule
   punishes every one of these calls, so under ``reward = "router-r1"`` none earns a valid
   format however it is run; ltrr's rule accepts the first and a placeholder word in a query,
   on purpose (`ltrr.agent.reward_options.LtrrReward`).
4. After ``max_turns`` calls a short instruction is injected (mask 0,
   `ltrr.agent.prompt.FINAL_ANSWER_INSTRUCTION`) and the model writes one last turn. It still
   stops at ``</search>``, as Router-R1's last turn is cut there (``generation.py:286-318`` with
   ``_postprocess_responses``, ``:63-68``): a search in that turn is recorded (reason
   ``past_budget``, issue ``search_past_budget``), runs nothing, injects nothing and ends the
   rollout without an answer, so the format rules punish it. Were ``</answer>`` the only stop
   there, the model could write a search *and* an ``<information>`` block of its own, which the
   counting format rules cannot tell from an injected one.
5. The rollout ends at ``</answer>``, at a turn that closes nothing (``unclosed_tag``), or when
   the total token budget is spent (``token_cap``); see `ltrr.agent.trajectory` for the stop
   reasons and issues recorded.

Whoever writes an ``<information>`` block, the format rules (`ltrr.agent.rewards.format_reward`,
`ltrr.agent.reward_options.router_r1_format`) count every block and need as many as there are
searches; since every call the loop answers gets exactly one injected block and every call it
leaves unanswered breaks a rule of its own (no arm, an empty query, two arms, a malformed tag,
a search past the budget), a block the model writes itself can never balance the count into a
valid format.

Bad input never raises: an empty question is recorded (``empty_question``) and answered with
nothing, without a model call; an unknown arm, an over-long observation, a model that never
closes a tag, an exhausted search budget and a search past it are recorded in the trajectory.

Every continuation goes through ltrr's `GenerationCache` when one is given, keyed (with
`ltrr.generation.cache.cache_key`) by the backend, the model identity, the decoding parameters
and a sha256 of the prefix ids (of the prefix text at text level). Decoding is greedy unless
``temperature > 0``; sampling is seeded with ``seed`` (one seed for every call of a rollout,
so a seed gives one trajectory; give each member of an RL group its own seed). Greedy calls
are keyed with seed 0, since the seed cannot change them.

Examples
--------
>>> from ltrr.agent.backends import Continuation, ContinuationLM
>>> class Words(ContinuationLM):  # a scripted model over a toy word tokenizer
...     backend, identity = "words", "words-1"
...     vocab = ["<pad>", "<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>",
...              "bm25:", "capital", "paris", "<information>", "</information>", "Doc", "1:"]
...     replies = iter(["<think> capital </think> <search> bm25: capital </search>",
...                     "<think> paris </think> <answer> paris </answer>"])
...     def render(self, messages): return "Q"
...     def prompt_ids(self, messages): return [0]
...     def encode(self, text): return [self.vocab.index(w) if w in self.vocab else 0 for w in text.split()]
...     def decode(self, ids): return " ".join(self.vocab[i] for i in ids if i)
...     def continue_(self, ids, text, params):
...         new = self.encode(next(self.replies))
...         return Continuation(self.decode(new), new, len(new), "stop")
>>> search = lambda arm, query, k: [("d1", "paris")]
>>> loop = AgentLoop(Words(), search, arms=[{"name": "bm25", "retriever": "bm25"}])
>>> t = loop.rollout("What is the capital of France?", qid="q1")
>>> t.answer, t.stop_reason, [s.arm for s in t.searches], t.mask.count(1)
('paris', 'answered', ['bm25'], 13)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError, LtrrError
from ltrr.agent.backends import Continuation, ContinuationLM
from ltrr.agent.prompt import FINAL_ANSWER_INSTRUCTION, build_messages
from ltrr.agent.rewards import TAGS, parse_search
from ltrr.agent.trajectory import Search, Trajectory, Turn
from ltrr.generation.base import DecodingParams, Generation

__all__ = ["AgentLoop", "SearchFn", "format_information", "pool_search"]

#: ``search(arm, query, k) -> [(docid, text), ...]`` in rank order; ``k`` None means the arm's
#: own passage count.
SearchFn = Callable[[str, str, "int | None"], Sequence[tuple[str, str]]]
INFO_HEAD = "\n\n<information>\n"
INFO_TAIL = "\n</information>\n\n"
NO_PASSAGES = "(no passages: this arm retrieves nothing)"
#: The body of the block injected for a call that could not run (an unknown arm, a search
#: error): Router-R1's ``<information>None</information>`` (``generation.py:405, 409``).
FAILED_CALL = "None"
#: Both closing tags stop every turn, the last one included (see the module, step 4).
CLOSERS = ("</search>", "</answer>")
_PROTOCOL_TAG = re.compile(r"</?(?:" + "|".join(TAGS) + r")>")


def pool_search(pool: Any) -> SearchFn:
    """A `SearchFn` over a built `ltrr.retrieval.pool.Pool` (one ``Pool.search`` per call)."""

    def search(arm: str, query: str, k: int | None) -> list[tuple[str, str]]:
        import pandas as pd

        rows = pool.search(pd.DataFrame({"qid": ["q"], "question": [query]}), arms=[arm], k=k)
        return list(zip(rows["docid"].astype(str), rows["text"].astype(str), strict=True))

    return search


def format_information(passages: Sequence[tuple[str, str]]) -> str:
    """The body of an ``<information>`` block: ``Doc i: text`` lines, protocol tags removed.

    A passage that contains ``<answer>`` or another protocol tag would confuse the format
    rules and the parser, so those tags are dropped from passage text.

    Examples
    --------
    >>> print(format_information([("d1", "Paris is <b>the</b> capital."), ("d2", "<answer>x")]))
    Doc 1: Paris is <b>the</b> capital.
    Doc 2: x
    """
    if not passages:
        return NO_PASSAGES
    return "\n".join(f"Doc {i}: {' '.join(_PROTOCOL_TAG.sub('', t).split())}"
                     for i, (_, t) in enumerate(passages, 1))


def _action(text: str, closers: Sequence[str]) -> tuple[str | None, str | None]:
    """``(tag, content)`` of the first closing tag of ``closers`` in a model turn.

    ``tag`` is ``"search"`` or ``"answer"`` (None when no closer is in the text); ``content`` is
    the text between the last matching opener before it and the closer, or None when there is
    no opener (a malformed tag).
    """
    found = [(text.find(c), c) for c in closers if c in text]
    if not found:
        return None, None
    at, closer = min(found)
    tag = closer[2:-1]
    opener = f"<{tag}>"
    start = text.rfind(opener, 0, at)
    return tag, (None if start < 0 else text[start + len(opener): at])


def _cut_after_closer(lm: ContinuationLM, cont: Continuation, closers: Sequence[str]) -> Continuation:
    """``cont`` ended at its first closing tag, as Router-R1 cuts each response
    (``_postprocess_responses``, ``generation.py:63-68``).

    The backends already stop at the token that completes a stop string, so this changes
    nothing for them; it guards against one that writes on (a server that ignores ``stop``, a
    hand-written `ContinuationLM`), whose text after the tag could hold an ``<information>``
    block of its own and an answer. At token level the ids are cut to the shortest prefix whose
    text holds the tag (the last kept token may carry a few characters past it, as from any
    decoder); at text level the text is cut right after the tag and its tokens counted again.
    """
    ends = [cont.text.find(c) + len(c) for c in closers if c in cont.text]
    if not ends or not cont.text[min(ends):].strip():
        return cont
    end = min(ends)
    closer = next(c for c in closers if cont.text[:end].endswith(c))
    if lm.token_level:
        keep = next((i for i in range(1, len(cont.ids) + 1) if closer in lm.decode(cont.ids[:i])), None)
        if keep is None:  # the text is not the ids' (never from ltrr's backends): keep what came
            return cont
        ids = list(cont.ids[:keep])
        return Continuation(lm.decode(ids), ids, len(ids), "stop", latency_s=cont.latency_s, cached=cont.cached)
    text = cont.text[:end]
    return Continuation(text, [], lm.count_tokens(text), "stop", latency_s=cont.latency_s, cached=cont.cached)


def _sha256_of(prefix: Any) -> str:
    data = prefix if isinstance(prefix, str) else ",".join(map(str, prefix))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class AgentLoop:
    """Roll out the multi-round router on questions; see the module docstring.

    Parameters
    ----------
    lm : ContinuationLM
        The policy model (`ltrr.agent.backends.TransformersLM`,
        `ltrr.agent.backends.OpenAICompletionsLM`, ...).
    search : callable
        ``search(arm, query, k) -> [(docid, text), ...]`` (`SearchFn`; `pool_search` adapts a
        `Pool`). An `ltrr` error it raises is recorded as an invalid call.
    arms : sequence of Arm or mapping
        The arms the model may call (their names, families and costs go into the prompt).
    strengths : mapping, optional
        Arm name -> (question type -> mean utility on the design part), for the prompt.
    retriever_types : mapping, optional
        Pool retriever name -> type, for the arms' families (`ltrr.agent.prompt.arm_family`).
    k : int or None
        Passages per search; None uses each arm's own ``k``.
    max_turns : int
        Search calls before the final turn (where only an answer is accepted: a search there
        ends the rollout unanswered).
    max_new_tokens : int
        Token cap of one model turn.
    max_obs_tokens : int
        Token cap of the passages of one ``<information>`` block.
    max_total_tokens : int, optional
        Token budget of the whole sequence (prompt included); None uses the model's context.
    temperature, top_p : float
        Decoding; greedy when ``temperature`` is 0.
    seed : int
        Sampling seed of every call (`rollout` may override it).
    cache : GenerationCache, optional
        Where continuations are cached; None calls the model every time.
    system_role : bool
        Put the instructions in a system message (False: at the top of the user message).
    view : ArmView, optional
        How the prompt presents the arms (`ltrr.agent.presentation`: order, shown names, an arm
        left out); None lists every arm, in order, under its own name. See `with_view`.

    Attributes
    ----------
    hits, misses : int
        Continuation calls answered by the cache, and sent to the model.

    Examples
    --------
    See the module docstring.
    """

    def __init__(
        self,
        lm: ContinuationLM,
        search: SearchFn,
        arms: Sequence[Any],
        *,
        strengths: Mapping[str, Mapping[str, float]] | None = None,
        retriever_types: Mapping[str, str] | None = None,
        k: int | None = 3,
        max_turns: int = 3,
        max_new_tokens: int = 256,
        max_obs_tokens: int = 512,
        max_total_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        cache: Any = None,
        system_role: bool = True,
        view: Any = None,
    ):
        self.lm = lm
        self.search = search
        self.arms = arms
        self.strengths = strengths
        self.retriever_types = retriever_types
        self.k = k
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.max_obs_tokens = max_obs_tokens
        self.max_total_tokens = max_total_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.cache = cache
        self.system_role = system_role
        self.view = view
        self.hits = 0
        self.misses = 0
        self._continue_fn: Callable[..., Continuation] | None = None  # `ltrr.agent.batching` routes turns here

    @classmethod
    def from_pool(cls, lm: ContinuationLM, pool: Any, *, arms: Sequence[Any] | None = None,
                  **kwargs: Any) -> AgentLoop:
        """A loop over a built pool: its arms (or the given subset), their retriever types and
        `pool_search`."""
        types = {name: r.name for name, r in pool.retrievers.items()}
        return cls(lm, pool_search(pool), pool.arms if arms is None else arms, retriever_types=types, **kwargs)

    def with_view(self, view: Any) -> AgentLoop:
        """A copy of this loop (the same model, search, cache and settings) whose prompt shows
        the arms as ``view`` does (an `ltrr.agent.presentation.ArmView` over this loop's arms;
        None: plainly). Its trajectories record the shown names in ``arms`` and the pool arm
        behind each renamed one in ``shown_arms``; a valid search records the pool arm. The
        view's ``config_only`` arms are described without their measured strengths. The copy
        counts its own cache hits and misses."""
        import copy

        from ltrr.agent.presentation import ArmView

        if view is not None and not isinstance(view, ArmView):
            raise ConfigError(f"an arm view must be an ltrr.agent.presentation.ArmView, got {type(view).__name__}")
        if view is not None and not view.covers(self.arm_names):
            raise ConfigError(f"the arm view shows {list(view.arms)} and leaves out {list(view.left_out)}, "
                              f"but the loop's arms are {self.arm_names}")
        loop = copy.copy(self)
        loop.view = view
        return loop

    def __repr__(self) -> str:
        return f"AgentLoop(lm={self.lm!r}, arms={self.arm_names!r}, max_turns={self.max_turns!r})"

    @property
    def arm_names(self) -> list[str]:
        """The names of ``arms``, in order (an arm's ``name``, a mapping's ``"name"``, a str)."""
        return self._names(self.arms)

    @property
    def counters(self) -> dict[str, int]:
        """``hits`` and ``misses`` by name: continuations from the cache, and from the model."""
        return {"hits": self.hits, "misses": self.misses}

    def _validate(self) -> None:
        def positive(name: str, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            check_int(v, f"AgentLoop {name}", low=1)

        for name in ("max_new_tokens", "max_obs_tokens"):
            positive(name)
        positive("k", allow_none=True)
        positive("max_total_tokens", allow_none=True)
        check_int(self.max_turns, "AgentLoop max_turns", low=0)
        check_int(self.seed, "AgentLoop seed")
        check_number(self.temperature, "AgentLoop temperature", low=0)
        check_number(self.top_p, "AgentLoop top_p", low=0, high=1, low_open=True)
        if not isinstance(self.lm, ContinuationLM):
            raise ConfigError(f"AgentLoop lm must be a ContinuationLM, got {type(self.lm).__name__}")
        if not callable(self.search):
            raise ConfigError("AgentLoop search must be a callable search(arm, query, k)")
        names = self.arm_names
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ConfigError(f"AgentLoop arms must have unique, non-empty names, got {names!r}")
        colon = [n for n in names if ":" in n]
        if colon:  # <search>ARM: query</search> splits at the first colon: such an arm could never be called
            raise ConfigError(f"AgentLoop arm names must not hold ':' (the search call is 'ARM: query'), got "
                              f"{colon}; rename the arms or show them under other names (an arm view)")
        if self.view is not None:
            self.with_view(self.view)  # checks that the view is one of these arms

    # ---- rollouts ------------------------------------------------------------------------
    def run(self, questions: Iterable[Any], *, seed: int | None = None, batch: int = 1) -> list[Trajectory]:
        """Roll out every question: strings (qids ``q0``, ``q1``, ...) or ``(qid, question)``;
        ``batch`` rollouts at a time (`ltrr.agent.batching.rollout_many`)."""
        from ltrr.agent.batching import rollout_many

        jobs = []
        for i, item in enumerate(questions):
            qid, question = (f"q{i}", item) if isinstance(item, str) else item
            jobs.append((self, question, qid, seed))
        return rollout_many(jobs, batch=batch)

    def rollout(self, question: str, *, qid: str = "", seed: int | None = None) -> Trajectory:
        """One trajectory for ``question``; never raises for bad model output (see module)."""
        self._validate()
        if not isinstance(question, str):
            raise DataError(f"question must be a string, got {type(question).__name__}")
        seed = self.seed if seed is None else seed
        lm = self.lm
        arms, strengths, names = self._presented()
        traj = Trajectory(qid=str(qid), question=question, arms=[names.get(a, a) for a in self._names(arms)],
                          model=lm.identity, seed=int(seed), token_level=lm.token_level,
                          shown_arms={s: a for a, s in names.items() if s != a})
        if not question.strip():
            traj.stop_reason = "empty_question"
            traj.issues.append("empty_question")
            return traj
        messages = build_messages(question, arms, strengths, max_turns=self.max_turns,
                                  retriever_types=self.retriever_types, system_role=self.system_role,
                                  names=names)
        traj.prompt = lm.render(messages)
        if lm.token_level:
            traj.ids = list(lm.prompt_ids(messages))
            traj.mask = [0] * len(traj.ids)
            traj.prompt_tokens = len(traj.ids)
        else:
            traj.prompt_tokens = lm.count_tokens(traj.prompt)
        state = _State(traj, lm, traj.prompt_tokens)
        budget = self.max_total_tokens or lm.context_length
        calls, final = 0, False
        while True:
            if calls >= self.max_turns and not final:
                final = True
                state.flag("max_turns")
                state.inject(FINAL_ANSWER_INSTRUCTION, "final_instruction")
            room = budget - state.used
            if room <= 0:
                state.stop("token_cap")
                break
            n_new = min(self.max_new_tokens, room)
            params = DecodingParams(max_new_tokens=n_new, temperature=float(self.temperature),
                                    top_p=float(self.top_p), stop=CLOSERS,
                                    seed=int(seed) if self.temperature > 0 else 0)
            cont = self._continue(state, params)
            if cont.error is not None:
                traj.error = cont.error
                state.stop("error")
                break
            cont = _cut_after_closer(lm, cont, CLOSERS)
            tag, content = _action(cont.text, CLOSERS)
            state.add_model(cont, tag or ("eos" if cont.finish == "eos" else "length"))
            if tag == "answer":
                traj.answer = None if content is None else content.strip()
                if content is None:
                    state.flag("malformed_answer")
                traj.stop_reason = "max_turns" if final else "answered"
                break
            if tag == "search" and final:  # past the budget: recorded, nothing run or injected
                self._past_budget(state, content)
                traj.stop_reason = "max_turns"
                break
            if tag == "search":
                calls += 1
                self._search(state, content)
                continue
            # A turn that closes no tag ends the rollout. Router-R1 instead lets such a rollout go
            # on to its next turn (generation.py:418-423: no action, nothing injected, not done).
            # We depart on purpose: our trajectories keep the model's exact ids, so a turn that
            # ended at the end-of-sequence token would be continued after the model's own EOS id
            # (Router-R1 decodes with skip_special_tokens and re-tokenises, which drops it); and a
            # turn cut at max_new_tokens continued would only be a longer turn, which the per-turn
            # cap exists to prevent (it keeps a CPU rollout near its token budget). The cost: such a
            # rollout has no answer and scores -1 under either format rule, where Router-R1's could
            # still answer in a later turn.
            state.stop("token_cap" if cont.finish == "length" and n_new < self.max_new_tokens
                       else "unclosed_tag")
            break
        return traj

    @staticmethod
    def _names(arms: Sequence[Any]) -> list[Any]:
        return [a.get("name") if isinstance(a, Mapping) else getattr(a, "name", a) for a in arms]

    def _presented(self) -> tuple[list[Any], Mapping[str, Mapping[str, float]] | None, dict[str, str]]:
        """(the arms in prompt order, their strengths, pool name -> shown name) under the view."""
        if self.view is None:
            return list(self.arms), self.strengths, {}
        by_name = dict(zip(self.arm_names, self.arms, strict=True))
        arms = [by_name[a] for a in self.view.arms]
        strengths = None if self.strengths is None else \
            {a: v for a, v in self.strengths.items() if a in self.view.arms and a not in self.view.config_only}
        return arms, strengths, self.view.names

    def _continue(self, state: _State, params: DecodingParams) -> Continuation:
        lm = self.lm
        call = self._continue_fn or lm.continue_
        prefix: Any = state.traj.ids if lm.token_level else state.traj.prompt + state.traj.text
        if self.cache is None:
            self.misses += 1
            return call(list(state.traj.ids), state.context_text(), params)
        from ltrr.generation.cache import cache_key

        payload = {"agent_continue": "ids" if lm.token_level else "text",
                   "sha256": _sha256_of(prefix), "length": len(prefix)}
        key = cache_key(lm.backend, lm.identity, params, payload)  # type: ignore[arg-type]
        hit = self.cache.get_many([key]).get(key)
        if hit is not None and isinstance(hit.extra.get("ids"), list):
            self.hits += 1
            return Continuation(text=hit.text, ids=[int(i) for i in hit.extra["ids"]],
                                n_tokens=hit.completion_tokens, finish=str(hit.extra.get("finish")),
                                latency_s=hit.latency_s, cached=True)
        self.misses += 1
        cont = call(list(state.traj.ids), state.context_text(), params)
        if cont.error is None:
            gen = Generation(text=cont.text, prompt_tokens=len(prefix) if lm.token_level else 0,
                             completion_tokens=cont.n_tokens, latency_s=cont.latency_s,
                             extra={"ids": cont.ids, "finish": cont.finish})
            self.cache.put_many([(key, lm.backend, lm.identity, params, gen)])
        return cont

    def _past_budget(self, state: _State, content: str | None) -> None:
        """Record a search written in the final turn: it runs nothing and injects nothing."""
        arm, query = (None, "") if content is None else parse_search(content, state.traj.arms)[:2]
        state.traj.searches.append(Search(arm=arm, query=query, valid=False, reason="past_budget"))
        state.flag("search_past_budget")

    def _search(self, state: _State, content: str | None) -> None:
        if content is None:
            state.traj.searches.append(Search(arm=None, query="", valid=False, reason="malformed_tag"))
            state.flag("invalid_search")
            return
        # arms by the names the prompt shows; `parse_search` resolves the name as the format rules do
        arm, query, error = parse_search(content, state.traj.arms)
        if error == "unknown_arm":
            n, _ = state.inject_information(FAILED_CALL, self.max_obs_tokens)
            state.traj.searches.append(Search(arm=arm, query=query, valid=False, reason=error, injected_tokens=n))
            state.flag("invalid_search")
            return
        if error is not None:
            state.traj.searches.append(Search(arm=arm, query=query, valid=False, reason=error))
            state.flag("invalid_search")
            return
        arm = cast(str, arm)  # a valid call names an arm (`parse_search`)
        arm = state.traj.shown_arms.get(arm, arm)  # the pool arm behind a shown name
        try:
            hits = self.search(arm, query, self.k)
        except LtrrError as exc:
            n, _ = state.inject_information(FAILED_CALL, self.max_obs_tokens)
            state.traj.searches.append(Search(arm=arm, query=query, valid=False,
                                              reason=f"search_error: {exc}", injected_tokens=n))
            state.flag("search_error")
            return
        passages = _check_hits(hits, arm)[: self.k]
        n, truncated = state.inject_information(format_information(passages), self.max_obs_tokens)
        state.traj.searches.append(Search(arm=arm, query=query, valid=True, docids=[d for d, _ in passages],
                                          injected_tokens=n, truncated=truncated))
        if truncated:
            state.flag("obs_truncated")


def _check_hits(hits: Any, arm: str) -> list[tuple[str, str]]:
    try:
        passages = [(str(d), t) for d, t in hits]
    except (TypeError, ValueError):
        raise DataError(f"search({arm!r}, ...) must return (docid, text) pairs, got {hits!r}"[:200]) from None
    if not all(isinstance(t, str) for _, t in passages):
        raise DataError(f"search({arm!r}, ...) returned a passage text that is not a string")
    return passages


class _State:
    """The growing trajectory of one rollout: turns, ids and mask, tokens used."""

    def __init__(self, traj: Trajectory, lm: ContinuationLM, used: int):
        self.traj, self.lm, self.used = traj, lm, used

    def context_text(self) -> str:
        return "" if self.lm.token_level else self.traj.prompt + self.traj.text

    def flag(self, issue: str) -> None:
        if issue not in self.traj.issues:
            self.traj.issues.append(issue)

    def stop(self, reason: str) -> None:
        self.traj.stop_reason = reason
        if reason in ("unclosed_tag", "token_cap", "error"):
            self.flag(reason)

    def add_model(self, cont: Continuation, kind: str) -> None:
        self.traj.turns.append(Turn("model", cont.text, cont.n_tokens, kind, cont.cached))
        if self.lm.token_level:
            self.traj.ids += cont.ids
            self.traj.mask += [1] * len(cont.ids)
        self.used += cont.n_tokens

    def _add_injected(self, text: str, ids: list[int], kind: str) -> int:
        n = len(ids) if self.lm.token_level else self.lm.count_tokens(text)
        self.traj.turns.append(Turn("injected", text, n, kind))
        self.traj.ids += ids
        self.traj.mask += [0] * len(ids)
        self.used += n
        return n

    def inject(self, text: str, kind: str) -> int:
        ids = self.lm.encode(text) if self.lm.token_level else []
        return self._add_injected(text, ids, kind)

    def inject_information(self, body: str, max_tokens: int) -> tuple[int, bool]:
        """Inject ``<information>`` + body cut to ``max_tokens`` + ``</information>``.

        At token level the three parts are encoded apart, so the passages take exactly the
        ids that were kept (at most ``max_tokens``), never re-tokenised with their neighbours.
        """
        lm = self.lm
        if lm.token_level:
            body_ids = lm.encode(body)
            truncated = len(body_ids) > max_tokens
            if truncated:
                body_ids = body_ids[:max_tokens]
                body = lm.decode(body_ids)
            ids = lm.encode(INFO_HEAD) + body_ids + lm.encode(INFO_TAIL)
        else:
            body, truncated = lm.truncate(body, max_tokens)
            ids = []
        return self._add_injected(INFO_HEAD + body + INFO_TAIL, ids, "information"), truncated
