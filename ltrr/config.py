"""Run configuration: TOML or YAML files, validated on load.

A config names the dataset, the retrievers, rerankers and arms of the pool, and the settings of
the later stages. Every key is checked against the schema below; an unknown key, a wrong type or
a missing required key raises `ConfigError` naming the key (``[arms][2].k``). Relative paths are
resolved against the current working directory.

``load_config("demo")`` loads the default config shipped inside the package.

This module sits near the ground floor of the import layers (see ``[importlinter]`` in
setup.cfg): it imports only `ltrr._errors` and, to validate the ``[context]`` table, the specs
that table's owner keeps in `ltrr.packing` (`PackSpec`, `LoopSpec`), which import nothing above
the ground. Objects built from a config (the pool: `ltrr.retrieval.Pool.from_run_config`) are
built by the packages above, never here.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ltrr._errors import ConfigError

__all__ = ["Config", "load_config", "packaged_configs", "SCHEMA", "RUN_GENERATION_KEYS", "backend_settings"]

_ANY = object()

# section -> key -> (allowed types, default). A default of ConfigError means "required".
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "run": {
        "name": ((str,), ConfigError),
        "seed": ((int,), 13),
        "workdir": ((str,), None),  # default: runs/<name>
    },
    "data": {
        "dataset": ((str,), ConfigError),  # a built dataset name ("demo"), a folder or "irds:<id>"
        "build_seed": ((int,), 13),
        "n_per_type": ((int,), 200),
        "n_noanswer": ((int,), 200),
        "n_multihop": ((int,), 300),
        "grow_per_type": ((int,), 0),  # a second build round (ltrr.data.demo.generate_demo)
        "grow_noanswer": ((int,), 0),
        "builder": ((str,), ""),  # the builder of a dataset named otherwise; default: the name
        "exclude_qtypes": ((list,), []),  # query types the run leaves out (before max_queries)
        "max_queries": ((int,), 0),  # 0 = all; else a seeded, type-stratified sample
        "answers": ((str,), ""),  # a qid -> answers table for a dataset without them (irds:<id>)
    },
    # Keys of [generation] other than these go to the backend (ltrr.generation.make_generator),
    # which validates them and names an unknown one.
    "generation": {
        "backend": ((str,), "transformers"),
        "template": ((str,), "short_answer"),
        "max_new_tokens": ((int,), 32),
        "cache": ((str,), ""),  # default: <data_root>/cache/generations.sqlite
        "use_cache": ((bool,), True),
        "chunk_size": ((int,), 8),
        "max_prompt_tokens": ((int,), 0),  # 0: the model's context minus max_new_tokens
        "prebuilt": ((str,), ""),  # a packaged prebuilt cache (ltrr/prebuilt/NAME-generations.jsonl.gz)
        # > 0: answers read the top routed arms' passages packed into this many tokens
        # (ltrr.packing.rag; route --answer and serving), settings in [context]
        "context_budget": ((int,), 0),
    },
    # context packing (ltrr.packing.PackSpec) and the multi-agent loop
    "context": {
        # `ltrr run` also runs the multi-agent loop's stage (`ltrr context run`: every strategy on
        # the protocol's test part, at these settings); off unless asked, the loop is long
        "enabled": ((bool,), False),
        "top_m": ((int,), 2),  # arms whose passages are candidates, in routed order
        "depth": ((int,), 5),  # passages read per arm
        "selector": ((str,), "knapsack"),  # greedy, greedy-skip, greedy-density, knapsack, knapsack-marginal
        "prior": ((float,), 0.3),  # weight of the routed order, prior / (arm rank * passage rank)
        "weights": ((dict,), {}),  # importance weights: keyword, stage, recency, similarity, decay
        # the multi-agent loop (ltrr.packing.LoopSpec; `ltrr context run`)
        "base_budget": ((int,), 512),  # B in B_i = B + offset_i, each agent's token budget
        "rounds": ((int,), 2),  # rounds of planner -> searcher -> answerer (1 to 3)
        "max_subquestions": ((int,), 3),  # the planner's sub-questions per round
        "strategies": ((list,), ["full-context", "static", "rcr-oneshot", "rcr-iterative"]),
        "roles": ((dict,), {}),  # name -> {keywords, priorities, budget_offset}, over the default roles
        "dedup_threshold": ((float,), 0.95),  # embedding cosine at which a new memory item is a duplicate
    },
    # the multi-round router (ltrr.agent; `ltrr agent sft|eval`)
    "agent": {
        # `ltrr run` also runs the agent stage: SFT (unless `policy` names one; skipped when its
        # folder holds the policy of these settings), then `ltrr agent eval`; off unless asked
        "enabled": ((bool,), False),
        "k": ((int,), 1),  # passages per search
        "max_turns": ((int,), 3),  # searches before the answer-only turn
        "max_obs_tokens": ((int,), 150),  # tokens of passages per <information>
        "max_new_tokens": ((int,), 96),  # tokens per model turn
        "alpha": ((float,), 0.2),  # cost reward's weight, counted only for a correct answer
        "reward": ((str,), "ltrr"),  # a named reward of ltrr.agent.reward_options.REWARDS: ltrr or router-r1
        "token_price": ((float,), 0.001),  # cost of one injected token, in arm-cost units
        "metric": ((str,), "recall"),  # outcome reward (a registry metric)
        "correct_threshold": ((float,), 1.0),  # outcome at which an answer counts as correct
        "n_eval": ((int,), 150),  # test questions per policy (multihop first, then a type-stratified sample)
        "policy": ((str,), ""),  # a policy folder (SFT or RL); "" = the generator's model
        "holdout_arms": ((list,), []),
        "device": ((str,), "cpu"),  # torch device of the policy: SFT, GRPO, RFT and evaluation ("cuda" on a GPU)
        "rollout_batch": ((int,), 1),  # rollouts decoded together (ltrr.agent.batching); 1 = one at a time  # arms kept from SFT and the prompt; `agent eval --holdout` adds them
        "sft": ((dict,), {}),  # SFT settings (ltrr.agent.sft.SFTSpec): epochs, learning_rate, max_examples, ...
        "grpo": ((dict,), {}),  # GRPO settings (ltrr.agent.grpo.GRPOSpec): steps, group_size, learning_rate, ...
    },
    "labels": {
        "metric": ((str,), "f1"),
        "extra_metrics": ((list,), []),
        "noise_floor": ((bool,), True),
        "noise_floor_arm": ((str,), ""),
        "tolerate_failures": ((bool,), False),
        "judge": ((dict,), {}),
        # also the generator's log-probability of the gold answer (teacher forcing), per item
        "likelihood": ((bool,), False),
        # a second, independent replicate of the labels under an equivalent template, for the
        # noise-corrected headroom: "" (none), on the protocol's "test" part or on "all" queries
        "replicate_template": ((str,), ""),
        "replicate": ((str,), "test"),
    },
    "features": {
        "set": ((str,), "paper"),  # a features/*.toml name or path (it sets pca_dim etc.)
    },
    "train": {
        "ranker": ((str,), "lambdamart-listwise"),  # what `ltrr train` fits by default
        "params": ((dict,), {}),  # ranker name -> hyper-parameters
        "rankers": ((list,), []),  # rankers compared by the eval stage (default: the 9 non-transformer ones)
    },
    "eval": {
        "splits": ((list,), ["balanced", "leave-one-type-out"]),
        "test_size": ((float,), 0.3),
        "n_folds": ((int,), 5),
        "n_bootstrap": ((int,), 1000),
        "correction": ((str,), "bonferroni"),
        "metric": ((str,), ""),
        "k": ((int,), 3),
        # ir_measures strings of the retrieval tables; [] = nDCG@10, R@k at the arms' k, RR, P@1
        "retrieval_measures": ((list,), []),
    },
    # the pre-registered design/test protocol (`ltrr protocol`, ltrr.eval.headline)
    "protocol": {
        "design_size": ((float,), 0.7),
        "rankers": ((list,), ["lambdamart-listwise"]),  # candidates, crossed with train_labels
        "train_labels": ((list,), ["norm_gain"]),  # label columns: norm_gain, likelihood_norm_gain
        "feature_sets": ((list,), []),  # candidate feature sets (default: [features] set)
        "n_folds": ((int,), 5),
        "routers": ((list,), []),  # more candidates as router specs, e.g. "knn:n_neighbors=50"
        "seeds": ((list,), []),  # more partition seeds: the headline's mean and sd over them
        "n_jobs": ((int,), 1),  # candidates cross-validated in parallel processes (same result)
    },
    # the budgeted routing policy (ltrr.policy); `ltrr run` runs its stage when the config has
    # a [policy] table (enabled then defaults to true)
    "policy": {
        "enabled": ((bool,), None),
        "budget": ((float,), 0.5),  # as a share of the most expensive arm's cost
        "fractions": ((list,), [0.25, 0.5, 0.75]),  # budgets (shares of the top cost) of `policy eval`
        "representation": ((str,), "features"),  # "features" or "lm"
        "trainers": ((list,), ["grpo", "exact"]),  # the first is the one `ltrr run` saves
        "cost": ((str,), "config"),  # "config": the arms' cost; "tokens": measured prompt tokens + latency
        "latency_weight": ((float,), 1000.0),  # tokens per second of retrieval latency (cost = "tokens")
        "pooling": ((str,), "last"),  # question state of the lm representation: "last" or "mean"
        "n_folds": ((int,), 5),  # cross-fitted LTR scores of the training queries
        "params": ((dict,), {}),  # more BudgetPolicy parameters (n_steps, group_size, ...)
    },
}
_MAP_SECTIONS = ("retrievers", "rerankers")
_OPEN_SECTIONS = ("generation",)  # extra keys are passed on to the backend
_LIST_SECTIONS = ("arms",)

# the [generation] keys the run reads itself (prompts, cache, packing); the others configure the
# generator backend (`ltrr.generation.make_generator`)
RUN_GENERATION_KEYS = ("template", "max_new_tokens", "cache", "use_cache", "chunk_size", "max_prompt_tokens",
                       "prebuilt", "context_budget")


def backend_settings(generation: dict) -> dict:
    """The keys of a ``[generation]`` table that configure the generator backend: all but
    `RUN_GENERATION_KEYS`, which the run, the policy and the agent read themselves."""
    return {k: v for k, v in generation.items() if k not in RUN_GENERATION_KEYS}


def packaged_configs() -> list[str]:
    """Names of the configs shipped inside the package (``demo``, ...)."""
    files = importlib.resources.files("ltrr") / "configs"
    return sorted(p.name.rsplit(".", 1)[0] for p in files.iterdir() if p.name.endswith(".toml"))


def _read(path_or_name: str | Path) -> tuple[dict, str]:
    p = Path(path_or_name)
    if not p.exists() and "/" not in str(path_or_name) and p.suffix == "":
        res = importlib.resources.files("ltrr") / "configs" / f"{path_or_name}.toml"
        if not res.is_file():
            raise ConfigError(
                f"no config file {str(path_or_name)!r} and no packaged config of that name "
                f"(packaged: {', '.join(packaged_configs())})"
            )
        return _parse(res.read_text(encoding="utf-8"), ".toml", f"<packaged {path_or_name}>"), f"packaged:{path_or_name}"
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    return _parse(p.read_text(encoding="utf-8-sig"), p.suffix.lower(), str(p)), str(p.resolve())


def _parse(text: str, suffix: str, where: str) -> dict:
    if suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: invalid TOML ({exc})") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: invalid YAML ({str(exc).splitlines()[0]})") from None
    else:
        raise ConfigError(f"{where}: config files are .toml, .yaml or .yml, not {suffix or 'no suffix'}")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level of a config must be a table/mapping")
    return data


def _check_section(name: str, given: Any, spec: dict) -> dict:
    if not isinstance(given, dict):
        raise ConfigError(f"config key [{name}] must be a table, got {type(given).__name__}")
    unknown = sorted(set(given) - set(spec))
    extra = {}
    if name in _OPEN_SECTIONS:
        extra, unknown = {k: given[k] for k in unknown}, []
    if unknown:
        raise ConfigError(
            f"unknown config key [{name}].{unknown[0]}; allowed keys: {', '.join(sorted(spec))}"
        )
    out = {}
    for key, (types, default) in spec.items():
        if key in given:
            val = given[key]
            ok = isinstance(val, types) and not (isinstance(val, bool) and bool not in types)
            if not ok:
                allowed = " or ".join(t.__name__ for t in types)
                raise ConfigError(
                    f"config key [{name}].{key} must be {allowed}, got {type(val).__name__} {val!r}"
                )
            out[key] = float(val) if float in types and isinstance(val, int) and not isinstance(val, bool) else val
        elif default is ConfigError:
            raise ConfigError(f"config key [{name}].{key} is required")
        else:
            out[key] = copy.deepcopy(default)
    out.update(extra)
    return out


@dataclass
class Config:
    """A validated run configuration (plain dicts per section; see `SCHEMA`)."""

    run: dict
    data: dict
    retrievers: dict
    rerankers: dict
    arms: list
    generation: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    policy: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)
    agent: dict = field(default_factory=dict)
    source: str = ""

    @property
    def name(self) -> str:
        return self.run["name"]

    @property
    def seed(self) -> int:
        return int(self.run["seed"])

    @property
    def workdir(self) -> Path:
        return Path(self.run["workdir"] or f"runs/{self.run['name']}")

    def to_dict(self) -> dict:
        return {
            k: copy.deepcopy(getattr(self, k))
            for k in ("run", "data", "retrievers", "rerankers", "arms", "generation", "labels",
                      "features", "train", "eval", "protocol", "policy", "context", "agent")
        }

    def fingerprint(self, *sections: str) -> str:
        """A hash of the named sections (all when none): stages use it to detect changes."""
        import hashlib

        d = self.to_dict()
        keep = {k: d[k] for k in (sections or d.keys())}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def validate(data: dict, source: str = "<dict>") -> Config:
    """Validate a config mapping and return a `Config` with defaults filled in."""
    known = set(SCHEMA) | set(_MAP_SECTIONS) | set(_LIST_SECTIONS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown config section [{unknown[0]}]; allowed: {', '.join(sorted(known))}")
    try:
        sections = {name: _check_section(name, data.get(name, {}), spec) for name, spec in SCHEMA.items()}
        if sections["policy"]["enabled"] is None:
            sections["policy"]["enabled"] = "policy" in data
        # the [context] table's owner validates it: downward, packing imports only the ground
        from ltrr.packing.rag import pack_spec
        from ltrr.packing.strategies import LoopSpec

        pack_spec(sections["context"], sections["generation"]["context_budget"])
        LoopSpec.from_mapping(sections["context"], "[context]")
        for name in _MAP_SECTIONS:
            val = data.get(name, {})
            if not isinstance(val, dict) or not all(isinstance(v, dict) for v in val.values()):
                raise ConfigError(f"config key [{name}] must be a table of tables ([{name}.NAME])")
            for rname, spec in val.items():
                if "type" not in spec:
                    raise ConfigError(f"config key [{name}.{rname}].type is required")
        arms = data.get("arms", [])
        if not isinstance(arms, list) or not arms or not all(isinstance(a, dict) for a in arms):
            raise ConfigError("config key [[arms]] must be a non-empty list of tables")
        names = []
        for i, arm in enumerate(arms):
            if "name" not in arm:
                raise ConfigError(f"config key [arms][{i}].name is required")
            if arm["name"] in names:
                raise ConfigError(f"config key [arms][{i}].name: duplicate arm name {arm['name']!r}")
            names.append(arm["name"])
            ret = arm.get("retriever", "none")
            if ret not in (None, "none", "packed") and ret not in data.get("retrievers", {}):
                raise ConfigError(
                    f"config key [arms][{i}].retriever: unknown retriever {ret!r}; declared: "
                    f"{', '.join(data.get('retrievers', {})) or 'none'}"
                )
            rr = arm.get("reranker", "none")
            if rr not in (None, "none") and rr not in data.get("rerankers", {}):
                raise ConfigError(
                    f"config key [arms][{i}].reranker: unknown reranker {rr!r}; declared: "
                    f"{', '.join(data.get('rerankers', {})) or 'none'}"
                )
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return Config(
        retrievers=copy.deepcopy(data.get("retrievers", {})),
        rerankers=copy.deepcopy(data.get("rerankers", {})),
        arms=copy.deepcopy(arms),
        source=source,
        **sections,
    )


def _merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``: tables merge key by key, anything else (arrays too) replaces."""
    out = copy.deepcopy(base)
    for key, val in over.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def _read_extended(path_or_name: str | Path, chain: tuple[str, ...] = ()) -> tuple[dict, str]:
    data, source = _read(path_or_name)
    parent = data.pop("extends", None)
    if parent is None:
        return data, source
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{source}: config key extends must be a config name or path, got {parent!r}")
    if source in chain:
        raise ConfigError(f"{source}: config extends itself ({' -> '.join((*chain, source))})")
    # a relative path is relative to the extending file; a bare name may be a packaged config
    if not source.startswith("packaged:") and not Path(parent).is_absolute():
        near = Path(source).parent / parent
        if near.exists():
            parent = str(near)
    base, _ = _read_extended(parent, (*chain, source))
    return _merge(base, data), source


def load_config(path_or_name: str | Path) -> Config:
    """Load and validate a TOML/YAML config file, or a packaged config by name (``demo``).

    A config may start with ``extends = "NAME_OR_PATH"``: it is then laid over that config,
    tables merged key by key and arrays (``[[arms]]``) replaced whole. ``demo-full`` is
    ``demo`` with every query labelled.
    """
    data, source = _read_extended(path_or_name)
    return validate(data, source)
