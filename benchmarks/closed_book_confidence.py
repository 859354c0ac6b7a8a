"""The generator's confidence in its closed-book answer, for every design query of the protocol.

For `within_type_probe.py`'s variant E (declared in `results/protocol_demo/README.md` before it
was computed). Each design query's closed-book answer is rebuilt with the run's own template,
decoding parameters and prompt cap (`ltrr.generation.answer_batch`; the generation cache holds
it, so nothing new is generated), then scored under teacher forcing after its own prompt
(`Generator.score`, cached). The CSV is rewritten after every chunk and a rerun skips the queries
it holds, so a run resumes on another machine from the committed file. Per query: the mean and the minimum natural-log
probability of the answer's tokens, and its token count. Only design queries are read.

    python benchmarks/closed_book_confidence.py demo [--seed 13] [--chunk 64]

Writes ``benchmarks/results/protocol_demo_qwen/closed_book_confidence.csv``.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np
import pandas as pd


def _messages(answer):
    """The messages of an answered item's prompt (every item `answer_batch` answered has one)."""
    if answer.prompt is None:
        raise ValueError("an answered item without its prompt")
    return answer.prompt.messages


def confidence(run, qids: list[str], *, chunk: int = 64, done: pd.DataFrame | None = None,
               save=None) -> pd.DataFrame:
    """The closed-book confidence of ``qids``; ``done`` holds rows already computed (skipped), and
    ``save(df)`` is called with every row so far after each chunk (the resume point)."""
    from ltrr.generation import answer_batch, load_template
    from ltrr.progress import bar

    gcfg = run.config.generation
    template = load_template(gcfg.template)
    params = template.default_params(max_new_tokens=gcfg.max_new_tokens)
    generator = run.make_generator()
    q = run.dataset.queries.set_index(run.dataset.queries["qid"].astype(str))["question"]
    rows = [] if done is None else done.to_dict("records")
    have = {r["qid"] for r in rows}
    todo = [x for x in qids if x not in have]
    for start in bar(range(0, len(todo), chunk), desc="closed-book confidence", unit="chunk"):
        ids = todo[start:start + chunk]
        answers = answer_batch(generator, template, [(q[x], None) for x in ids], params,
                               max_prompt_tokens=gcfg.max_prompt_tokens or None)
        ok = [i for i, a in enumerate(answers) if a.ok and a.raw_output.strip()]
        scored = generator.score([_messages(answers[i]) for i in ok], [answers[i].raw_output for i in ok])
        by = dict(zip(ok, scored, strict=True))
        for i, x in enumerate(ids):
            lp = np.asarray(by[i].extra.get("token_logprobs", []), float) if i in by and not by[i].error else np.array([])
            rows.append({"qid": x, "answer": answers[i].raw_output,
                         "cb_mean_logprob": float(lp.mean()) if len(lp) else float("nan"),
                         "cb_min_logprob": float(lp.min()) if len(lp) else float("nan"),
                         "cb_answer_tokens": int(len(lp))})
        if save is not None:
            save(pd.DataFrame(rows))
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.pipeline import Run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--out", type=Path,
                    default=Path("benchmarks/results/protocol_demo_qwen/closed_book_confidence.csv"))
    a = ap.parse_args(argv)
    run = Run(load_config(a.config), log=lambda m: None)
    labels = pd.read_parquet(run.labels_dir / "labels.parquet", columns=["qid", "arm", "raw_output"])
    design, _ = run.protocol_part("design", seed=a.seed, labels=None)
    qids = [x for x in run.dataset.queries["qid"].astype(str) if x in design]
    nr = run.no_retrieval_arms()[0]
    held = labels[labels["arm"] == nr].set_index("qid")["raw_output"]

    def save(df: pd.DataFrame) -> None:
        # the rebuilt answer must be the one the labels hold (the same prompt, from the cache)
        out = df.assign(same_answer=(df["answer"] == held.reindex(df["qid"]).to_numpy()).astype(int))
        buf = io.StringIO()
        out.drop(columns=["answer"]).to_csv(buf, index=False, float_format="%.6g")
        write_text_atomic(a.out, buf.getvalue())

    done = None
    if a.out.is_file():  # resume: the rows written so far, with their answers from the labels
        done = pd.read_csv(a.out, dtype={"qid": str}).drop(columns=["same_answer"])
        done = done[done["qid"].isin(set(qids))].assign(answer=lambda d: held.reindex(d["qid"]).to_numpy())
    df = confidence(run, qids, chunk=a.chunk, done=done, save=save)
    save(df)
    same = float((df["answer"] == held.reindex(df["qid"]).to_numpy()).mean())
    print(f"{len(df)} of {len(qids)} design queries; rebuilt answer equals the label's on {same:.1%}; "
          f"scored {int(df['cb_mean_logprob'].notna().sum())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
