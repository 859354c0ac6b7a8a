"""`ltrr context pack` and `ltrr context run`: the command-line faces of `ltrr.context.evaluate`
and `ltrr.context.agents_eval`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ltrr._errors import ConfigError
from ltrr.cli._flags import add_field_flag, add_renamed, parse_shard
from ltrr.packing.section import ContextSection


def _budgets(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--token-budgets must be comma-separated integers, got {text!r}") from None
    if not out or any(b < 0 for b in out):
        raise ConfigError(f"--token-budgets must be integers >= 0, got {text!r}")
    _no_duplicates("--token-budgets", out, text)
    return out


def _no_duplicates(flag: str, values: list, text: str) -> None:
    """A value given twice would count each query twice in the tables and the paired tests."""
    dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if dup is not None:
        raise ConfigError(f"{flag} names {dup} twice ({text!r}): give each value once")


def _selectors(text: str, flag: str = "--selectors") -> list[str]:
    from ltrr.packing.select import selectors

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{flag} must name at least one selector, got {text!r}")
    for n in names:
        selectors.get(n)
    _no_duplicates(flag, names, text)
    return names


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr context`` on the CLI's subparsers."""
    p = sub.add_parser("context", help="context routing: packed RAG contexts and the multi-agent loop")
    csub = p.add_subparsers(dest="context_command", metavar="ACTION", required=True)
    k = csub.add_parser("pack", help="gold-evidence recall per token (and utility) of packed contexts on "
                                     "the protocol's test part, against the routed arm's top-k")
    k.add_argument("config")
    add_renamed(k, "--token-budgets", ["--budgets"], default="128,256,512",
                help="token budgets, comma-separated (default 128,256,512)")
    add_field_flag(k, ContextSection, "selector", "--selector", help="the selector whose packings --answer answers")
    k.add_argument("--selectors", default="knapsack,greedy,greedy-skip",
                   help="selectors compared, comma-separated (default knapsack,greedy,greedy-skip; "
                        "--selector is added when missing)")
    k.add_argument("--answer", action="store_true", help="also answer the packed contexts (generator, cached)")
    k.add_argument("--ablations", action="store_true", help="add the budget and importance-signal ablations")
    k.add_argument("--shard", default=None, metavar="I/N",
                   help="with --answer: only generate the answers of every N-th test query into the cache and "
                        "write no table (parallel warm-up; the run without --shard then replays them)")
    k.set_defaults(func=lambda a: _pack(a, log, out))
    r = csub.add_parser("run", help="the multi-agent QA loop (planner, searcher, answerer) under each context "
                                    "strategy, against full context and closed-book")
    r.add_argument("config")
    r.add_argument("--strategies", default=None,
                   help="comma-separated, among full-context, static, rcr-oneshot, rcr-iterative "
                        "(default: [context] strategies)")
    r.add_argument("--questions", type=int, default=60, help="questions of the protocol's test part (default 60)")
    add_field_flag(r, ContextSection, "rounds", "--rounds", help="rounds T, 1 to 3")
    add_field_flag(r, ContextSection, "base_budget", "--token-budget", old=["--budget"], help="base token budget B")
    r.add_argument("--qtype", default=None, help="only questions of this query type")
    r.add_argument("--part", choices=["test", "design"], default="test",
                   help="the protocol's test part (default), or its design part, where budgets are chosen")
    r.add_argument("--router-part", choices=["design", "all"], default="design",
                   help="the Searcher's router: fitted on the protocol's design part alone, held out from "
                        "every test question (default; fitted here as `ltrr train CONFIG --part design` "
                        "would), or `all`: the router `ltrr train` fits on every labelled query, the test "
                        "part included (in-sample for every test question)")
    r.set_defaults(func=lambda a: _run(a, log, out))


def _pack(args: argparse.Namespace, log, out) -> int:
    from ltrr.config import load_config
    from ltrr.context.evaluate import evaluate_packing
    from ltrr.packing import pack_spec
    from ltrr.pipeline import Run

    shard = parse_shard(args.shard)
    if shard is not None and not args.answer:
        raise ConfigError("--shard only splits the answering: give --answer too")
    budgets = _budgets(args.token_budgets)
    names = _selectors(args.selectors)
    chosen = _selectors(args.selector, "--selector")[0] if args.selector is not None else None
    run = Run(load_config(args.config), log=log)
    context = dict(run.config.context)
    if chosen is not None:
        context["selector"] = chosen
    base = pack_spec(context, budgets[0], "[context]")
    names += [base.selector] if base.selector not in names else []
    doc = evaluate_packing(run, budgets, base=base, selectors=names, answer=args.answer, ablations=args.ablations,
                           shard=shard)
    if shard is not None:
        out(f"shard {shard[0]}/{shard[1]}: {doc['queries']} test queries answered into the cache "
            f"({doc['generator_calls']} generator calls, {doc['hits']} cache hits); no table written: "
            "run without --shard once every shard is done")
        return 0
    out(f"router (the protocol's choice): {doc['router']}")
    out(doc["table"].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if len(doc["gaps"]):
        out("\noptimality gap against the exact optimum of each objective (relative loss):")
        out(doc["gaps"].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    out(f"\ntables: {run.workdir / 'context'}")
    return 0


def _run(args: argparse.Namespace, log, out) -> int:
    from ltrr.config import load_config
    from ltrr.context.agents_eval import agents_text, run_context_agents
    from ltrr.pipeline import Run

    names = None
    if args.strategies is not None:
        names = [n.strip() for n in args.strategies.split(",") if n.strip()]
        if not names:
            raise ConfigError(f"--strategies must name at least one strategy, got {args.strategies!r}")
    run = Run(load_config(args.config), log=log)
    doc = run_context_agents(run, strategy_names=names, n_questions=args.questions, rounds=args.rounds,
                             budget=args.token_budget, qtype=args.qtype, part=args.part,
                             router_part=args.router_part)
    out(agents_text(doc))
    return 0
