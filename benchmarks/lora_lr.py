"""Choose the LoRA learning rate of the multi-round router's SFT on design questions (issue 28).

LoRA became the SFT default with full fine-tuning's ``learning_rate = 1e-4``, and the policy it
trained never learned the format (session 15: SFT loss 1.11 after 30 steps against 0.04-0.10 for
full fine-tuning; format-valid 0% on the test questions). This script chooses the rate on the
design part alone. The rule, fixed before any run:

- the config's scripted design trajectories (`ltrr.agent.sft.build_sft_trajectories`, the
  same ones `ltrr agent sft` trains on) are split, seeded, into a training fold and a held-out
  fold of ``--heldout`` (20%) of them, ``multihop`` stratified;
- per rate, a fresh adapter of the config's rank and targets is trained on the training fold for
  ``--steps`` optimiser steps (``epochs`` set so the run has that many; the config's batch,
  accumulation, warm-up share and linear decay; the run's seed);
- each is scored on the held-out fold: (1) the held-out loss, the mean negative log-likelihood of
  the scripts' model tokens (teacher forcing, the SFT loss on unseen scripts); (2) the
  format-valid share of greedy rollouts of the held-out questions with the evaluation's prompt
  (the held-out arms left out, as `ltrr agent eval` without ``--holdout``), and their recall;
- chosen: the lowest held-out loss among the rates whose format-valid share is within 0.10 of
  the best share.

Each rate runs as its own process, so two can share the machine's two cores::

    taskset -c 0 .venv/bin/python benchmarks/lora_lr.py demo-agent-unseen --rate 3e-4 &
    taskset -c 1 .venv/bin/python benchmarks/lora_lr.py demo-agent-unseen --rate 1e-3 &
    .venv/bin/python benchmarks/lora_lr.py demo-agent-unseen --choose 3e-4,1e-3,2e-3 \\
        --out benchmarks/results/agent_demo_agent/lora_lr.json

A rate's result is ``<workdir>/agent/lora-lr/<rate>/result.json``; its training resumes from
its checkpoints (every ``save_steps``) if stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, replace
from pathlib import Path

import ltrr  # noqa: F401  (first: it pins torch's CPU kernels before torch loads; ltrr._cpu)


def _split(trajs, qtype, share: float, seed: int):
    """(train, held-out): ``share`` of each question type's scripts held out, seeded."""
    rng = random.Random(seed)
    by_type: dict[str, list] = {}
    for t in sorted(trajs, key=lambda t: t.qid):
        by_type.setdefault(str(qtype.get(t.qid, "all")), []).append(t)
    train, held = [], []
    for kind in sorted(by_type):
        group = by_type[kind]
        rng.shuffle(group)
        n = round(share * len(group))
        held += group[:n]
        train += group[n:]
    return sorted(train, key=lambda t: t.qid), sorted(held, key=lambda t: t.qid)


def _heldout_loss(lm, trajs, max_length: int) -> float:
    """Token-weighted mean NLL of the model tokens (mask 1) of ``trajs``, teacher-forced."""
    import torch

    model = lm.hf_model
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for t in trajs:
            ids = torch.tensor([list(t.ids)[:max_length]])
            mask = torch.tensor(list(t.mask)[:max_length])
            logits = model(input_ids=ids).logits[0, :-1].float()
            target, keep = ids[0, 1:], mask[1:].bool()
            nll = torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum")
            total += float(nll)
            count += int(keep.sum())
    return total / max(count, 1)


def _prepare(run, spec):
    from ltrr.agent.run import labels_table, partition, policy_lm
    from ltrr.agent.sft import build_sft_trajectories

    labels = labels_table(run)
    design, _ = partition(run)
    base = policy_lm(run, "")
    trajs = build_sft_trajectories(run, base, labels, design, spec)
    return labels, design, base, trajs


def run_rate(config: str, rate: float, steps: int, heldout: float, n_rollouts: int) -> dict:
    import torch

    from ltrr.agent.batching import raise_on_model_errors, rollout_many
    from ltrr.agent.evaluate import design_normaliser
    from ltrr.agent.lora import load_policy
    from ltrr.agent.rewards import outcome_reward
    from ltrr.agent.run import agent_dir, gold_answers, make_loop
    from ltrr.agent.sft import SFTSpec, train_sft
    from ltrr.agent.trajectory import score_trajectories
    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.pipeline import Run

    torch.set_num_threads(1)
    run = Run(load_config(config))
    seed = run.config.seed
    spec0 = SFTSpec.from_mapping(run.config.agent.sft)
    labels, design, base, trajs = _prepare(run, spec0)
    q = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    train, held = _split(trajs, q["qtype"].astype(str), heldout, seed)
    per_epoch = math.ceil(len(train) / (spec0.batch_size * spec0.grad_accum))
    spec = replace(spec0, learning_rate=rate, epochs=steps / per_epoch)
    folder = agent_dir(run) / "lora-lr" / f"{rate:g}"
    t0 = time.perf_counter()
    done = folder / "sft.json"
    record = json.loads(done.read_text()) if done.is_file() else None
    if record is None or record["spec"] != json.loads(json.dumps(asdict(spec))) or record["seed"] != seed:
        record = train_sft(train, base, folder, spec, seed=seed, log=print)  # else: trained; score it again
    train_s = time.perf_counter() - t0
    lm = load_policy(folder)
    loss = _heldout_loss(lm, held, spec.max_length)
    acfg = run.config.agent
    loop = make_loop(run, lm, labels, design=design)
    qids = [t.qid for t in held][:n_rollouts]
    t1 = time.perf_counter()
    rolled = rollout_many([(loop, str(q.loc[i, "question"]), i, None) for i in qids], batch=1)
    raise_on_model_errors(rolled, "lora-lr rollouts")
    gold = gold_answers(run)
    score_trajectories(rolled, gold, arm_costs=run.pool.costs, normaliser=design_normaliser(run, lm, labels, design),
                       alpha=acfg.alpha, token_price=acfg.token_price, metric=acfg.metric,
                       correct_threshold=acfg.correct_threshold, reward=acfg.reward)
    valid = [t.rewards["format"] == 0 for t in rolled]
    recall = [outcome_reward(t.answer, gold[t.qid], acfg.metric, question=t.question) for t in rolled]
    doc = {"config": config, "rate": rate, "steps": record["steps"], "epochs": spec.epochs,
           "train_scripts": len(train), "heldout_scripts": len(held), "seed": seed,
           "train_loss": record["loss"], "heldout_loss": round(loss, 4),
           "rollouts": len(rolled), "format_valid": sum(valid) / len(valid),
           "searches_per_question": sum(len([s for s in t.searches if s.valid]) for t in rolled) / len(rolled),
           "recall": sum(recall) / len(recall),
           "stop_reasons": {r: sum(t.stop_reason == r for t in rolled) for r in sorted({t.stop_reason for t in rolled})},
           "seconds": {"train": round(train_s, 1), "rollouts": round(time.perf_counter() - t1, 1)},
           "heldout_qids": [t.qid for t in held]}
    write_text_atomic(folder.parent / f"{rate:g}.json", json.dumps(doc, indent=1) + "\n")
    return doc


def choose(config: str, rates: list[float], out: str) -> dict:
    from ltrr.agent.run import agent_dir
    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.pipeline import Run

    run = Run(load_config(config))
    docs = [json.loads((agent_dir(run) / "lora-lr" / f"{r:g}.json").read_text()) for r in rates]
    best_share = max(d["format_valid"] for d in docs)
    eligible = [d for d in docs if d["format_valid"] >= best_share - 0.10]
    chosen = min(eligible, key=lambda d: (d["heldout_loss"], d["rate"]))
    result = {"rule": "lowest held-out loss among the rates whose format-valid share is within 0.10 of the best",
              "chosen": chosen["rate"],
              "rates": [{k: d[k] for k in d if k != "heldout_qids"} for d in docs],
              "heldout_qids": docs[0]["heldout_qids"]}
    write_text_atomic(Path(out), json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--rate", type=float, help="train and score this learning rate")
    ap.add_argument("--choose", help="comma-separated rates already scored: apply the rule")
    ap.add_argument("--out", default="benchmarks/results/agent_demo_agent/lora_lr.json")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--heldout", type=float, default=0.2)
    ap.add_argument("--rollouts", type=int, default=32, help="held-out questions rolled out")
    args = ap.parse_args()
    if args.choose:
        res = choose(args.config, [float(r) for r in args.choose.split(",")], args.out)
        for d in res["rates"]:
            print(f"rate {d['rate']:g}: held-out loss {d['heldout_loss']:.4f}, format-valid {d['format_valid']:.2f}, "
                  f"searches {d['searches_per_question']:.2f}, recall {d['recall']:.3f}")
        print(f"chosen: {res['chosen']:g}")
    elif args.rate:
        doc = run_rate(args.config, args.rate, args.steps, args.heldout, args.rollouts)
        print(json.dumps({k: v for k, v in doc.items() if k not in ("heldout_qids", "train_loss")}))
    else:
        ap.error("give --rate or --choose")


if __name__ == "__main__":
    main()
