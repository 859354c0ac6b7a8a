"""Do two CPUs compute the same bits? The numerical steps under ltrr's routing features and rankers,
with each library's kernels native and pinned to AVX2 (`ltrr._cpu`), hashed for comparison.

Run it on two machines with the same library versions and compare the two JSON files:

    python benchmarks/cpu_determinism.py --out results/cpu_determinism/HOST.json [--data demo.npz]
    python benchmarks/cpu_determinism.py --compare A.json B.json

Each mode runs in a fresh process (the libraries read their kernel settings when they load):
``native`` with ``LTRR_CPU_KERNELS=native``, ``pinned`` with ``LTRR_CPU_KERNELS=avx2`` (MKL's AVX2
branch for torch; the ``ltrr`` command's default until session 41), ``portable`` with
``LTRR_CPU_KERNELS=portable`` (MKL's vendor-neutral branch; the default since). BLAS runs
on one thread in each (thread counts are a separate, known source: `ltrr._cpu.one_blas_thread`).
The checks:

- numpy: float32 row L2 normalisation (every embedding, `ltrr.embed`), float64 exp and log;
- OpenBLAS: a float64 product, a float32 product and the SVD of a PCA;
- faiss: flat inner-product search of 5, 30 and 700 queries (distances and ids);
- LightGBM: ltrr's ``lambdamart-listwise`` fitted on a fixed table (its model text and
  predictions), on 1 and 2 threads. ``--data`` gives it a real table (``make_data`` exports the
  demo's routing features with a label made from them, not from any utility label); without it a
  synthetic table with ties.
- torch: a float32 product, small products of a torch ranker's layer shapes, float32 sqrt (the
  default Adam takes it; ltrr's rankers take fused AdamW's since session 41), layer norm, GELU and
  softmax; the default encoder (MiniLM) on fixed sentences; ``ffn-pointwise`` fitted on the same
  table (its predictions).

``--runner 'qemu-x86_64 -cpu Haswell-v4'`` runs the checks on an emulated AVX2 CPU without
AVX-512 (``qemu-user`` 10.0 from Debian's bookworm-backports: QEMU's TCG has AVX2 and FMA but no
AVX-512; bookworm's own 7.2 crashed in torch's AVX2 kernels). There /proc/cpuinfo is still the
host's, so the machine record names the host; each child also records the kernels its libraries
chose (``seen``), which name the CPU they saw.

Inputs are seeded; nothing is timed. Machines, versions and the C library are recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

MODES = {"native": {"LTRR_CPU_KERNELS": "native"}, "pinned": {"LTRR_CPU_KERNELS": "avx2"},
         "portable": {"LTRR_CPU_KERNELS": "portable"}}
_KERNEL_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES",
                "OPENBLAS_CORETYPE", "FAISS_SIMD_LEVEL", "LTRR_CPU_KERNELS")


def _h(a) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def _synthetic_table(rng):
    import numpy as np

    n_q, n_arms = 3000, 7
    x = rng.normal(size=(n_q * n_arms, 12)).round(3)  # rounded: ties, as real features have
    y = ((x[:, 0] + 0.5 * x[:, 1] > 0).astype(float) + (x[:, 2] > 1)) / 2  # gains in [0, 1]
    return x, y, np.full(n_q, n_arms)


def child(data: str | None) -> dict:
    """The checks, in this process (called in a fresh one per mode)."""
    # isort: off
    import ltrr  # noqa: F401  first: pins the kernels unless LTRR_CPU_KERNELS=native
    import numpy as np
    # isort: on

    out: dict[str, str] = {}
    rng = np.random.default_rng(20261128)
    emb = rng.normal(size=(6000, 384)).astype(np.float32)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    out["numpy.normalise_f32"] = _h(emb / norms)
    x64 = rng.normal(size=200_000) * 5
    out["numpy.exp_f64"] = _h(np.exp(x64))
    out["numpy.log_f64"] = _h(np.log(np.abs(x64) + 1e-3))
    a = rng.normal(size=(400, 400))
    out["openblas.dgemm"] = _h(a @ a.T)
    out["openblas.sgemm"] = _h(emb[:500] @ emb[500:1500].T)
    centred = emb[:2000].astype(np.float64) - emb[:2000].mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    out["openblas.svd"] = _h(np.round(np.abs(vt[:16]), 12)) + "/" + _h(s)
    try:
        import faiss

        index = faiss.IndexFlatIP(384)
        index.add(emb)
        for nq in (5, 30, 700):
            d, i = index.search(emb[-nq:] * 0.9 + emb[:nq] * 0.1, 10)
            out[f"faiss.flat_ip_{nq}"] = _h(d) + "/" + _h(i)
    except ImportError:
        out["faiss"] = "not installed"
    if data:
        z = np.load(data)
        x, y, sizes = z["x"], z["y"], z["sizes"]
    else:
        x, y, sizes = _synthetic_table(rng)
    from ltrr.rankers import LambdaMARTRanker

    qid = np.repeat(np.arange(len(sizes)), sizes)
    for threads in (1, 2):
        model = LambdaMARTRanker(n_estimators=100, random_state=0, n_jobs=threads).fit(x, y, qid=qid)
        trees = json.dumps(model.booster_.dump_model()["tree_info"], sort_keys=True)  # not the parameters
        out[f"lightgbm.trees_{threads}t"] = hashlib.sha256(trees.encode()).hexdigest()[:16]
        out[f"lightgbm.predict_{threads}t"] = _h(model.predict(x))
    from ltrr._cpu import numeric_kernels

    out["kernels"] = json.dumps(numeric_kernels(), sort_keys=True)
    out.update(_torch_checks(x, y, qid))
    out["seen"] = json.dumps(_kernels_seen(), sort_keys=True)
    return out


def _torch_checks(x, y, qid) -> dict[str, str]:
    """torch: ATen's and oneDNN's float32 kernels on their own, the default encoder (MiniLM) on
    fixed sentences, and a torch ranker (``ffn-pointwise``) fitted on the table."""
    try:
        import torch
    except ImportError:
        return {"torch": "not installed"}
    import numpy as np

    out: dict[str, str] = {}
    torch.manual_seed(0)
    t = torch.randn(512, 384)
    w = torch.randn(384, 384)
    out["torch.matmul_f32"] = _h((t @ w).numpy())
    out["torch.layer_norm"] = _h(torch.nn.functional.layer_norm(t, (384,)).numpy())
    out["torch.gelu"] = _h(torch.nn.functional.gelu(t).numpy())
    out["torch.softmax"] = _h(torch.softmax(t, dim=-1).numpy())
    # small products of the shapes a torch ranker's layers have (MKL picks its code path by shape)
    out["torch.matmul_small_shapes"] = "/".join(_h((torch.randn(m, k) @ torch.randn(k, n)).numpy())
                                                for m, k, n in ((7, 30, 64), (64, 256, 30), (1000, 30, 64)))
    s = torch.rand(4096) + 0.1
    out["torch.sqrt_f32"] = _h(s.sqrt().numpy())
    try:
        from ltrr.embed import get_encoder

        texts = [f"Which {w} did the {n} of {p} found in the year {1800 + 7 * i}?"
                 for i, (w, n, p) in enumerate((w, n, p) for w in ("city", "company", "school", "river")
                                               for n in ("king", "founder", "mayor", "bishop")
                                               for p in ("Norway", "Peru", "Kenya", "Laos"))]
        out["torch.minilm_encode"] = _h(get_encoder("minilm").encode_queries(texts, batch_size=16))
    except ImportError as exc:  # the encoder package missing
        out["torch.minilm_encode"] = f"not installed ({exc})"
    from ltrr.rankers import FFNPointwiseRanker

    ffn = FFNPointwiseRanker(n_epochs=3, random_state=0).fit(x, y, qid=qid)
    out["torch.ffn_pointwise_predict"] = _h(np.asarray(ffn.predict(x), dtype=np.float64))
    return out


def _kernels_seen() -> dict:
    """Which kernels the libraries chose in this process, as each reports it (the CPU they saw:
    under an emulator /proc/cpuinfo is the host's, these are the emulated CPU's)."""
    from numpy.lib.introspect import opt_func_info

    seen: dict[str, Any] = {"numpy.exp_f64": opt_func_info(func_name="exp", signature="float64")["exp"]["dd"]["current"]}
    try:
        from threadpoolctl import threadpool_info

        seen["openblas"] = sorted({f"{i.get('prefix')}:{i.get('architecture')}" for i in threadpool_info()
                                   if i.get("internal_api") == "openblas"})
    except ImportError:
        pass
    try:
        import torch

        seen["torch"] = torch.backends.cpu.get_cpu_capability()
        s = torch.rand(4096, generator=torch.Generator().manual_seed(0)) + 0.1
        # float32 sqrt against the correctly rounded value (float64 sqrt rounded once to float32)
        seen["torch.sqrt_f32_correctly_rounded"] = bool((s.sqrt() == s.double().sqrt().float()).all())
    except ImportError:
        pass
    return seen


def machine() -> dict:
    import numpy as np

    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("flags")), [])
    versions: dict[str, str | None] = {"python": platform.python_version(), "numpy": np.__version__, "libc": " ".join(platform.libc_ver())}
    for name in ("lightgbm", "faiss", "scipy", "sklearn"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    return {"cpu": model, "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
            "cores": os.cpu_count(), "versions": versions}


def make_data(out: Path, features: Path = Path("features/demo/raw.parquet")) -> None:
    """The demo's routing features as a LightGBM table, with a label computed from them (the
    arm's rank by max_sim within its query: gain 1, 0.5 or 0), so no utility label is read."""
    import numpy as np
    import pandas as pd

    raw = pd.read_parquet(features)
    num = raw.select_dtypes("number").columns.tolist()
    arms = pd.get_dummies(raw["arm"]).astype(float)
    x = np.hstack([raw[num].to_numpy(np.float64), arms.to_numpy()])
    rank = raw.groupby("qid", sort=False)["max_sim"].rank(method="first", ascending=False).to_numpy()
    y = np.select([rank <= 1, rank <= 3], [1.0, 0.5], 0.0)
    sizes = raw.groupby("qid", sort=False).size().to_numpy()
    np.savez_compressed(out, x=x, y=y, sizes=sizes)


def compare(a: dict, b: dict) -> str:
    def who(r: dict) -> str:
        m = r["machine"]
        on = f" under `{r['runner']}` (kernels seen: {r['native'].get('seen')})" if r.get("runner") else ""
        return f"{m['cpu']} (AVX-512 {m['avx512f']}){on}, versions {m['versions']}"

    lines = [f"A: {who(a)}", f"B: {who(b)}",
             "", "| check | native: A = B | pinned: A = B | portable: A = B | A: native = pinned "
             "| B native = A pinned |", "|---|---|---|---|---|---|"]
    for key in a["native"]:
        if key in ("kernels", "seen") or key not in b["native"]:
            continue
        portable = (a["portable"][key] == b["portable"].get(key)) if "portable" in a and "portable" in b else None
        same = [a["native"][key] == b["native"].get(key), a["pinned"][key] == b["pinned"].get(key), portable,
                a["native"][key] == a["pinned"][key], b["native"].get(key) == a["pinned"][key]]
        lines.append(f"| {key} | " + " | ".join("-" if s is None else "same" if s else "**differs**"
                                                 for s in same) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--data", help="a .npz table for LightGBM (see --make-data)")
    ap.add_argument("--make-data", type=Path, help="export the demo's features as such a table and stop")
    ap.add_argument("--compare", nargs=2, type=Path)
    ap.add_argument("--runner", default="", help="a command that runs each child, as "
                    "'qemu-x86_64 -cpu Haswell-v4' (an AVX2 CPU without AVX-512, emulated)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.data)))
        return 0
    if args.make_data:
        make_data(args.make_data)
        return 0
    if args.compare:
        print(compare(*(json.loads(p.read_text()) for p in args.compare)))
        return 0
    base = {k: v for k, v in os.environ.items() if k not in _KERNEL_VARS}
    base.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="2", PYTHONPATH=os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p))
    result = {"machine": machine(), "runner": args.runner or None}
    for mode, env in MODES.items():
        cmd = shlex.split(args.runner) + [sys.executable, __file__, "--child"] + (["--data", args.data] if args.data else [])
        done = subprocess.run(cmd, env={**base, **env}, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            return done.returncode
        result[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    text = json.dumps(result, indent=1)
    if args.out:
        from ltrr.data.io import write_text_atomic

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
