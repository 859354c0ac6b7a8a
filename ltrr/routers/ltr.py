"""LTRRouter: the pool, the feature pipeline and a learning-to-rank model, end to end.

Training: raw features of the training queries (`ltrr.features.extract_raw`) are turned into a
feature matrix by a `FeaturePipeline` fit on those queries only, and a ranker from
`ltrr.rankers` learns to score each (query, arm) by its normalised utility gain. Routing a new
question runs the pool, extracts the same features and ranks the arms by predicted gain.

Saved as one folder: ``router.json`` (pool config, ranker name, feature set, versions), the
feature pipeline (``features/``) and the ranker in its library's own format (``ranker/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.exceptions import NotFittedError

from ltrr._atomic import manifest_last, plain_json, sha256_file, write_json_atomic
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._version import __version__
from ltrr.rankers.tags import RankerTags, ranker_tags
from ltrr.routers.reference import score_frame
from ltrr.routers.trainfree import Router, routers

__all__ = ["LTRRouter", "ROUTER_FORMAT", "GENERATOR_FILE", "resolve_index_dir"]

ROUTER_FORMAT = 1
#: beside router.json: the generator (backend settings and template) whose answers the router's
#: labels measured, which `LTRRouter.answering_generator` and the server answer with
GENERATOR_FILE = "generator.json"


@routers.register("ltrr")
class LTRRouter(Router):
    """Learning-to-rank router over any pool of arms.

    Parameters
    ----------
    ranker : str
        Registry name of the ranker (`ltrr.rankers.rankers`), e.g. ``"lambdamart-listwise"``.
    ranker_params : dict, optional
        Hyper-parameters of the ranker.
    features : str
        Feature set name or path (``features/*.toml``; ``"paper"`` by default).
    label : str
        Label column the ranker learns (``"norm_gain"``: per-query min-max normalised gain).
    pool_config : dict, optional
        ``{"retrievers", "rerankers", "arms", "seed"}``: needed only by `route`/`answer`.
    index_dir : str, optional
        Where the pool's indexes are (``ltrr index``); needed only by `route`/`answer`.
    random_state : int
        Seed of the ranker and the feature pipeline.

    Attributes
    ----------
    labelled_with_ : dict or None
        Of a loaded router: ``{"generation": backend settings, "template": name}``, the generator
        whose answers its labels measured (``ltrr train`` records it with `save`); None for a
        router saved without it.

    Examples
    --------
    >>> router = LTRRouter(ranker="xgboost-pairwise", random_state=0)  # doctest: +SKIP
    >>> router.fit(raw_train, labels_train).route_scores(raw_test)  # doctest: +SKIP
    """

    name = "ltrr"

    def __init__(
        self,
        *,
        ranker: str = "lambdamart-listwise",
        ranker_params: dict | None = None,
        features: str = "paper",
        label: str = "norm_gain",
        pool_config: dict | None = None,
        index_dir: str | None = None,
        random_state: int = 0,
    ):
        self.ranker = ranker
        self.ranker_params = ranker_params
        self.features = features
        self.label = label
        self.pool_config = pool_config
        self.index_dir = index_dir
        self.random_state = random_state

    # ---- data assembly -------------------------------------------------------------------
    @property
    def _tags(self) -> RankerTags:
        return ranker_tags(self.ranker)

    @property
    def _impute(self) -> bool:
        """Whether the feature pipeline imputes NaN: not for a ranker that learns its own fill
        value, except the cross-encoders, which have always been given imputed features (a
        table with NaN would change their scores)."""
        return not self._tags.learns_missing or self._tags.needs_text

    def _make_ranker(self):
        from ltrr.rankers import rankers

        klass = rankers.get(self.ranker)
        params = dict(self.ranker_params or {})
        if "random_state" in klass().get_params():
            params.setdefault("random_state", self.random_state)
        return klass(**params)

    def _matrix(self, raw, texts: pd.DataFrame | None):
        X = self.pipeline_.transform(raw)
        if not self._tags.needs_text:
            return X
        from ltrr.rankers.transformer import ARM_COLUMN, QUERY_COLUMN

        if texts is None:
            raise DataError(f"ranker {self.ranker!r} reads text: pass texts (qid, arm, query_text, arm_text)")
        frame = pd.DataFrame(X, columns=list(self.pipeline_.get_feature_names_out()))
        key = raw.table[["qid", "arm"]].astype(str)
        t = texts.astype({"qid": str, "arm": str}).set_index(["qid", "arm"])
        idx = pd.MultiIndex.from_frame(key)
        frame.insert(0, QUERY_COLUMN, t["query_text"].reindex(idx).fillna("").to_numpy())
        frame.insert(1, ARM_COLUMN, t["arm_text"].reindex(idx).fillna("").to_numpy())
        return frame

    # ---- fit / route ---------------------------------------------------------------------
    def fit(self, raw: Any = None, labels: pd.DataFrame | None = None, *, texts: pd.DataFrame | None = None) -> LTRRouter:
        """Fit the feature pipeline and the ranker on training queries.

        Parameters
        ----------
        raw : RawFeatures
            Raw features of the training queries.
        labels : DataFrame
            Long labels (qid, arm, ``label`` column, failed); a query with a failed item is left
            out, and a (qid, arm) pair of the raw features that has no label row is a
            `DataError` (a missing row is not a failure the labels recorded).
        texts : DataFrame, optional
            ``qid, arm, query_text, arm_text`` for the transformer rankers.
        """
        from ltrr.features import FeaturePipeline

        if raw is None or labels is None:
            raise DataError("LTRRouter.fit needs raw features and labels")
        if self.label not in labels.columns:
            raise DataError(f"labels table has no column {self.label!r}")
        lab = labels.copy()
        lab["qid"] = lab["qid"].astype(str)
        lab["arm"] = lab["arm"].astype(str)
        if "failed" in lab.columns:
            # a query with a failed generation has no gains: it is left out, as in labelling
            lab = lab[~lab["qid"].isin(set(lab.loc[lab["failed"].astype(bool), "qid"]))]
        if lab[self.label].isna().any():
            raise DataError(f"labels column {self.label!r} has NaN for queries that did not fail; relabel them")
        keep = sorted(set(lab["qid"]) & set(map(str, raw.qids)))
        if not keep:
            raise DataError("LTRRouter.fit: no query has both raw features and complete labels")
        raw = raw.subset(keep)
        y_map = lab.set_index(["qid", "arm"])[self.label]
        idx = pd.MultiIndex.from_frame(raw.table[["qid", "arm"]].astype(str))
        y = y_map.reindex(idx).to_numpy(dtype=float)
        if np.isnan(y).any():
            missing = raw.table.loc[np.isnan(y), ["qid", "arm"]].iloc[0].tolist()
            raise DataError(f"labels lack the (qid, arm) pair {missing} that the raw features have")
        self.pipeline_ = FeaturePipeline(self.features, impute=self._impute,
                                         random_state=self.random_state).fit(raw)
        X = self._matrix(raw, texts)
        self.ranker_ = self._make_ranker().fit(X, y, qid=raw.table["qid"].astype(str).to_numpy())
        self.arms_ = list(raw.arms)
        self.no_retrieval_ = list(raw.no_retrieval)
        self.n_train_queries_ = len(keep)
        # new labels: the generator a loaded router's labels were measured with is not theirs
        # (`ltrr train` records the run's at save)
        self.labelled_with_: dict | None = None
        return self

    def route_scores(self, raw: Any, *, texts: pd.DataFrame | None = None) -> pd.DataFrame:
        if not hasattr(self, "ranker_"):
            raise NotFittedError("LTRRouter is not fitted; call fit(raw, labels) or LTRRouter.load(folder)")
        unknown = sorted(set(raw.arms) ^ set(self.arms_))
        if unknown:
            raise DataError(f"the router was trained on arms {self.arms_}, not {list(raw.arms)}")
        scores = np.asarray(self.ranker_.predict(self._matrix(raw, texts)), dtype=float)
        return score_frame(raw.table, scores)

    def route_query(self, qraw: Any) -> list[tuple[str, float]]:
        """Rank the arms of one query from its `ltrr.features.QueryRaw`: ``[(arm, score), ...]``,
        best first, ties to the earlier arm (as `ranking`). The per-query path: no pandas."""
        if not hasattr(self, "ranker_"):
            raise NotFittedError("LTRRouter is not fitted; call fit(raw, labels) or LTRRouter.load(folder)")
        if self._tags.needs_text:
            raise DataError(f"ranker {self.ranker!r} reads passage text; use route(question) or route_scores(raw, texts=...)")
        if list(qraw.arms) != self.arms_:
            raise DataError(f"the router was trained on arms {self.arms_}, not {list(qraw.arms)}")
        scores = np.asarray(self.ranker_.predict(self.pipeline_.transform_query(qraw)), dtype=np.float64)
        key = np.where(np.isnan(scores), -np.inf, scores)
        order = np.lexsort((np.arange(len(key)), -key))
        return [(self.arms_[i], float(scores[i])) for i in order]

    def feature_importance(self) -> dict[str, float]:
        """Total-gain importances of the GBDT rankers, by feature name; empty for other rankers."""
        booster = getattr(self.ranker_, "booster_", None)
        names = [str(n) for n in self.pipeline_.get_feature_names_out()]
        if booster is None:
            return {}
        if hasattr(booster, "feature_importance"):  # LightGBM
            values = booster.feature_importance(importance_type="gain")
            return {n: float(v) for n, v in zip(names, values, strict=True)}
        if hasattr(booster, "get_score"):  # XGBoost: keys f0..fN (or the feature names)
            score = booster.get_score(importance_type="total_gain")
            return {n: float(score.get(f"f{i}", score.get(n, 0.0))) for i, n in enumerate(names)}
        return {}

    # ---- end-to-end use ------------------------------------------------------------------
    @property
    def has_query_path(self) -> bool:
        """Whether `route_query` ranks one question from its `QueryRaw` (not for text rankers)."""
        return not self._tags.needs_text

    def routing_inputs(self, queries: pd.DataFrame, results: pd.DataFrame) -> dict:
        """Extra `route_scores` inputs from the queries' pool search: the passages' text
        (``texts``) for a ranker that reads it, else nothing."""
        if not self._tags.needs_text:
            return {}
        texts = results.groupby(["qid", "arm"])["text"].apply(lambda s: "\n".join(s)).rename("arm_text").reset_index()
        texts["query_text"] = texts["qid"].map(queries.set_index("qid")["question"])
        return {"texts": texts}

    def make_pool(self):
        """The router's pool, built from ``pool_config`` with the indexes of ``index_dir`` loaded."""
        if not self.pool_config or not self.index_dir:
            raise NotBuiltError("this router has no pool config/index dir; train it with `ltrr train`")
        # the indexes must be of the corpus the router was trained over (a folder of the same
        # name may hold another's), when the router recorded it
        return self._unloaded_pool().load(self._index_folder(),
                                          corpus_sha256=getattr(self, "index_corpus_sha256_", None))

    def _unloaded_pool(self):
        from ltrr.retrieval import Pool

        pc = self.pool_config
        if not pc:
            raise NotBuiltError("this router has no pool config; train it with `ltrr train`")
        return Pool.from_config(pc["retrievers"], pc["arms"], pc.get("rerankers"), seed=pc.get("seed", 0))

    def _index_folder(self) -> Path:
        # a relative index_dir is relative to the folder `ltrr train` ran in: found from here or
        # from the folder this router was loaded from (`resolve_index_dir`)
        if not self.index_dir:
            raise NotBuiltError("this router has no index dir; train it with `ltrr train`")
        return resolve_index_dir(self.index_dir, getattr(self, "loaded_from_", None))

    def route(self, question: str) -> pd.DataFrame:
        """Rank the arms for one question: DataFrame[arm, score, rank], best first.

        A one-off: it loads the pool each call. To route many questions, build one
        `ltrr.routers.RoutedPipeline` and call its ``route``.
        """
        from ltrr.routers.pipeline import RoutedPipeline

        return RoutedPipeline.from_router(self).route(question).ranking

    def answer(self, question: str, generator=None, *, template: str | None = None, packing=None) -> dict:
        """Route, then answer with the top arm's passages (closed-book for no retrieval).

        ``generator`` and ``template`` default to the ones the router's labels were measured with
        (`answering_generator`), so an answer reads passages as the generator the router learned
        for. With ``packing`` (a `ltrr.packing.PackSpec`), the answer reads the passages of the
        ``top_m`` best routed arms packed into ``packing.budget`` tokens instead; ``arm`` then
        names the arms read, and ``context_tokens`` the packed context's length. A one-off over
        `ltrr.routers.RoutedPipeline`, as `route`.
        """
        from ltrr.routers.pipeline import RoutedPipeline

        gen = generator or self.answering_generator()
        return RoutedPipeline.from_router(self, packing=packing, generator=gen,
                                          template=template or self.answering_template()).answer(question)

    def answering_template(self) -> str:
        """The prompt template of the router's labels (``short_answer`` when none was recorded)."""
        from ltrr.routers.pipeline import ANSWER_TEMPLATE

        return str((getattr(self, "labelled_with_", None) or {}).get("template") or ANSWER_TEMPLATE)

    def answering_generator(self, cache: str | Path | None = None, *, allow_remote: bool = False):
        """The generator the router's labels were measured with, behind the generation cache.

        The backend settings ``ltrr train`` recorded (`labelled_with_`); the packaged default
        generator for a router saved without them. Every call is cached in ``cache`` (default
        `ltrr.data.io.default_generation_cache`), as a run's are.

        A router folder may come from someone else, and its ``generator.json`` is theirs: a
        remote backend (the ``remote`` tag, e.g. ``openai``) read from it would send every
        question, its passages and the key of the environment variable it names to the endpoint
        it names. So a remote backend recorded in a *loaded* folder is a `ConfigError` unless
        ``allow_remote`` is true; give the generator yourself instead (``ltrr route --config``,
        ``ltrr serve --config``). Local backends (``llama_cpp``, ``transformers``) run here.
        """
        from ltrr.data.io import default_generation_cache
        from ltrr.generation import check_generator_options
        from ltrr.generation.cache import CachedGenerator, GenerationCache

        settings = dict((getattr(self, "labelled_with_", None) or {}).get("generation") or {})
        cls, options = check_generator_options(settings)
        saved_in = getattr(self, "loaded_from_", None)
        if cls.remote and saved_in is not None and not allow_remote:
            key = options.get("api_key_env", "OPENAI_API_KEY")
            raise ConfigError(
                f"{Path(saved_in) / GENERATOR_FILE}: the router's recorded generator is {cls.backend} at "
                f"{options.get('base_url', 'its default endpoint')!r} (key from ${key}); a saved folder does not "
                "choose where questions, passages and a key are sent: give the generator yourself "
                "(`--config CONFIG` with that [generation]), or allow_remote=True after checking it")
        return CachedGenerator(cls(**options), GenerationCache(cache or default_generation_cache()))  # as make_generator

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path, *, labelled_with: dict | None = None) -> Path:
        """Save pipeline, ranker and config into folder ``path`` (router.json written last).

        ``labelled_with`` (``{"generation": backend settings, "template": name}``; default the
        loaded router's `labelled_with_`) is written to ``generator.json``; without one, a stale
        file from an earlier save is removed."""
        if not hasattr(self, "ranker_"):
            raise NotFittedError("LTRRouter is not fitted")
        from ltrr.features.pipeline import load_spec

        labelled_with = labelled_with if labelled_with is not None else getattr(self, "labelled_with_", None)
        if labelled_with is not None:
            labelled_with = _generator_record(labelled_with, "labelled_with")
        meta = {
            "format": ROUTER_FORMAT,
            "ltrr_version": __version__,
            "params": plain_json(self.get_params(), "LTRRouter params"),  # before any file is touched
            "feature_set": load_spec(self.features).to_dict(),
            "feature_names": [str(n) for n in self.pipeline_.get_feature_names_out()],
            "arms": self.arms_,
            "no_retrieval": self.no_retrieval_,
            "n_train_queries": self.n_train_queries_,
            "index_corpus_sha256": self._index_corpus(),
        }
        with manifest_last(path, "router.json") as path:
            self.pipeline_.save(path / "features")
            self.ranker_.save(path / "ranker")
            if labelled_with is not None:
                write_json_atomic(path / GENERATOR_FILE, labelled_with, indent=2, sort_keys=True)
                self.labelled_with_ = labelled_with
            else:
                (path / GENERATOR_FILE).unlink(missing_ok=True)
            meta["parts"] = _part_digests(path)  # ties router.json to the parts it was saved with
            write_json_atomic(path / "router.json", meta, indent=2, sort_keys=True)
        return path

    def _index_corpus(self) -> str | None:
        """The digest of the corpus the router's indexes hold, recorded so that a folder of the
        same name elsewhere (`resolve_index_dir`) holding another corpus is refused."""
        known = getattr(self, "index_corpus_sha256_", None)  # as loaded: kept when the index is not here
        if not self.pool_config or not self.index_dir:
            return known
        try:
            return self._unloaded_pool().index_corpus(self._index_folder()) or known
        except NotBuiltError:
            return known

    @classmethod
    def load(cls, path: str | Path) -> LTRRouter:
        """Load a router saved by `save`; another format version or feature set is an error."""
        from ltrr.data.io import read_saved_meta, saved_model_errors
        from ltrr.features import FeaturePipeline
        from ltrr.features.pipeline import load_spec
        from ltrr.rankers.base import BaseRanker

        path = Path(path)
        meta = read_saved_meta(path / "router.json", "train a router with `ltrr train CONFIG --ranker NAME`")
        if meta.get("format") != ROUTER_FORMAT:
            raise DataError(f"{path}: router saved in format {meta.get('format')} by ltrr {meta.get('ltrr_version')}; "
                            f"this ltrr ({__version__}) reads format {ROUTER_FORMAT}: retrain it")
        parts = meta.get("parts")  # None: saved before the parts were recorded
        if parts is not None and _part_digests(path) != parts:
            raise DataError(_CHANGED.format(path=path))
        with saved_model_errors(path, "LTR router"):  # a missing or ill-typed entry: one DataError
            router = cls(**meta["params"])
            current = load_spec(router.features).to_dict()
            if current != meta["feature_set"]:
                raise DataError(f"{path}: the router was trained with another version of feature set "
                                f"{router.features!r}; retrain it with `ltrr train`")
            router.pipeline_ = FeaturePipeline.load(path / "features")
            names = [str(n) for n in router.pipeline_.get_feature_names_out()]
            if names != meta["feature_names"]:
                raise DataError(f"{path}: feature names of the saved pipeline do not match router.json")
            router.ranker_ = BaseRanker.load(path / "ranker")
            router.arms_ = [str(a) for a in meta["arms"]]
            router.no_retrieval_ = [str(a) for a in meta["no_retrieval"]]
            router.n_train_queries_ = int(meta["n_train_queries"])
        router.loaded_from_ = path  # where `make_pool` looks for a relative index_dir
        router.index_corpus_sha256_ = meta.get("index_corpus_sha256")  # None: saved before it was recorded
        router.labelled_with_ = None
        if (path / GENERATOR_FILE).is_file():
            gen = read_saved_meta(path / GENERATOR_FILE, "train the router again with `ltrr train CONFIG`")
            router.labelled_with_ = _generator_record(gen, str(path / GENERATOR_FILE))
        if parts is not None and _part_digests(path) != parts:  # replaced while it was read
            raise DataError(_CHANGED.format(path=path))
        return router


def resolve_index_dir(index_dir: str | Path, saved_in: str | Path | None = None) -> Path:
    """The folder of a saved router's indexes, found wherever the router is used from.

    A router saved by ``ltrr train`` records ``index_dir`` as the run gave it, often relative
    to the project folder it was trained in (``data/indexes/demo``), and the saved file is
    kept as it is. A relative ``index_dir`` is looked for first under the current folder, then
    under ``saved_in`` (the folder the router was loaded from) and each of its ancestors (a
    model folder ``runs/<name>/models/<ranker>`` lies under the project folder); the first
    that exists is returned. An absolute ``index_dir`` is returned as it is.

    Parameters
    ----------
    index_dir : str or Path
        The router's ``index_dir``.
    saved_in : str or Path, optional
        The folder the router (or the policy holding it) was loaded from.

    Returns
    -------
    Path
        ``index_dir`` itself when it exists from the current folder, else the first existing
        candidate.

    Raises
    ------
    NotBuiltError
        No candidate exists; the message lists the paths tried.

    Examples
    --------
    >>> import os, tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "data" / "indexes" / "demo").mkdir(parents=True)
    >>> (root / "runs" / "demo" / "models" / "m").mkdir(parents=True)
    >>> found = resolve_index_dir("data/indexes/demo", root / "runs" / "demo" / "models" / "m")
    >>> found == (root / "data" / "indexes" / "demo").resolve()
    True
    """
    given = Path(index_dir)
    if given.is_absolute() or given.is_dir():
        return given
    tried = [Path.cwd() / given]
    if saved_in is not None:
        folder = Path(saved_in).resolve()
        tried += [base / given for base in (folder, *folder.parents) if base / given not in tried]
    for candidate in tried[1:]:
        if candidate.is_dir():
            import warnings

            # said (on stderr, apart from a command's output), since a folder of the same name
            # above the router could hold another corpus's index
            warnings.warn(f"index folder {str(index_dir)!r} is not under the current folder: using {candidate}, "
                          f"found above the router's folder {saved_in}", stacklevel=2)
            return candidate
    raise NotBuiltError(
        f"index folder {str(index_dir)!r} (as the router was trained, relative to the folder it was trained in) "
        f"not found; tried {', '.join(str(t) for t in tried)}; run from the project folder it was trained in, "
        "or build the index there with `ltrr index CONFIG`")


#: the parts of a saved router folder whose digests router.json records: each names the
#: checksums of the files it holds, so together they pin the fitted model (generator.json, a
#: record of how the labels were made that a user may edit, is checked on its own when read)
_PARTS = ("features/pipeline.json", "ranker/ranker.json")
_CHANGED = ("{path}: its feature pipeline and ranker are not the ones router.json was saved with (another "
            "`ltrr train` saving a router there now, or a part replaced since): load it again once a save has "
            "finished, or train it again")


def _part_digests(path: Path) -> dict[str, str | None]:
    """The sha256 of each of `_PARTS` in ``path`` (None for one that is not there)."""
    return {part: (sha256_file(path / part) if (path / part).is_file() else None) for part in _PARTS}


def _generator_record(obj: Any, where: str) -> dict:
    """``{"generation": backend settings, "template": name}`` checked and copied; `DataError` naming
    ``where`` otherwise."""
    if not isinstance(obj, dict) or not isinstance(obj.get("generation"), dict) or not isinstance(obj.get("template"), str):
        raise DataError(f"{where}: not a generator record {{'generation': {{backend settings}}, 'template': name}}; "
                        "train the router again with `ltrr train CONFIG`")
    return {"generation": dict(obj["generation"]), "template": obj["template"]}
