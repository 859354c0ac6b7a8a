"""Batched rollouts: many `AgentLoop` rollouts at once, their model turns decoded in one batch.

On a GPU a 135M policy decodes one sequence at about the speed it decodes sixty-four: a step
costs a kernel launch per layer whatever the batch. Rolling out a GRPO step, an RFT sample or
an evaluation one question at a time leaves the accelerator idle, so `rollout_many` runs the
rollouts in threads and a `_Batcher` gathers their model turns: when every live rollout is
waiting for the model (the others are searching an arm), their prefixes go to the model
together (`hf_continue_batch`, left-padded, one KV cache) and each thread gets its own
`Continuation` back. The loop itself (`ltrr.agent.loop.AgentLoop.rollout`) is unchanged: its
search, injection, caching and stop rules run per thread as before.

No library does this: transformers' ``generate`` takes one ``max_new_tokens``, one stop rule
and one seed for the whole batch, while our rows may differ in all three (the stop strings are
each request's own, the room left differs per row, and each GRPO sample has its own seed); vLLM
would, but it is a GPU-only server dependency. ``hf_continue_batch`` is a plain
KV-cached decode loop with a `torch.Generator` per sampled row, so a row's sample depends on
its seed and its prefix, not on its neighbours; greedy rows match `hf_continue` up to the float
effects of padding (tested on a tiny model).

``batch = 1`` (the CPU default, `[agent] rollout_batch`) runs the rollouts one after another
in the caller's thread, exactly as before.
"""

from __future__ import annotations

import copy
import inspect
import threading
import time
from collections.abc import Sequence
from typing import Any

from ltrr._checks import check_int
from ltrr._errors import ConfigError, GenerationError
from ltrr.agent.continuation import Continuation, finish_reason
from ltrr.generation.base import DecodingParams

__all__ = ["hf_continue_batch", "rollout_many", "raise_on_model_errors"]


def hf_continue_batch(model: Any, tokenizer: Any, requests: Sequence[tuple[list[int], DecodingParams]],
                      *, device: Any = None) -> list[Continuation]:
    """Continue several prefixes at once with a Hugging Face causal LM.

    Each request is ``(ids, params)``: its own ``max_new_tokens``, stop strings, temperature,
    ``top_p`` and seed. Rows are left-padded into one batch and decoded with one KV cache; a
    row stops at the end-of-sequence token, at its token cap, or once its decoded text holds
    one of its stop strings (the ids that wrote it are kept, as in `hf_continue`). A sampled
    row draws from its own `torch.Generator` seeded with ``params.seed``.

    Returns one `Continuation` per request, in order; a failure of the model (RuntimeError,
    ValueError) gives every request an error continuation instead of raising.
    """
    import torch

    start = time.perf_counter()
    n = len(requests)
    if n == 0:
        return []
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos if eos is not None else 0)
    device = device if device is not None else model.device
    lengths = [len(ids) for ids, _ in requests]
    width = max(lengths)
    input_ids = torch.full((n, width), pad, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, (ids, _) in enumerate(requests):
        if ids:
            input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[i, width - len(ids):] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    params = [p for _, p in requests]
    cap = [int(p.max_new_tokens) for p in params]
    gens: list[Any] = []
    for p in params:
        g = None
        if p.temperature > 0:
            g = torch.Generator(device=device)
            g.manual_seed(int(p.seed))
        gens.append(g)
    new: list[list[int]] = [[] for _ in range(n)]
    done = [c <= 0 for c in cap]
    # the KV cache argument is ``cache`` from transformers 5.2x, ``past_key_values`` before
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    training = model.training
    try:
        model.eval()
        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                        logits_to_keep=1)  # the prefill's last position only: all of them is ~26 GB at 150 x 900
            past = _kv(out)
            last_pos = positions[:, -1:]
            for _ in range(max(cap, default=0)):
                if all(done):
                    break
                logits = out.logits[:, -1, :].float()
                token = logits.argmax(-1)
                for i, p in enumerate(params):
                    if not done[i] and p.temperature > 0:
                        token[i] = _sample(logits[i], p, gens[i])
                chosen = token.tolist()
                for i in range(n):
                    if done[i]:
                        continue
                    new[i].append(int(chosen[i]))
                    text = tokenizer.decode(new[i], skip_special_tokens=True) if params[i].stop else ""
                    if chosen[i] == eos or len(new[i]) >= cap[i] or any(s in text for s in params[i].stop):
                        done[i] = True
                if all(done):
                    break
                feed = torch.tensor([[c if not d else pad] for c, d in zip(chosen, done, strict=True)],
                                    dtype=torch.long, device=device)
                attention = torch.cat([attention, torch.ones((n, 1), dtype=attention.dtype, device=device)], dim=1)
                last_pos = last_pos + 1
                out = model(input_ids=feed, attention_mask=attention, position_ids=last_pos,
                            use_cache=True, **{cache_arg: past})
                past = _kv(out)
    except (RuntimeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        return [Continuation(text="", finish="error", error=error, latency_s=time.perf_counter() - start)
                for _ in range(n)]
    finally:
        model.train(training)
    latency = (time.perf_counter() - start) / n
    result = []
    for i, p in enumerate(params):
        text = tokenizer.decode(new[i], skip_special_tokens=True)
        result.append(Continuation(text=text, ids=new[i], n_tokens=len(new[i]),
                                   finish=finish_reason(text, new[i], eos, p.stop), latency_s=latency))
    return result


def _kv(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _sample(logits: Any, params: DecodingParams, generator: Any) -> Any:
    """One token from ``logits`` at ``params.temperature``, nucleus ``params.top_p`` (as
    transformers' warpers: temperature first, then the smallest set of mass >= top_p)."""
    import torch

    scores = logits / float(params.temperature)
    if params.top_p < 1.0:
        order = torch.argsort(scores, descending=True)
        probs = torch.softmax(scores[order], dim=-1)
        drop = probs.cumsum(-1) - probs > float(params.top_p)  # keep the first token always
        scores = scores.clone()
        scores[order[drop]] = float("-inf")
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[0]


class _Batcher:
    """Gathers the model turns of concurrent rollouts into batches (see the module)."""

    def __init__(self, lm: Any, max_batch: int, live: int):
        self.lm = lm
        self.max_batch = max_batch
        self.live = live
        self.pending: list[list[Any]] = []
        self.cond = threading.Condition()
        self.failure: BaseException | None = None

    def submit(self, ids: list[int], text: str, params: DecodingParams) -> Continuation:
        """Called from a rollout thread in place of ``lm.continue_``; blocks until served."""
        request: list[Any] = [list(ids), params, None]
        with self.cond:
            self.pending.append(request)
            self.cond.notify_all()
            while request[2] is None:
                self.cond.wait()
        return request[2]

    def finished(self) -> None:
        with self.cond:
            self.live -= 1
            self.cond.notify_all()

    def serve(self) -> None:
        """Serve batches in the calling thread until every rollout thread has finished."""
        while True:
            with self.cond:
                while self.live > 0 and len(self.pending) < min(self.live, self.max_batch):
                    self.cond.wait(timeout=1.0)
                if self.live <= 0 and not self.pending:
                    return
                batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
            try:
                results = self.lm.continue_batch([(r[0], r[1]) for r in batch])
            except BaseException as exc:  # unblock the threads, then raise in the caller
                self.failure = self.failure or exc
                results = [Continuation(text="", finish="error", error=f"{type(exc).__name__}: {exc}")
                           for _ in batch]
            with self.cond:
                for r, c in zip(batch, results, strict=True):
                    r[2] = c
                self.cond.notify_all()


def raise_on_model_errors(trajectories: Sequence[Any], where: str) -> None:
    """Raise `GenerationError` when a model call failed in any of ``trajectories``.

    A failed call (CUDA out of memory, a server gone) ends its rollout with ``stop_reason ==
    "error"``; scored, it would read as a -1 format reward that the policy never earned. GRPO
    would train on it and an evaluation would report it, so both stop instead (GRPO resumes
    from its last checkpoint). A seen case: on an H100, batched prefills that kept every
    position's logits ran out of memory on 8 of 30 GRPO steps, which then scored -1 throughout.
    """
    failed = [t for t in trajectories if t.stop_reason == "error"]
    if failed:
        raise GenerationError(f"{where}: {len(failed)} of {len(trajectories)} rollouts failed in the model call "
                              f"(first: {str(failed[0].error)[:200]}); nothing was scored")


def rollout_many(jobs: Sequence[tuple[Any, str, str, int | None]], *, batch: int = 1,
                 progress: Any = None) -> list[Any]:
    """Roll out ``jobs``, each ``(loop, question, qid, seed)``, ``batch`` at a time.

    Parameters
    ----------
    jobs : sequence of (AgentLoop, str, str, int or None)
        The loop to use (loops may differ per job, e.g. in ``max_turns``), the question, its
        qid and the sampling seed (None: the loop's).
    batch : int
        Rollouts in flight at once. 1 rolls out one after another in this thread. Above 1, the
        loops' model must offer ``continue_batch`` (`ltrr.agent.backends.TransformersLM`
        does); its model turns are then decoded together.
    progress : callable, optional
        Called with no argument after each finished rollout (a tqdm bar's ``update``).

    Returns
    -------
    list of Trajectory
        In the order of ``jobs``.
    """
    check_int(batch, "rollout batch", low=1)
    tick = progress or (lambda: None)
    if batch == 1 or len(jobs) <= 1:
        out = []
        for loop, question, qid, seed in jobs:
            out.append(loop.rollout(question, qid=qid, seed=seed))
            tick()
        return out
    lms = {id(loop.lm): loop.lm for loop, *_ in jobs}
    if len(lms) != 1:
        raise ConfigError("rollout_many with batch > 1 needs every loop to share one model")
    lm = next(iter(lms.values()))
    if not callable(getattr(lm, "continue_batch", None)):
        raise ConfigError(f"{type(lm).__name__} cannot decode in batches (no continue_batch); use rollout batch 1")
    n_threads = min(batch, len(jobs))
    batcher = _Batcher(lm, batch, n_threads)
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    queue = list(enumerate(jobs))
    lock = threading.Lock()
    originals = {id(loop): loop for loop, *_ in jobs}

    def worker() -> None:
        try:
            while True:
                with lock:
                    if not queue or errors:
                        return
                    i, (loop, question, qid, seed) = queue.pop(0)
                local = copy.copy(loop)  # its own counters; the model turns go to the batcher
                local.hits = local.misses = 0
                local._continue_fn = batcher.submit
                results[i] = local.rollout(question, qid=qid, seed=seed)
                with lock:
                    original = originals[id(loop)]
                    original.hits += local.hits
                    original.misses += local.misses
                tick()
        except BaseException as exc:
            with lock:
                errors.append(exc)
        finally:
            batcher.finished()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n_threads)]
    for t in threads:
        t.start()
    batcher.serve()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    if batcher.failure is not None:
        raise batcher.failure
    return results
