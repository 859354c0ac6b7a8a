"""Lexical metrics (em, f1, contains), semsim, input validation and the metric text form.

The SQuAD agreement tests compare with the official v1.1 evaluation script's functions, copied
below unchanged from ``evaluate-v1.1.py`` (they are not packaged anywhere installable), and
with values worked out by hand.
"""

from __future__ import annotations

import re
import string
import sys
from collections import Counter

import numpy as np
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.embed import Encoder
from ltrr.metrics import (
    EM,
    F1,
    Contains,
    Metric,
    SemSim,
    metrics,
    normalize_answer,
    parse_metric,
    parse_metrics,
)


# ---- official SQuAD v1.1 evaluation functions (reference implementation) -------------------
def squad_normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def squad_f1_score(prediction, ground_truth):
    prediction_tokens = squad_normalize_answer(prediction).split()
    ground_truth_tokens = squad_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def squad_exact_match_score(prediction, ground_truth):
    return squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth)


def squad_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


# ---- hand cases ------------------------------------------------------------------------------
# (prediction, aliases, em, f1), each worked out by hand.
HAND = [
    ("The Denver Broncos", ["Denver Broncos"], 1.0, 1.0),
    ("Denver Broncos won", ["Denver Broncos"], 0.0, 0.8),  # P 2/3, R 1
    ("in 1990", ["1990"], 0.0, 2 / 3),  # P 1/2, R 1
    ("x x y", ["x y y"], 0.0, 2 / 3),  # common {x:1, y:1}: P 2/3, R 2/3
    ("Carolina Panthers", ["Denver Broncos"], 0.0, 0.0),
    ("U.S.A.", ["USA"], 1.0, 1.0),
    ("Hello,   World!", ["hello world"], 1.0, 1.0),
    ("“Paris”", ["Paris"], 0.0, 0.0),  # curly quotes are not ASCII punctuation
    ("", ["Paris"], 0.0, 0.0),
    ("the", ["a"], 1.0, 0.0),  # both normalise to "": v1.1 says EM 1, F1 0
    ("Saint Bernadette", ["Bernadette Soubirous", "Saint Bernadette Soubirous"], 0.0, 0.8),
    ("an apple pie and a cake", ["apple cake"], 0.0, 2 * (2 / 4) * 1 / (2 / 4 + 1)),
]


@pytest.mark.parametrize("pred, aliases, em, f1", HAND)
def test_em_f1_hand_cases(pred, aliases, em, f1):
    assert EM().score("q", pred, aliases) == em
    assert F1().score("q", pred, aliases) == pytest.approx(f1, abs=1e-12)
    # and the official script agrees with the hand values
    assert float(squad_metric_max_over_ground_truths(squad_exact_match_score, pred, aliases)) == em
    assert squad_metric_max_over_ground_truths(squad_f1_score, pred, aliases) == pytest.approx(f1)


STRINGS = [
    "The Eiffel Tower",
    "eiffel tower, Paris",
    "A man, a plan, a canal: Panama!",
    "panama canal",
    "Norman conquest of England (1066)",
    "1066",
    "in the year 1066",
    "the the the",
    "",
    "   ",
    "Théâtre de l'Odéon",
    "theatre de lodeon",
    "New York City",
    "new-york",
    "an Apple a day",
    "Martin Luther King Jr.",
    "King, Martin Luther",
    "tab\tseparated\nlines",
]


def test_agreement_with_official_script_on_all_pairs():
    preds = STRINGS
    aliases = [[a] for a in STRINGS if a.strip()]  # blank aliases are rejected on input
    n, m = len(preds), len(aliases)
    qs = ["q"] * (n * m)
    P = [p for p in preds for _ in range(m)]
    A = [a for _ in range(n) for a in aliases]
    em = EM().score_batch(qs, P, A)
    f1 = F1().score_batch(qs, P, A)
    for k, (p, a) in enumerate(zip(P, A, strict=True)):
        assert normalize_answer(p) == squad_normalize_answer(p)
        assert em[k] == float(squad_exact_match_score(p, a[0])), (p, a)
        assert f1[k] == pytest.approx(squad_f1_score(p, a[0]), abs=1e-12), (p, a)
    # multi-alias max agrees too
    got = F1().score_batch(["q"] * n, preds, [STRINGS[:5]] * n)
    want = [squad_metric_max_over_ground_truths(squad_f1_score, p, STRINGS[:5]) for p in preds]
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize(
    "pred, aliases, expected",
    [
        ("It is Paris, France.", ["paris"], 1.0),
        ("Parisian cafes", ["paris"], 0.0),  # whole tokens only
        ("I live in New York City", ["new york"], 1.0),
        ("york new", ["New York"], 0.0),  # contiguous, in order
        ("The answer: Martin Luther King Jr.", ["Luther King"], 1.0),
        ("the", ["The"], 0.0),  # an alias that normalises to nothing never matches
        ("", ["paris"], 0.0),
        ("London", ["Paris", "london"], 1.0),
        ("1066", ["in 1066"], 0.0),
    ],
)
def test_contains(pred, aliases, expected):
    assert Contains().score("q", pred, aliases) == expected


def test_details_name_the_best_alias():
    r = F1().score_details(
        ["q"], ["Denver Broncos"], [["Carolina", "the Denver Broncos", "Broncos"]]
    )
    assert r.details[0] == {"best_alias": 1} and r.n_failed == 0 and r.errors == [None]


# ---- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", [EM(), F1(), Contains()])
def test_validation_errors_name_the_item(metric):
    with pytest.raises(DataError, match=r"same length; got 2, 1 and 2"):
        metric.score_batch(["q", "q"], ["a"], [["a"], ["b"]])
    with pytest.raises(DataError, match=r"answers\[1\] is empty"):
        metric.score_batch(["q", "q"], ["a", "b"], [["a"], []])
    with pytest.raises(DataError, match=r"predictions\[1\] must be a string, got NoneType"):
        metric.score_batch(["q", "q"], ["a", None], [["a"], ["b"]])
    with pytest.raises(DataError, match=r"predictions\[0\] must be a string, got float \(nan\)"):
        metric.score_batch(["q"], [float("nan")], [["a"]])
    with pytest.raises(DataError, match=r"answers\[0\]\[1\] must be a string, got int"):
        metric.score_batch(["q"], ["a"], [["a", 3]])
    with pytest.raises(
        DataError, match=r"answers\[0\] must be a list of reference strings, got the string 'Paris'"
    ):
        metric.score_batch(["q"], ["a"], ["Paris"])
    with pytest.raises(DataError, match=r"questions\[0\] must be a string"):
        metric.score_batch([7], ["a"], [["a"]])
    with pytest.raises(DataError, match=r"answers\[0\]\[0\] is blank"):
        metric.score("q", "a", [" "])
    with pytest.raises(DataError, match=r"predictions must be a list, got a single str"):
        metric.score_batch(["q"], "a", [["a"]])


def test_numpy_and_pandas_inputs():
    import pandas as pd

    df = pd.DataFrame(
        {
            "q": ["q1", "q2"],
            "p": ["Paris", "Rome"],
            "a": [np.array(["paris", "x"]), np.array(["Milan"])],
        }
    )
    np.testing.assert_array_equal(EM().score_batch(df.q, df.p, df.a), [1.0, 0.0])
    assert EM().score_batch([], [], []).shape == (0,)


# ---- text form -------------------------------------------------------------------------------


def test_registry_and_round_trip():
    assert metrics.names() == ["ac", "aqs", "bem", "contains", "em", "f1", "recall", "semsim"]
    for name in metrics.names():
        m = parse_metric(name)
        assert isinstance(m, Metric) and str(m) == name and parse_metric(str(m)) == m
    assert parse_metric("f1") == F1() and parse_metric(" F1 ") == F1()
    assert parse_metric("em") != parse_metric("f1") and hash(EM()) != hash(F1())
    assert len({EM(), EM(), F1(), SemSim(), SemSim(encoder="e5")}) == 4
    assert parse_metric(F1()) is not None and parse_metric(SemSim()) == SemSim()
    assert parse_metric("semsim(encoder=minilm)") == SemSim() and str(SemSim()) == "semsim"
    m = parse_metric("semsim(encoder=e5)")
    assert str(m) == "semsim(encoder=e5)" and parse_metric(str(m)) == m
    with pytest.raises(Exception, match="cannot assign"):
        m.encoder = "minilm"


def test_quoted_values_round_trip():
    for folder in ["/models/my encoder, v2", "C:\\models\\e5", "123", "true", 'say "hi"']:
        m = SemSim(encoder=folder)
        assert parse_metric(str(m)) == m, str(m)
    assert parse_metric("semsim(encoder='/a b')") == SemSim(encoder="/a b")
    assert str(SemSim(encoder="/data/enc-1")) == "semsim(encoder=/data/enc-1)"


def test_parse_errors():
    with pytest.raises(
        ConfigError,
        match=r"unknown metric 'bleu'; choose one of: ac, aqs, bem, contains, em, f1, recall, semsim",
    ):
        parse_metric("bleu")
    with pytest.raises(
        ConfigError, match=r"metric f1 has no parameter 'k'; its parameters: \(none\)"
    ):
        parse_metric("f1(k=3)")
    with pytest.raises(
        ConfigError, match=r"metric semsim has no parameter 'model'; its parameters: encoder"
    ):
        parse_metric("semsim(model=x)")
    with pytest.raises(ConfigError, match=r"label_index='one' is not a valid int"):
        parse_metric("bem(label_index=one)")
    with pytest.raises(ConfigError, match=r"parameters go in parentheses"):
        parse_metric("semsim encoder=e5")
    with pytest.raises(ConfigError, match=r"expected key=value"):
        parse_metric("semsim(e5)")
    with pytest.raises(ConfigError, match=r"unterminated quoted value"):
        parse_metric('semsim(encoder="e5)')
    with pytest.raises(ConfigError, match=r"parameter encoder given twice"):
        parse_metric("semsim(encoder=a, encoder=b)")
    with pytest.raises(ConfigError, match=r"takes a int, got the string '3'"):
        parse_metric('bem(label_index="3")')
    with pytest.raises(ConfigError, match=r"a metric is given by name, got int"):
        parse_metric(3)


def test_parse_metrics():
    got = parse_metrics('em, f1,bem(model="/m, x", label_index=0) ,semsim(encoder=e5)')
    assert [str(m) for m in got] == [
        "em",
        "f1",
        'bem(model="/m, x", label_index=0)',
        "semsim(encoder=e5)",
    ]
    assert parse_metrics(["em", F1()]) == [EM(), F1()]
    with pytest.raises(ConfigError, match="no metric given"):
        parse_metrics(" , ")


def test_importing_metrics_loads_no_heavy_library():
    import subprocess

    code = (
        "import sys, ltrr.metrics; "
        "print([m for m in ('torch', 'transformers', 'ragas', 'sentence_transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- semsim ----------------------------------------------------------------------------------


class TableEncoder(Encoder):
    """Fixed 3-d vectors per text, so cosines are known by hand."""

    name = "table"
    VECTORS = {
        "Paris": [1.0, 0.0, 0.0],
        "paris france": [3.0, 4.0, 0.0],  # cos with Paris = 0.6
        "London": [0.0, 1.0, 0.0],  # cos with Paris = 0
        "Rome": [0.0, 0.0, 2.0],
    }

    def __init__(self):
        self.seen: list[list[str]] = []

    @property
    def dim(self):
        return 3

    @property
    def identity(self):
        return "table"

    def _encode(self, texts, batch_size, show_progress):
        self.seen.append(list(texts))
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


def test_semsim_cosine_max_over_aliases_and_empty_prediction():
    enc = TableEncoder()
    scorer = SemSim().bind(encoder=enc)
    r = scorer.score_details(
        ["q"] * 4,
        ["Paris", "paris france", "", "Rome"],
        [["London", "Paris"], ["Paris"], ["Paris"], ["Paris", "London"]],
    )
    np.testing.assert_allclose(r.values, [1.0, 0.6, 0.0, 0.0], atol=1e-6)
    assert r.details[0] == {"best_alias": 1} and r.details[2] == {"empty_prediction": True}
    # each distinct text is encoded once, in one call
    assert len(enc.seen) == 1 and sorted(enc.seen[0]) == sorted(set(enc.seen[0]))


def test_semsim_stays_within_its_documented_range():
    """A float32 dot of a normalised vector with itself passed 1 by an ulp (1.000000238)."""

    class Random(TableEncoder):
        def _encode(self, texts, batch_size, show_progress):
            return np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=384) for t in texts]).astype(np.float32)

        @property
        def dim(self):
            return 384

    texts = [f"answer {i}" for i in range(60)]
    v = SemSim().bind(encoder=Random()).score_batch(["q"] * 60, texts, [[t, "-" + t] for t in texts])
    assert v.max() <= 1.0 and v.min() >= -1.0
    np.testing.assert_allclose(v, 1.0, atol=1e-6)  # each text is its own best alias


@pytest.mark.slow
def test_semsim_with_the_packaged_minilm():
    from ltrr.embed import get_encoder

    scores = SemSim().score_batch(
        ["capital?"] * 3,
        ["Paris", "The capital is Paris.", "bananas are yellow"],
        [["Paris"], ["London", "Paris"], ["Paris"]],
    )
    assert scores[0] == pytest.approx(1.0, abs=1e-5)
    v = get_encoder("minilm").encode_queries(["The capital is Paris.", "Paris"])
    assert scores[1] == pytest.approx(float(v[0] @ v[1]), abs=1e-5)
    assert scores[2] < scores[1] < scores[0]


def test_token_recall_against_hand_values():
    from ltrr.metrics.lexical import Recall

    r = Recall()
    assert r.score("q", "The painter was Leonardo da Vinci.", ["Leonardo da Vinci"]) == 1.0
    assert r.score("q", "da Vinci", ["Leonardo da Vinci", "Vinci"]) == 1.0  # best alias
    assert r.score("q", "Leonardo", ["Leonardo da Vinci"]) == pytest.approx(1 / 3)
    assert r.score("q", "nothing here", ["Paris"]) == 0.0
