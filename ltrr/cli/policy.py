"""`ltrr policy train|eval`: the command-line face of `ltrr.policy.run`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ltrr._checks import check_int
from ltrr.cli._flags import add_field_flag, add_renamed
from ltrr.config import RunSection
from ltrr.policy.section import PolicySection


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr policy`` on the CLI's subparsers."""
    p = sub.add_parser("policy", help="the budgeted routing policy: train one, or evaluate over budgets")
    psub = p.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    t = psub.add_parser("train", help="train a policy for one budget on every labelled query and save it")
    t.add_argument("config")
    add_renamed(t, "--cost-budget", ["--budget"], type=float, required=True, metavar="C",
                help="average cost per query, in the arms' cost units")
    add_field_flag(t, PolicySection, "representation", "--representation", choices=["features", "lm"])
    t.add_argument("--trainer", choices=["grpo", "exact"], help="default: the first of [policy] trainers")
    t.set_defaults(func=lambda a: _train(a, log, out))
    e = psub.add_parser("eval", help="cost-utility curve over budgets against the baselines (table and PNG)")
    e.add_argument("config")
    add_field_flag(e, PolicySection, "representation", "--representation", choices=["features", "lm"])
    add_renamed(e, "--part", ["--on"], choices=["test", "design"], default="test",
                help="test: train on the design part, measure on the test part (default); design: train and "
                     "measure inside the design part (to choose settings; the test part is not read)")
    add_field_flag(e, RunSection, "seed", "--seed", help="partition, folds and head seed, as the seeds of [protocol] "
                                                          "seeds; another seed's tables go to their own folder")
    e.set_defaults(func=lambda a: _eval(a, log, out))


def _run(args: argparse.Namespace, log):
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    return Run(load_config(args.config), log=log)


def _train(args: argparse.Namespace, log, out) -> int:
    from ltrr.policy.run import train_policy

    folder = train_policy(_run(args, log), args.cost_budget, representation=args.representation, trainer=args.trainer)
    out(f"policy: {folder}")
    out(f"try:    ltrr route {folder} 'your question'")
    return 0


def _eval(args: argparse.Namespace, log, out) -> int:
    from ltrr.policy.evaluate import budgets_markdown
    from ltrr.policy.run import evaluate_policy

    if args.seed is not None:  # as the [run] seed key: numpy takes no negative seed
        check_int(args.seed, "--seed", low=0)
    run = _run(args, log)
    doc = evaluate_policy(run, representation=args.representation, on=args.part, seed=args.seed)
    out(budgets_markdown(doc, run.config.policy.trainers))
    for p in doc["plots"]:
        out(f"plot:   {p}")
    return 0
