"""The retriever pool: named arms, each a first-stage retriever plus a reranker.

An `Arm` is ``(name, retriever, reranker, k, depth, cost)``. The pool builds each retriever's
index once (``index_dir/<retriever name>/``), runs each retriever once per query batch at the
largest depth its arms need, then applies each arm's reranker and keeps its top ``k``. The
no-retrieval arm (``retriever: "none"``) is a first-class arm: it returns no rows and costs 0 by
default. Any number of arms works; names are free strings used in configs, tables and the CLI.

Configuration (``Pool.from_config``)::

    retrievers = {"bm25": {"type": "bm25", "backend": "bm25s", "k1": 0.9, "b": 0.4},
                  "dense": {"type": "dense", "encoder": "minilm", "index": "flat"}}
    rerankers = {"reg": {"type": "reg", "m": 5, "t": 1},
                 "stoch": {"type": "stoch", "n_samples": 50, "intensity": 2.0}}
    arms = [{"name": "bm25+reg", "retriever": "bm25", "reranker": "reg", "k": 5, "depth": 50},
            {"name": "none", "retriever": "none"}]

An arm's ``reranker`` names an entry of ``rerankers`` or, with default parameters, a registered
reranker type (``none``, ``reg``, ``stoch``, ``cross-encoder``). ``reg`` rerankers read document
embeddings from a dense retriever of the pool, so no document is encoded twice: without an
``encoder`` setting, the arm's own retriever if it is dense, else the pool's first dense
retriever; with ``encoder: NAME``, a dense retriever using that encoder. Only when the pool has
no such retriever are documents encoded (with ``NAME``, default ``minilm``) and cached.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# importing these registers the "bm25" and "dense" retriever types
import ltrr.retrieval.bm25  # noqa: F401
import ltrr.retrieval.dense  # noqa: F401
from ltrr._atomic import write_table_atomic
from ltrr._checks import check_int, check_number
from ltrr._errors import ConfigError, NotBuiltError
from ltrr.data.schema import POOL_COLUMNS
from ltrr.data.trec import file_name_problem
from ltrr.retrieval.arms import (
    ARM_KEYS,
    NO_RETRIEVAL,
    PACKED,
    RETRIEVER_ALIASES,
    Arm,
    default_pool_config,
)
from ltrr.retrieval.base import (
    Retriever,
    corpus_fingerprint,
    passage_text,
    validate_corpus,
    validate_queries,
)
from ltrr.retrieval.base import retrievers as retriever_registry
from ltrr.retrieval.rerank import EmbeddingSource, Reranker
from ltrr.retrieval.rerank import rerankers as reranker_registry

__all__ = ["Arm", "Pool", "default_pool_config", "POOL_COLUMNS", "NO_RETRIEVAL"]


def _reraise(where: str, exc: ConfigError) -> ConfigError:
    return ConfigError(f"{where}: {exc}")


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def _corpus_sha256(corpus: pd.DataFrame) -> str:
    """The `corpus_fingerprint` an index of the (validated) ``corpus`` records as corpus_sha256."""
    texts = [passage_text(t, x) for t, x in zip(corpus["title"], corpus["text"], strict=True)]
    return corpus_fingerprint(corpus["docid"].tolist(), texts)


def _check_case_unique(where: str, name: str, taken, kind: str, files: str) -> None:
    """A `ConfigError` when ``name`` differs from one in ``taken`` only in case (one file on macOS)."""
    other = next((t for t in taken if t != name and t.casefold() == name.casefold()), None)
    if other is not None:
        raise ConfigError(f"{where}: {kind} name {name!r} differs from {other!r} only in case; their {files} "
                          "would be one file on a case-insensitive file system (macOS, Windows): rename one")


class Pool:
    """A set of arms over shared first-stage retrievers.

    Build one with `Pool.from_config`; then `build` (index a corpus) or `load` (open built
    indexes), and `search`.

    Parameters
    ----------
    arms : list of Arm
    retrievers : dict
        Retriever name -> unfitted `Retriever` (the configuration).
    rerankers : dict
        Reranker name -> spec dict with ``type`` and parameters.
    seed : int
        Run seed, given to stochastic rerankers that do not set their own.

    Examples
    --------
    >>> import pandas as pd
    >>> corpus = pd.DataFrame({"docid": ["au", "fr"], "title": ["Australia", "France"],
    ...     "text": ["Its capital is Canberra.", "Its capital is Paris."]})
    >>> pool = Pool.from_config(
    ...     {"bm25": {"type": "bm25"}},
    ...     [{"name": "bm25", "retriever": "bm25", "k": 1}, {"name": "none", "retriever": "none"}])
    >>> import tempfile
    >>> _ = pool.build(corpus, tempfile.mkdtemp(), show_progress=False)
    >>> pool.search(["capital of France"])[["arm", "docid"]].values.tolist()
    [['bm25', 'fr']]
    >>> pool.costs
    {'bm25': 1.0, 'none': 0.0}
    """

    def __init__(
        self,
        arms: Sequence[Arm],
        retrievers: dict[str, Retriever],
        rerankers: dict[str, dict[str, Any]] | None = None,
        *,
        seed: int = 0,
    ):
        self.arms = list(arms)
        self.retrievers = dict(retrievers)
        self.rerankers = dict(rerankers or {})
        self.seed = seed
        # tokens of a packed arm's passages: the run's generator sets it (ltrr.packing.rag)
        self.count_tokens: Any = None

    # ---- configuration -----------------------------------------------------------------
    @classmethod
    def from_run_config(cls, config: Any) -> Pool:
        """The (unindexed) pool a run's `ltrr.config.Config` declares; an error names its file.

        It lives here, not on `Config`, so that the config stays near the ground floor and
        imports no retrieval code.
        """
        try:
            return cls.from_config(config.retrievers, config.arms, config.rerankers, seed=config.seed)
        except ConfigError as exc:
            raise ConfigError(f"{config.source}: {exc}") from None

    @classmethod
    def from_config(
        cls,
        retrievers: dict[str, dict[str, Any]],
        arms: Sequence[dict[str, Any]],
        rerankers: dict[str, dict[str, Any]] | None = None,
        *,
        seed: int = 0,
    ) -> Pool:
        """Validate a pool configuration and build the (unindexed) pool.

        Unknown arm, retriever or reranker names, unknown keys and bad values raise
        `ConfigError` naming the key (``retrievers.dense.index``, ``arms[2].reranker``, ...).
        """
        check_int(seed, "seed", low=0)
        if not isinstance(retrievers, dict):
            raise ConfigError(
                f"retrievers must be a mapping of name -> settings, got {type(retrievers).__name__}"
            )
        rets: dict[str, Retriever] = {}
        for name, spec in retrievers.items():
            if (problem := file_name_problem(str(name))) is not None:  # it names the index folder
                raise ConfigError(f"retrievers.{name}: retriever name {str(name)!r} is not a plain file name: "
                                  f"{problem}; use letters, digits and - + _")
            _check_case_unique(f"retrievers.{name}", str(name), rets, "retriever", "index folders")
            rets[str(name)] = cls._make_retriever(str(name), spec)
        rr_specs: dict[str, dict[str, Any]] = {}
        for name, spec in (rerankers or {}).items():
            rr_specs[str(name)] = cls._check_reranker_spec(str(name), spec)
        if isinstance(arms, (str, bytes, dict)) or not isinstance(arms, Sequence):
            raise ConfigError(f"arms must be a list of arm settings, got {type(arms).__name__}")
        if not arms:
            raise ConfigError("arms is empty; a pool needs at least one arm")
        out: list[Arm] = []
        seen: set[str] = set()
        for i, spec in enumerate(arms):
            arm = cls._make_arm(i, spec, rets, rr_specs)
            if arm.name in seen:
                raise ConfigError(
                    f"arms[{i}].name: duplicate arm name {arm.name!r}; arm names must be unique"
                )
            _check_case_unique(f"arms[{i}].name", arm.name, seen, "arm", "TREC run files")
            seen.add(arm.name)
            out.append(arm)
        pool = cls(out, rets, rr_specs, seed=int(seed))
        for arm in out:
            if arm.is_packed:
                cls._check_packed_arm(arm, out)
        for arm in out:  # fail now, not at search time, on bad reranker settings
            if arm.reranker != "none":
                pool._reranker_spec(arm)
        return pool

    @staticmethod
    def _make_retriever(name: str, spec: Any) -> Retriever:
        where = f"retrievers.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a mapping of settings, got {type(spec).__name__}")
        if "type" not in spec:
            raise ConfigError(
                f"{where}.type is missing; choose one of: {', '.join(retriever_registry.names())}"
            )
        rtype = spec["type"]
        try:
            cls = retriever_registry.get(rtype)
        except ConfigError as exc:
            raise _reraise(f"{where}.type", exc) from None
        aliases = RETRIEVER_ALIASES.get(rtype, {})
        allowed = set(cls._param_names())
        params: dict[str, Any] = {}
        for key, value in spec.items():
            if key == "type":
                continue
            target = str(aliases.get(key, key))
            if target not in allowed:
                raise ConfigError(
                    f"{where}.{key}: unknown key for a {rtype!r} retriever; allowed: "
                    f"{sorted(set(aliases) | allowed)}"
                )
            params[target] = value
        try:
            r = cls.from_params(params)
            r.validate_params()
        except ConfigError as exc:
            raise _reraise(where, exc) from None
        return r

    @staticmethod
    def _check_reranker_spec(name: str, spec: Any) -> dict[str, Any]:
        where = f"rerankers.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a mapping of settings, got {type(spec).__name__}")
        spec = dict(spec)
        rtype = spec.get("type", name if name in reranker_registry else None)
        if rtype is None:
            raise ConfigError(
                f"{where}.type is missing; choose one of: {', '.join(reranker_registry.names())}"
            )
        try:
            cls = reranker_registry.get(rtype)
        except ConfigError as exc:
            raise _reraise(f"{where}.type", exc) from None
        allowed = set(cls._param_names()) - {"embeddings"}
        for key in spec:
            if key != "type" and key not in allowed:
                raise ConfigError(
                    f"{where}.{key}: unknown key for a {rtype!r} reranker; allowed: {sorted(allowed)}"
                )
        spec["type"] = rtype
        try:
            cls(**{k: v for k, v in spec.items() if k != "type"}).validate_params()
        except ConfigError as exc:
            raise _reraise(where, exc) from None
        return spec

    @staticmethod
    def _make_arm(
        i: int, spec: Any, rets: dict[str, Retriever], rr_specs: dict[str, dict[str, Any]]
    ) -> Arm:
        where = f"arms[{i}]"
        if isinstance(spec, Arm):
            spec = spec.to_dict()
        if not isinstance(spec, dict):
            raise ConfigError(
                f"{where} must be a mapping with keys {list(ARM_KEYS)}, got {type(spec).__name__}"
            )
        unknown = [k for k in spec if k not in ARM_KEYS]
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown arm key; allowed: {list(ARM_KEYS)}")
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.name must be a non-empty string, got {name!r}")
        if (problem := file_name_problem(name)) is not None:  # it names the arm's run file, <name>.trec
            raise ConfigError(f"{where}.name: arm name {name!r} is not a plain file name: {problem}; "
                              "use letters, digits and - + _ (e.g. 'bm25+reg')")
        where = f"arms[{i}] ({name!r})"
        if "retriever" not in spec:
            raise ConfigError(f"{where}.retriever is missing; give a retriever name or 'none'")
        retriever = spec["retriever"]
        if "pack" in spec and retriever != PACKED:
            raise ConfigError(f"{where}.pack: only a packed arm (retriever = 'packed') packs")
        if retriever == PACKED:
            return Arm(name=name, retriever=PACKED, cost=Pool._cost(where, spec.get("cost")), pack=spec.get("pack"))
        if retriever not in (None, NO_RETRIEVAL) and retriever not in rets:
            raise ConfigError(
                f"{where}.retriever: unknown retriever {retriever!r}; define it under retrievers "
                f"(defined: {sorted(rets)}) or use 'none'"
            )
        reranker = spec.get("reranker", "none") or "none"
        if reranker not in rr_specs and reranker not in reranker_registry:
            raise ConfigError(
                f"{where}.reranker: unknown reranker {reranker!r}; define it under rerankers "
                f"(defined: {sorted(rr_specs)}) or use one of: {', '.join(reranker_registry.names())}"
            )
        if retriever in (None, NO_RETRIEVAL) and reranker != "none":
            raise ConfigError(f"{where}.reranker: the no-retrieval arm cannot rerank; use 'none'")
        k = check_int(spec.get("k", 5), f"{where}.k", low=1)
        depth = check_int(spec.get("depth", 50), f"{where}.depth", low=1)
        if reranker != "none" and depth < k:
            raise ConfigError(f"{where}.depth ({depth}) must be >= k ({k}) for a reranked arm")
        return Arm(name=name, retriever=retriever, reranker=reranker, k=k, depth=depth,
                   cost=Pool._cost(where, spec.get("cost")))

    @staticmethod
    def _cost(where: str, cost: Any) -> float | None:
        return None if cost is None else check_number(cost, f"{where}.cost", low=0)

    @staticmethod
    def _check_packed_arm(arm: Arm, arms: Sequence[Arm]) -> None:
        from ltrr.packing import PackSpec

        where = f"arm {arm.name!r}.pack"
        if arm.pack is None:
            raise ConfigError(f"{where} is missing: a packed arm packs other arms' passages "
                              "(pack = {arms = [...], budget = N})")
        spec = PackSpec.from_mapping(arm.pack, where)
        if not spec.arms:
            raise ConfigError(f"{where}.arms is missing: the arms whose passages it packs, in order")
        sources = {a.name: a for a in arms}
        for name in spec.arms:
            if name not in sources or sources[name].is_packed or sources[name].is_no_retrieval:
                raise ConfigError(f"{where}.arms: {name!r} is not a retrieving arm of this pool")

    def to_config(self) -> dict[str, Any]:
        """JSON-safe keyword arguments for `from_config` that rebuild this pool."""
        rets = {}
        for name, r in self.retrievers.items():
            rets[name] = {"type": r.name, **_jsonable(r.get_params())}
        return {
            "retrievers": rets,
            "rerankers": copy.deepcopy(self.rerankers),
            "arms": [a.to_dict() for a in self.arms],
            "seed": self.seed,
        }

    # ---- names and costs ---------------------------------------------------------------
    @property
    def arm_names(self) -> list[str]:
        """The arms' names, in pool order."""
        return [a.name for a in self.arms]

    @property
    def costs(self) -> dict[str, float]:
        """Arm name -> relative cost (`Arm.cost`), in pool order."""
        return {a.name: float(a.cost or 0.0) for a in self.arms}

    def arm(self, name: str) -> Arm:
        """The arm called ``name``; an unknown name is a `ConfigError` listing the pool's arms."""
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"unknown arm {name!r}; this pool has: {', '.join(self.arm_names)}")

    def _used_retrievers(self) -> list[str]:
        return list(dict.fromkeys(a.retriever for a in self.arms if a.retriever is not None and not a.is_packed))

    # ---- building and loading ----------------------------------------------------------
    def build(
        self, corpus: pd.DataFrame, index_dir: str | Path, *, show_progress: bool = True
    ) -> Pool:
        """Index ``corpus`` once per retriever into ``index_dir/<name>/``; returns ``self``.

        An existing index built with the same settings over the same corpus is reused; any other
        is rebuilt and replaced atomically.
        """
        corpus = validate_corpus(corpus)
        index_dir = Path(index_dir)
        index_dir.mkdir(parents=True, exist_ok=True)
        fingerprint = _corpus_sha256(corpus)
        built: dict[str, Retriever] = {}
        for name in self._used_retrievers():
            spec = self.retrievers[name]
            path = index_dir / name
            if self._matches(path, spec, fingerprint):
                built[name] = Retriever.load(path)
                continue
            r = type(spec).from_params(spec.get_params())
            r.index(corpus, show_progress=show_progress)
            r.save(path)
            built[name] = r
        self.retrievers_ = built
        self._sources: dict[Any, EmbeddingSource] = {}
        self._arm_rerankers: dict[str, Reranker] = {}
        return self

    @staticmethod
    def _matches(path: Path, spec: Retriever, fingerprint: str | None) -> bool:
        try:
            meta = Retriever.read_meta(path)
        except NotBuiltError:
            return False
        ident = _jsonable(spec.identity())
        if any(_jsonable(meta.get(k)) != v for k, v in ident.items()):
            return False
        return fingerprint is None or meta.get("corpus_sha256") == fingerprint

    def load(self, index_dir: str | Path, *, corpus: pd.DataFrame | None = None,
             corpus_sha256: str | None = None) -> Pool:
        """Open the indexes built by `build`; `NotBuiltError` if one is missing or stale.

        With ``corpus``, or its digest ``corpus_sha256`` (`index_corpus`, as a saved router
        records it), an index built over other documents is stale too (two datasets, or an
        edited one, whose indexes share a folder).
        """
        index_dir = Path(index_dir)
        fingerprint = corpus_sha256 if corpus is None else _corpus_sha256(validate_corpus(corpus))
        loaded: dict[str, Retriever] = {}
        for name in self._used_retrievers():
            path = index_dir / name
            meta = Retriever.read_meta(path)  # NotBuiltError when missing
            if fingerprint is not None and meta.get("corpus_sha256") != fingerprint:
                raise NotBuiltError(f"index {str(path)!r} was built over other documents than the dataset's; "
                                    "rebuild it with `ltrr index CONFIG`")
            if not self._matches(path, self.retrievers[name], None):
                want = _jsonable(self.retrievers[name].identity())
                diff = sorted(k for k, v in want.items() if _jsonable(meta.get(k)) != v)
                raise NotBuiltError(
                    f"index {str(path)!r} was built with other settings ({', '.join(diff)} differ "
                    "from the configuration); rebuild it with `ltrr index CONFIG`"
                )
            loaded[name] = Retriever.load(path)
        self.retrievers_ = loaded
        self._sources = {}
        self._arm_rerankers = {}
        return self

    def index_corpus(self, index_dir: str | Path) -> str | None:
        """The corpus digest the indexes in ``index_dir`` were built over (None: none is built)."""
        for name in self._used_retrievers():
            try:
                digest = Retriever.read_meta(Path(index_dir) / name).get("corpus_sha256")
            except NotBuiltError:
                continue
            if digest:
                return str(digest)
        return None

    def _check_built(self) -> None:
        if not hasattr(self, "retrievers_"):
            raise NotBuiltError(
                "the pool has no indexes: run `ltrr index CONFIG` (or call pool.build(corpus, "
                "index_dir) / pool.load(index_dir) in Python)"
            )

    # ---- rerankers ---------------------------------------------------------------------
    def _reranker_spec(self, arm: Arm) -> dict[str, Any]:
        if arm.reranker in self.rerankers:
            spec = dict(self.rerankers[arm.reranker])
        else:
            spec = {"type": arm.reranker}
        if spec["type"] == "stoch":
            spec.setdefault("seed", self.seed)
        cls = reranker_registry.get(spec["type"])
        try:
            cls(**{k: v for k, v in spec.items() if k != "type"}).validate_params()
        except ConfigError as exc:
            raise ConfigError(f"arm {arm.name!r} reranker {arm.reranker!r}: {exc}") from None
        return spec

    def _embedding_source(self, arm: Arm, encoder: str | None) -> EmbeddingSource:
        dense: list[tuple[str | None, Retriever | None]] = [
            (n, r)
            for n, r in self.retrievers_.items()
            if type(r).embeds_documents and (encoder is None or getattr(r, "encoder", None) == encoder)
        ]
        own = [(n, r) for n, r in dense if n == arm.retriever]
        name, retriever = (own or dense or [(None, None)])[0]
        key = name if name is not None else ("encoder", encoder or "minilm")
        if key not in self._sources:
            self._sources[key] = EmbeddingSource(retriever, encoder=encoder or "minilm")
        return self._sources[key]

    def embedding_source(self, encoder: str | None = None) -> EmbeddingSource:
        """Document embeddings shared with the pool's ``reg`` rerankers.

        The stored vectors of the pool's first dense retriever (of ``encoder`` when given), so
        feature extraction encodes no document twice; without a dense retriever, the encoder.
        """
        self._check_built()
        return self._embedding_source(Arm(name="_embeddings", retriever=None), encoder)

    def reranker_for(self, arm_name: str) -> Reranker:
        """The reranker instance an arm uses (created on first use, then kept)."""
        self._check_built()
        arm = self.arm(arm_name)
        if arm.name not in self._arm_rerankers:
            spec = self._reranker_spec(arm)
            params = {k: v for k, v in spec.items() if k != "type"}
            cls = reranker_registry.get(spec["type"])
            if spec["type"] == "reg":
                params["embeddings"] = self._embedding_source(arm, params.get("encoder"))
            self._arm_rerankers[arm.name] = cls(**params)
        return self._arm_rerankers[arm.name]

    # ---- searching ---------------------------------------------------------------------
    def search(
        self, queries: Any, arms: Sequence[str] | None = None, *, k: int | None = None,
        show_progress: bool = False
    ) -> pd.DataFrame:
        """Passages of every arm for every query: ``DataFrame[qid, arm, rank, docid, score, text]``.

        Rows are sorted by query input order, then arm order, then rank. The no-retrieval arm
        contributes no rows. ``arms`` selects a subset by name; ``k`` overrides every arm's
        passage count (context packing reads deeper than an arm's own ``k``).
        """
        if k is not None:
            k = check_int(k, "search k", low=1)
        self._check_built()
        q = validate_queries(queries)
        selected = (
            self.arms
            if arms is None
            else [self.arm(a) for a in ([arms] if isinstance(arms, str) else arms)]
        )
        depth: dict[str, int] = {}
        for a in selected:
            if a.retriever is not None and not a.is_packed:
                depth[a.retriever] = max(depth.get(a.retriever, 0), a.first_stage_depth, k or 0)
        from tqdm.auto import tqdm

        first: dict[str, pd.DataFrame] = {}
        for name in tqdm(list(depth), disable=not show_progress, desc="retrievers"):
            first[name] = self.retrievers_[name].search(q, depth[name], show_progress=show_progress)
        frames = []
        for a in tqdm(selected, disable=not show_progress, desc="arms"):
            if a.retriever is None:
                continue
            if a.is_packed:
                frames.append(self._packed_rows(q, a))
                continue
            fs = first[a.retriever]
            cut = fs[fs["rank"] <= max(a.first_stage_depth, k or 0)]
            res = self.reranker_for(a.name).rerank(q, cut, k or a.k)
            frames.append(res.assign(arm=a.name))
        if not frames or sum(len(f) for f in frames) == 0:
            return pd.DataFrame(
                {
                    "qid": pd.Series([], dtype=object),
                    "arm": pd.Series([], dtype=object),
                    "rank": pd.Series([], dtype=np.int64),
                    "docid": pd.Series([], dtype=object),
                    "score": pd.Series([], dtype=np.float64),
                    "text": pd.Series([], dtype=object),
                }
            )
        out = pd.concat(frames, ignore_index=True)
        qpos = {qid: i for i, qid in enumerate(q["qid"])}
        apos = {a.name: i for i, a in enumerate(selected)}
        order = np.lexsort(
            (
                out["rank"].to_numpy(),
                out["arm"].map(apos).to_numpy(),
                out["qid"].map(qpos).to_numpy(),
            )
        )
        return out.iloc[order][POOL_COLUMNS].reset_index(drop=True)

    def _packed_rows(self, queries: pd.DataFrame, arm: Arm) -> pd.DataFrame:
        from ltrr.packing import PackSpec, pack_results

        count = self.count_tokens
        if count is None:  # the packaged default generator's tokenizer
            from ltrr.generation import make_generator

            count = self.count_tokens = make_generator({}).count_tokens
        spec = PackSpec.from_mapping(arm.pack or {}, f"arm {arm.name!r}.pack")
        return pack_results(self, queries, arm.name, spec, count)

    def search_to_parquet(
        self,
        queries: Any,
        path: str | Path,
        arms: Sequence[str] | None = None,
        *,
        show_progress: bool = False,
    ) -> Path:
        """`search` and write the table to Parquet atomically; returns the path."""
        return write_table_atomic(self.search(queries, arms, show_progress=show_progress), path)

    def __repr__(self) -> str:
        return f"Pool(arms={self.arm_names!r}, retrievers={sorted(self.retrievers)!r})"
