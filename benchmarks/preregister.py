"""Pre-register the protocol's choice from the design part's labels, before the test part is labelled.

`ltrr protocol` chooses the router on the design part and writes ``preregistration.json``
before it reads a test label, but it runs only once every query is labelled. For a long
relabelling (`benchmarks/relabel.py` labels the design part first) this script makes the same
preregistration as soon as the design part is labelled: the label stage runs from the
generation cache alone in a scratch workdir (`power_plan.cache_only_run`: nothing is generated,
the run's own workdir is untouched), the features stage runs, and
``ltrr.eval.headline.run_protocol(design_only=True)`` cross-validates the candidates on the design
part of the config's seed, drops the test part's label rows unread, and writes the choice, the
best single arm and the power analysis.

The same from the command line, in the run's own workdir: ``ltrr label CONFIG --cache-only``,
``ltrr features CONFIG``, ``ltrr protocol CONFIG --design-only``. This script leaves the run's
workdir untouched (the cache-only labels go to a scratch workdir).

Committed before the test part is labelled, the file fixes the choice in advance; the full
``ltrr protocol`` later writes its own ``preregistration.json``, which must be identical (the
design part's labels, features and folds are the same). Only the config's seed can be made this
way: the other partition seeds' design parts hold test queries of this one.

    python benchmarks/preregister.py demo-qwen \\
        --out benchmarks/results/protocol_demo_qwen/preregistration_seed13.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--out", type=Path, required=True, help="where the preregistration.json copy goes")
    ap.add_argument("--n-jobs", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from power_plan import cache_only_run

    from ltrr.config import load_config
    from ltrr.eval.headline import run_protocol

    cfg = load_config(a.config)
    _reuse_retrieval(cfg)
    run = cache_only_run(a.config)
    run.stage_features()
    p = run.config.protocol
    out_dir = run.workdir / "protocol" / f"seed-{run.config.seed}-design-only"
    doc = run_protocol(run, design_size=p.design_size, seed=run.config.seed, rankers=p.rankers,
                       train_labels=p.train_labels, feature_sets=p.feature_sets or None, n_folds=p.n_folds,
                       routers=p.routers, n_jobs=a.n_jobs, out_dir=out_dir, design_only=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out_dir / "preregistration.json", a.out)
    pre = doc["preregistration"]
    print(json.dumps({k: pre[k] for k in ("seed", "n_design", "n_test", "router", "best_single_arm", "power")},
                     indent=2, default=float))
    print(f"-> {a.out}")


def _reuse_retrieval(cfg) -> None:
    """Give the scratch workdir the run's retrieval results (the retrieve stage's record and its
    output), so the scratch run does not retrieve again; its own fingerprint check still decides."""
    src = Path(cfg.workdir)
    dst = src.with_name(src.name + "-power")
    for rel in ("retrieval/results.parquet", "stages/retrieve.json"):
        if (src / rel).is_file() and not (dst / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, dst / rel)


if __name__ == "__main__":
    main()
