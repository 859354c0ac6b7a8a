"""`ltrr agent sft|eval`: the command-line face of `ltrr.agent.sft` and `ltrr.agent.evaluate`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr agent`` on the CLI's subparsers."""
    p = sub.add_parser("agent", help="the multi-round LLM router: format warm-start (SFT) and evaluation")
    asub = p.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    s = asub.add_parser("sft", help="script design-part trajectories and fine-tune the policy on them (TRL)")
    s.add_argument("config")
    s.add_argument("--out", help="policy folder (default: <workdir>/agent/policies/sft)")
    s.set_defaults(func=lambda a: _sft(a, log, out))
    e = asub.add_parser("eval", help="roll out a policy on the test part against single-round routing")
    e.add_argument("config")
    e.add_argument("--policy", help="a policy folder (default: [agent] policy, else the generator's model)")
    e.add_argument("--n", type=int, help="test questions (default: [agent] n_eval)")
    e.add_argument("--holdout", action="store_true", help="put [agent] holdout_arms in the prompt too")
    e.set_defaults(func=lambda a: _eval(a, log, out))


def _run(args: argparse.Namespace, log):
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    return Run(load_config(args.config), log=log)


def _sft(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.run import agent_dir, labels_table, partition, policy_lm
    from ltrr.agent.sft import SFTSpec, build_sft_trajectories, train_sft
    from ltrr.agent.trajectory import save_trajectories

    run = _run(args, log)
    spec = SFTSpec.from_mapping(run.config.agent["sft"])
    labels = labels_table(run)
    design, _ = partition(run)
    lm = policy_lm(run, "")
    trajs = build_sft_trajectories(run, lm, labels, design, spec)
    data = save_trajectories(trajs, agent_dir(run) / "sft_data" / "trajectories.jsonl")
    n_search = sum(1 for t in trajs if t.searches)
    log(f"[agent sft] {len(trajs)} scripted design trajectories ({n_search} search, "
        f"{sum(len(t.searches) == 2 for t in trajs)} two-hop) -> {data}")
    folder = args.out or agent_dir(run) / "policies" / "sft"
    rec = train_sft(trajs, lm, folder, spec, seed=run.config.seed, log=log, show_progress=progress_enabled())
    last = rec["loss"][-1]["loss"] if rec["loss"] else float("nan")
    out(f"policy: {folder} ({rec['examples']} examples, {rec['steps']} steps, {rec['seconds_this_leg']}s, "
        f"final loss {last:.4f})")
    out(f"try:    ltrr agent eval {args.config} --policy {folder}")
    return 0


def _eval(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.evaluate import eval_markdown, evaluate_agent

    run = _run(args, log)
    doc = evaluate_agent(run, policy=args.policy, n=args.n, holdout=args.holdout, show_progress=progress_enabled())
    out(eval_markdown(doc))
    out(f"report: {doc['folder']}/eval.md")
    log(json.dumps({"cache": doc["cache"]}))
    return 0
