"""Where a policy calls an arm it never saw in training, and what the arm changes (issue 28, point 3).

Reads two `ltrr agent eval` folders of one policy on the same test questions: ``--with`` (the
config's ``[agent] holdout_arms`` in the prompt, ``agent eval --holdout``: described by their
configuration alone) and ``--without`` (the prompt the policy was trained with). Writes, per
held-out arm:

- its calls: valid searches of it, and the questions with at least one, overall and per question
  type;
- where its descriptor says it is strong. A config-only line names no question type, so two
  readings are reported, both fixed before the evaluations were read: *family* — the types the
  prompt's line of the seen arm of the same retriever family without a reranker (``dense`` for
  ``dense+reg``) names as its strongest (its design-part means, as the prompt shows them); and
  *own* — the arm's own two strongest types by its design-part mean utility (measured, never
  shown to the policy);
- its calls on the test questions where its labels make it the strict best arm, against the rest;
- the calls the loop rejected, by the name the policy wrote (a name it learned that the prompt
  lacks), overall and per question type;
- with ``--leave-out`` evaluations (both folders must leave out the same arms): the same, with
  those arms gone from both prompts; leaving out the family arm itself (``dense``) asks whether
  the policy finds the family by the unseen arm's line once the name it learned is gone, and the
  family reading is then the types the family arm's line would name;
- the run's metric with the arm against without it, on the common questions: both means, the
  difference and a two-sided paired Wilcoxon p (`ltrr.eval.stats.paired_wilcoxon`), overall and
  per question type (means only).

    taskset -c 1 .venv/bin/python benchmarks/unseen_arm.py demo-agent-unseen \\
        --with runs/demo-agent/agent/eval-sft-holdout-views-holdout \\
        --without runs/demo-agent/agent/eval-sft-holdout-views \\
        --out runs/demo-agent/unseen_arm    # writes unseen_arm.json and unseen_arm.md

The committed readings are in ``benchmarks/results/agent_demo_agent/`` (``unseen_arm_lr.*``,
``unseen_renamed/``, ``unseen_typed/``) and ``benchmarks/results/agent_demo_agent_qwen/``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import ltrr  # noqa: F401  (before numpy and the rest: it pins their CPU kernels, ltrr._cpu)

# isort: split
import numpy as np


def _fmt(v) -> str:
    return "" if v is None else f"{v:.3f}"


def _top_types(means: dict[str, float], n: int = 2) -> list[str]:
    """The ``n`` strongest types, as `ltrr.agent.prompt.describe_strengths` names them."""
    ranked = sorted(((t, v) for t, v in means.items() if not np.isnan(v)), key=lambda kv: (-kv[1], kv[0]))
    return [t for t, _ in ranked[: n if len(ranked) >= 3 else 1]]


def _outcome(traj) -> float:
    """A scored trajectory's outcome reward (an evaluation's trajectories are all scored)."""
    if traj.rewards is None:
        raise SystemExit(f"trajectory {traj.qid}: no rewards (not an evaluation's trajectory)")
    return traj.rewards["outcome"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--with", dest="with_arm", required=True)
    ap.add_argument("--without", required=True)
    ap.add_argument("--out", required=True, help="output prefix: PREFIX.json and PREFIX.md")
    args = ap.parse_args()

    from ltrr.agent.run import labels_table, partition, strengths
    from ltrr.agent.trajectory import load_trajectories
    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.eval.stats import paired_wilcoxon
    from ltrr.pipeline import Run

    run = Run(load_config(args.config))
    held = list(run.config.agent["holdout_arms"])
    labels = labels_table(run)
    design, _ = partition(run)
    power = strengths(run, labels, design)  # design-part mean utility per arm and type
    q = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    qtype = q["qtype"].astype(str)
    docs = {k: json.loads((Path(p) / "eval.json").read_text()) for k, p in
            (("with", args.with_arm), ("without", args.without))}
    if not docs["with"]["holdout_in_prompt"] or docs["without"]["holdout_in_prompt"]:
        raise SystemExit("--with must be an `agent eval --holdout` folder and --without one without --holdout")
    left = [sorted(docs[k].get("left_out_arms") or []) for k in ("with", "without")]
    if left[0] != left[1]:
        raise SystemExit(f"--with leaves out {left[0]} and --without {left[1]}: compare evaluations of one prompt")
    left_out = left[0]
    if bool(docs["with"].get("neutral_ids")) != bool(docs["without"].get("neutral_ids")):
        raise SystemExit("one evaluation shows neutral ids (--neutral-ids) and the other real names: "
                         "compare evaluations of one prompt")
    trajs = {k: {t.qid: t for t in load_trajectories(Path(p) / "trajectories.jsonl")}
             for k, p in (("with", args.with_arm), ("without", args.without))}
    qids = sorted(set(trajs["with"]) & set(trajs["without"]))
    lab = labels[labels["qid"].astype(str).isin(set(qids))]
    if "failed" in lab:
        lab = lab[~lab["failed"].astype(bool)]
    U = lab.pivot_table(index=lab["qid"].astype(str), columns="arm", values="utility", aggfunc="mean")
    metric = docs["with"]["metric"]
    pool = run.pool.load(run.index_dir)
    doc = {"config": args.config, "part": "test", "metric": metric, "n": len(qids), "held_out": held, "left_out": left_out,
           "neutral_ids": bool(docs["with"].get("neutral_ids")),
           "with": args.with_arm, "without": args.without, "arms": {}}
    outcome = {k: np.array([_outcome(trajs[k][x]) for x in qids], dtype=np.float64) for k in trajs}
    w = paired_wilcoxon(outcome["with"], outcome["without"])
    doc["outcome"] = {"with": float(outcome["with"].mean()), "without": float(outcome["without"].mean()),
                      "diff": float(outcome["with"].mean() - outcome["without"].mean()), "p": w.pvalue,
                      "n_nonzero": w.n_nonzero}
    types = sorted({qtype[x] for x in qids})
    doc["outcome_by_type"] = {t: {"n": sum(qtype[x] == t for x in qids),
                                  "with": float(np.mean([outcome["with"][i] for i, x in enumerate(qids) if qtype[x] == t])),
                                  "without": float(np.mean([outcome["without"][i] for i, x in enumerate(qids)
                                                            if qtype[x] == t]))} for t in types}
    doc["calls_all_arms"] = {k: dict(Counter(s.arm for t in trajs[k].values() for s in t.searches if s.valid))
                             for k in trajs}
    # rejected calls by the name written (an arm the prompt lacks: a name learned in training, or
    # with neutral ids a real one), and by question type
    doc["rejected_calls"] = {k: dict(Counter(s.arm for t in trajs[k].values() for s in t.searches if not s.valid))
                             for k in trajs}
    doc["rejected_calls_by_type"] = {k: {t: dict(Counter(s.arm for x in qids if qtype[x] == t
                                                         for s in trajs[k][x].searches if not s.valid))
                                         for t in types} for k in trajs}
    shown = {a: v for a, v in power.items() if a not in held and a not in left_out}
    best_shown = {t: max(((a, v[t]) for a, v in shown.items() if t in v and not np.isnan(v[t])),
                         key=lambda av: (av[1], av[0]), default=(None, None)) for t in types}
    for arm in held:
        spec = pool.arm(arm)
        family = [a.name for a in pool.arms if a.name not in held and a.retriever == spec.retriever
                  and (a.reranker in (None, "none"))]
        fam_types = _top_types(power.get(family[0], {})) if family else []
        own_types = _top_types(power.get(arm, {}))
        called = {x: sum(1 for s in trajs["with"][x].searches if s.valid and s.arm == arm) for x in qids}
        others = [a for a in U.columns if a != arm]
        best = {x: bool(x in U.index and U.loc[x, arm] > U.loc[x, others].max()) for x in qids}
        by_type: dict[str, dict[str, Any]] = {}
        for t in types:
            sel = [x for x in qids if qtype[x] == t]
            by_type[t] = {"n": len(sel), "questions_calling": sum(called[x] > 0 for x in sel),
                          "calls": sum(called[x] for x in sel),
                          "design_mean_utility": power.get(arm, {}).get(t),
                          "family_design_mean_utility": power.get(family[0], {}).get(t) if family else None,
                          "family_strong": t in fam_types, "own_strong": t in own_types,
                          # the strongest seen arm the prompt shows on this type (design-part means):
                          # an arm that is never above it has no type on which the prompt makes it the pick
                          "best_shown_arm": best_shown[t][0], "best_shown_design_mean": best_shown[t][1]}

        def share(sel, called=called):
            return {"n": len(sel), "questions_calling": sum(called[x] > 0 for x in sel)}

        below = [t for t in types if by_type[t]["design_mean_utility"] is not None
                 and by_type[t]["best_shown_design_mean"] is not None
                 and by_type[t]["design_mean_utility"] < by_type[t]["best_shown_design_mean"]]
        doc["arms"][arm] = {
            "types_below_best_shown_arm": below,
            "calls": sum(called.values()), "questions_calling": sum(v > 0 for v in called.values()),
            "family_arm": family[0] if family else None, "family_strong_types": fam_types,
            "own_strong_types": own_types, "by_type": by_type,
            "on_family_strong_types": share([x for x in qids if qtype[x] in fam_types]),
            "on_other_types_than_family_strong": share([x for x in qids if qtype[x] not in fam_types]),
            "on_own_strong_types": share([x for x in qids if qtype[x] in own_types]),
            "where_label_best": share([x for x in qids if best[x]]),
            "where_not_label_best": share([x for x in qids if not best[x]]),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(f"{args.out}.json"), json.dumps(doc, indent=1, default=float) + "\n")
    o = doc["outcome"]
    lines = [f"# Unseen arm(s) {held}: {args.with_arm} (with) vs {args.without} (without)", "",
             f"Test part, {doc['n']} common questions, metric {metric}"
             + (f"; left out of both prompts: {left_out}" if left_out else "")
             + ("; every arm under a neutral id (--neutral-ids)." if docs["with"].get("neutral_ids") else "."), "",
             f"- {metric} with the arm {o['with']:.4f}, without {o['without']:.4f}, diff {o['diff']:+.4f}, "
             f"paired Wilcoxon p = {o['p']:.3g} ({o['n_nonzero']} non-zero differences)",
             f"- valid calls per arm, with: {doc['calls_all_arms']['with']}",
             f"- valid calls per arm, without: {doc['calls_all_arms']['without']}",
             f"- rejected calls by the name written, with: {doc['rejected_calls']['with']}",
             f"- rejected calls by the name written, without: {doc['rejected_calls']['without']}"]
    for arm, a in doc["arms"].items():
        lines += ["", f"## {arm}", "",
                  f"Called {a['calls']} time(s), on {a['questions_calling']} of {doc['n']} questions. "
                  f"Family arm {a['family_arm']!r} is shown as strongest on {a['family_strong_types']}; "
                  f"{arm}'s own design-part strongest types (never shown): {a['own_strong_types']}.", "",
                  f"On {len(a['types_below_best_shown_arm'])} of {len(types)} question types its own design-part "
                  "mean is below the strongest arm the prompt shows on that type (last columns).", "",
                  "| where | questions | calling it |", "|---|---|---|"]
        for key in ("on_family_strong_types", "on_other_types_than_family_strong", "on_own_strong_types",
                    "where_label_best", "where_not_label_best"):
            lines.append(f"| {key.replace('_', ' ')} | {a[key]['n']} | {a[key]['questions_calling']} |")
        lines += ["", f"| type | n | calling {arm} | calls | {arm} design mean | {a['family_arm']} design mean "
                  f"| family-strong | own-strong | {metric} with | {metric} without | strongest shown arm "
                  "| its design mean |", "|---" * 12 + "|"]
        for t, r in a["by_type"].items():
            ob = doc["outcome_by_type"][t]
            lines.append(f"| {t} | {r['n']} | {r['questions_calling']} | {r['calls']} | {_fmt(r['design_mean_utility'])} "
                         f"| {_fmt(r['family_design_mean_utility'])} | {'yes' if r['family_strong'] else ''} "
                         f"| {'yes' if r['own_strong'] else ''} | {ob['with']:.3f} | {ob['without']:.3f} "
                         f"| {r['best_shown_arm']} | {_fmt(r['best_shown_design_mean'])} |")
    write_text_atomic(Path(f"{args.out}.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
