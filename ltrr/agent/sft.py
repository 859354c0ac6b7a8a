"""The format warm-start of the multi-round router: scripted design-part trajectories, then SFT.

SmolLM2-135M never writes the router's tags unprompted, so the policy first learns the format
from supervised trajectories of design-part questions (never a test group):

- a single-hop question whose label-best arm is a retrieval arm (its utility above the
  no-retrieval arm's; ties go to the cheaper arm) searches that arm once with the question and
  answers with the gold alias;
- a question where ``none`` strictly beats every retrieval arm answers at once (closed-book);
- a tie (no arm beats ``none`` and ``none`` beats no arm; most are all-zero utilities) follows
  ``ties``: ``"search"`` (the default) searches the retrieval arm with the best design-part mean
  utility on the question's type, ``"closed_book"`` answers at once. The default was chosen on
  demo-agent's design part alone: of its 1,071 single-hop questions, a retrieval arm is strictly
  best on 38.6%, ``none`` on 2.1% and 59.3% tie; scripting the ties closed-book taught the SFT
  policy to search on almost no single-hop question (it learns the majority, since it cannot
  tell a tie from a question text), although the labels say retrieval is at least as good on
  97.9% of them;
- a ``multihop`` question searches once per hop: the bridge sentence, with the arm that ranks
  the bridge document first (the cheapest such arm), then the missing name and the asked
  predicate, with the arm that ranks the answer's document first; a hop no arm finds at rank 1
  drops the question, so no script reasons from passages that do not hold what it says.

With ``arm_choice = "type"`` the label decides only whether a single-hop question searches; the
arm is the best of its type on the design part (among the arms shown), and a hop takes the first
arm in the ``multihop`` type's order that finds its document at rank 1 (`SFTSpec`).

Each example shows the arms its own way (`ltrr.agent.presentation.ArmView`, drawn from the
run's seed and the example's place among the design qids): a shuffled order, on a share of the
examples neutral ids (``arm-3``) for every arm, on a share one arm left out, on a share one shown
arm described by its configuration alone (as an arm held out of training is at evaluation; its
script is unchanged, so it is still called where it is the best arm). The script calls
its arm by the name the prompt shows, so the policy must find the arm by its descriptor line;
when an example leaves out the arm the rules above pick, the same rules pick among the arms it
shows (a multihop question whose hop no shown arm finds at rank 1 is dropped).

The scripts are played through the real `AgentLoop` with `ScriptedLM`, which writes the
scripted turns with the policy's own tokenizer, so the injected ``<information>`` blocks, the
prompt and the token mask are exactly those of a rollout. TRL's `SFTTrainer` then fine-tunes
the policy on the pre-tokenised trajectories with the loss on model-written tokens only (the
mask becomes TRL's ``assistant_masks``). Training checkpoints every ``save_steps`` optimiser
steps and resumes from the last checkpoint; the policy is saved with safetensors.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._atomic import write_text_atomic
from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, DataError
from ltrr.agent.backends import Continuation, ContinuationLM

# SFT_STATE: a file ltrr writes into each SFT checkpoint after transformers has written the rest
# (GRPO's ``router_state.json`` does the same): `ltrr.agent.lora.last_checkpoint` takes it for
# complete, and `ltrr.agent.lora.export_run` exports such a checkpoint of an interrupted run
from ltrr.agent.lora import SFT_STATE

__all__ = ["SFTSpec", "ScriptedLM", "script_for", "script_plans", "build_sft_trajectories", "train_sft"]

_BRIDGE = re.compile(r'^(?P<hop2>.*?) \(The blank is the name missing from: "(?P<bridge>.*)"\)$')


def spec_from_mapping(cls, d: dict, where: str, *, nonneg: tuple[str, ...] = (), text: tuple[str, ...] = ()):
    """A settings dataclass ``cls`` from a config table: unknown keys refused, ints taken as
    floats where the default is a float, each number positive (``nonneg`` ones >= 0, those the
    class lists in ``_SHARES`` in [0, 1]), a field whose default is a bool true or false; the
    ``text`` fields are left to the caller to check. Raises `ConfigError` naming the key."""
    shares = tuple(getattr(cls, "_SHARES", ()))
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(names)}")
    values = {}
    for f in fields(cls):
        v = d.get(f.name, f.default)
        if isinstance(f.default, bool) and f.name not in text:
            if not isinstance(v, bool):
                raise ConfigError(f"{where}.{f.name} must be true or false, got {v!r}")
        elif f.name in shares:
            v = check_number(v, f"{where}.{f.name}", low=0, high=1)
        elif f.name not in text and isinstance(f.default, float):
            v = check_number(v, f"{where}.{f.name}", low=0, low_open=f.name not in nonneg)
        elif f.name not in text:
            v = check_int(v, f"{where}.{f.name}", low=0 if f.name in nonneg else 1)
        values[f.name] = v
    return cls(**values)


@dataclass(frozen=True)
class SFTSpec:
    """SFT settings (``[agent] sft``).

    Attributes
    ----------
    epochs : float
        Passes over the scripted trajectories.
    learning_rate : float
        AdamW's peak rate (linear warm-up, then linear decay). The default is LoRA's, chosen on
        demo-agent-unseen's held-out design scripts from {3e-4, 1e-3, 2e-3}
        (``benchmarks/lora_lr.py``: after 10 steps only 2e-3 wrote the format, 94% of rollouts
        valid, held-out loss 0.25 against 0.51 and 1.21); demo-agent's full fine-tuning used a
        twentieth of it (1e-4).
    max_examples : int
        Design questions scripted: usable ``multihop`` ones first (at most half), then a
        type-stratified, seeded sample of the others.
    shuffle_arms : bool
        List the arms in a random order in each example's prompt.
    rename_share : float
        Share of the examples that show every arm under a neutral id (``arm-3``).
    leave_out_share : float
        Share of the examples that leave one random arm out of the prompt (their script calls
        the best arm shown, by the same rules).
    config_only_share : float
        Share of the examples that describe one random shown arm by its configuration alone,
        with the line an arm held out of training gets at evaluation (``no measured
        strengths``); their script still calls it where the labels make it the best arm.

        These four (`ltrr.agent.presentation`) make the policy read the arms' descriptors
        rather than learn their names; ``false, 0, 0, 0`` gives the plain prompt that the
        earlier policies were trained on. The defaults (true, 0.25, 0.25, 0.75) were chosen on
        demo-agent-unseen's design part alone, by a rule fixed before looking
        (``benchmarks/view_settings.py``, results in
        ``benchmarks/results/agent_demo_agent/view_settings.json``), from what its 160 SFT
        scripts would teach, not from trained policies: no setting met every criterion (an arm
        called in 12 scripts, ``bm25+reg``, is called config-only fewer than twice at any share
        below 1), so the rule's fallback took the most scripts that call the arm described by
        its configuration alone (23 of 160, 19 of them under its real name, as at evaluation)
        among the settings that keep at least 20% of the scripts calling an arm under a neutral
        id (37) and at least 10% with the evaluation's own prompt (22); rename 0.25 and 0.5
        tied and the smaller was kept. No policy was trained or measured to choose.
    batch_size, grad_accum : int
        Sequences per forward pass, and passes per optimiser step.
    max_length : int
        Tokens kept per sequence (longer ones are cut at the end).
    save_steps : int
        Optimiser steps between checkpoints.
    warmup_ratio : float
        Share of the steps spent warming up.
    ties : {"search", "closed_book"}
        What a single-hop question on which no arm beats another is scripted to do.
    arm_choice : {"label", "type"}
        Which arm a search is scripted with. ``"label"`` (the default, every policy before
        session 27): a single-hop question's own label-best arm, and for a hop the cheapest arm
        that finds its document at rank 1. ``"type"``: the arm with the best design-part mean
        utility on the question's type (among the arms shown), and for a hop the first such arm,
        by the ``multihop`` type's order, that finds its document at rank 1. The label decides
        only *whether* a single-hop question searches. With ``"label"`` the SFT policies called
        only ``bm25`` (the scripts' majority arm) whatever the question; ``"type"`` makes the
        arm a function of what the question is, which the policy can read from the question and
        find by the descriptor line that names the type among the arm's strengths.
    adapter : {"lora", "full"}
        Train a LoRA adapter on the start model (a few MB, committable) or every weight.
    lora_r, lora_alpha, lora_dropout, lora_targets
        A new adapter's rank, scale numerator, dropout, and the modules it goes on
        (``"all-linear"`` or comma-separated names); a LoRA start policy keeps its own. The
        defaults and why: `ltrr.agent.lora`.
    """

    epochs: float = 1.0
    learning_rate: float = 2e-3
    max_examples: int = 300
    shuffle_arms: bool = True
    rename_share: float = 0.25
    leave_out_share: float = 0.25
    config_only_share: float = 0.75
    batch_size: int = 1
    grad_accum: int = 8
    max_length: int = 768
    save_steps: int = 5
    warmup_ratio: float = 0.05
    ties: str = "search"
    arm_choice: str = "label"
    adapter: str = "lora"
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: str = "all-linear"

    _TIES = ("search", "closed_book")
    _ARM_CHOICES = ("label", "type")
    _SHARES = ("rename_share", "leave_out_share", "config_only_share")

    @classmethod
    def from_mapping(cls, d: dict, where: str = "[agent] sft") -> SFTSpec:
        """Validate a config table into an `SFTSpec` (`spec_from_mapping`'s checks).

        ``lora_targets`` may be a list of module names. Beyond the per-key checks, the adapter
        settings must be usable, ``ties`` and ``arm_choice`` among their choices and
        ``warmup_ratio`` below 1.

        Raises
        ------
        ConfigError
            Naming the key (``where``-prefixed) that is unknown or out of range.
        """
        from ltrr.agent.lora import check_adapter_fields

        spec = spec_from_mapping(cls, _joined_targets(d), where, text=("ties", "arm_choice", "adapter", "lora_targets"),
                                 nonneg=("lora_dropout",))
        check_adapter_fields(spec, where)
        if spec.ties not in cls._TIES:
            raise ConfigError(f"{where}.ties must be one of {', '.join(cls._TIES)}, got {spec.ties!r}")
        if spec.arm_choice not in cls._ARM_CHOICES:
            raise ConfigError(f"{where}.arm_choice must be one of {', '.join(cls._ARM_CHOICES)}, "
                              f"got {spec.arm_choice!r}")
        if spec.warmup_ratio >= 1:
            raise ConfigError(f"{where}.warmup_ratio must be below 1, got {spec.warmup_ratio!r}")
        return spec


def _joined_targets(d: dict) -> dict:
    """``lora_targets`` given as a TOML list, as the comma-separated text the specs keep."""
    t = d.get("lora_targets")
    if isinstance(t, (list, tuple)) and all(isinstance(x, str) for x in t):
        return {**d, "lora_targets": ",".join(t)}
    return d


class ScriptedLM(ContinuationLM):
    """Writes scripted model turns with a real token-level model's tokenizer and chat template.

    Each `continue_` call returns the next scripted turn, encoded by ``lm``; the loop around it
    runs as in a rollout (the turns must close ``</search>`` or ``</answer>``).

    Examples
    --------
    >>> lm = ScriptedLM(base_lm, ["<think>x</think>\\n<answer>y</answer>"])  # doctest: +SKIP
    """

    backend = "scripted"
    token_level = True

    def __init__(self, lm: ContinuationLM, turns: list[str]):
        if not lm.token_level:
            raise ConfigError("SFT trajectories need a token-level policy model (transformers)")
        self.lm = lm
        self.turns = list(turns)

    @property
    def identity(self) -> str:
        return f"scripted:{self.lm.identity}"

    @property
    def context_length(self) -> int:
        return self.lm.context_length

    def render(self, messages):
        return self.lm.render(messages)

    def prompt_ids(self, messages):
        return self.lm.prompt_ids(messages)

    def encode(self, text):
        return self.lm.encode(text)

    def decode(self, ids):
        return self.lm.decode(ids)

    def continue_(self, ids, text, params) -> Continuation:
        if not self.turns:
            return Continuation("", [], 0, "error", error="the script has no turn left")
        turn = self.turns.pop(0)
        new = self.lm.encode(turn)
        return Continuation(turn, new, len(new), "stop")


def script_for(gold: str, plan: list[tuple[str, str, str]]) -> list[str]:
    r"""The model turns of one scripted trajectory: a search per ``(arm, sub-query, thought)`` of
    ``plan``, then the answer ``gold``; no search when ``plan`` is empty.

    Examples
    --------
    >>> script_for("Shakespeare", [("bm25", "Who wrote Hamlet?", "I need evidence for this.")])[0]
    '<think>I need evidence for this. bm25 suits this search.</think>\n<search>bm25: Who wrote Hamlet?</search>'
    >>> script_for("Paris", [])
    ['<think>I can answer this without searching.</think>\n<answer>Paris</answer>']
    """
    if not plan:
        return [f"<think>I can answer this without searching.</think>\n<answer>{gold}</answer>"]
    turns = [f"<think>{why} {arm} suits this search.</think>\n<search>{arm}: {query}</search>"
             for arm, query, why in plan]
    turns.append(f"<think>The information answers the question.</think>\n<answer>{gold}</answer>")
    return turns


def _first_hit_arms(pool, queries: pd.DataFrame, gold: dict[str, str], arms: list[str], costs: dict) -> dict:
    """qid -> the arms whose first passage is the gold document, cheapest first (name order on ties)."""
    res = pool.search(queries, arms=arms, k=1)
    top = res[res["rank"] == 1]
    hit = top[top["docid"].astype(str) == top["qid"].map(gold).astype(str)]
    out = {}
    for qid, g in hit.groupby("qid"):
        out[str(qid)] = sorted(set(g["arm"].astype(str)), key=lambda a: (costs[a], a))
    return out


def _typical_arms(U: pd.DataFrame, queries: pd.DataFrame, retrieval: list[str], costs: dict) -> dict[str, list]:
    """Query type (``queries``' ``qtype``) -> the retrieval arms by mean design utility, best first
    (the cheaper on ties)."""
    qtype = queries["qtype"].astype(str).reindex(U.index) if "qtype" in queries else pd.Series("all", U.index)
    means = U[[a for a in retrieval if a in U]].groupby(qtype.to_numpy()).mean()
    return {str(t): sorted(means.columns, key=lambda a: (float(row[a]), -costs[a], a), reverse=True)
            for t, row in means.iterrows()}


def _plans(run, labels: pd.DataFrame, design: list[str], spec: SFTSpec, views=None) -> list[tuple[str, list]]:
    """(qid, plan) of the scripted design questions; see the module docstring. ``views`` (qid ->
    `ltrr.agent.presentation.ArmView`) says which arms each question's prompt leaves out."""
    from ltrr.routers.reference import utility_frame

    def out_of(qid: str) -> set[str]:
        return set(views[qid].left_out) if views is not None else set()

    q = run.dataset.queries.assign(qid=run.dataset.queries["qid"].astype(str)).set_index("qid")
    pool = run.pool.load(run.index_dir)
    costs = pool.costs
    none = [a for a in pool.arm_names if pool.arm(a).retriever is None]
    held = set(run.config.agent.holdout_arms)  # kept out of the prompt, so out of the scripts too
    retrieval = [a for a in pool.arm_names if a not in none and a not in held]
    rng = np.random.default_rng(run.config.seed)
    dq = q.loc[[i for i in design if i in q.index]]
    U = utility_frame(labels)
    typical = _typical_arms(U.loc[U.index.isin(dq.index)], dq, retrieval, costs)  # per type, design part

    def by_type(qtype: str, arms: list[str]) -> list[str]:
        """``arms`` in the order ``spec.arm_choice`` scripts them (see `SFTSpec`)."""
        if spec.arm_choice != "type":
            return arms
        ranked = typical.get(qtype, [])
        return sorted(arms, key=lambda a: ranked.index(a) if a in ranked else len(ranked))

    plans: list[tuple[str, list]] = []
    # multihop: one search per hop, each with an arm that finds its document at rank 1
    mh = dq[dq["qtype"].astype(str) == "multihop"] if "qtype" in dq else dq.iloc[:0]
    if len(mh) and run.dataset.qrels is None:
        raise DataError("multihop questions need qrels (their bridge and answer documents) to be scripted")
    if len(mh):
        qrels = run.dataset.qrels.assign(qid=run.dataset.qrels["qid"].astype(str))
        corpus = run.dataset.corpus.set_index("docid")["title"]
        hop1, hop2, gold1, gold2 = [], [], {}, {}
        for qid, row in mh.iterrows():
            m = _BRIDGE.match(str(row["question"]))
            docs = qrels.loc[qrels["qid"] == qid, "docid"].astype(str).tolist()
            a = qid.removeprefix("mul-")
            if not m or len(docs) != 2 or a not in docs:
                continue
            b = next(d for d in docs if d != a)
            name = str(corpus.get(b, ""))
            hop1.append((qid, m.group("bridge").replace("___", "").strip()))
            hop2.append((qid, m.group("hop2").replace("___", name)))
            gold1[qid], gold2[qid] = a, b
        if hop1:
            arm1 = _first_hit_arms(pool, pd.DataFrame(hop1, columns=["qid", "question"]), gold1, retrieval, costs)
            arm2 = _first_hit_arms(pool, pd.DataFrame(hop2, columns=["qid", "question"]), gold2, retrieval, costs)
            for (qid, s1), (_, s2) in zip(hop1, hop2, strict=True):
                a1 = next((a for a in by_type("multihop", arm1.get(qid, [])) if a not in out_of(qid)), None)
                a2 = next((a for a in by_type("multihop", arm2.get(qid, [])) if a not in out_of(qid)), None)
                if a1 is not None and a2 is not None:
                    name = str(corpus.get(gold2[qid], ""))
                    plans.append((qid, [(a1, s1, "First I need the missing name."),
                                        (a2, s2, f"The missing name is {name}. Now I need the year.")]))
    plans = plans[: max(1, spec.max_examples // 2)]  # two-hop scripts fill at most half
    # single-hop: the label-best arm once (or the type's, `arm_choice`), or no search when no
    # retrieval arm beats none
    single = dq[(dq["qtype"].astype(str) != "multihop") if "qtype" in dq else slice(None)]
    single = single[single.index.isin(U.index)]
    room = spec.max_examples - len(plans)
    if room > 0 and len(single):
        types = sorted(single["qtype"].astype(str).unique()) if "qtype" in single else ["all"]
        per = max(1, room // len(types))
        chosen: list[str] = []
        for t in types:
            ids = np.sort(single.index[single["qtype"].astype(str) == t].to_numpy()) if "qtype" in single \
                else np.sort(single.index.to_numpy())
            chosen += rng.permutation(ids)[:per].tolist()
        for qid in sorted(chosen)[:room]:
            u = U.loc[qid]
            base = float(u[none[0]]) if none and none[0] in u else -np.inf
            shown = [a for a in retrieval if a not in out_of(qid)]  # the rules below, on the arms shown
            if not shown:
                plans.append((qid, []))
                continue
            best = max(shown, key=lambda a: (float(u.get(a, -np.inf)), -costs[a]))
            top = float(u.get(best, -np.inf))
            if (top == base and spec.ties == "search") or spec.arm_choice == "type":
                ranked = typical[str(single.loc[qid, "qtype"]) if "qtype" in single else "all"]
                best = next((a for a in ranked if a in shown), best)
            search = top > base or (top == base and spec.ties == "search")
            plans.append((qid, [(best, str(q.loc[qid, "question"]), "I need evidence for this.")] if search else []))
    if not plans:
        raise DataError("no design question could be scripted for SFT (no labels or usable multihop questions)")
    return plans


def script_plans(run, labels: pd.DataFrame, design: list[str], spec: SFTSpec, arms: list[str]) -> list[tuple]:
    """(qid, `ltrr.agent.presentation.ArmView`, plan) of each scripted design question, in qid
    order, without playing the scripts: ``arms`` are the loop's (the pool's less ``[agent]
    holdout_arms``), the design qid at place ``i`` (sorted) shows them as `draw_view` with key
    ``(0, i)`` and ``spec``'s view settings draws, and a plan is a list of ``(pool arm, sub-query,
    thought)`` searches (see the module docstring). What `build_sft_trajectories` plays."""
    from ltrr.agent.presentation import draw_view, view_settings

    views = {qid: draw_view(arms, seed=run.config.seed, key=(0, i), **view_settings(spec))
             for i, qid in enumerate(sorted(set(map(str, design))))}
    return [(qid, views[qid], plan) for qid, plan in sorted(_plans(run, labels, design, spec, views))]


def build_sft_trajectories(run, lm, labels: pd.DataFrame, design: list[str], spec: SFTSpec):
    """Scripted trajectories of design questions (see the module docstring), in qid order; the
    design qid at place ``i`` (sorted) shows the arms as `ltrr.agent.presentation.draw_view`
    with key ``(0, i)`` and ``spec``'s view settings draws (`script_plans`)."""
    from ltrr.agent.run import gold_answers, make_loop

    gold = gold_answers(run)
    questions = run.dataset.queries.set_index(run.dataset.queries["qid"].astype(str))["question"]
    scripted = ScriptedLM(lm, [])
    loop = make_loop(run, scripted, labels, design=design, use_cache=False)  # holdout arms left out
    trajs = []
    for qid, view, plan in script_plans(run, labels, design, spec, loop.arm_names):
        scripted.turns = script_for(gold[qid][0], [(view.shown_name(arm), query, why) for arm, query, why in plan])
        t = loop.with_view(view).rollout(str(questions.loc[qid]), qid=qid)
        if t.stop_reason != "answered":
            raise DataError(f"the SFT script of {qid} ended with {t.stop_reason} ({t.issues}); this is a bug")
        trajs.append(t)
    return trajs


def claim_checkpoints(ckpt: Path, inputs: dict, log, stage: str = "agent sft", *,
                      exported: str | Path | None = None) -> Path | None:
    """Keep ``ckpt``'s checkpoints only if they were written for these exact inputs.

    A resume must continue the same run: local checkpoints of other trajectories or settings
    (say, a re-scripted SFT set) are removed, with a log line, and the inputs' fingerprint is
    recorded (`ltrr.agent.lora.inputs_stamp`). ``exported`` is a run the user asked to resume
    (``--resume``, `ltrr.agent.lora.export_run`): one of other inputs is refused with a
    `ConfigError` naming the inputs that differ, before anything is removed, and otherwise its
    checkpoint replaces older local ones (`ltrr.agent.lora.import_checkpoint`); returns the
    checkpoint imported or kept (None: no ``exported``, or it holds no checkpoint). A checkpoint
    written by other ltrr, TRL, transformers or peft versions is resumed, with a log line.
    """
    from ltrr.agent import lora

    stamp = lora.inputs_stamp(inputs)
    if exported is not None:
        lora.check_exported(exported, stamp)  # refuses before anything is removed
    old = lora.read_stamp(ckpt)
    if ckpt.exists() and any(ckpt.glob("checkpoint-*")) and (old is None or old["key"] != stamp["key"]):
        log(f"[{stage}] the checkpoints in {ckpt} are of other inputs; starting afresh")
        shutil.rmtree(ckpt)
    got = None
    if exported is not None:
        got = lora.import_checkpoint(exported, ckpt.parent, stamp)
        log(f"[{stage}] {exported}: " + (f"resuming {got}" if got else "no checkpoint to resume; starting"))
    old = lora.read_stamp(ckpt)
    if old is not None and any(ckpt.glob("checkpoint-*")) and old.get("versions") != stamp["versions"]:
        was = old.get("versions") or {}
        log(f"[{stage}] the checkpoints in {ckpt} were written with other package versions ("
            + ", ".join(f"{k} {was.get(k)} now {v}" for k, v in stamp["versions"].items() if was.get(k) != v)
            + "); resuming them anyway")
    ckpt.mkdir(parents=True, exist_ok=True)
    write_text_atomic(ckpt / "inputs.json", json.dumps(stamp) + "\n")
    return got


def train_sft(trajectories, model_dir_or_lm, out: str | Path, spec: SFTSpec, *, seed: int = 0,
              log=print, show_progress: bool = False, resume_from: str | Path | None = None) -> dict:
    """Fine-tune the policy with TRL's `SFTTrainer` on ``trajectories`` (loss on their mask-1
    tokens); save it to ``out`` (a LoRA adapter and ``base_model.json``, or with ``adapter =
    "full"`` safetensors weights and the tokenizer; then ``sft.json``). ``model_dir_or_lm`` is a
    `TransformersLM` or a policy folder (`ltrr.agent.lora.load_policy`). Resumes from the last
    checkpoint under ``out/checkpoints``.

    ``resume_from``: an interrupted run exported by `ltrr.agent.lora.export_run` (its newest
    complete checkpoint, committed), resumed unless ``out`` holds a newer checkpoint of the same
    inputs; one trained on other inputs is refused (`ConfigError` naming them) before any local
    checkpoint is touched (`claim_checkpoints`). The inputs name the policy model by content
    (`ltrr.agent.lora.content_digest`), not by path or device, so a run interrupted on one
    machine resumes on another."""
    try:
        from datasets import Dataset
        from transformers import PrinterCallback, TrainerCallback
        from trl import SFTConfig, SFTTrainer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from ltrr._errors import MissingDependencyError

        raise MissingDependencyError(f"SFT needs TRL: pip install 'ltrr[agent]' ({exc})") from None
    from ltrr.agent import lora
    from ltrr.agent.backends import TransformersLM

    out = Path(out)
    lm = model_dir_or_lm if isinstance(model_dir_or_lm, TransformersLM) else lora.load_policy(model_dir_or_lm)
    model, peft_config = lora.trainable_model(lm, spec, log, stage="agent sft")
    tokenizer = lm.tokenizer
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = {"input_ids": [list(t.ids)[: spec.max_length] for t in trajectories],
            "assistant_masks": [list(t.mask)[: spec.max_length] for t in trajectories]}
    if not rows["input_ids"] or not any(1 in m for m in rows["assistant_masks"]):
        raise DataError("no SFT trajectory has a model-written token")
    ckpt = out / "checkpoints"
    # the policy model by content: its identity holds the folder's name, dtype and device, so an
    # export made elsewhere (another path, a GPU) was refused; no committed SFT checkpoint holds
    # the old key (they are removed when the run ends), so none is orphaned by the change
    claim_checkpoints(ckpt, {"spec": asdict(spec), "seed": seed, "base_model": lora.content_digest(lm), "rows": rows},
                      log, exported=resume_from)
    # two kept: transformers removes the older one before `_Log.on_save` marks the new one complete
    args = SFTConfig(output_dir=str(ckpt), num_train_epochs=spec.epochs, learning_rate=spec.learning_rate,
                     per_device_train_batch_size=spec.batch_size, gradient_accumulation_steps=spec.grad_accum,
                     warmup_steps=float(spec.warmup_ratio), lr_scheduler_type="linear", logging_steps=1,
                     save_steps=spec.save_steps, save_total_limit=2, save_only_model=False,
                     **lora.device_args(lm),
                     seed=seed, data_seed=seed, report_to=[], max_length=spec.max_length, bf16=False, fp16=False,
                     disable_tqdm=not show_progress, dataloader_num_workers=0, packing=False)
    history: list[dict] = []

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                history.append({"step": state.global_step, "loss": float(logs["loss"]), "epoch": logs.get("epoch")})
                if state.global_step % 10 == 0:
                    log(f"[agent sft] step {state.global_step}/{state.max_steps} loss {logs['loss']:.4f}")

        def on_save(self, args, state, control, **kw):
            folder = ckpt / f"checkpoint-{state.global_step}"
            if folder.exists():  # written last, atomically: it marks a complete checkpoint
                write_text_atomic(folder / SFT_STATE, json.dumps({"step": state.global_step}) + "\n")

    from transformers import set_seed

    set_seed(seed)  # a new adapter's initial weights come from the seed (the Trainer seeds only after wrapping)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict(rows), processing_class=tokenizer,
                         callbacks=[_Log()], peft_config=peft_config)
    trainer.remove_callback(PrinterCallback)  # the log lines above, not a dict per step
    # the newest complete checkpoint, not transformers' newest folder: one killed while it was
    # written (transformers writes in place) lacks its marker and is passed over
    last = lora.last_checkpoint(ckpt, SFT_STATE)
    resume = last is not None
    if resume:
        log(f"[agent sft] resuming from {last}")
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(last) if resume else None)
    seconds = time.perf_counter() - t0
    # the loss history of every leg (a resumed run's trainer state holds the earlier steps)
    history = [{"step": h["step"], "loss": h["loss"], "epoch": h.get("epoch")}
               for h in trainer.state.log_history if "loss" in h] or history
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    adapter = lora.save_trained(trainer, tmp, lm)
    record = {"spec": asdict(spec), "adapter": adapter or {"adapter": "full"}, "examples": len(rows["input_ids"]),
              "model_tokens": int(sum(sum(m) for m in rows["assistant_masks"])),
              "tokens": int(sum(len(i) for i in rows["input_ids"])), "steps": trainer.state.global_step,
              "seconds_this_leg": round(seconds, 1), "resumed": resume, "base_model": lm.identity,
              "seed": seed, "loss": history}
    (tmp / "sft.json").write_text(json.dumps(record, indent=1) + "\n")
    lora.replace_policy(tmp, out, "sft.json")
    shutil.rmtree(ckpt, ignore_errors=True)  # the policy is saved; the checkpoints were for resuming
    return record
