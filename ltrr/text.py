"""The shared lexical tokenizer used by every BM25 backend (and by lexical features).

One `Tokenizer` turns a passage or a query into index terms: lowercase, split with a regular
expression, drop stopwords, stem. Every BM25 backend (bm25s, rank_bm25, Lucene through pyserini)
indexes and searches the *same* terms, so their rankings differ only by their scoring code.

Stopword lists
    ``"english"``: Lucene's default English stop set (33 words, ``EnglishAnalyzer``), taken from
    ``bm25s.stopwords.STOPWORDS_EN``. ``"sklearn"``: scikit-learn's ``ENGLISH_STOP_WORDS``
    (318 words). A list gives your own words; ``None`` keeps every word.
Stemmers
    Any algorithm of the Snowball stemmers in PyStemmer (``Stemmer.algorithms()``):
    ``"porter"`` (default; the original Porter algorithm, as Lucene's ``PorterStemFilter``),
    ``"english"`` (Porter2), ... ``None`` disables stemming.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ltrr._errors import ConfigError, MissingDependencyError

__all__ = ["Tokenizer", "STOPWORD_LISTS"]

#: named stopword lists accepted by ``Tokenizer(stopwords=...)``
STOPWORD_LISTS = ("english", "sklearn")


def _named_stopwords(name: str) -> frozenset[str]:
    if name == "english":
        from bm25s.stopwords import STOPWORDS_EN

        return frozenset(STOPWORDS_EN)
    if name == "sklearn":
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return frozenset(ENGLISH_STOP_WORDS)
    raise ConfigError(
        f"Tokenizer: unknown stopword list {name!r}; choose one of {list(STOPWORD_LISTS)}, "
        "a list of words, or None"
    )


class Tokenizer:
    """Configurable lexical tokenizer: lowercase, regex split, stopword removal, stemming.

    Parameters
    ----------
    lowercase : bool
        Lowercase the text before splitting.
    stopwords : {"english", "sklearn"}, list of str or None
        Words to drop (compared after lowercasing, before stemming), see the module docstring.
    stemmer : str or None
        PyStemmer algorithm name (``"porter"``, ``"english"``, ...) or None for no stemming.
    token_pattern : str
        Regular expression whose matches are the tokens (scikit-learn's convention).

    Examples
    --------
    >>> tok = Tokenizer()
    >>> tok.tokenize("The cats are running in the garden")
    ['cat', 'run', 'garden']
    >>> Tokenizer(stemmer=None, stopwords=None).tokenize("The cats")
    ['the', 'cats']
    >>> Tokenizer.from_dict(tok.to_dict()).tokenize("Running") == tok.tokenize("Running")
    True
    """

    def __init__(
        self,
        lowercase: bool = True,
        stopwords: str | Sequence[str] | None = "english",
        stemmer: str | None = "porter",
        token_pattern: str = r"(?u)\b\w+\b",
    ):
        self.lowercase = lowercase
        self.stopwords = stopwords
        self.stemmer = stemmer
        self.token_pattern = token_pattern
        self._compiled: tuple[Any, frozenset[str], Any] | None = None

    # ---- configuration -----------------------------------------------------------------
    def _setup(self) -> tuple[Any, frozenset[str], Any]:
        if self._compiled is not None:
            return self._compiled
        try:
            pattern = re.compile(self.token_pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(
                f"Tokenizer: token_pattern {self.token_pattern!r} is not a valid regular expression ({exc})"
            ) from None
        if self.stopwords is None:
            stop: frozenset[str] = frozenset()
        elif isinstance(self.stopwords, str):
            stop = _named_stopwords(self.stopwords)
        else:
            stop = frozenset(str(w).lower() if self.lowercase else str(w) for w in self.stopwords)
        stem = None
        if self.stemmer is not None:
            try:
                import Stemmer
            except ImportError as exc:
                raise MissingDependencyError(
                    f"Tokenizer(stemmer={self.stemmer!r}) needs PyStemmer: pip install PyStemmer ({exc})"
                ) from exc
            if self.stemmer not in Stemmer.algorithms():
                raise ConfigError(
                    f"Tokenizer: unknown stemmer {self.stemmer!r}; choose one of "
                    f"{', '.join(Stemmer.algorithms())}, or None"
                )
            stem = Stemmer.Stemmer(self.stemmer).stemWords
        self._compiled = (pattern, stop, stem)
        return self._compiled

    # ---- tokenizing --------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """Return the index terms of one text, in order (duplicates kept)."""
        pattern, stop, stem = self._setup()
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        if self.lowercase:
            text = text.lower()
        tokens = [t for t in pattern.findall(text) if t not in stop]
        if stem is not None and tokens:
            # Porter stems some tokens to "" (e.g. the "s" of "Earth's"); an empty term cannot
            # be indexed by Lucene, so it is dropped for every backend
            tokens = [t for t in stem(tokens) if t]
        return tokens

    def tokenize_batch(
        self, texts: Iterable[str], *, show_progress: bool = False
    ) -> list[list[str]]:
        """Tokenize many texts; returns one token list per text."""
        from tqdm.auto import tqdm

        return [self.tokenize(t) for t in tqdm(texts, disable=not show_progress, desc="tokenize")]

    # ---- persistence -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe parameters; `from_dict` rebuilds an identical tokenizer."""
        stop = self.stopwords
        if stop is not None and not isinstance(stop, str):
            stop = sorted(set(map(str, stop)))
        return {
            "lowercase": bool(self.lowercase),
            "stopwords": stop,
            "stemmer": self.stemmer,
            "token_pattern": self.token_pattern,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from `to_dict` output; unknown keys raise `ConfigError`."""
        if not isinstance(d, dict):
            raise ConfigError(f"Tokenizer.from_dict expects a dict, got {type(d).__name__}")
        allowed = {"lowercase", "stopwords", "stemmer", "token_pattern"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ConfigError(
                f"tokenizer: unknown key(s) {unknown}; allowed keys: {sorted(allowed)}"
            )
        return cls(**d)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"Tokenizer({args})"
