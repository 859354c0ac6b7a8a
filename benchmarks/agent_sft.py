"""The multi-round router's format warm-start: SFT wall time and loss curve.

Runs ``ltrr agent sft CONFIG`` (default ``demo-agent``; skipped when the policy folder already
holds a finished ``sft.json``, whose record is then read), and writes the wall time, the
examples and tokens trained on and the loss per optimiser step to
``benchmarks/results/agent_sft.json`` with the curve as ``agent_sft_loss.png``.

    python benchmarks/agent_sft.py [CONFIG] [--force]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="demo-agent")
    ap.add_argument("--force", action="store_true", help="train again even if the policy exists")
    args = ap.parse_args(argv)
    from ltrr.agent.run import agent_dir
    from ltrr.cli import main as ltrr
    from ltrr.config import load_config
    from ltrr.data.io import atomic_path, write_text_atomic
    from ltrr.pipeline import Run

    run = Run(load_config(args.config), log=lambda m: None)
    folder = agent_dir(run) / "policies" / "sft"
    if args.force or not (folder / "sft.json").exists():
        if ltrr(["agent", "sft", args.config]) != 0:
            return 1
    rec = json.loads((folder / "sft.json").read_text())
    doc = {"config": args.config, "policy": str(folder), **{k: v for k, v in rec.items() if k != "loss"},
           "seconds_per_step": round(rec["seconds_this_leg"] / max(1, rec["steps"]), 1), "loss": rec["loss"]}
    OUT.mkdir(exist_ok=True)
    write_text_atomic(OUT / "agent_sft.json", json.dumps(doc, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([x["step"] for x in rec["loss"]], [x["loss"] for x in rec["loss"]], marker=".")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("loss (model-written tokens)")
    ax.set_title(f"SFT of the router policy: {rec['examples']} trajectories, {rec['seconds_this_leg']:.0f}s")
    fig.tight_layout()
    with atomic_path(OUT / "agent_sft_loss.png", suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120)
    print(json.dumps({k: v for k, v in doc.items() if k != "loss"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
