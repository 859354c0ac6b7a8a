"""ragas AnswerCorrectness with an ltrr Generator as the judge: ``ac``.

Score = 0.75 x factuality + 0.25 x semantic similarity, computed by ragas's own
``ragas.metrics.collections.AnswerCorrectness`` (ragas 0.4.3):

1. the judge splits the prediction and the reference into atomic statements;
2. the judge classifies the statements as TP (in the answer and supported by the reference),
   FP (in the answer, unsupported) and FN (in the reference, missing from the answer);
   factuality = F1 = TP / (TP + (FP + FN) / 2);
3. similarity = cosine of the prediction and reference embeddings.

The best alias counts (one ragas evaluation per alias).

How ragas is wired to ltrr:

- the judge is any `ltrr.generation.Generator`, wrapped as a ragas ``InstructorBaseRagasLLM``.
  ragas hands it a prompt string with the expected JSON schema; the adapter sends it as one user
  chat message in JSON mode (``DecodingParams(json_mode=True, max_new_tokens=...)``), parses the
  reply with the pydantic model ragas asks for, and raises `GenerationError` when the
  generation failed or the reply does not fit. The adapter gathers the prompts that the
  concurrent ragas evaluations issue in the same step and sends them to the generator as one
  batch (three batches per chunk of items: answer statements, reference statements,
  classification), and never sends the same prompt twice.
- embeddings come from `ltrr.embed` (the encoder the metric names, MiniLM by default) through a
  ragas ``BaseRagasEmbedding`` adapter, so ``ac`` and ``semsim`` share one loaded model and the
  same vectors; nothing is downloaded.

Deliberate differences from calling ragas directly, each for a reason:

- an empty prediction scores 0 without a judge call: ragas treats "no statements" as a perfect
  factuality of 1.0, which would make an empty answer score at least 0.75.
- not handled: a non-empty answer the judge splits into no statement (a refusal such as "I
  don't know", depending on the judge) still gets ragas' perfect factuality, so it can score
  0.75 or more; the statements are ragas' internals, which ltrr does not parse.
- a failed judge call fails the item (NaN plus an error in ``score_details``; `GenerationError`
  from ``score_batch``), even when another alias was scored: a max over the aliases that
  happened to succeed would bias the label upwards.

ragas is imported only when the metric is bound; ``RAGAS_DO_NOT_TRACK`` is set to ``true`` first
unless the environment already sets it, so ragas does not send usage data.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ltrr._errors import GenerationError
from ltrr.metrics.base import (
    Metric,
    MetricScores,
    Scorer,
    _excerpt,
    extract_json_object,
    register,
)

__all__ = ["AnswerCorrectness", "run_coroutine"]


def run_coroutine(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine to completion from synchronous code, even inside a running event loop.

    Jupyter runs an event loop in the main thread, where ``asyncio.run`` refuses to start, so
    the coroutine then runs on its own loop in a worker thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def _chat(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


@lru_cache(maxsize=1)
def _ragas_parts():
    """Import ragas (once) and build the adapter classes that subclass its bases."""
    os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
    from ltrr._registry import require

    require("ragas", extra="ragas", purpose="the ac metric (ragas AnswerCorrectness)")
    import pydantic
    from ragas.embeddings.base import BaseRagasEmbedding
    from ragas.llms.base import InstructorBaseRagasLLM
    from ragas.metrics.collections import AnswerCorrectness as RagasAnswerCorrectness

    def parse(text: str, response_model):
        obj = extract_json_object(text)
        try:
            return response_model.model_validate(obj)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "(root)"
            raise GenerationError(
                f"judge output does not fit ragas's {response_model.__name__} schema "
                f"({where}: {first.get('msg')}): {_excerpt(text)}"
            ) from None

    class GeneratorRagasLLM(InstructorBaseRagasLLM):
        """ragas LLM interface over an ltrr Generator, with micro-batching of async calls."""

        def __init__(self, generator, params):
            self.generator = generator
            self.params = params
            self._pending: dict[str, list[asyncio.Future]] = {}
            self._memo: dict[str, str] = {}

        def _generate_texts(self, prompts: list[str]) -> list[Any]:
            gens = self.generator.generate([_chat(p) for p in prompts], self.params)
            if len(gens) != len(prompts):
                raise GenerationError(
                    f"judge {self.generator.identity} returned {len(gens)} generations for "
                    f"{len(prompts)} prompts"
                )
            return gens

        def _text_of(self, gen) -> str:
            if gen.error is not None:
                raise GenerationError(f"judge call failed: {gen.error}")
            return gen.text

        def generate(self, prompt, response_model):
            if prompt not in self._memo:
                self._memo[prompt] = self._text_of(self._generate_texts([prompt])[0])
            return parse(self._memo[prompt], response_model)

        async def agenerate(self, prompt, response_model):
            if prompt in self._memo:
                return parse(self._memo[prompt], response_model)
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            if not self._pending:
                # Runs after every ready task has queued its prompt for this step.
                loop.call_soon(self._flush)
            self._pending.setdefault(prompt, []).append(future)
            text = await future
            return parse(text, response_model)

        def _flush(self) -> None:
            pending, self._pending = self._pending, {}
            prompts = list(pending)
            try:
                gens = self._generate_texts(prompts)
            except Exception as exc:  # the whole batch failed: every waiting call gets it
                for futures in pending.values():
                    for f in futures:
                        if not f.done():
                            f.set_exception(exc)
                return
            for prompt, gen in zip(prompts, gens, strict=True):
                try:
                    text = self._text_of(gen)
                    self._memo[prompt] = text
                    outcome: tuple[str | None, Exception | None] = (text, None)
                except GenerationError as exc:
                    outcome = (None, exc)
                for f in pending[prompt]:
                    if f.done():
                        continue
                    if outcome[1] is None:
                        f.set_result(outcome[0])
                    else:
                        f.set_exception(GenerationError(str(outcome[1])))

    class EncoderRagasEmbedding(BaseRagasEmbedding):
        """ragas embedding interface over an ltrr Encoder, memoising vectors by text."""

        def __init__(self, encoder):
            super().__init__(cache=None)
            self.encoder = encoder
            self._memo: dict[str, np.ndarray] = {}

        def prefill(self, texts: list[str]) -> None:
            from ltrr.metrics.semantic import encode_unique

            todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
            self._memo.update(encode_unique(self.encoder, todo))

        def embed_text(self, text: str, **kwargs) -> list[float]:
            if text not in self._memo:
                self.prefill([text])
            return self._memo[text].tolist()

        async def aembed_text(self, text: str, **kwargs) -> list[float]:
            return self.embed_text(text)

    return GeneratorRagasLLM, EncoderRagasEmbedding, RagasAnswerCorrectness


class _ACScorer(Scorer):
    def __init__(self, metric: AnswerCorrectness, judge, encoder, chunk_size: int = 64):
        from ltrr.generation.base import DecodingParams

        super().__init__(metric)
        llm_cls, emb_cls, ragas_ac = _ragas_parts()
        self.params = DecodingParams(max_new_tokens=metric.max_new_tokens, json_mode=True)
        self.llm = llm_cls(judge, self.params)
        self.embeddings = emb_cls(encoder)
        self.ragas_metric = ragas_ac(llm=self.llm, embeddings=self.embeddings)
        self.chunk_size = chunk_size

    async def _run(self, jobs: list[tuple[str, str, str]]) -> list[Any]:
        results: list[Any] = []
        for s in range(0, len(jobs), self.chunk_size):
            chunk = jobs[s : s + self.chunk_size]
            results += await asyncio.gather(
                *(
                    self.ragas_metric.ascore(user_input=q, response=p, reference=a)
                    for q, p, a in chunk
                ),
                return_exceptions=True,
            )
        return results

    def _score(self, questions, predictions, answers) -> MetricScores:
        jobs, owner = [], []
        for i, (q, p, al) in enumerate(zip(questions, predictions, answers, strict=True)):
            if p.strip():
                for a in al:
                    jobs.append((q, p, a))
                    owner.append(i)
        try:
            self.embeddings.prefill([t for _, p, a in jobs for t in (p, a)])
            results = run_coroutine(lambda: self._run(jobs)) if jobs else []
        finally:
            # Memos dedupe within one batch; across batches the generator's own cache does,
            # and a long labelling run must not hold every vector and reply in memory.
            self.llm._memo.clear()
            self.embeddings._memo.clear()
        per_item: dict[int, list[Any]] = {}
        for i, r in zip(owner, results, strict=True):
            if isinstance(r, BaseException) and not isinstance(r, GenerationError):
                raise r
            per_item.setdefault(i, []).append(r)
        n = len(questions)
        values = np.zeros(n, dtype=np.float64)
        errors: list[str | None] = [None] * n
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        for i in range(n):
            if i not in per_item:
                details[i] = {"empty_prediction": True}
                continue
            failed = [r for r in per_item[i] if isinstance(r, GenerationError)]
            if failed:
                values[i] = np.nan
                errors[i] = str(failed[0])
                continue
            scores = [float(r.value) for r in per_item[i]]
            best = int(np.argmax(scores))
            values[i] = scores[best]
            details[i] = {"best_alias": best}
        return MetricScores(self.metric, values, errors, details)


@register
@dataclass(frozen=True)
class AnswerCorrectness(Metric):
    """ragas AnswerCorrectness judged by an ltrr Generator (``ac``); scores in [0, 1].

    Parameters
    ----------
    encoder : str
        `ltrr.embed` encoder for the similarity part (``minilm``, ``e5`` or a local folder).
    max_new_tokens : int
        Token budget of each judge reply (statement lists with reasons can be long).

    Examples
    --------
    >>> from ltrr.metrics import parse_metric
    >>> m = parse_metric("ac")
    >>> m.needs_judge, str(m)
    (True, 'ac')
    >>> scorer = m.bind(judge=my_generator)  # doctest: +SKIP
    >>> result = scorer.score_details(questions, predictions, answers)  # doctest: +SKIP
    >>> result.n_failed  # judge failures are NaN in result.values, never a score  # doctest: +SKIP
    """

    name = "ac"
    needs_judge = True

    encoder: str = "minilm"
    max_new_tokens: int = 512

    def bind(self, *, judge=None, encoder=None, device=None) -> Scorer:
        judge = self._require_judge(judge)
        if encoder is None:
            from ltrr.embed import get_encoder

            encoder = get_encoder(self.encoder)
        return _ACScorer(self, judge, encoder)
