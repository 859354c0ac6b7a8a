"""The SFT arm-view settings, chosen on design questions without training (issue 28, point 3).

Training shows each SFT example the arms its own way (`ltrr.agent.presentation`): a shuffled
order, neutral ids on ``rename_share`` of the examples, one arm left out on ``leave_out_share``,
one shown arm described by its configuration alone on ``config_only_share``. Training a policy
per setting to choose among them costs about half an hour of CPU each, so the settings are
chosen instead from what the scripts would teach: for each setting of `GRID`, the run's SFT
scripts are drawn (`ltrr.agent.sft.script_plans`: the same design questions, plans and views
that `ltrr agent sft` plays and trains on; nothing is generated, no test question is read, no
policy is trained or evaluated), and the script counts below are compared by `RULE`, fixed
before the script was first run.

A script *calls* an arm when one of its searches uses it. Per setting:

- ``scripts``, ``search_scripts``: scripts, and scripts with at least one search;
- ``calls_renamed``: scripts that call an arm under a neutral id;
- ``calls_config_only``: scripts that call the arm described by its configuration alone, and
  ``calls_config_only_real_name`` those of them under the arm's real name (the situation of an
  unseen arm at evaluation: its real name, no measured strengths);
- ``eval_prompt``: scripts whose prompt is the evaluation's (real names, every arm, every arm
  with its strengths);
- ``calls``: per arm, the scripts calling it, and of them under a neutral id, and config-only.

    taskset -c 1 .venv/bin/python benchmarks/view_settings.py demo-agent-unseen \\
        [--out benchmarks/results/agent_demo_agent/view_settings.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

GRID: dict[str, tuple[Any, ...]] = {
    "shuffle_arms": (True,),
    "rename_share": (0.25, 0.5),
    "leave_out_share": (0.1, 0.25),
    "config_only_share": (0.25, 0.5, 0.75, 1.0),
}
RULE = (
    "Counts on the run's SFT scripts (max_examples of [agent] sft). A setting passes when: "
    "(a) at least 10% of the scripts call the arm described by its configuration alone (the skill "
    "the unseen-arm test needs) and at least 5% do so under its real name (the test's exact "
    "situation); (b) at least 20% of the scripts call an arm under a neutral id; (c) at least 10% "
    "of the scripts show the evaluation's prompt (real names, every arm, all strengths), so the "
    "policy still meets the prompt it is evaluated on; (d) every arm that the plain scripts "
    "(every setting off) call in at least 10 scripts is called at least twice under a neutral id "
    "and at least twice config-only. Among the settings that pass, the one with the most "
    "evaluation-prompt scripts (the least departure from the evaluated prompt); ties go to the "
    "smaller leave_out_share, then the smaller rename_share, then the smaller config_only_share. "
    "If none passes: the most scripts calling a config-only arm among those meeting (b) and (c), "
    "said so in the result."
)


def _counts(plans) -> dict:
    calls: dict[str, dict[str, int]] = {}
    out: dict[str, Any] = {"scripts": len(plans), "search_scripts": 0, "calls_renamed": 0, "calls_config_only": 0,
           "calls_config_only_real_name": 0, "eval_prompt": 0}
    for _, view, plan in plans:
        called = {arm for arm, _, _ in plan}
        out["search_scripts"] += bool(called)
        out["calls_renamed"] += bool(called) and view.renamed
        hit = called & set(view.config_only)
        out["calls_config_only"] += bool(hit)
        out["calls_config_only_real_name"] += bool(hit) and not view.renamed
        out["eval_prompt"] += not view.renamed and not view.left_out and not view.config_only
        for arm in called:
            c = calls.setdefault(arm, {"scripts": 0, "renamed": 0, "config_only": 0})
            c["scripts"] += 1
            c["renamed"] += view.renamed
            c["config_only"] += arm in view.config_only
    out["calls"] = dict(sorted(calls.items()))
    return out


def _passes(c: dict, plain: dict) -> dict[str, bool]:
    n = c["scripts"]
    busy = [a for a, v in plain["calls"].items() if v["scripts"] >= 10]
    return {
        "a": c["calls_config_only"] >= 0.10 * n and c["calls_config_only_real_name"] >= 0.05 * n,
        "b": c["calls_renamed"] >= 0.20 * n,
        "c": c["eval_prompt"] >= 0.10 * n,
        "d": all(c["calls"].get(a, {}).get("renamed", 0) >= 2 and c["calls"].get(a, {}).get("config_only", 0) >= 2
                 for a in busy),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from ltrr.agent.presentation import draw_view
    from ltrr.agent.run import labels_table, partition
    from ltrr.agent.sft import SFTSpec, script_plans
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    t0 = time.perf_counter()
    run = Run(load_config(args.config))
    labels, design = labels_table(run), partition(run)[0]
    held = set(run.config.agent["holdout_arms"])
    arms = [a for a in run.pool.load(run.index_dir).arm_names if a not in held]
    base = dict(run.config.agent["sft"])

    def plans(**view):
        return script_plans(run, labels, design, SFTSpec.from_mapping({**base, **view}), arms)

    # A plan depends on its view's left-out arm alone, and that is drawn the same whatever the
    # other shares (`draw_view` makes every draw), so the scripts are planned once per
    # leave_out_share (the pool's searches of the two-hop scripts are the slow part) and each
    # setting's views are drawn afresh; the left-out arms are checked to agree.
    plain = _counts(plans(shuffle_arms=False, rename_share=0, leave_out_share=0, config_only_share=0))
    planned = {share: plans(shuffle_arms=True, rename_share=0, leave_out_share=share, config_only_share=0)
               for share in GRID["leave_out_share"]}
    place = {qid: i for i, qid in enumerate(sorted(set(map(str, design))))}
    rows = []
    for values in itertools.product(*GRID.values()):
        setting = dict(zip(GRID, values, strict=True))
        drawn = []
        for qid, view, plan in planned[setting["leave_out_share"]]:
            new = draw_view(arms, seed=run.config.seed, key=(0, place[qid]), **setting)
            if new.left_out != view.left_out:
                raise RuntimeError(f"{qid}: the left-out arm moved with the other settings; plan per setting")
            drawn.append((qid, new, plan))
        c = _counts(drawn)
        rows.append({"setting": setting, **c, "passes": _passes(c, plain)})
    ok = [r for r in rows if all(r["passes"].values())]
    if ok:
        pick = max(ok, key=lambda r: (r["eval_prompt"], -r["setting"]["leave_out_share"],
                                      -r["setting"]["rename_share"], -r["setting"]["config_only_share"]))
        how = "passes (a)-(d); the most evaluation-prompt scripts"
    else:
        fallback = [r for r in rows if r["passes"]["b"] and r["passes"]["c"]] or rows
        pick = max(fallback, key=lambda r: r["calls_config_only"])
        how = "NONE passes (a)-(d): the most config-only calls among those meeting (b) and (c)"
    doc = {"config": args.config, "part": "design", "arms": arms, "held_out": sorted(held), "rule": RULE,
           "grid": {k: list(v) for k, v in GRID.items()}, "plain": plain, "rows": rows,
           "choice": pick["setting"], "how": how, "seconds": round(time.perf_counter() - t0, 1)}
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        from ltrr.data.io import write_text_atomic

        write_text_atomic(Path(args.out), text)
    print(json.dumps({"choice": doc["choice"], "how": how, "plain_calls": plain["calls"]}, indent=1))
    for r in rows:
        s = r["setting"]
        print(f"rename {s['rename_share']:.2f} leave {s['leave_out_share']:.2f} config {s['config_only_share']:.2f}: "
              f"renamed {r['calls_renamed']:3d} config-only {r['calls_config_only']:3d} "
              f"(real name {r['calls_config_only_real_name']:3d}) eval-prompt {r['eval_prompt']:3d} "
              f"{''.join(k for k, v in r['passes'].items() if v)}")


if __name__ == "__main__":
    main()
