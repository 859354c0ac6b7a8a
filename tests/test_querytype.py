"""Query-type classifiers: hand examples, the phrasing labels, grouped evaluation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ltrr._errors import ConfigError, DataError
from ltrr.features.querytype import (
    KEYWORD,
    QUESTION,
    EmbeddingQueryTypeClassifier,
    RuleQueryTypeClassifier,
    SpacyQueryTypeClassifier,
    evaluate_query_type,
    get_query_type_classifier,
    phrasing_labels,
    query_type_classifiers,
)

KEYWORD_QUERIES = [
    "capital of australia population",
    "will smith movies",
    "can opener",
    "list of presidents of the united states",
    "name generator fantasy",
    "mount everest height",
    "recounts marley dickens",
    "boiling point of water fahrenheit",
]
QUESTIONS = [
    "What is the capital of Australia?",
    "who wrote pride and prejudice",
    "how to tie a tie",
    "is the earth flat",
    "tell me about the french revolution",
    "explain quantum entanglement simply",
    "I need the population of Canada.",
    "Can you list the planets in order from the sun",
    "Please give me a summary of the plot of Hamlet.",
    "name the first man on the moon",
    "While helping my kid we got stuck. What is the part of the body between the chest and pelvis? Any help?",
    "Describe the water cycle.",
]


def test_rules_on_the_brief_examples():
    clf = RuleQueryTypeClassifier()
    assert clf.predict(["capital of australia population"]).tolist() == [KEYWORD]
    assert clf.predict(["What is the capital of Australia?"]).tolist() == [QUESTION]


def test_rules_on_hand_examples():
    clf = get_query_type_classifier("rules")
    assert clf.predict(KEYWORD_QUERIES).tolist() == [KEYWORD] * len(KEYWORD_QUERIES)
    assert clf.predict(QUESTIONS).tolist() == [QUESTION] * len(QUESTIONS)


def test_rules_need_no_fit_and_validate_input():
    clf = RuleQueryTypeClassifier()
    assert clf.fit(["a b"]) is clf
    assert clf.predict([]).tolist() == []
    assert clf.predict(["", "?"]).tolist() == [KEYWORD, QUESTION]
    with pytest.raises(DataError, match="not a single string"):
        clf.predict("what is it?")
    with pytest.raises(DataError, match="take strings"):
        clf.predict([3])


def test_registry():
    assert query_type_classifiers.names() == ["logreg", "rules", "spacy"]
    with pytest.raises(
        ConfigError,
        match="unknown query-type classifier 'bert'; choose one of: logreg, rules, spacy",
    ):
        get_query_type_classifier("bert")


def test_logreg_learns_from_given_embeddings():
    rng = np.random.default_rng(0)
    y = np.array([0, 1] * 20)
    E = rng.normal(size=(40, 6)) + y[:, None] * 3.0
    texts = [f"q{i}" for i in range(40)]
    clf = EmbeddingQueryTypeClassifier(random_state=0).fit(texts, y, embeddings=E)
    assert (clf.predict(texts, embeddings=E) == y).mean() == 1.0
    with pytest.raises(DataError, match="both classes"):
        EmbeddingQueryTypeClassifier().fit(texts, np.ones(40), embeddings=E)
    with pytest.raises(Exception, match="not fitted"):
        EmbeddingQueryTypeClassifier().predict(texts, embeddings=E)


def demo_like_queries():
    return pd.DataFrame(
        {
            "qid": [f"q{i}" for i in range(8)],
            "question": [
                "rare words here",
                "What is X?",
                "Who is Y?",
                "alpha beta gamma",
                "In what year did Z happen?",
                "I wonder. What is W?",
                "delta epsilon zeta",
                "When was V?",
            ],
            "group": ["g0", "g0", "g1", "g1", "g2", "g3", "g4", "g4"],
            "phrasing": [
                "query",
                "natural",
                "natural",
                "query",
                "natural",
                "verbose",
                "query",
                "natural",
            ],
        }
    )


def test_phrasing_labels_and_grouped_evaluation():
    q = demo_like_queries()
    assert phrasing_labels(q).tolist() == [0, 1, 1, 0, 1, 1, 0, 1]
    res = evaluate_query_type(q, names=("rules",), n_splits=3, test_size=0.4, random_state=0)
    assert res["rules"]["mean"] == 1.0 and res["rules"]["std"] == 0.0
    with pytest.raises(DataError, match="unknown phrasing value"):
        phrasing_labels(q.assign(phrasing="chatty"))
    with pytest.raises(DataError, match="no phrasing column"):
        phrasing_labels(q.drop(columns="phrasing"))


def test_grouped_evaluation_fits_logreg_on_train_side_only():
    q = demo_like_queries()
    y = phrasing_labels(q)
    E = np.c_[y * 2.0 - 1.0, np.zeros(8)]
    res = evaluate_query_type(
        q, names=("logreg",), n_splits=2, test_size=0.4, random_state=1, embeddings=E
    )
    assert res["logreg"]["mean"] == 1.0


@pytest.mark.slow
def test_spacy_classifier_on_hand_examples():
    clf = SpacyQueryTypeClassifier()
    assert clf.predict(
        ["capital of australia population", "What is the capital of Australia?"]
    ).tolist() == [0, 1]
    assert clf.predict(["tell me about the french revolution", "is the earth flat"]).tolist() == [
        1,
        1,
    ]
    with pytest.raises(ConfigError, match="cannot load spaCy pipeline 'no_such_pipeline'"):
        SpacyQueryTypeClassifier("no_such_pipeline").predict(["x"])
