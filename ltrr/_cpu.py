"""The same numbers on every x86-64 machine: each numerical library's CPU kernels pinned to AVX2.

Libraries pick vectorised kernels by the CPU's instruction set, and kernels of other vector
widths sum in other orders or use other approximations, so the same inputs give other last bits
on an AVX-512 machine than on an AVX2 one. Trained rankers amplify those bits: LightGBM and the
torch FFN fit differently on features that differ by 1e-7, which is how seed 13's headline moved
between machines (issue 25; `benchmarks/results/protocol_demo/README.md`). Each source was
measured on one AVX-512 machine by switching its kernels alone:

- **torch** (ATen's layer norm, GELU, softmax; oneDNN's and MKL's products): MiniLM's embeddings
  differ by up to 1.5e-7. Pinned by ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2`` and
  MKL's conditional numerical reproducibility ``MKL_CBWR=AVX2`` (with the first two alone MKL
  still takes its AVX-512 branch for some products). **MKL does not take its AVX2 branch on AMD
  CPUs**: its verbose log (``MKL_VERBOSE=1``) says ``CNR:AUTO`` there and ``CNR:AVX2`` on an
  Intel CPU, and the two give other bits for some product shapes. On an emulated Intel Haswell
  (AVX2, no AVX-512; `benchmarks/results/cpu_determinism/`) the demo's 5,732 query embeddings
  differed from this AMD EPYC's by up to 1.4e-7 on 2,204 rows; with ``MKL_CBWR=COMPATIBLE`` (MKL's
  vendor-neutral code) a sample of 256 came out the same on both, and on a real Intel Xeon
  (session 40) the same as on the EPYC. With the AVX2 branch the main job's headline moved with
  the vendor (seed 13: Wilcoxon p 0.080 on the EPYC, 0.013 on the Xeon), so the COMPATIBLE branch
  is the default, ``LTRR_CPU_KERNELS=portable``, since session 41. It halves MiniLM's encoding
  speed (8.6 s against 4.2 s for 512 passages here); ``LTRR_CPU_KERNELS=avx2`` takes MKL's AVX2
  branch (the same bits between CPUs of one vendor only) and ``native`` every library's own.
- **numpy** (its own SIMD loops, dispatched at import): float64 ``exp`` and ``log`` take an
  AVX-512 (SVML) kernel that differs from the C library on 4.6% of values, and reductions sum
  in other orders; the demo's query embeddings moved by up to 1.1e-7, its similarity features
  by up to 1.6e-7, and LambdaMART's design CV utility from 0.41788 to 0.41728.
  Pinned by ``NPY_DISABLE_CPU_FEATURES`` (numpy >= 2.4's AVX-512 targets ``X86_V4 AVX512_ICL
  AVX512_SPR``; under it float64 ``exp``/``log`` equal the C library's bit for bit). Older numpy
  names its targets otherwise and is left alone.
- **OpenBLAS** (numpy's, scipy's and faiss's copies): its kernels are chosen per CPU model
  (Haswell, SkylakeX, Zen, ...). Pinned by ``OPENBLAS_CORETYPE=Haswell``, the AVX2 kernels.
- **faiss** (flat inner-product search; faiss-cpu 1.15 dispatches at run time): the dense arm's scores
  differ in the last bit on 3% of rows. Pinned by ``FAISS_SIMD_LEVEL=AVX2``.

LightGBM gives the same trees on an AMD EPYC and an Intel Xeon and for 1, 2 and 8 threads, and
XGBoost for 1, 2 and 8 threads (measured), so the trees are not a source; they only amplify their
inputs'. Pinned, numpy, OpenBLAS and faiss gave the same bits on both CPUs, and natively faiss's
batched search did not (`benchmarks/results/cpu_determinism/`).

`pin_cpu_kernels` sets these variables unless the user set them (every x86-64 CPU of the last
decade has AVX2; elsewhere nothing is set; ``LTRR_CPU_KERNELS=native`` turns it off and
``LTRR_CPU_KERNELS=avx2`` takes MKL's AVX2 branch instead of COMPATIBLE; another value is a
`ConfigError` from `kernel_mode`, which the ``ltrr`` command and every stage's inputs call, while
``import ltrr`` stays quiet and pins as by default). A library
reads them when it loads, so ``import ltrr`` calls it first thing, and each library's pins are set
only if that library is not loaded yet: a process that imported numpy (or torch, or faiss) first
keeps that library's own kernels. The ``ltrr`` command and its worker processes are always
pinned; in a notebook, import ltrr before numpy for the command's numbers. `cpu_kernels` (in
every encoder's identity, so indexes and features built under other torch kernels are rebuilt,
not reused) says which torch kernels are in effect, and `numeric_kernels` says it for each
library (the features stage's inputs name it); `unpinned_note` is the features stage's warning
when a library loaded before ltrr keeps AVX-512 kernels.

`one_blas_thread` runs a block of numpy linear algebra on one BLAS thread. OpenBLAS splits an
SVD's and a matrix product's sums by its thread count, so the query-embedding PCA of the
features came out different in the last bits with 2 threads (a main process) and with 1 (a
joblib worker, which loky limits to cores / n_jobs), and the torch rankers trained on those
features diverged from there: the eval stage's tables differed between ``[eval] n_jobs`` 1 and 2
on the 5,732-query demo (measured in session 23: ffn-pointwise's mean utility 0.3056 against
0.3014 on the balanced split), and would between machines with other core counts.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator

from ltrr._errors import ConfigError

__all__ = ["pin_cpu_kernels", "kernel_mode", "cpu_kernels", "numeric_kernels", "unpinned_note", "machine_record", "has_avx2",
           "one_blas_thread", "cpu_vendor", "reproducibility_note"]

#: library (the module whose loading reads the variables) -> the variables that pin its kernels
_PINS: dict[str, dict[str, str]] = {
    "torch": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    "numpy": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Haswell"},
    "faiss": {"FAISS_SIMD_LEVEL": "AVX2"},
}
#: ``LTRR_CPU_KERNELS=portable`` (the default): MKL's COMPATIBLE branch instead of AVX2, which MKL
#: does not take on AMD CPUs (see the module's docstring)
_PORTABLE = {"MKL_CBWR": "COMPATIBLE"}
#: libraries that were loaded before `pin_cpu_kernels` ran (their kernels are their own)
_LOADED_FIRST: set[str] = set()


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in ``/proc/cpuinfo`` (``"flags"``, ``"model name"``); None
    where there is no such file (not Linux) or field."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.split(":", 1)[0].strip() == field),
                        None)
    except OSError:
        return None


def _cpu_flags() -> set[str]:
    """The CPU's feature flags on an x86-64 Linux machine; empty elsewhere (where the kernels are
    left to the libraries)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return set()
    return set((_cpuinfo("flags") or "").split())


def has_avx2() -> bool:
    """Whether this is an x86-64 Linux machine whose CPU has AVX2 (where the pins apply)."""
    return "avx2" in _cpu_flags()


def _numpy_names_its_targets() -> bool:
    """numpy >= 2.4 dispatches to the targets that ``_PINS["numpy"]`` disables (read from its
    metadata, without importing it); older numpy names them otherwise and warns on these names."""
    version = _installed_version("numpy")
    try:
        major, minor = (int(p) for p in (version or "").split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 4)


def _installed_version(dist: str) -> str | None:
    """The installed version of ``dist`` without importing it, or None when it is not installed.

    The ``<dist>-<version>.dist-info`` folder beside the package (where pip puts it) is read
    first: ``importlib.metadata`` costs about 19 ms to import, which every ``import ltrr`` paid
    for this one lookup; other layouts (eggs, conda) fall back to it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(dist)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(os.path.realpath(spec.origin)))
        with contextlib.suppress(OSError):
            infos = [f for f in os.listdir(site) if f.startswith(f"{dist}-") and f.endswith(".dist-info")]
            if len(infos) == 1:
                return infos[0][len(dist) + 1:-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


#: the values ``LTRR_CPU_KERNELS`` takes (unset or empty means `DEFAULT_MODE`)
KERNEL_MODES = ("portable", "avx2", "native")
#: the mode when ``LTRR_CPU_KERNELS`` is unset: the same bits on AMD and Intel CPUs
DEFAULT_MODE = "portable"


def kernel_mode() -> str:
    """The mode ``LTRR_CPU_KERNELS`` asks for: ``"portable"`` (the default), ``"avx2"`` or
    ``"native"``; a `ConfigError` for any other value (the ``ltrr`` command's one-line error)."""
    mode = os.environ.get("LTRR_CPU_KERNELS", "").strip().lower() or DEFAULT_MODE
    if mode not in KERNEL_MODES:
        raise ConfigError(f"LTRR_CPU_KERNELS={os.environ['LTRR_CPU_KERNELS']!r} is not one of "
                          f"{', '.join(KERNEL_MODES)} (unset means {DEFAULT_MODE})")
    return mode


def _mode_or_default() -> str:
    """`kernel_mode`, or the default for a value it does not know: ``import ltrr`` stays quiet, and
    `numeric_kernels` and `cpu_kernels` (every stage's and encoder's inputs) raise the error."""
    try:
        return kernel_mode()
    except ConfigError:
        return DEFAULT_MODE


def _pins(mode: str) -> dict[str, dict[str, str]]:
    """`_PINS` under a `kernel_mode` (``portable``: MKL's vendor-neutral code path for torch's
    products)."""
    if mode != "portable":
        return _PINS
    return {**_PINS, "torch": {**_PINS["torch"], **_PORTABLE}}


def pin_cpu_kernels() -> dict[str, str]:
    """Pin the kernels of each numerical library not yet loaded (AVX2, and MKL's vendor-neutral
    branch unless ``LTRR_CPU_KERNELS=avx2``); returns what was set."""
    mode = _mode_or_default()
    if mode == "native" or not has_avx2():
        return {}
    set_now: dict[str, str] = {}
    for library, pins in _pins(mode).items():
        if library in sys.modules:
            _LOADED_FIRST.add(library)
            continue
        for key, value in pins.items():
            if key == "NPY_DISABLE_CPU_FEATURES" and not _numpy_names_its_targets():
                continue
            if key not in os.environ:
                set_now[key] = value
    os.environ.update(set_now)
    return set_now


def cpu_kernels() -> str:
    """The CPU kernels torch computes with, as a short string for cache identities.

    ``"portable"`` under the default pins, ``"avx2"`` under ``LTRR_CPU_KERNELS=avx2``, otherwise
    the settings as found
    (``"aten=AVX512,onednn=NATIVE,mkl=NATIVE"``). Imports torch.
    """
    import torch

    kernel_mode()  # an unknown LTRR_CPU_KERNELS: the ConfigError
    aten = str(torch.backends.cpu.get_cpu_capability()).upper()
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "native").upper()
    mkl = os.environ.get("MKL_CBWR", "native").upper()
    if (aten, onednn, mkl) == ("AVX2", "AVX2", "AVX2"):
        return "avx2"
    if (aten, onednn, mkl) == ("AVX2", "AVX2", "COMPATIBLE"):
        return "portable"
    return f"aten={aten},onednn={onednn},mkl={mkl}"


def numeric_kernels() -> dict[str, str]:
    """Each library's kernels as this process set them: ``"avx2"`` where pinned (torch:
    ``"portable"`` under the default, ``"avx2"`` under ``LTRR_CPU_KERNELS=avx2``), else ``"native"``.

    A library counts as pinned when every one of its variables holds its pin and it was not loaded
    before `pin_cpu_kernels` ran (numpy older than 2.4 is never pinned). Imports nothing (torch's
    own report is `cpu_kernels`).

    Examples
    --------
    >>> sorted(numeric_kernels())
    ['faiss', 'numpy', 'torch']
    """
    kernel_mode()  # an unknown LTRR_CPU_KERNELS: the ConfigError, not numbers under unasked kernels

    def holds(library: str, mode: str) -> bool:
        return library not in _LOADED_FIRST and all(os.environ.get(k) == v for k, v in _pins(mode)[library].items())

    # numpy's and faiss's portable pins are their avx2 ones, so only torch can read "portable"
    return {library: next((m for m in ("avx2", "portable") if holds(library, m)), "native") for library in _PINS}


def unpinned_note() -> str | None:
    """One line for a stage's log when the numbers may differ from the ``ltrr`` command's on an
    x86-64 machine with AVX2: no pin applies on this machine (another architecture, such as an
    Apple Silicon Mac, or a CPU or OS whose AVX2 ltrr cannot read), or a library loaded before
    ltrr keeps kernels that differ from the pinned ones (on a CPU with AVX-512). None otherwise
    (pinned, or ``LTRR_CPU_KERNELS=native`` asked for)."""
    if _mode_or_default() == "native":
        return None
    if not has_avx2():
        return (f"the CPU-kernel pins apply to x86-64 CPUs with AVX2 read from /proc/cpuinfo, not to this "
                f"{platform.system()} {platform.machine()} machine: the libraries' own kernels are in effect, so "
                "features and figures can differ in the last bits from those made on x86-64, and a shipped "
                "corpus-embedding matrix made under the pins is not used (the corpus is encoded here)")
    if not _LOADED_FIRST or "avx512f" not in _cpu_flags():
        return None
    one = len(_LOADED_FIRST) == 1
    return (f"{' and '.join(sorted(_LOADED_FIRST))} {'was' if one else 'were'} imported before ltrr, so "
            f"{'its' if one else 'their'} own AVX-512 kernels are in effect and these numbers can differ in "
            "the last bits from the `ltrr` command's; import ltrr first")


#: the libraries whose versions change a run's numbers -> their distributions' names (read from
#: the metadata, not imported)
_RECORDED = {"numpy": ("numpy",), "scipy": ("scipy",), "scikit-learn": ("scikit-learn",),
             "lightgbm": ("lightgbm",), "xgboost": ("xgboost", "xgboost-cpu"), "torch": ("torch",),
             "faiss": ("faiss-cpu", "faiss-gpu", "faiss"), "pandas": ("pandas",)}


def machine_record() -> dict:
    """Where a result was computed: the CPU, the kernels in effect and the numerical libraries'
    versions, for a record beside the result (`ltrr.eval.headline` writes ``environment.json``).
    Imports nothing heavy.

    Examples
    --------
    >>> sorted(machine_record())
    ['avx512', 'cpu', 'kernels', 'python', 'vendor', 'versions']
    """
    from importlib import metadata

    cpu = _cpuinfo("model name") or platform.processor() or platform.machine()
    versions: dict[str, str | None] = {}
    for name, dists in _RECORDED.items():
        versions[name] = None
        for dist in dists:
            try:
                versions[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return {"cpu": cpu, "vendor": cpu_vendor(), "avx512": "avx512f" in _cpu_flags(), "kernels": numeric_kernels(),
            "python": platform.python_version(), "versions": versions}


#: ``/proc/cpuinfo``'s ``vendor_id`` -> the vendor's name
_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon"}


def cpu_vendor() -> str | None:
    """The x86-64 CPU's vendor (``"Intel"``, ``"AMD"``, another ``vendor_id`` as found), or None where
    ``/proc/cpuinfo`` does not say (not Linux, not x86-64). torch's MKL chooses its code path by it
    (the module's docstring), so figures computed under the ``avx2`` pins agree to the last bit only
    between CPUs of one vendor."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    vendor = _cpuinfo("vendor_id")
    return _VENDORS.get(vendor, vendor) if vendor else None


def reproducibility_note(record: dict) -> str | None:
    """One line for a result computed on the machine ``record`` (`machine_record`, as written to
    ``environment.json``): on which machines its figures should come out the same to the last digit.

    None for a record without the fields (an ``environment.json`` written before they existed).

    Examples
    --------
    >>> reproducibility_note({"vendor": "Intel", "kernels": {"torch": "avx2", "numpy": "avx2", "faiss": "avx2"}})[:72]
    "Computed on an Intel CPU with torch's avx2 kernels: another Intel x86-64"
    >>> reproducibility_note({"cpu": "x"}) is None
    True
    """
    kernels, vendor = record.get("kernels"), record.get("vendor")
    if not isinstance(kernels, dict) or "torch" not in kernels:
        return None
    where = (f"an {vendor} CPU" if vendor in ("Intel", "AMD") else f"a {vendor} CPU" if vendor
             else "a CPU whose vendor was not recorded")
    if "native" in kernels.values():
        return (f"Computed on {where} with native kernels ({', '.join(k for k, v in kernels.items() if v == 'native')}): "
                "another CPU may give other last bits and, through the trained rankers, other figures.")
    if kernels["torch"] == "portable":
        return (f"Computed on {where} with the portable kernels: x86-64 CPUs with AVX2 of either vendor and these "
                "versions should give the same figures to the last digit.")
    same = f"another {vendor} x86-64 CPU" if vendor else "another x86-64 CPU of the same vendor"
    return (f"Computed on {where} with torch's avx2 kernels: {same} with AVX2 and these versions should give "
            "the same figures to the last digit; MKL takes another branch on the other vendor's CPUs, where they "
            "can differ (LTRR_CPU_KERNELS=portable, the default, agrees across vendors; "
            "benchmarks/results/cpu_determinism/).")


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run a block with numpy's BLAS and LAPACK on one thread, then restore the caller's setting.

    For the small products whose last bits feed a training (the PCA of a few thousand query
    embeddings takes milliseconds either way); not for large products where threads pay.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
