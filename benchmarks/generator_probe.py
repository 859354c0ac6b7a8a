"""Can the generator read? The design probe that chooses the embedded model and its template.

On *design* questions only (partition seed 13 of the relabelled demo, design_size 0.7; the
test part is never read here), each generator answers:

- single-hop questions whose gold passage contains an answer: closed book, with the gold
  passage, and with a near-miss passage (the best TF-IDF match over the corpus that lacks every
  answer). The *reading gap* is gold minus near-miss: how much a right passage is worth.
- ``multihop`` (two-hop bridge) questions with both gold passages.

Prompts are built by ltrr's own `answer_batch` (the label stage's path: same template, same
decoding parameters, same fallback) through the project's generation cache, so the probe's
generations are cache hits when the relabelling meets the same prompts.

Cells are ``contains`` / token F1 / token recall, with seconds per answer measured on cache
misses (2 threads; a model's first call includes loading it).

    python benchmarks/generator_probe.py [--single 40] [--multihop 20] [--out benchmarks/results/generator_probe.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd

from ltrr.data.io import atomic_path, write_text_atomic
from ltrr.eval.protocol import design_test_partition
from ltrr.generation import answer_batch, load_template, make_generator
from ltrr.generation.cache import CachedGenerator, GenerationCache
from ltrr.metrics import parse_metric

CANDIDATES = [
    # (label, generator config, template)
    ("SmolLM2-135M, short_answer", {"backend": "llama_cpp", "model": "smollm2-135m", "n_threads": 2}, "short_answer"),
    ("SmolLM2-135M, few_shot", {"backend": "llama_cpp", "model": "smollm2-135m", "n_threads": 2}, "few_shot"),
    ("Qwen2.5-Coder-0.5B, short_answer", {"backend": "llama_cpp", "model": "qwen2.5-coder-0.5b", "n_threads": 2}, "short_answer"),
    ("Qwen2.5-Coder-0.5B, few_shot", {"backend": "llama_cpp", "model": "qwen2.5-coder-0.5b", "n_threads": 2}, "few_shot"),
]


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def probe_items(data: Path, n_single: int, n_multi: int, seed: int = 13) -> list[dict]:
    """Design questions with their gold, near-miss and (two-hop) passages; deterministic."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    q = pd.read_parquet(data / "queries.parquet")
    corpus = pd.read_parquet(data / "corpus.parquet")
    qrels = pd.read_parquet(data / "qrels.parquet")
    design = set(design_test_partition(q, design_size=0.7, random_state=seed).train)
    text = dict(zip(corpus["docid"].astype(str), corpus["text"].astype(str), strict=True))
    gold = qrels.groupby("qid")["docid"].apply(lambda s: sorted(map(str, s))).to_dict()
    rng = np.random.default_rng(seed)
    q = q[q["qid"].isin(design)].sort_values("qid")
    single = q[~q["qtype"].isin(["multihop", "noanswer"])]
    single = single.iloc[rng.permutation(len(single))]
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit(corpus["text"])
    X = vec.transform(corpus["text"])
    docids = corpus["docid"].astype(str).tolist()
    items: list[dict] = []
    for row in single.itertuples():
        answers = [str(a) for a in row.answers]
        golds = gold.get(row.qid, [])
        if len(golds) != 1 or not any(_norm(a) in _norm(text[golds[0]]) for a in answers):
            continue
        sims = (X @ vec.transform([row.question]).T).toarray().ravel()
        near = next(docids[i] for i in np.argsort(-sims, kind="stable")
                    if docids[i] != golds[0] and not any(_norm(a) in _norm(text[docids[i]]) for a in answers))
        items.append({"qid": row.qid, "kind": "single", "question": row.question, "answers": answers,
                      "gold": [text[golds[0]]], "near": [text[near]]})
        if len(items) == n_single:
            break
    multi = q[q["qtype"] == "multihop"]
    multi = multi.iloc[rng.permutation(len(multi))]
    for row in multi.itertuples():
        golds = gold.get(row.qid, [])
        if len(golds) != 2:
            continue
        items.append({"qid": row.qid, "kind": "multihop", "question": row.question,
                      "answers": [str(a) for a in row.answers], "both": [text[d] for d in golds]})
        if sum(i["kind"] == "multihop" for i in items) == n_multi:
            break
    return items


def run(items: list[dict], cache: Path, max_new_tokens: int = 32) -> pd.DataFrame:
    metrics = {m: parse_metric(m) for m in ("contains", "f1", "recall")}
    rows = []
    for label, gcfg, template_name in CANDIDATES:
        gen = CachedGenerator(make_generator(gcfg), GenerationCache(cache))
        template = load_template(template_name)
        params = template.default_params(max_new_tokens=max_new_tokens)
        for cond in ("closed", "gold", "near", "both"):
            sel = [i for i in items if (cond == "both") == (i["kind"] == "multihop")]
            if cond == "closed":
                sel = [i for i in sel if i["kind"] == "single"]
            batch = [(i["question"], None if cond == "closed" else i[cond]) for i in sel]
            t0, misses = time.perf_counter(), gen.generator_calls
            out = answer_batch(gen, template, batch, params)
            secs, calls = time.perf_counter() - t0, gen.generator_calls - misses
            preds = [r.answer or "" for r in out]
            golds = [i["answers"] for i in sel]
            row = {"model": label, "condition": cond, "n": len(sel),
                   "s_per_call": round(secs / calls, 2) if calls else float("nan")}
            for name, m in metrics.items():
                row[name] = float(np.mean(m.score_details([i["question"] for i in sel], preds, golds).values))
            rows.append(row)
            print(f"{label:34s} {cond:7s} n={len(sel):3d} contains={row['contains']:.2f} f1={row['f1']:.2f} "
                  f"recall={row['recall']:.2f} s/call={row['s_per_call']}", flush=True)
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> str:
    lines = ["| model, template | closed | gold | near-miss | gap | two-hop, both golds | s/answer |",
             "|---|---|---|---|---|---|---|"]
    for model, g in df.groupby("model", sort=False):
        c = g.set_index("condition")

        def cell(cond: str, c=c) -> str:
            return f"{c.loc[cond, 'contains']:.2f}/{c.loc[cond, 'f1']:.2f}/{c.loc[cond, 'recall']:.2f}"

        gap = "/".join(f"{c.loc['gold', m] - c.loc['near', m]:+.2f}" for m in ("contains", "f1", "recall"))
        secs = np.nanmean(g["s_per_call"].to_numpy(dtype=float))
        lines.append(f"| {model} | {cell('closed')} | {cell('gold')} | {cell('near')} | {gap} | {cell('both')} | {secs:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/built/demo")
    ap.add_argument("--cache", default="data/cache/generations.sqlite")
    ap.add_argument("--single", type=int, default=40)
    ap.add_argument("--multihop", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/generator_probe.md")
    a = ap.parse_args()
    items = probe_items(Path(a.data), a.single, a.multihop)
    df = run(items, Path(a.cache))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    write_text_atomic(out, "# Generator probe on design questions (partition seed 13)\n\n"
                   f"{sum(i['kind'] == 'single' for i in items)} single-hop and "
                   f"{sum(i['kind'] == 'multihop' for i in items)} multihop design questions; cells are "
                   "contains / token F1 / token recall; gap = gold minus near-miss.\n\n" + table(df) + "\n")
    print(table(df))


if __name__ == "__main__":
    main()
