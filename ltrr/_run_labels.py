"""The label stage's replicate labels and the export of a run's generations (part of `ltrr.pipeline.Run`).

Kept apart from `ltrr.pipeline` to keep that module short; `Run` inherits these methods.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from ltrr._errors import ConfigError
from ltrr._log import bar
from ltrr.data.io import write_table_atomic

__all__ = ["ReplicateAndExport"]


class ReplicateAndExport:
    """`Run` methods: which queries get replicate labels, labelling them, exporting generations."""

    def replicate_queries(self: Any, queries: pd.DataFrame) -> pd.DataFrame:
        """The queries of the replicate labels: the protocol's test part, or all."""
        lcfg = self.config.labels
        if lcfg["replicate"] == "all":
            return queries.reset_index(drop=True)
        if lcfg["replicate"] != "test":
            raise ConfigError(f"[labels] replicate must be 'test' or 'all', got {lcfg['replicate']!r}")
        from ltrr.eval.protocol import design_test_partition

        part = design_test_partition(queries, design_size=self.config.protocol["design_size"],
                                     random_state=self.config.seed)
        return queries[queries["qid"].astype(str).isin(set(part.test))].reset_index(drop=True)

    def _label_replicate(self: Any, queries, results, arms, no_retrieval, generator, scorer, metric, extra_scorers,
                         main: pd.DataFrame, only: set[str] | None = None) -> dict:
        """Label ``arms`` again under ``[labels] replicate_template`` -> labels/replicate.parquet.

        ``only`` (a shard's query ids) labels just those replicate queries, to fill the cache:
        nothing is written then.
        """
        from ltrr.generation import load_template
        from ltrr.labels import label_queries

        lcfg, gcfg = self.config.labels, self.config.generation
        template = load_template(lcfg["replicate_template"])
        sub = self.replicate_queries(queries)
        if only is not None:
            sub = sub[sub["qid"].astype(str).isin(only)].reset_index(drop=True)
            if sub.empty:  # a shard or chunk of design queries only: nothing of the replicate
                return {}
        self.log(f"[label] replicate: {len(sub)} queries x {len(arms)} arms with template {template.identity}")
        t0 = time.perf_counter()
        with bar(total=len(sub) * len(arms), desc="replicate", unit="item") as pbar:
            rep = label_queries(sub, results, arms=arms, no_retrieval=no_retrieval, generator=generator,
                                template=template, scorer=scorer, metric_name=str(metric), extra_scorers=extra_scorers,
                                seed=self.config.seed, chunk_size=gcfg["chunk_size"],
                                max_prompt_tokens=gcfg["max_prompt_tokens"] or None, progress=pbar.update,
                                params=template.default_params(max_new_tokens=gcfg["max_new_tokens"]))
        if only is not None:
            return {}
        write_table_atomic(rep.labels, self.labels_dir / "replicate.parquet")
        both = main.merge(rep.labels[["qid", "arm", "utility"]], on=["qid", "arm"], suffixes=("", "_rep"))
        diff = (both["utility"] - both["utility_rep"]).abs()
        return {"template": template.identity, "queries": int(len(sub)), "part": lcfg["replicate"],
                "mean_abs_diff": float(diff.mean()) if len(diff) else float("nan"),
                "disagreement_rate": float((diff > 1e-9).mean()) if len(diff) else float("nan"),
                "seconds": round(time.perf_counter() - t0, 1)}

    def export_generations(self: Any, out: Path) -> dict:
        """Export exactly the generations the labelled run used (with prompts) as a prebuilt cache."""
        from ltrr.generation import load_template
        from ltrr.generation.prebuilt import RecordingGenerator, write_prebuilt
        from ltrr.labels import label_queries
        from ltrr.metrics import parse_metric

        self._need("cache export", self.labels_dir / "labels.parquet", "label")
        lcfg, gcfg = self.config.labels, self.config.generation
        cached = self.make_generator(use_cache=True)
        rec = RecordingGenerator(cached.generator, cached.cache)
        pool = self.pool
        nr = [a.name for a in pool.arms if a.is_no_retrieval]
        noise_arm = (lcfg["noise_floor_arm"] or next(a.name for a in pool.arms if not a.is_no_retrieval)) if lcfg["noise_floor"] else None
        template = load_template(gcfg["template"])
        label_queries(self.dataset.queries, pd.read_parquet(self.results_path), arms=pool.arm_names, no_retrieval=nr[0],
                      generator=rec, template=template, scorer=parse_metric("em").bind(), metric_name="em",
                      noise_arm=noise_arm, seed=self.config.seed, chunk_size=gcfg["chunk_size"],
                      max_prompt_tokens=gcfg["max_prompt_tokens"] or None,
                      params=template.default_params(max_new_tokens=gcfg["max_new_tokens"]),
                      likelihood=lcfg["likelihood"])
        if lcfg["replicate_template"]:
            rep = load_template(lcfg["replicate_template"])
            label_queries(self.replicate_queries(self.dataset.queries), pd.read_parquet(self.results_path), arms=pool.arm_names, no_retrieval=nr[0],
                          generator=rec, template=rep, scorer=parse_metric("em").bind(), metric_name="em",
                          seed=self.config.seed, chunk_size=gcfg["chunk_size"],
                          max_prompt_tokens=gcfg["max_prompt_tokens"] or None,
                          params=rep.default_params(max_new_tokens=gcfg["max_new_tokens"]))
        from ltrr._version import __version__

        return write_prebuilt(rec.records, out, meta={"made_by": "ltrr label", "ltrr_version": __version__,
                                                      "config": self.config.source, "generator": rec.identity,
                                                      "template": template.identity, "queries": len(self.dataset.queries)})

