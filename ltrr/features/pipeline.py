"""Feature sets and the fitted transform from raw features to a model's feature matrix.

A feature set (`FeatureSpec`) is a small TOML file: which pre- and post-retrieval features to
use, the PCA size of the query embedding, and the arm-indicator options::

    name = "paper"
    version = 1
    description = "..."
    pre = ["query_embedding", "query_length", "query_type"]
    post = ["overall_sim", "avg_sim", "max_sim", "var_sim", "moran", "cross_ret_sim"]
    pca_dim = 32

    [arm_indicator]
    missing = true    # a 0/1 column "no_passages": the arm has no passages for the query
    one_hot = false   # one 0/1 column "arm=<name>" per arm seen at fit

Specs are found by name (`load_spec`): a path to a ``.toml`` file, else a file shipped in the
package's ``feature_specs`` folder (``paper``, ``pre_only``, ``post_only``, ``no_moran``,
``no_cross``, ``paper_onehot``; `available_specs`).

Arm indicators (default of ``paper``: ``missing = true``, ``one_hot = false``). The
``no_passages`` column is what lets a model tell the no-retrieval arm (whose post-retrieval
features are imputed with training medians, so look like an average retrieval arm) from the
others. One-hot arm identity is off by default because it ties a model to the arms it was
trained on and lets it learn "arm X is usually best" instead of reading the evidence of the
features; the paper's features describe an arm only through its results. Turn it on
(``paper_onehot``) to give a model a per-arm prior.

Feature sets live in `ltrr.features.spec` (re-exported here). `FeaturePipeline` fits, on
training rows only, the PCA of the query embeddings, the
standardiser of the query length and the median imputer of the post-retrieval features, then
maps any raw table to ``X``. Its fitted state is plain arrays, saved as JSON plus ``.npy``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin

from ltrr._atomic import plain_json, sha256_file, write_json_atomic
from ltrr._checks import check_int
from ltrr._cpu import one_blas_thread
from ltrr._errors import ConfigError, DataError, NotBuiltError
from ltrr._version import __version__
from ltrr.features.raw import RAW_VERSION, QueryRaw, RawFeatures
from ltrr.features.spec import (  # re-exported: their home was this module
    MISSING_COLUMN,
    POST_FEATURES,
    PRE_FEATURES,
    FeatureSpec,
    available_specs,
    load_spec,
)

__all__ = [
    "PRE_FEATURES",
    "POST_FEATURES",
    "FeatureSpec",
    "load_spec",
    "available_specs",
    "FeaturePipeline",
]

FORMAT_VERSION = 1
META_FILE = "pipeline.json"


#: `RawFeatures.meta` keys that change what a raw column means; a pipeline checks them at transform.
_EXTRACTION = ("k", "moran_neighbours", "query_type")


class FeaturePipeline(TransformerMixin, BaseEstimator):
    """Raw features -> feature matrix, with every learnt statistic fit on training rows only.

    Columns, in this order (those the feature set selects):

    - ``q_pca_0 .. q_pca_{d-1}``: the query embedding projected on the first ``d`` principal
      components of the *training* queries' embeddings (``d = min(pca_dim, n_train_queries,
      dim)``);
    - ``query_length``: standardised with the training queries' mean and standard deviation;
    - ``query_type``: 0/1 as extracted;
    - the post-retrieval features, with NaN replaced by the training rows' median when
      ``impute`` (a feature with no value in training gets 0);
    - ``no_passages`` (1 when the arm has no passages: the no-retrieval arm) and ``arm=<name>``
      columns, as the feature set's ``arm_indicator`` says.

    Parameters
    ----------
    spec : str, path, mapping or FeatureSpec
        The feature set (`load_spec`); ``"paper"`` by default.
    pca_dim : int or None
        Overrides the feature set's ``pca_dim`` (None: use the set's; ``paper``: 32).
    impute : bool
        Impute NaN post-retrieval features (for tree and linear rankers). With False, NaN is
        kept for rankers that learn their own fill value (neural rankers, ``missing="learned"``).
    svd_solver : str
        PCA solver (`sklearn.decomposition.PCA`); the exact ``"full"`` SVD is deterministic.
    random_state : int or None
        Seed of the randomised PCA solvers (``svd_solver="randomized"`` or ``"arpack"``).

    Attributes
    ----------
    spec_ : FeatureSpec
    pca_mean_, pca_components_ : ndarray
        PCA centre and components (empty when the set has no query embedding).
    length_mean_, length_scale_ : float
    impute_values_ : ndarray
        Per post-retrieval feature median of the training rows (empty when not imputing).
    arms_ : list of str
        Arms of the training data (the one-hot columns).
    feature_names_out_ : ndarray of str
    encoder_ : str
        Encoder of the training query embeddings; transform refuses raw features of another.

    Examples
    --------
    >>> pipe = FeaturePipeline("paper").fit(raw.subset(train_qids))  # doctest: +SKIP
    >>> X_test = pipe.transform(raw.subset(test_qids))  # doctest: +SKIP
    >>> pipe.save("runs/demo/features/pipeline")  # doctest: +SKIP
    """

    def __init__(
        self,
        spec: Any = "paper",
        *,
        pca_dim: int | None = None,
        impute: bool = True,
        svd_solver: str = "full",
        random_state: int | None = None,
    ):
        self.spec = spec
        self.pca_dim = pca_dim
        self.impute = impute
        self.svd_solver = svd_solver
        self.random_state = random_state

    # ---- validation --------------------------------------------------------------------
    def _resolved_spec(self) -> FeatureSpec:
        spec = load_spec(self.spec)
        if self.pca_dim is not None:
            pca_dim = check_int(self.pca_dim, "FeaturePipeline: pca_dim", low=1, note=" or None")
            spec = FeatureSpec(**{**spec.__dict__, "pca_dim": pca_dim})
        if not isinstance(self.impute, bool):
            raise ConfigError(f"FeaturePipeline: impute must be True or False, got {self.impute!r}")
        return spec

    @staticmethod
    def _check_raw(raw: Any, spec: FeatureSpec) -> RawFeatures:
        if not isinstance(raw, RawFeatures):
            raise DataError(
                f"FeaturePipeline takes RawFeatures (ltrr.features.extract_raw), got {type(raw).__name__}"
            )
        raw.check_columns(spec.raw_columns)
        FeaturePipeline._check_version(raw.meta)
        if len(raw.table) == 0:
            raise DataError("the raw feature table has no rows")
        return raw

    @staticmethod
    def _check_version(meta: dict) -> None:
        version = meta.get("version")
        if version != RAW_VERSION:
            raise DataError(
                f"raw features were extracted with feature version {version!r} but this ltrr "
                f"computes version {RAW_VERSION}; re-extract them (`ltrr features CONFIG`)"
            )

    def _check_encoder(self, meta: dict) -> None:
        enc = str(meta.get("encoder", ""))
        if "query_embedding" in self.spec_.pre and enc != self.encoder_:
            raise DataError(
                f"raw features use encoder {enc!r} but the pipeline was fit on {self.encoder_!r}; "
                "extract them with the same encoder"
            )
        # the extraction options change what a column means (k passages, Moran's I neighbours,
        # the query-type classifier); a pipeline saved before they were kept checks none
        fitted = getattr(self, "extraction_", None) or {}
        differ = {k: (v, meta.get(k)) for k, v in fitted.items() if k in meta and plain_json(meta.get(k), "raw features meta") != v}
        if differ:
            said = ", ".join(f"{k} {got!r} (fit on {want!r})" for k, (want, got) in differ.items())
            raise DataError(f"raw features extracted with other options than the pipeline was fit on: {said}; "
                            "extract them as the training features were")

    # ---- fit / transform ---------------------------------------------------------------
    def fit(self, raw: RawFeatures, y=None):
        """Fit PCA, standardiser and imputer on the rows of ``raw`` (training rows only)."""
        spec = self._resolved_spec()
        raw = self._check_raw(raw, spec)
        table = raw.table
        train_qids = pd.unique(table["qid"].astype(str))
        self.pca_mean_ = np.zeros(0)
        self.pca_components_ = np.zeros((0, 0))
        if "query_embedding" in spec.pre:
            from sklearn.decomposition import PCA

            E = np.asarray(raw.embeddings_for(train_qids), dtype=np.float64)
            if len(E) < 2:
                raise DataError("the query-embedding PCA needs at least two training queries")
            n_comp = min(spec.pca_dim, len(E), E.shape[1])
            pca = PCA(
                n_components=n_comp, svd_solver=self.svd_solver, random_state=self.random_state
            )
            with one_blas_thread():
                pca.fit(E)
            # Plain arrays, not the sklearn object: they save as .npy and transform identically
            # after load whatever the sklearn version.
            self.pca_mean_ = pca.mean_.astype(np.float64)
            self.pca_components_ = pca.components_.astype(np.float64)
        self.length_mean_, self.length_scale_ = 0.0, 1.0
        if "query_length" in spec.pre:
            from sklearn.preprocessing import StandardScaler

            per_query = table.drop_duplicates("qid")["query_length"].to_numpy(np.float64)
            scaler = StandardScaler().fit(per_query[:, None])
            self.length_mean_ = float(scaler.mean_[0])
            self.length_scale_ = float(scaler.scale_[0])
        self.impute_values_ = np.zeros(0)
        if self.impute and spec.post:
            from sklearn.impute import SimpleImputer

            P = table[list(spec.post)].to_numpy(np.float64)
            imp = SimpleImputer(strategy="median", keep_empty_features=True).fit(P)
            self.impute_values_ = np.asarray(imp.statistics_, dtype=np.float64)
        self.arms_ = [str(a) for a in raw.arms]
        self.encoder_ = str(raw.meta.get("encoder", ""))
        self.extraction_ = {k: plain_json(raw.meta[k], "raw features meta") for k in _EXTRACTION if k in raw.meta}
        self.raw_version_ = RAW_VERSION
        self.spec_ = spec
        self.feature_names_out_ = np.asarray(self._names(), dtype=object)
        self.n_features_out_ = len(self.feature_names_out_)
        return self

    def _names(self) -> list[str]:
        spec = self.spec_ if hasattr(self, "spec_") else self._resolved_spec()
        names: list[str] = []
        for f in spec.pre:
            if f == "query_embedding":
                names += [f"q_pca_{i}" for i in range(len(self.pca_components_))]
            else:
                names.append(f)
        names += list(spec.post)
        if spec.missing_indicator:
            names.append(MISSING_COLUMN)
        if spec.one_hot_arms:
            names += [f"arm={a}" for a in self.arms_]
        return names

    def transform(self, raw: RawFeatures) -> np.ndarray:
        """The feature matrix, one row per row of ``raw.table`` (same order), float64."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "feature_names_out_")
        spec = self.spec_
        raw = self._check_raw(raw, spec)
        self._check_encoder(raw.meta)
        table = raw.table
        Z = None
        if "query_embedding" in spec.pre:
            uq, inv = np.unique(table["qid"].astype(str).to_numpy(), return_inverse=True)
            E = np.asarray(raw.embeddings_for(uq), dtype=np.float64)
            with one_blas_thread():
                Z = ((E - self.pca_mean_) @ self.pca_components_.T)[inv]
        return self._assemble(lambda c: table[c].to_numpy(np.float64), Z,
                              table["arm"].astype(str).to_numpy(), len(table))

    def _assemble(self, column, Z, arms, n) -> np.ndarray:
        """The feature matrix from ``column(name) -> (n,) float64``, the PCA block ``Z`` (n, d)
        and the arm of each row: the one code path of `transform` and `transform_query`."""
        spec = self.spec_
        blocks: list[np.ndarray] = []
        for f in spec.pre:
            if f == "query_embedding":
                blocks.append(Z)
            elif f == "query_length":
                v = column("query_length")
                blocks.append(((v - self.length_mean_) / self.length_scale_)[:, None])
            else:
                blocks.append(column(f)[:, None])
        if spec.post:
            P = np.column_stack([column(c) for c in spec.post]) if n else np.zeros((0, len(spec.post)))
            if self.impute:
                nan = np.isnan(P)
                P[nan] = np.broadcast_to(self.impute_values_, P.shape)[nan]
            blocks.append(P)
        if spec.missing_indicator:
            blocks.append((column("n_docs") == 0).astype(np.float64)[:, None])
        if spec.one_hot_arms:
            blocks.append(np.stack([(arms == a) for a in self.arms_], axis=1).astype(np.float64))
        return np.ascontiguousarray(np.hstack(blocks), dtype=np.float64)

    def transform_query(self, qraw: QueryRaw) -> np.ndarray:
        """`transform` for one query's `QueryRaw` (``extract_query``): the same rows, no pandas."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "feature_names_out_")
        if not isinstance(qraw, QueryRaw):
            raise DataError(f"transform_query takes a QueryRaw (ltrr.features.extract_query), got {type(qraw).__name__}")
        spec = self.spec_
        self._check_version(qraw.meta)
        self._check_encoder(qraw.meta)
        n = len(qraw.arms)
        Z = None
        if "query_embedding" in spec.pre:
            z = (np.asarray(qraw.query_embedding, dtype=np.float64) - self.pca_mean_) @ self.pca_components_.T
            Z = np.broadcast_to(z, (n, len(z)))
        cols = qraw.columns

        def column(c):
            if c not in cols:
                raise DataError(f"the query's raw features lack column {c!r}")
            return np.asarray(cols[c], dtype=np.float64)

        return self._assemble(column, Z, np.asarray(qraw.arms, dtype=str), n)

    def transform_frame(self, raw: RawFeatures) -> pd.DataFrame:
        """`transform` as a DataFrame with ``qid`` and ``arm`` first, then the named features."""
        X = self.transform(raw)
        out = pd.DataFrame(X, columns=list(self.feature_names_out_))
        out.insert(0, "arm", raw.table["arm"].astype(str).to_numpy())
        out.insert(0, "qid", raw.table["qid"].astype(str).to_numpy())
        return out

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Names of the columns of `transform`'s output."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "feature_names_out_")
        return self.feature_names_out_.copy()

    # ---- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save the fitted pipeline into folder ``path``: ``pipeline.json`` plus ``.npy`` arrays.

        The arrays are staged, then moved in; ``pipeline.json`` is written last, so an
        interrupted save leaves no loadable half-pipeline.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "feature_names_out_")
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise DataError(f"{path} is a file; save a feature pipeline into a folder")
        params = plain_json({"pca_dim": self.pca_dim, "impute": self.impute, "svd_solver": self.svd_solver,
                             "random_state": self.random_state}, "FeaturePipeline params")  # before any file moves
        path.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".pipeline-", dir=path))
        try:
            arrays = {
                "pca_mean.npy": self.pca_mean_,
                "pca_components.npy": self.pca_components_,
                "impute_values.npy": self.impute_values_,
            }
            files = {}
            for name, arr in arrays.items():
                np.save(stage / name, np.asarray(arr, dtype=np.float64), allow_pickle=False)
                files[name] = sha256_file(stage / name)
            (path / META_FILE).unlink(missing_ok=True)
            for name in files:
                os.replace(stage / name, path / name)
            meta = {
                "class": type(self).__name__,
                "format_version": FORMAT_VERSION,
                "ltrr_version": __version__,
                "raw_version": self.raw_version_,
                "spec": self.spec_.to_dict(),
                "params": params,
                "fitted": {
                    "length_mean": self.length_mean_,
                    "length_scale": self.length_scale_,
                    "arms": self.arms_,
                    "encoder": self.encoder_,
                    "extraction": getattr(self, "extraction_", {}),
                    "feature_names_out": [str(n) for n in self.feature_names_out_],
                },
                "files": files,
            }
            write_json_atomic(path / META_FILE, meta, indent=2)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return path

    @classmethod
    def load(cls, path: str | Path, *, spec: Any = None) -> FeaturePipeline:
        """Load a pipeline saved by `save`.

        With ``spec`` (a feature-set name, path or `FeatureSpec`), the saved set must have the
        same name and version, else `DataError`; a pipeline saved for another raw-feature
        version, a damaged file or a changed array also raise `DataError`.
        """
        path = Path(path)
        meta_file = path / META_FILE
        if not meta_file.is_file():
            raise NotBuiltError(
                f"{path}: no {META_FILE}; fit and save a FeaturePipeline there first"
            )
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{meta_file}: not valid JSON ({exc}); the file is damaged") from None
        if meta.get("class") != cls.__name__ or meta.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{meta_file}: a {meta.get('class')!r} of format version {meta.get('format_version')!r}; "
                f"this ltrr reads {cls.__name__} format version {FORMAT_VERSION}"
            )
        if meta.get("raw_version") != RAW_VERSION:
            raise DataError(
                f"{path}: the pipeline was fit on raw feature version {meta.get('raw_version')!r}, this "
                f"ltrr extracts version {RAW_VERSION}; refit it on newly extracted features"
            )
        saved = FeatureSpec.from_dict(meta["spec"], where=f"{meta_file} spec")
        if spec is not None:
            want = load_spec(spec)
            if (want.name, want.version) != (saved.name, saved.version):
                raise DataError(
                    f"{path}: feature set mismatch: the pipeline was fit with {saved.name!r} version "
                    f"{saved.version}, expected {want.name!r} version {want.version}; refit it"
                )
        arrays = {}
        for name, digest in meta["files"].items():
            f = path / name
            if not f.is_file():
                raise DataError(f"{path}: missing {name}; the saved pipeline is incomplete")
            if sha256_file(f) != digest:
                raise DataError(f"{f}: checksum mismatch; the file changed since it was saved")
            arrays[name] = np.load(f, allow_pickle=False)
        p = meta["params"]
        obj = cls(
            saved,
            pca_dim=p["pca_dim"],
            impute=p["impute"],
            svd_solver=p["svd_solver"],
            random_state=p["random_state"],
        )
        fitted = meta["fitted"]
        obj.spec_ = saved
        obj.pca_mean_ = arrays["pca_mean.npy"]
        obj.pca_components_ = arrays["pca_components.npy"]
        obj.impute_values_ = arrays["impute_values.npy"]
        obj.length_mean_ = float(fitted["length_mean"])
        obj.length_scale_ = float(fitted["length_scale"])
        obj.arms_ = [str(a) for a in fitted["arms"]]
        obj.encoder_ = str(fitted["encoder"])
        obj.extraction_ = dict(fitted.get("extraction") or {})  # absent in a pipeline saved before
        obj.raw_version_ = meta["raw_version"]
        obj.feature_names_out_ = np.asarray(fitted["feature_names_out"], dtype=object)
        obj.n_features_out_ = len(obj.feature_names_out_)
        if list(obj._names()) != list(fitted["feature_names_out"]):
            raise DataError(
                f"{meta_file}: the saved feature names do not match the saved state; the file is damaged"
            )
        return obj
