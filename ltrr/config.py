"""Run configuration: TOML or YAML files, validated on load.

A config names the dataset, the retrievers, rerankers and arms of the pool, and the settings of
the later stages. Each settings table is a frozen section (`ltrr._sections.Section`) owned by the
package it configures: ``[agent]`` by `ltrr.agent.section`, ``[policy]`` by
`ltrr.policy.section`, and so on (`section_classes`); ``[run]``, ``[labels]`` and ``[features]``,
which no subpackage owns, and ``[train]`` are declared here. This module only assembles and validates them. An
unknown key, a wrong type or a missing required key raises `ConfigError` naming the key
(``[arms][2].k``). Relative paths are resolved against the current working directory.

``load_config("demo")`` loads the default config shipped inside the package.

This module sits near the ground floor of the import layers (see ``[importlinter]`` in
setup.cfg): it imports only the ground floor, the section modules (``ltrr.<package>.section``,
which import nothing of ltrr but `ltrr._errors` and `ltrr._sections`; those of the packages
above are imported on first use) and, to validate the ``[context]`` table, the specs that
table's owner keeps in `ltrr.packing` (`PackSpec`, `LoopSpec`), which import nothing above the
ground. Objects built from a config (the pool: `ltrr.retrieval.Pool.from_run_config`) are
built by the packages above, never here.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ltrr._errors import ConfigError
from ltrr._sections import REQUIRED, Section, section, setting, settings_of

if TYPE_CHECKING:
    from ltrr.agent.section import AgentSection
    from ltrr.data.section import DataSection
    from ltrr.eval.section import EvalSection, ProtocolSection
    from ltrr.generation.section import GenerationSection
    from ltrr.packing.section import ContextSection
    from ltrr.policy.section import PolicySection

__all__ = ["Config", "load_config", "packaged_configs", "SCHEMA", "RUN_GENERATION_KEYS", "backend_settings",  # noqa: F822
           "validate", "section_classes", "RunSection", "LabelsSection", "FeaturesSection", "TrainSection"]


@section("run")
class RunSection(Section):
    """The ``[run]`` table: the run's name, its seed and its folder."""

    name: str = setting(str, help="the run's name (its folder is runs/<name> unless workdir says otherwise)")
    # scikit-learn's random_state takes 0 to 2**32 - 1 (numpy's RandomState), numpy's
    # default_rng([seed, n]) refuses a negative seed
    seed: int = setting(int, 13, help="the seed of every partition, fold and estimator (their random_state)",
                        low=0, high=2**32 - 1)
    workdir: str = setting(str, None, help="the run's folder (default: runs/<name>)")


@section("labels")
class LabelsSection(Section):
    """The ``[labels]`` table: how `ltrr.labels` scores each arm's answer."""

    metric: str = setting(str, "f1", help="the answer metric of the labels (a registry metric)")
    extra_metrics: list = setting(list, [], help="more answer metrics, kept beside the label")
    noise_floor: bool = setting(bool, True, help="measure the noise floor of the labels")
    noise_floor_arm: str = setting(str, "", help="the arm whose answers measure the noise floor")
    tolerate_failures: bool = setting(bool, False, help="keep going past a failed generation: its query is left unlabelled "
                                   "(NaN gains) and the next run generates it again, instead of stopping")
    judge: dict = setting(dict, {}, help="settings of an LLM judge metric")
    likelihood: bool = setting(bool, False, help="also the generator's log-probability of the gold answer "
                                                 "(teacher forcing), per item")
    replicate_template: str = setting(str, "", help="a second, independent replicate of the labels under an "
                                                    "equivalent template, for the noise-corrected headroom")
    replicate: str = setting(str, "test", help='where the replicate is labelled: the protocol\'s "test" part or '
                                               '"all" queries', choices=("test", "all"))


@section("features")
class FeaturesSection(Section):
    """The ``[features]`` table."""

    set: str = setting(str, "paper", help="a features/*.toml name or path (it sets pca_dim etc.)")


@section("train")
class TrainSection(Section):
    """The ``[train]`` table: which ranker `ltrr train` fits and the eval stage compares.

    Declared here, not in `ltrr.rankers`: importing that package imports every ranker (scikit-learn
    and SciPy, about 1.4 s), which every `load_config` would then pay.
    """

    ranker: str = setting(str, "lambdamart-listwise", help="the ranker `ltrr train` fits by default")
    params: dict = setting(dict, {}, help="ranker name -> hyper-parameters")
    rankers: list = setting(list, [], help="rankers compared by the eval stage (default: the non-transformer ones)",
                            items=str)


_sections_cache: dict[str, type[Section]] = {}


def section_classes() -> dict[str, type[Section]]:
    """The section class of each config table, in the order the tables are validated.

    ``[run]``, ``[labels]`` and ``[features]``, which no subpackage owns, and ``[train]`` (see
    `TrainSection`) are declared here; every other table by the package it configures, in its
    ``section`` module.

    Examples
    --------
    >>> section_classes()["agent"].__name__
    'AgentSection'
    """
    if not _sections_cache:
        # Imported here, not at the top: eval, policy and agent sit above the config and their
        # packages import this module, so a top-level import would be a cycle. Their section modules import nothing of ltrr but the ground floor (setup.cfg's contracts).
        from ltrr.agent.section import AgentSection
        from ltrr.data.section import DataSection
        from ltrr.eval.section import EvalSection, ProtocolSection
        from ltrr.generation.section import GenerationSection
        from ltrr.packing.section import ContextSection
        from ltrr.policy.section import PolicySection

        _sections_cache.update(
            run=RunSection, data=DataSection, generation=GenerationSection, context=ContextSection,
            agent=AgentSection, labels=LabelsSection, features=FeaturesSection, train=TrainSection,
            eval=EvalSection, protocol=ProtocolSection, policy=PolicySection,
        )
    return dict(_sections_cache)


def _schema() -> dict[str, dict[str, tuple[tuple[type, ...], Any]]]:
    # section -> key -> (allowed types, default), a default of ConfigError meaning "required":
    # the shape this module exported before the sections existed, for code that reads it
    return {name: {f.name: ((f.metadata["type"],),
                            ConfigError if f.metadata["default"] is REQUIRED else copy.deepcopy(f.metadata["default"]))
                   for f in settings_of(cls)}
            for name, cls in section_classes().items()}


def __getattr__(name: str) -> Any:
    if name == "SCHEMA":  # computed on use: it needs the sections of the packages above (see above)
        return _schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MAP_SECTIONS = ("retrievers", "rerankers")
_LIST_SECTIONS = ("arms",)

# the [generation] keys the run reads itself (prompts, cache, packing); the others configure the
# generator backend (`ltrr.generation.make_generator`)
RUN_GENERATION_KEYS = ("template", "max_new_tokens", "cache", "use_cache", "chunk_size", "max_prompt_tokens",
                       "prebuilt", "context_budget")


def backend_settings(generation: Mapping[str, Any]) -> dict:
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
        raise ConfigError(f"config file {p} " + ("is a directory, not a file" if p.is_dir() else "does not exist"))
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    return _parse(text, p.suffix.lower(), str(p)), str(p.resolve())


#: the message of a config whose arrays or tables nest deeper than the parsers recurse
_TOO_DEEP = "nested too deeply to read (arrays or tables inside each other hundreds of levels deep)"


def _parse(text: str, suffix: str, where: str) -> dict:
    if suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: invalid TOML ({exc})") from None
        except RecursionError:
            raise ConfigError(f"{where}: {_TOO_DEEP}") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: invalid YAML ({str(exc).splitlines()[0]})") from None
        except RecursionError:
            raise ConfigError(f"{where}: {_TOO_DEEP}") from None
    else:
        raise ConfigError(f"{where}: config files are .toml, .yaml or .yml, not {suffix or 'no suffix'}")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level of a config must be a table/mapping")
    return data


@dataclass(frozen=True)
class Config:
    """A validated run configuration: one frozen section per table (see `section_classes`).

    Each table is a `ltrr._sections.Section` owned by the package it configures (``agent`` is
    an `ltrr.agent.section.AgentSection`, ...), read by attribute (``cfg.agent.k``) or, as a
    read-only mapping, by key (``cfg.agent["k"]``). ``retrievers``, ``rerankers`` and ``arms``
    stay plain tables: the pool validates them. A config is not changed in place; build a new one
    with `dataclasses.replace` (a section too), or edit `to_dict` and `validate` it again.

    Examples
    --------
    >>> cfg = load_config("demo")
    >>> cfg.agent.k == cfg.agent["k"]
    True
    """

    run: RunSection
    data: DataSection
    retrievers: dict
    rerankers: dict
    arms: list
    generation: GenerationSection
    labels: LabelsSection
    features: FeaturesSection
    train: TrainSection
    eval: EvalSection
    protocol: ProtocolSection
    policy: PolicySection
    context: ContextSection
    agent: AgentSection
    source: str = ""

    @property
    def name(self) -> str:
        """The run's name, ``[run] name``."""
        return self.run.name

    @property
    def seed(self) -> int:
        """The run's seed, ``[run] seed``, as an int."""
        return int(self.run.seed)

    @property
    def workdir(self) -> Path:
        """The run's folder: ``[run] workdir``, or ``runs/<name>`` when it is not set."""
        return Path(self.run.workdir or f"runs/{self.run.name}")

    def to_dict(self) -> dict:
        """The config as plain, validated tables (a deep copy): what `fingerprint` hashes."""
        out = {}
        for k in ("run", "data", "retrievers", "rerankers", "arms", "generation", "labels",
                  "features", "train", "eval", "protocol", "policy", "context", "agent"):
            val = getattr(self, k)
            out[k] = val.to_dict() if isinstance(val, Section) else copy.deepcopy(val)
        return out

    def fingerprint(self, *sections: str) -> str:
        """A hash of the named sections (all when none): stages use it to detect changes."""
        import hashlib

        d = self.to_dict()
        keep = {k: d[k] for k in (sections or d.keys())}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def validate(data: dict, source: str = "<dict>") -> Config:
    """Validate a config mapping and return a `Config` with defaults filled in."""
    classes = section_classes()
    known = set(classes) | set(_MAP_SECTIONS) | set(_LIST_SECTIONS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown config section [{unknown[0]}]; allowed: {', '.join(sorted(known))}")
    try:
        sections = {name: cls.from_mapping(data.get(name, {}), name) for name, cls in classes.items()}
        if sections["policy"].enabled is None:
            sections["policy"] = dataclasses.replace(sections["policy"], enabled="policy" in data)
        # the [context] table's owner validates it: downward, packing imports only the ground
        from ltrr.packing.rag import pack_spec
        from ltrr.packing.strategies import LoopSpec

        pack_spec(sections["context"], sections["generation"].context_budget)
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
    try:
        data, source = _read_extended(path_or_name)
        return validate(data, source)
    except RecursionError:  # tables nested just within the parser's depth, too deep to merge or copy
        raise ConfigError(f"{path_or_name}: {_TOO_DEEP}") from None
