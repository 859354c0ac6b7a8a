"""The metric contract: named, hashable value objects whose text form round-trips.

As in ir_measures, a metric is a small frozen value object. Its text form is its registry name
followed, when a parameter differs from its default, by ``(key=value, ...)``; ``parse_metric``
reads it back, so configs, CLI flags and result tables use the same strings::

    parse_metric("f1") == F1()
    str(parse_metric("semsim(encoder=e5)")) == "semsim(encoder=e5)"
    parse_metric("semsim(encoder=minilm)") == SemSim()   # defaults are dropped from str()

Scoring takes three aligned lists: questions, predictions and, per item, a non-empty list of
reference aliases. Metrics that need a loaded model or an LLM judge are turned into a ready
`Scorer` by ``metric.bind(judge=..., encoder=..., device=...)``; the value object itself holds
no model and stays hashable. Lexical metrics (and model metrics whose model loads from a name)
can be scored straight from the value object, which binds itself with defaults.

Failures. A scorer returns a `MetricScores` from ``score_details``: ``values`` holds NaN where an
item could not be scored (a judge call failed or returned unparseable output) and ``errors``
says why, so a labelling pipeline can count and record failures. ``score_batch`` and ``score``
never return a score for a failed item: they raise `GenerationError` naming the failed items.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import typing
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ltrr._errors import ConfigError, DataError, GenerationError
from ltrr._registry import Registry

if TYPE_CHECKING:
    from ltrr.embed import Encoder
    from ltrr.generation.base import Generator

__all__ = [
    "Metric",
    "Scorer",
    "MetricScores",
    "metrics",
    "parse_metric",
    "parse_metrics",
    "validate_inputs",
    "extract_json_object",
]

metrics: Registry = Registry("metric")


# ---- inputs ----------------------------------------------------------------------------------


def _as_list(x: Any, what: str) -> list[Any]:
    if isinstance(x, (str, bytes)):
        raise DataError(f"{what} must be a list, got a single {type(x).__name__}")
    if isinstance(x, list):
        return x
    if hasattr(x, "tolist"):  # numpy arrays and pandas Series
        return list(x.tolist())
    if isinstance(x, Sequence):
        return list(x)
    raise DataError(f"{what} must be a list, got {type(x).__name__}")


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} ({text[:40]})"


def validate_inputs(
    questions: Sequence[str], predictions: Sequence[str], answers: Sequence[Sequence[str]]
) -> tuple[list[str], list[str], list[list[str]]]:
    """Check the three aligned inputs of a metric and return them as plain lists.

    Accepts lists, tuples, numpy arrays and pandas Series (a Parquet list column comes back as
    numpy arrays of strings). Raises `DataError` naming the offending item on: lengths that
    differ, a question or prediction that is not a string, an ``answers`` item that is not a
    list of strings, an empty alias list, or a blank alias.
    """
    qs = _as_list(questions, "questions")
    ps = _as_list(predictions, "predictions")
    ans = _as_list(answers, "answers")
    if not (len(qs) == len(ps) == len(ans)):
        raise DataError(
            f"questions, predictions and answers must have the same length; got {len(qs)}, "
            f"{len(ps)} and {len(ans)}"
        )
    for i, q in enumerate(qs):
        if not isinstance(q, str):
            raise DataError(f"questions[{i}] must be a string, got {_describe(q)}")
    for i, p in enumerate(ps):
        if not isinstance(p, str):
            raise DataError(
                f"predictions[{i}] must be a string, got {_describe(p)}; record a failed "
                "generation as failed instead of scoring it"
            )
    out: list[list[str]] = []
    for i, a in enumerate(ans):
        if isinstance(a, str):
            raise DataError(
                f"answers[{i}] must be a list of reference strings, got the string {a[:40]!r}; "
                "wrap a single answer in a list"
            )
        if not isinstance(a, (Sequence, np.ndarray)):
            raise DataError(f"answers[{i}] must be a list of strings, got {_describe(a)}")
        aliases = list(a.tolist()) if isinstance(a, np.ndarray) else list(a)
        if not aliases:
            raise DataError(
                f"answers[{i}] is empty; every item needs at least one reference answer"
            )
        for j, alias in enumerate(aliases):
            if not isinstance(alias, str):
                raise DataError(f"answers[{i}][{j}] must be a string, got {_describe(alias)}")
            if not alias.strip():
                raise DataError(f"answers[{i}][{j}] is blank; drop empty reference aliases")
        out.append(aliases)
    return qs, ps, out


# ---- results ---------------------------------------------------------------------------------


@dataclass
class MetricScores:
    """Per-item scores of one metric on one batch, with failures kept apart.

    Attributes
    ----------
    metric : Metric
        The metric that produced the scores.
    values : numpy.ndarray
        float64 scores, NaN where the item failed.
    errors : list of (str or None)
        Why each failed item failed; None where it was scored.
    details : list of dict
        Per-item extras (the judge's justification, the best alias, ...); empty dicts where a
        metric has nothing to add.

    Examples
    --------
    >>> import numpy as np
    >>> from ltrr.metrics import F1
    >>> r = MetricScores(F1(), np.array([1.0, np.nan]), [None, "judge failed"], [{}, {}])
    >>> r.n_failed
    1
    >>> r.failed.tolist()
    [False, True]
    """

    metric: Metric
    values: np.ndarray
    errors: list[str | None]
    details: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> np.ndarray:
        """Boolean mask of the items that could not be scored."""
        return np.array([e is not None for e in self.errors], dtype=bool)

    @property
    def n_failed(self) -> int:
        """Number of items that could not be scored."""
        return int(self.failed.sum())

    def raise_for_errors(self) -> None:
        """Raise `GenerationError` naming the failed items, if any."""
        bad = [i for i, e in enumerate(self.errors) if e is not None]
        if bad:
            shown = "; ".join(f"item {i}: {self.errors[i]}" for i in bad[:3])
            more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
            raise GenerationError(
                f"metric {self.metric} could not score {len(bad)} of {len(self.errors)} items: "
                f"{shown}{more}; use score_details() to keep the scored items and count failures"
            )


# ---- scorers ---------------------------------------------------------------------------------


class Scorer(ABC):
    """A metric bound to what it needs (a judge, a loaded model), ready to score.

    Subclasses implement `_score` on validated inputs; the public methods validate first.
    """

    def __init__(self, metric: Metric):
        self.metric = metric

    @abstractmethod
    def _score(
        self, questions: list[str], predictions: list[str], answers: list[list[str]]
    ) -> MetricScores:
        """Score validated inputs."""

    def score_details(
        self,
        questions: Sequence[str],
        predictions: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> MetricScores:
        """Score a batch, keeping failed items as NaN with their error; never raises for them."""
        qs, ps, ans = validate_inputs(questions, predictions, answers)
        return self._score(qs, ps, ans)

    def score_batch(
        self,
        questions: Sequence[str],
        predictions: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Score a batch; returns float64 scores. Raises `GenerationError` if any item failed."""
        result = self.score_details(questions, predictions, answers)
        result.raise_for_errors()
        return result.values

    def score(self, question: str, prediction: str, answers: Sequence[str]) -> float:
        """Score one item; raises `GenerationError` if it could not be scored."""
        return float(self.score_batch([question], [prediction], [answers])[0])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self.metric}>"


def _scores(metric: Metric, values: Sequence[float], details=None) -> MetricScores:
    n = len(values)
    return MetricScores(
        metric,
        np.asarray(values, dtype=np.float64).reshape(n),
        [None] * n,
        list(details) if details is not None else [{} for _ in range(n)],
    )


# ---- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric(ABC):
    """Base class of every metric: a frozen, hashable value object with a round-trip text form.

    Subclasses are frozen dataclasses whose fields are the metric's parameters (``str``,
    ``int``, ``float`` or ``bool``, each with a default), set ``name`` and implement `bind`.

    Examples
    --------
    >>> from ltrr.metrics import parse_metric, F1
    >>> m = parse_metric("f1")
    >>> m == F1(), str(m), hash(m) == hash(F1())
    (True, 'f1', True)
    >>> float(m.score("Who wrote Hamlet?", "William Shakespeare", ["Shakespeare"]))
    0.6666666666666666
    """

    #: registry name
    name: ClassVar[str] = "abstract"
    #: whether ``bind`` needs ``judge=``
    needs_judge: ClassVar[bool] = False
    #: the range scores fall in (for table formatting and checks)
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)

    @abstractmethod
    def bind(
        self,
        *,
        judge: Generator | None = None,
        encoder: Encoder | None = None,
        device: str | None = None,
    ) -> Scorer:
        """Return a `Scorer` ready to score.

        Parameters
        ----------
        judge : Generator, optional
            The LLM judge, for metrics with ``needs_judge`` (``ac``, ``aqs``).
        encoder : Encoder, optional
            An already loaded encoder to use instead of loading the one the metric names (to
            share one model between metrics); it must be that same model.
        device : str, optional
            Torch device for metrics that run a local model (``bem``); ``"cpu"`` by default.

        Resources a metric does not use are ignored, so a pipeline may bind every metric the
        same way.
        """

    def score_details(
        self,
        questions: Sequence[str],
        predictions: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> MetricScores:
        """``self.bind().score_details(...)``; see `Scorer.score_details`."""
        return self.bind().score_details(questions, predictions, answers)

    def score_batch(
        self,
        questions: Sequence[str],
        predictions: Sequence[str],
        answers: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """``self.bind().score_batch(...)``; see `Scorer.score_batch`."""
        return self.bind().score_batch(questions, predictions, answers)

    def score(self, question: str, prediction: str, answers: Sequence[str]) -> float:
        """``self.bind().score(...)``; see `Scorer.score`."""
        return self.bind().score(question, prediction, answers)

    # ---- text form ---------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """All parameters, defaults included."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __str__(self) -> str:
        changed = [
            f"{f.name}={_format_value(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return f"{self.name}({', '.join(changed)})" if changed else self.name

    def _require_judge(self, judge: Generator | None) -> Generator:
        from ltrr.generation.base import Generator

        if judge is None:
            raise ConfigError(
                f"metric {self} needs an LLM judge: use metric.bind(judge=generator) with an "
                "ltrr Generator (e.g. an OpenAI-compatible server or a local model)"
            )
        if not isinstance(judge, Generator):
            raise ConfigError(
                f"metric {self}: judge must be an ltrr.generation.Generator, got "
                f"{type(judge).__name__}"
            )
        return judge


def _metric_hash(self: Metric) -> int:
    return hash((self.name, tuple(getattr(self, f.name) for f in dataclasses.fields(self))))


def register(cls: type[Metric]) -> type[Metric]:
    """Class decorator (outermost, above ``@dataclass``): register a metric under its ``name``."""
    # dataclass hashes fields only, so every metric without parameters would share one hash.
    cls.__hash__ = _metric_hash  # type: ignore[method-assign,assignment]
    metrics.register(cls.name, cls)
    return cls


# ---- parsing ---------------------------------------------------------------------------------

_BARE_VALUE = re.compile(r"^[A-Za-z0-9_./:@+\-~]+$")
_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*")


def _format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    # Strings that would read back as another type, or hold separators, are quoted.
    if _BARE_VALUE.match(s) and s.lower() not in {"true", "false"} and not _looks_numeric(s):
        return s
    return json.dumps(s)


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _split_params(body: str, text: str) -> list[tuple[str, str, bool]]:
    """Split ``k=v, k="v,w"`` into (key, raw value, was_quoted) triples."""
    out: list[tuple[str, str, bool]] = []
    i, n = 0, len(body)
    while i < n:
        m = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*").match(body, i)
        if not m:
            raise ConfigError(
                f"cannot parse metric {text!r}: expected key=value at {body[i:]!r}; write e.g. "
                "semsim(encoder=minilm)"
            )
        key, i = m.group(1), m.end()
        if i < n and body[i] in "\"'":
            quote, j = body[i], i + 1
            while j < n and body[j] != quote:
                j += 2 if body[j] == "\\" else 1
            if j >= n:
                raise ConfigError(f"cannot parse metric {text!r}: unterminated quoted value")
            raw = body[i : j + 1]
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError) as exc:
                raise ConfigError(f"cannot parse metric {text!r}: bad quoted value {raw}") from exc
            out.append((key, value, True))
            i = j + 1
        else:
            j = body.find(",", i)
            j = n if j < 0 else j
            out.append((key, body[i:j].strip(), False))
            i = j
        rest = re.compile(r"\s*(,|$)").match(body, i)
        if not rest:
            raise ConfigError(f"cannot parse metric {text!r}: expected ',' at {body[i:]!r}")
        i = rest.end()
    return out


def _coerce(cls: type[Metric], key: str, raw: str, quoted: bool, text: str) -> Any:
    hints = typing.get_type_hints(cls)
    typ = hints[key]
    if quoted and typ is not str:
        raise ConfigError(f"metric {text!r}: {key} takes a {typ.__name__}, got the string {raw!r}")
    try:
        if typ is bool:
            low = raw.lower()
            if low in {"true", "1", "yes"}:
                return True
            if low in {"false", "0", "no"}:
                return False
            raise ValueError(raw)
        if typ is int:
            return int(raw)
        if typ is float:
            return float(raw)
        if typ is str:
            if not raw:
                raise ValueError(raw)
            return raw
    except ValueError:
        raise ConfigError(f"metric {text!r}: {key}={raw!r} is not a valid {typ.__name__}") from None
    raise ConfigError(f"metric {cls.name}: parameter {key} has unsupported type {typ!r}")


def parse_metric(text: str | Metric) -> Metric:
    """Read a metric from its text form (``"f1"``, ``"semsim(encoder=e5)"``).

    A `Metric` is returned unchanged. An unknown name raises `ConfigError` listing the
    registered metrics; an unknown parameter or a bad value raises `ConfigError` listing the
    metric's parameters.

    Examples
    --------
    >>> from ltrr.metrics import parse_metric
    >>> str(parse_metric("semsim(encoder=e5)"))
    'semsim(encoder=e5)'
    >>> parse_metric("EM") == parse_metric("em")
    True
    """
    if isinstance(text, Metric):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"a metric is given by name, got {type(text).__name__}")
    m = _NAME.match(text)
    if not m:
        raise ConfigError(
            f"cannot parse metric {text!r}; choose one of: {', '.join(metrics.names())}"
        )
    name = m.group(1).lower()
    rest = text[m.end() :]
    cls = metrics.get(name)
    kwargs: dict[str, Any] = {}
    if rest:
        if not (rest.startswith("(") and rest.rstrip().endswith(")")):
            raise ConfigError(
                f"cannot parse metric {text!r}: parameters go in parentheses, e.g. "
                f"{name}(key=value)"
            )
        body = rest.rstrip()[1:-1]
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key, raw, quoted in _split_params(body, text):
            if key not in allowed:
                raise ConfigError(
                    f"metric {name} has no parameter {key!r}; its parameters: "
                    f"{', '.join(allowed) or '(none)'}"
                )
            if key in kwargs:
                raise ConfigError(f"metric {text!r}: parameter {key} given twice")
            kwargs[key] = _coerce(cls, key, raw, quoted, text)
    return cls(**kwargs)


def parse_metrics(text: str | Sequence[str | Metric]) -> list[Metric]:
    """Read several metrics: a list of names, or one string of names separated by commas.

    Commas inside parentheses belong to parameters: ``"em,f1,bem(model=/m, label_index=0)"``.

    Examples
    --------
    >>> from ltrr.metrics import parse_metrics
    >>> [str(m) for m in parse_metrics("em, f1,semsim(encoder=e5)")]
    ['em', 'f1', 'semsim(encoder=e5)']
    """
    if isinstance(text, str):
        parts: list[str] = []
        cur: list[str] = []
        depth, quote = 0, ""
        for ch in text:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append("".join(cur))
                cur = []
                continue
            cur.append(ch)
        parts.append("".join(cur))
        items: Sequence[str | Metric] = [p.strip() for p in parts if p.strip()]
    else:
        items = list(text)
    if not items:
        raise ConfigError(f"no metric given; choose from: {', '.join(metrics.names())}")
    return [parse_metric(t) for t in items]


# ---- judge output ----------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """Parse the JSON object a judge returned; raise `GenerationError` if there is none.

    JSON mode makes most servers return a bare object, but small local models often wrap it in
    a Markdown code fence or add a sentence around it, so the first ``{...}`` object that
    decodes is taken. Anything else is an error, never a guess.
    """
    raw = text.strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group(1).strip()
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        obj = None
        decoder = json.JSONDecoder()
        for m in re.finditer(r"\{", raw):
            try:
                obj, _ = decoder.raw_decode(raw, m.start())
                break
            except json.JSONDecodeError:
                continue
    if not isinstance(obj, dict):
        raise GenerationError(f"judge output is not a JSON object: {_excerpt(text)}")
    return obj


def _excerpt(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[:n] + "...")
