"""`ltrr agent sft|eval|train|rft|export|progress|compare|sweep`: the command-line face of `ltrr.agent`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from ltrr._checks import check_int
from ltrr.agent.section import AgentSection
from ltrr.cli._flags import add_field_flag


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr agent`` on the CLI's subparsers."""
    p = sub.add_parser("agent", help="the multi-round LLM router: SFT warm-start, GRPO training, RFT baseline, evaluation")
    asub = p.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    s = asub.add_parser("sft", help="script design-part trajectories and fine-tune the policy on them (TRL)")
    s.add_argument("config")
    s.add_argument("--out", help="policy folder (default: <workdir>/agent/policies/sft)")
    s.add_argument("--resume", metavar="DIR", help="resume an interrupted run exported by `ltrr agent export` (its "
                   "committed checkpoint) when --out has no newer one; refused, naming the inputs that differ, when it "
                   "was trained on other settings, trajectories, seed or base model")
    s.set_defaults(func=lambda a: _sft(a, log, out))
    e = asub.add_parser("eval", help="roll out a policy on the test part against single-round routing")
    e.add_argument("config")
    e.add_argument("--policy", help="a policy folder (default: [agent] policy, else the generator's model)")
    add_field_flag(e, AgentSection, "n_eval", "--questions", old=["--n"], help="test questions")
    e.add_argument("--holdout", action="store_true", help="put [agent] holdout_arms in the prompt too")
    e.add_argument("--leave-out", action="append", default=[], metavar="ARM",
                   help="keep this pool arm out of the prompt (repeatable; results in eval-...-without-ARM)")
    e.add_argument("--neutral-ids", action="store_true",
                   help="show every arm under a neutral id (arm-3), as [agent] sft.rename_share = 1 trains")
    e.set_defaults(func=lambda a: _eval(a, log, out))
    t = asub.add_parser("train", help="GRPO: train the policy on design-part rollouts (TRL; needs ltrr[rl])")
    t.add_argument("config")
    t.add_argument("--from", dest="start", help="the starting policy (default: <workdir>/agent/policies/sft)")
    t.add_argument("--steps", type=int, help="optimiser steps (default: [agent] grpo.steps)")
    add_field_flag(t, AgentSection, "alpha", "--alpha", help="weight of the cost reward")
    t.add_argument("--out", help="policy folder (default: <workdir>/agent/policies/grpo-a<alpha>)")
    t.add_argument("--resume", metavar="DIR", help="resume from a run exported by `ltrr agent export` (a committed "
                   "checkpoint) when --out has no newer one; refused, naming the inputs that differ, when it was trained "
                   "on other settings, questions, seed, alpha or start policy")
    t.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="end this leg at a checkpoint when the next step would not fit in SECONDS; the same "
                   "command resumes it")
    t.set_defaults(func=lambda a: _train(a, log, out))
    r = asub.add_parser("rft", help="rejection-sampling fine-tuning: the RL run's equal-compute baseline")
    r.add_argument("config")
    r.add_argument("--from", dest="start", help="the starting policy (default: <workdir>/agent/policies/sft)")
    r.add_argument("--rollouts", type=int, required=True, help="samples to draw (the RL run's rollouts)")
    r.add_argument("--out", help="policy folder (default: <workdir>/agent/policies/rft)")
    r.set_defaults(func=lambda a: _rft(a, log, out))
    x = asub.add_parser("export", help="copy a LoRA policy, or its GRPO or interrupted SFT run's newest checkpoint, "
                        "to a tracked folder")
    x.add_argument("policy_dir", help="a policy folder (--out of ltrr agent sft|train|rft)")
    x.add_argument("dest", help="where to copy it (e.g. data/policies/<config>/<name>); replaced")
    x.set_defaults(func=lambda a: _export(a, out))
    g = asub.add_parser("progress", help="a GRPO run's per-step log so far (from its last checkpoint) and its plot")
    g.add_argument("policy_dir", help="the run's policy folder (--out of ltrr agent train)")
    g.set_defaults(func=lambda a: _progress(a, out))
    c = asub.add_parser("compare", help="paired tests of one policy's evaluation against another's")
    c.add_argument("policy_eval", help="an evaluation folder (<workdir>/agent/eval-NAME)")
    c.add_argument("baseline_eval", help="the evaluation folder to compare with")
    c.set_defaults(func=lambda a: _compare(a, out))
    w = asub.add_parser("sweep", help="the cost-weight sweep: its policies' evaluations per alpha, and whether "
                        "searches and cost fall as alpha rises (Page's trend test, bootstrap intervals)")
    w.add_argument("evals", nargs="+", help="evaluation folders (<workdir>/agent/eval-NAME), one per alpha")
    w.add_argument("--alphas", help="comma-separated cost weights, one per evaluation in order (default: each "
                   "policy's grpo.json)")
    w.add_argument("--seed", type=int, help="the bootstrap intervals' seed (default: the run seed the evaluations "
                   "recorded; 0 for evaluations that recorded none)")
    w.add_argument("--json", dest="json_out", help="also write the result here as JSON")
    w.set_defaults(func=lambda a: _sweep(a, out))


def _run(args: argparse.Namespace, log):
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    return Run(load_config(args.config), log=log)


def _sft(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.stage import sft_policy

    run = _run(args, log)
    folder, rec = sft_policy(run, args.out, log=log, show_progress=progress_enabled(), resume_from=args.resume)
    last = rec["loss"][-1]["loss"] if rec["loss"] else float("nan")
    out(f"policy: {folder} ({rec['examples']} examples, {rec['steps']} steps, {rec['seconds_this_leg']}s, "
        f"final loss {last:.4f})")
    out(f"try:    ltrr agent eval {args.config} --policy {folder}")
    return 0


def _eval(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.evaluate import eval_markdown, evaluate_agent

    run = _run(args, log)
    doc = evaluate_agent(run, policy=args.policy, n=args.questions, holdout=args.holdout,
                         leave_out=args.leave_out, neutral_ids=args.neutral_ids, show_progress=progress_enabled())
    out(eval_markdown(doc))
    out(f"report: {doc['folder']}/eval.md")
    log(json.dumps({"cache": doc["cache"]}))
    return 0


def _train(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.rl import run_grpo
    from ltrr.agent.run import agent_dir

    run = _run(args, log)
    alpha = run.config.agent.alpha if args.alpha is None else args.alpha
    start = args.start or agent_dir(run) / "policies" / "sft"
    folder = args.out or agent_dir(run) / "policies" / f"grpo-a{alpha:g}"
    rec = run_grpo(run, start, folder, steps=args.steps, alpha=alpha, log=log, show_progress=progress_enabled(),
                   resume_from=args.resume, time_budget=args.time_budget)
    last = rec["router_log"][-1] if rec["router_log"] else {}
    if rec.get("paused"):
        out(f"paused: {folder} at step {rec['steps']} of {rec['spec']['steps']} ({rec['seconds_this_leg']}s this "
            f"leg; last step reward {last.get('reward', float('nan')):.3f}); the same command resumes it")
        out(f"carry:  ltrr agent export {folder} data/policies/{run.config.name}/<name>   (then --resume it there)")
        return 0
    if rec.get("kept"):
        out(f"policy: {folder} (finished: {rec['steps']} steps, {rec['rollouts']} rollouts; nothing trained, "
            "its record kept)")
        out(f"try:    ltrr agent eval {args.config} --policy {folder}")
        return 0
    out(f"policy: {folder} ({rec['steps']} steps, {rec['rollouts']} rollouts, {rec['seconds_this_leg']}s this leg; "
        f"last step reward {last.get('reward', float('nan')):.3f})")
    out(f"plot:   {folder}/training.png")
    out(f"try:    ltrr agent eval {args.config} --policy {folder}")
    return 0


def _rft(args: argparse.Namespace, log, out) -> int:
    from ltrr._log import progress_enabled
    from ltrr.agent.rl import run_rft
    from ltrr.agent.run import agent_dir

    run = _run(args, log)
    start = args.start or agent_dir(run) / "policies" / "sft"
    folder = args.out or agent_dir(run) / "policies" / "rft"
    rec = run_rft(run, start, folder, rollouts=args.rollouts, log=log, show_progress=progress_enabled())
    out(f"policy: {folder} ({rec['rft_kept']} kept of {rec['rft_samples']} samples, {rec['steps']} SFT steps)")
    out(f"try:    ltrr agent eval {args.config} --policy {folder}")
    return 0


def _compare(args: argparse.Namespace, out) -> int:
    from ltrr.agent.evaluate import compare_evals

    doc = compare_evals(args.policy_eval, args.baseline_eval)
    out(f"{doc['policy']} against {doc['baseline']}, {doc['n']} common questions; format-valid "
        f"{doc['format_valid'][0]:.3f} vs {doc['format_valid'][1]:.3f}")
    out("| measure | policy | baseline | diff | Wilcoxon p |\n|---|---|---|---|---|")
    for key, r in doc["rows"].items():
        out(f"| {key} | {r['policy']:.4f} | {r['baseline']:.4f} | {r['diff']:+.4f} | {r['p']:.3g} |")
    for m in ("contains", "f1", "em"):
        a, b = doc["agent"][0].get(m), doc["agent"][1].get(m)
        if a is not None and b is not None:
            out(f"| {m} (mean only) | {a:.4f} | {b:.4f} | {a - b:+.4f} | |")
    return 0


def _sweep(args: argparse.Namespace, out) -> int:
    from ltrr._errors import ConfigError
    from ltrr.agent.sweep import sweep_evals, sweep_markdown
    from ltrr.data.io import write_text_atomic

    alphas = None
    if args.alphas is not None:
        try:
            alphas = [float(x) for x in args.alphas.split(",")]
        except ValueError:
            raise ConfigError(f"--alphas must be comma-separated numbers, got {args.alphas!r}") from None
    if args.seed is not None:  # as the [run] seed key: numpy takes no negative seed
        check_int(args.seed, "--seed", low=0)
    doc = sweep_evals(args.evals, alphas, seed=args.seed)
    out(sweep_markdown(doc))
    if args.json_out:
        write_text_atomic(Path(args.json_out), json.dumps(doc, indent=1) + "\n")
    return 0


def _export(args: argparse.Namespace, out) -> int:
    from ltrr.agent.lora import export_run

    doc = export_run(args.policy_dir, args.dest)
    what = f"checkpoint {doc['checkpoint']}" if doc["checkpoint"] else "no checkpoint"
    out(f"exported: {doc['dest']} ({len(doc['files'])} files, {doc['bytes'] / 1e6:.1f} MB; {what})")
    if doc["kind"] == "sft":
        out(f"resume:   ltrr agent sft CONFIG --resume {doc['dest']}")
    elif doc["checkpoint"]:
        out(f"resume:   ltrr agent train CONFIG --from START --resume {doc['dest']}")
    return 0


def _progress(args: argparse.Namespace, out) -> int:
    from ltrr.agent.rl import checkpoint_record, plot_training, progress_table

    rec = checkpoint_record(args.policy_dir)
    out(progress_table(rec))
    png = plot_training(rec, Path(args.policy_dir) / "training.png")
    out(f"plot: {png}")
    return 0
