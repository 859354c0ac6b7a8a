"""`ltrr status CONFIG`: where each stage of a run stands, running none of them
(`ltrr.pipeline.stages.stage_status`).

A config `ltrr run` would refuse (a value out of range, an unknown name: the load and
`ltrr.pipeline.labels.check_config_names`) is one error line and exit code 2, not a status."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable


def add_parser(sub, log: Callable[[str], None], out: Callable[[str], None]) -> None:
    """Register ``ltrr status`` on the CLI's subparsers."""
    st = sub.add_parser("status", help="where each stage of a config's run stands (up to date, to run, "
                                        "running with how far it got, waits); runs nothing")
    st.add_argument("config")
    st.add_argument("--json", action="store_true", help="one JSON object per stage")
    st.set_defaults(func=lambda a: _status(a, out))


def _status(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from ltrr.config import load_config
    from ltrr.pipeline import Run
    from ltrr.pipeline.labels import check_config_names
    from ltrr.pipeline.stages import stage_status

    run = Run(load_config(args.config), log=lambda _: None)
    # the checks `ltrr run` makes before its first stage: a config it would refuse is not "ready"
    check_config_names(run)
    rows = stage_status(run)
    if args.json:
        out(json.dumps(rows, indent=1))
        return 0
    out(f"ltrr status {run.config.name}: seed {run.config.seed}, workdir {run.workdir}")
    width = max(len(r["stage"]) for r in rows)
    for r in rows:
        out(f"  {r['stage']:<{width}}  {r['state']:<14} {r['detail']}".rstrip())
    absent = [r for r in rows if r["state"] == "missing"]
    if absent:  # the data stage would fail: no command to suggest but a fix of the config
        out(f"the dataset is missing ({absent[0]['detail']}): `ltrr run {args.config}` would stop at its "
            "first stage; give [data] dataset an existing folder (or a built dataset's name), or a [data] builder")
        return 0
    runs = [r["stage"] for r in rows if r["state"] in ("to run", "to build")]
    waits = [r["stage"] for r in rows if r["state"] == "waits"]
    running = [r["stage"] for r in rows if r["state"] == "running"]
    if running:  # a second `ltrr run` now would generate the same items twice
        out(f"{', '.join(running)} is running now; `ltrr status {args.config}` again to follow it")
    elif not runs:
        out("every configured stage is up to date")
    else:
        out(f"`ltrr run {args.config}` runs {', '.join(runs)}"
            + (f", then checks {', '.join(waits)} (skipped if their inputs come out unchanged)" if waits else ""))
    return 0
