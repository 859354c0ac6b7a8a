"""The ``ltrr`` command line.

The commands of the policy, context routing and the agent are in `ltrr.cli.policy`,
`ltrr.cli.context` and `ltrr.cli.agent`.

Every user error (a bad config key, a malformed input line, a missing index, an unknown arm)
is printed as one ``ltrr: error: ...`` line on stderr with exit code 2; nothing is half-written
because every stage writes atomically. Heavy libraries are imported inside the commands, so
``ltrr --help`` answers fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ltrr._checks import check_int, check_number
from ltrr._errors import LtrrError
from ltrr._version import __version__
from ltrr.cli._flags import add_field_flag, add_renamed, parse_shard
from ltrr.config import TrainSection
from ltrr.data.section import DataSection

EXIT_USER_ERROR = 2


def _log(msg: str) -> None:
    """A progress line: shown by default, hidden by ``--quiet``."""
    from ltrr._log import logger

    logger.info(msg)


def _out(msg: str) -> None:
    """A command's result (a table, a ranking, an answer): always printed."""
    print(msg, flush=True)


# ---- retrieval ---------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import StageOptions, stages

    run = Run(load_config(args.config), log=_log)
    for name in ("data", "index"):  # a config that names a builder (demo) is built first, as `ltrr run` does
        stages.get(name).execute(run, StageOptions())
    return 0


def _check_scheduler_timeout(args: argparse.Namespace) -> None:
    check_number(args.scheduler_timeout, "--scheduler-timeout (seconds)", low=0, low_open=True)


def cmd_search(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    check_int(args.k, "-k", low=0, note=" (0: every passage of the arm)")
    run = Run(load_config(args.config), log=lambda m: None)
    pool = run.pool
    if args.arm not in pool.arm_names:
        raise LtrrError(f"unknown arm {args.arm!r}; the pool has: {', '.join(pool.arm_names)}")
    pool.load(run.index_dir, corpus=run.dataset.corpus)  # never an index of other documents
    res = pool.search([args.text], arms=[args.arm])
    if args.k:
        res = res[res["rank"] <= args.k]
    if args.json:
        _out(res.drop(columns=["qid"]).to_json(orient="records", force_ascii=False))
        return 0
    if res.empty:
        closed = next(a for a in pool.arms if a.name == args.arm).is_no_retrieval
        _out(f"arm {args.arm!r} retrieves nothing " + ("(the no-retrieval arm answers closed-book)" if closed
                                                      else "for this question"))
    for r in res.itertuples():
        text = r.text.replace("\n", " | ")
        _out(f"{r.rank:>2}  {r.score:8.4f}  {r.docid}  {text[:110]}")
    return 0


# ---- labels -------------------------------------------------------------------------
def cmd_label(args: argparse.Namespace) -> int:
    from ltrr.config import load_config, validate
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import StageOptions, stages

    if args.scheduler:
        from ltrr.dist import check_scheduler

        check_scheduler(args.scheduler)  # a bad value fails before any work
    shard = parse_shard(args.shard)  # so do a bad --shard and the flags' conflicts
    if args.scheduler and shard:
        raise LtrrError("give --shard or --scheduler, not both")
    if args.cache_only and (args.no_cache or args.scheduler):
        raise LtrrError(f"--cache-only labels from the generation cache here: not with "
                        f"{'--no-cache' if args.no_cache else '--scheduler'}")
    _check_scheduler_timeout(args)
    cfg = load_config(args.config)
    if args.scheduler and (args.no_cache or not cfg.generation.use_cache):
        raise LtrrError("--scheduler fills the generation cache: it cannot run with the cache off "
                        "(--no-cache or [generation] use_cache = false)")
    if args.questions is not None:
        d = cfg.to_dict()
        d["data"]["max_queries"] = args.questions
        cfg = validate(d, cfg.source)
    run = Run(cfg, log=_log)
    from ltrr.pipeline.labels import check_config_names

    check_config_names(run)  # a typo in a name fails now, not after the index and retrieval
    for name in ("data", "index", "retrieve"):  # as `ltrr retrieve`: a fresh clone's label builds what it needs
        stages.get(name).execute(run, StageOptions())
    run.stage_label(force=args.force, use_cache=False if args.no_cache else None,
                    tolerate_failures=True if args.tolerate_failures else None, shard=shard,
                    scheduler=args.scheduler, scheduler_timeout=args.scheduler_timeout, cache_only=args.cache_only)
    return 0


# ---- features, training, routing, evaluation ---------------------------------------------
def _check_names(run) -> None:
    """`ltrr.pipeline.labels.check_config_names`, as `ltrr run`, `ltrr label` and `ltrr status`
    call it, less the generator's settings (these commands read labels made already and
    generate nothing): an unknown name in the config fails before any work, not after it."""
    from ltrr.pipeline.labels import check_config_names

    check_config_names(run, labelling=False)


def cmd_features(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import check_inputs_current

    run = Run(load_config(args.config), log=_log)
    _check_names(run)
    check_inputs_current(run, "features")  # never the labels of another config sharing the workdir
    run.stage_features(force=args.force)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run

    cfg = load_config(args.config)
    run = Run(cfg, log=_log)
    _check_names(run)
    ranker = args.ranker or cfg.train.ranker
    from ltrr.rankers import rankers

    rankers.get(ranker)  # unknown name -> one clear line listing the choices
    if args.scheduler:
        from ltrr.rankers import ranker_tags

        _check_scheduler_timeout(args)

        if not ranker_tags(ranker).trains_on_dask:  # it would train here and be recorded as trained on Dask
            on_dask = [n for n in rankers if ranker_tags(n).trains_on_dask]
            raise LtrrError(f"{ranker} does not train on Dask; --scheduler trains {', '.join(on_dask)}")
    from ltrr.pipeline.stages import check_inputs_current

    check_inputs_current(run, "train")  # never the labels of another config sharing the workdir
    if args.scheduler:
        from ltrr.dist import check_scheduler, connected
        from ltrr.dist.rankers import dask_training

        check_scheduler(args.scheduler)
        with connected(args.scheduler, timeout=args.scheduler_timeout) as client, dask_training(client):
            out = run.stage_train(ranker, force=True, part=args.part, trained_on="dask")  # a local run fits again
    else:
        out = run.stage_train(ranker, force=args.force, part=args.part)
    _print_route_hint(run, out)
    return 0


def _print_route_hint(run, model_dir: Path) -> None:
    from ltrr.pipeline.stages import route_hint

    _out(route_hint(run, model_dir))


def cmd_route(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ltrr.routers.ltr import LTRRouter

    if not args.question.strip():
        raise LtrrError("the question is empty")
    if (Path(args.model_dir) / "policy.json").is_file():  # a budgeted policy folder
        from ltrr.policy.router import PolicyRouter

        if args.answer:
            raise LtrrError("--answer routes with an LTR router folder; a policy folder ranks the arms only")
        router = PolicyRouter.load(args.model_dir)
    else:
        router = LTRRouter.load(args.model_dir)
    if args.token_budget and not args.answer:
        raise LtrrError("--token-budget packs the context of an answer; add --answer")
    if args.config and not args.answer:
        raise LtrrError("--config gives the generator of an answer; add --answer")
    if args.answer:
        packing = None
        if args.token_budget:
            from ltrr.packing import PackSpec

            packing = PackSpec.from_mapping({"budget": args.token_budget}, "--token-budget")
        generator, template = None, None  # default: the generator the router's labels measured
        if args.config:
            generator, template, configured = _answering_setup(args.config)
            packing = packing if packing is not None else configured  # --token-budget wins over the config's context_budget
        out = router.answer(args.question, generator, template=template, packing=packing)
        ranking = out["ranking"]
    else:
        ranking = router.route(args.question)
    if args.json:
        _out(ranking.to_json(orient="records"))
    else:
        for r in ranking.itertuples():
            _out(f"{r.rank:>2}  {r.arm:<16} {r.score:+.4f}")
    if args.answer:
        if out["error"]:
            raise LtrrError(f"generation failed: {out['error']}")
        _out(f"answer ({out['arm']}): {out['answer']}")
        if out.get("context_tokens") is not None:
            _out(f"context: {len(out['passages'])} passage(s), {out['context_tokens']} tokens")
    return 0


def _answering_setup(config: str):
    """A config's answering setup, as ``ltrr route --config`` and ``ltrr serve --config`` take it:
    its generator behind its generation cache, its template, and its context packing (None
    without ``[generation] context_budget``)."""
    from ltrr.config import load_config
    from ltrr.packing import packing_from_config
    from ltrr.pipeline import Run

    run = Run(load_config(config), log=_log)
    return (run.make_generator(), run.config.generation.template,
            packing_from_config(run.config.generation, run.config.context))


def cmd_serve(args: argparse.Namespace) -> int:
    from ltrr.serve import ServeSettings, check_address, serve

    limits = {"max_queue": args.max_queue, "timeout_s": args.timeout, "max_tokens": args.max_tokens,
              "max_message_chars": args.max_message_chars, "max_body_bytes": args.max_body_bytes}
    # a flag left out keeps ServeSettings' default; the settings are checked before anything loads
    settings = ServeSettings(**{k: v for k, v in limits.items() if v is not None})
    check_address(args.host, args.port)
    generator, template, packing = None, None, None  # default: the generator the router's labels measured
    if args.config:
        generator, template, packing = _answering_setup(args.config)
    _log(f"[serve] loading {args.model_dir}; listening on http://{args.host}:{args.port}/v1")
    serve(args.model_dir, host=args.host, port=args.port, generator=generator, template=template, packing=packing,
          settings=settings)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import check_inputs_current

    run = Run(load_config(args.config), log=_log)
    _check_names(run)
    check_inputs_current(run, "eval")  # never the labels of another config sharing the workdir
    paths = run.stage_eval(force=args.force)
    _print_tables(run)
    _print_results(run, paths)
    return 0


def _print_results(run, paths) -> None:
    from ltrr.pipeline.stages import results_notes

    _out(results_notes(run, paths))


def _print_tables(run) -> None:
    """The evaluation's Table 1 and headroom table, every router x split (`ltrr eval`)."""
    import pandas as pd

    from ltrr._tables import markdown_table

    def read(name):  # "n/a" and "no headroom" cells are words, not missing values
        return pd.read_csv(run.reports_dir / name, index_col=0, keep_default_na=False, dtype=str)

    if (run.reports_dir / "table1.csv").exists():
        _out("\nMean downstream utility (95% CI) per router (rows) and split (columns); "
             "\u25b2/\u25bc: significantly better/worse than the best single arm:")
        _out(markdown_table(read("table1.csv")))
    if (run.reports_dir / "headroom.csv").exists():
        _out("\nShare of the oracle headroom captured, (router - best single) / (oracle - best single):")
        _out(markdown_table(read("headroom.csv")))


def cmd_protocol(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.eval.headline import protocol_summary
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import protocol_docs

    cfg = load_config(args.config)
    run = Run(cfg, log=_log)
    _check_names(run)
    if args.design_only:
        return _protocol_design_only(run, args)
    seeds = [cfg.seed] + [int(s) for s in cfg.protocol.seeds if int(s) != cfg.seed]
    _out(protocol_summary(protocol_docs(run, seeds, force=args.force, n_jobs=args.n_jobs)))
    return 0


def _protocol_design_only(run, args: argparse.Namespace) -> int:
    """`ltrr protocol --design-only`: the config seed's choice from its design part's labels alone."""
    from ltrr.eval.headline import preregistration_text, run_protocol

    p, seed = run.config.protocol, run.config.seed
    out_dir = run.workdir / "protocol" / f"seed-{seed}-design-only"
    run.log(f"[protocol] seed {seed}, design part only ({p.design_size:.0%}): choosing by {p.n_folds}-fold CV; "
            "no test label is read")
    doc = run_protocol(run, design_size=p.design_size, seed=seed, rankers=p.rankers, train_labels=p.train_labels,
                       feature_sets=p.feature_sets or None, n_folds=p.n_folds, routers=p.routers,
                       n_jobs=args.n_jobs or p.n_jobs, out_dir=out_dir, design_only=True)
    _out(preregistration_text(doc["preregistration"]))
    _out(f"Design part only: no test label was read -> {out_dir / 'preregistration.json'} (the full "
         f"`ltrr protocol` writes the same file into seed-{seed}/ once every query is labelled)")
    return 0


# ---- main job ----------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    import time

    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import StageOptions, run_stages

    t0 = time.perf_counter()
    cfg = load_config(args.config)
    _log(f"ltrr run {cfg.name}: seed {cfg.seed}, workdir {cfg.workdir}")
    run = Run(cfg, log=_log)
    if not args.retrieval_only:
        from ltrr.pipeline.labels import check_config_names

        check_config_names(run)  # a typo in a name fails now, not after the index and retrieval
    options = StageOptions(force=args.force, tolerate_failures=True if args.tolerate_failures else None)
    run_stages(run, until="retrieve" if args.retrieval_only else None, options=options, out=_out)
    _log(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


def cmd_retrieve(args: argparse.Namespace) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.stages import StageOptions, stages

    if args.router and not args.trec:
        raise LtrrError("--router names the router whose choices --trec writes: give --trec DIR too")
    run = Run(load_config(args.config), log=_log)
    options = StageOptions(force=args.force)
    done: dict = {}
    for name in ("data", "index", "retrieve"):  # the dataset and indexes first: built once, kept when unchanged
        done[name] = stages.get(name).execute(run, options)
    text = stages.get("retrieve").report(run, done)
    if text is not None:
        _out(text)
    if args.trec:
        paths = run.write_trec(args.trec, router=args.router)
        _out(f"TREC runs ({len(paths)}): " + ", ".join(str(p) for p in paths.values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ltrr",
        description="Learning to rank retrievers for LLMs: build data, index, search, run.",
    )
    p.add_argument("--version", action="version", version=f"ltrr {__version__}")
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      help="results and warnings only: no stage lines, no progress bars")
    loud.add_argument("-v", "--verbose", action="store_true",
                      help="also debug lines: why each stage ran or was skipped")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    from ltrr.cli.data import add_parser as add_data_parser

    add_data_parser(sub, _log, _out)

    i = sub.add_parser("index", help="build the indexes of a config's retrievers")
    i.add_argument("config", help="config file (TOML/YAML) or packaged name (demo)")
    i.set_defaults(func=cmd_index)

    se = sub.add_parser("search", help="run one arm on a query")
    se.add_argument("config")
    se.add_argument("--arm", required=True, help="arm name from the config's pool")
    se.add_argument("-k", type=int, default=0, help="show at most k passages")
    se.add_argument("--json", action="store_true", help="print JSON records")
    se.add_argument("text", help="the query")
    se.set_defaults(func=cmd_search)

    lb = sub.add_parser("label", help="label every (query, arm) with its utility gain (cached, resumable)")
    lb.add_argument("config")
    lb.add_argument("--no-cache", action="store_true", help="bypass the generation cache")
    lb.add_argument("--force", action="store_true", help="relabel even if up to date")
    lb.add_argument("--tolerate-failures", action="store_true", help="exit 0 even if some items failed (the next run generates them again)")
    lb.add_argument("--cache-only", action="store_true",
                    help="label from the generation cache alone: no generator call; an item not in it is a failed "
                         "item, which the next run without this flag generates (then `ltrr protocol --design-only`)")
    add_field_flag(lb, DataSection, "max_queries", "--questions", old=["--max-queries"], metavar="N",
                   help="label a seeded, type-stratified sample of N questions")
    lb.add_argument("--shard", help="I/N: fill the cache with every N-th query only (parallel warm-up)")
    lb.add_argument("--scheduler", help="local[:N] or tcp://HOST:PORT: generate on Dask workers (the dist extra)")
    lb.add_argument("--scheduler-timeout", type=float, default=30.0,
                    help="seconds to wait for a tcp:// scheduler to answer (default 30)")
    lb.set_defaults(func=cmd_label)

    fe = sub.add_parser("features", help="extract routing features into features/<run>/")
    fe.add_argument("config")
    fe.add_argument("--force", action="store_true")
    fe.set_defaults(func=cmd_features)

    tr = sub.add_parser("train", help="train an LTR router on all labelled queries and save it")
    tr.add_argument("config")
    add_field_flag(tr, TrainSection, "ranker", "--ranker", help="ranker name")
    tr.add_argument("--force", action="store_true", help="retrain even if up to date")
    tr.add_argument("--part", choices=["design"], default=None,
                    help="fit on the protocol's design part alone, into models/<ranker>-design")
    tr.add_argument("--scheduler", help="local[:N] or tcp://HOST:PORT: train lambdamart-listwise or xgboost-pairwise/-listwise on Dask (the dist extra)")
    tr.add_argument("--scheduler-timeout", type=float, default=30.0,
                    help="seconds to wait for a tcp:// scheduler and its first worker (default 30)")
    tr.set_defaults(func=cmd_train)

    ro = sub.add_parser("route", help="rank the arms for a question with a trained router")
    ro.add_argument("model_dir")
    ro.add_argument("question")
    ro.add_argument("--answer", action="store_true", help="also answer with the top arm, by the generator the router's labels measured")
    add_renamed(ro, "--token-budget", ["--context-budget"], type=int, default=0, metavar="N",
                help="with --answer: read the top 2 routed arms' passages packed into N tokens")
    ro.add_argument("--config", help="with --answer: answer with this config's generator, template and packing "
                                     "([generation] context_budget; --token-budget wins) (default: the ones "
                                     "the router's labels were measured with, recorded by ltrr train; a remote generator "
                                     "recorded in the folder is refused, since the folder would choose where questions go)")
    ro.add_argument("--json", action="store_true")
    ro.set_defaults(func=cmd_route)

    rt = sub.add_parser("retrieve", help="run every arm of a config's pool on its queries (-> <workdir>/retrieval)")
    rt.add_argument("config")
    rt.add_argument("--force", action="store_true", help="search again even if up to date")
    rt.add_argument("--trec", metavar="DIR", help="also write a TREC run file per arm (and the routed run) into DIR")
    rt.add_argument("--router", metavar="FOLDER",
                    help="with --trec: the trained router of the routed run (default: <workdir>/models/<[train] ranker>)")
    rt.set_defaults(func=cmd_retrieve)

    ev = sub.add_parser("eval", help="compare routers on the configured splits with significance tests")
    ev.add_argument("config")
    ev.add_argument("--force", action="store_true")
    ev.set_defaults(func=cmd_eval)

    pr = sub.add_parser("protocol", help="the pre-registered headline: choose on the design part, test once")
    pr.add_argument("config")
    pr.add_argument("--n-jobs", type=int, default=0,
                    help="candidates cross-validated in parallel processes (default: [protocol] n_jobs)")
    pr.add_argument("--force", action="store_true", help="redo seeds whose headline is up to date")
    pr.add_argument("--design-only", action="store_true",
                    help="choose and pre-register on the config seed's design part alone, reading no test label "
                         "(every design query must be labelled: e.g. after `ltrr label --cache-only`)")
    pr.set_defaults(func=cmd_protocol)

    sv = sub.add_parser("serve", help="serve a trained router over an OpenAI-compatible HTTP API")
    sv.add_argument("model_dir", help="a trained LTR router folder (ltrr train); its run's policies are served too")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--config", help="take the generator, template and packing from this config (default: the generator and template "
                         "the router's labels were measured with, recorded by ltrr train; a remote generator recorded in "
                         "the folder is refused)")
    sv.add_argument("--max-queue", type=int,
                    help="requests routing or waiting for the generation worker (429 past it; default 16)")
    sv.add_argument("--timeout", type=float,
                    help="longest wait of a request for its answer, routing included, in seconds (503 past it; default 120)")
    sv.add_argument("--max-tokens", type=int,
                    help="the largest max_tokens (or max_completion_tokens) a request may ask for (default 1024)")
    sv.add_argument("--max-message-chars", type=int,
                    help="longest question, in characters: the last user message of a chat request (the only one "
                         "read), or a completion's prompt (default 8000)")
    sv.add_argument("--max-body-bytes", type=int, help="largest request body, in bytes (413 past it; default 64000)")
    sv.set_defaults(func=cmd_serve)

    from ltrr.cli.agent import add_parser as add_agent_parser
    from ltrr.cli.cache import add_parser as add_cache_parser
    from ltrr.cli.context import add_parser as add_context_parser
    from ltrr.cli.policy import add_parser as add_policy_parser
    from ltrr.cli.status import add_parser as add_status_parser

    add_cache_parser(sub, _log, _out)
    add_policy_parser(sub, _log, _out)
    add_context_parser(sub, _log, _out)
    add_agent_parser(sub, _log, _out)
    add_status_parser(sub, _log, _out)

    r = sub.add_parser("run", help="run every stage of a config (the main job)")
    r.add_argument("config", help="config file or packaged name (demo)")
    r.add_argument("--force", action="store_true", help="redo stages even if up to date")
    r.add_argument("--retrieval-only", action="store_true", help="stop after retrieval and its recall report")
    r.add_argument("--tolerate-failures", action="store_true", help="go on when some generations failed")
    r.set_defaults(func=cmd_run)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    import logging

    from ltrr import _log as log_setup

    log_setup.configure(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO)
    from ltrr._cpu import numeric_kernels

    try:  # numeric_kernels raises the one-line error for an unknown LTRR_CPU_KERNELS
        logging.getLogger("ltrr").debug("CPU kernels: %s", ", ".join(f"{k} {v}" for k, v in numeric_kernels().items()))
        return int(args.func(args) or 0)
    except LtrrError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"ltrr: error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("ltrr: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`ltrr ... | head`): stop quietly, as a shell tool does
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141  # 128 + SIGPIPE
    except OSError as exc:  # the file system said no (a missing folder, a directory for a file, no permission)
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        print(f"ltrr: error: {exc.strerror or type(exc).__name__}{': ' + where if where else ''}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
