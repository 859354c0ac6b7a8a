"""BM25: the shared tokenizer, the three backends against Lucene's formula and each other,
persistence, and input validation."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _wiki import wiki_corpus, wiki_queries

import ltrr.retrieval.bm25 as bm25mod
from ltrr._errors import ConfigError, DataError, MissingDependencyError, NotBuiltError
from ltrr.retrieval import BM25Retriever, Retriever, bm25_backends, passage_text
from ltrr.text import Tokenizer

FAST_BACKENDS = ["bm25s", "rank_bm25"]


# ---- tokenizer --------------------------------------------------------------------------------
def test_tokenizer_default_lowercases_drops_stopwords_and_stems():
    assert Tokenizer().tokenize("The Cats ARE running in the Garden") == ["cat", "run", "garden"]


def test_tokenizer_options():
    assert Tokenizer(stemmer=None, stopwords=None).tokenize("The Cats") == ["the", "cats"]
    assert Tokenizer(lowercase=False, stemmer=None, stopwords=None).tokenize("The Cats") == [
        "The",
        "Cats",
    ]
    assert Tokenizer(stopwords=["cats"], stemmer=None).tokenize("the cats purr") == ["the", "purr"]
    # scikit-learn's list is larger than Lucene's: "very" is only in the former
    assert Tokenizer(stopwords="english", stemmer=None).tokenize("very big") == ["very", "big"]
    assert Tokenizer(stopwords="sklearn", stemmer=None).tokenize("very big") == ["big"]
    assert Tokenizer(stemmer="english").tokenize("generously") == ["generous"]
    assert Tokenizer(stemmer="porter").tokenize("generously") == ["gener"]
    assert Tokenizer(token_pattern=r"[a-z]+").tokenize("abc123def") == ["abc", "def"]


def test_tokenizer_drops_empty_stems():
    # Porter stems the "s" of "Earth's" to ""; Lucene cannot index an empty term
    tokens = Tokenizer().tokenize("Earth's southernmost continent")
    assert "" not in tokens
    assert tokens == ["earth", "southernmost", "contin"]


def test_tokenizer_round_trip_and_batch():
    tok = Tokenizer(stopwords=["x", "y"], stemmer="english", lowercase=False)
    again = Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again == tok
    assert again.tokenize_batch(["Running dogs", "x y z"]) == [["Run", "dog"], ["z"]]


def test_tokenizer_errors():
    with pytest.raises(ConfigError, match="unknown stemmer 'klingon'"):
        Tokenizer(stemmer="klingon").tokenize("a")
    with pytest.raises(ConfigError, match="unknown stopword list 'french-ish'"):
        Tokenizer(stopwords="french-ish").tokenize("a")
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        Tokenizer(token_pattern="(").tokenize("a")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['stemming'\]"):
        Tokenizer.from_dict({"stemming": "porter"})


# ---- a hand-made corpus and Lucene's formula ------------------------------------------------
HAND = pd.DataFrame(
    {
        "docid": ["a", "b", "c", "d", "e"],
        "title": ["Cats", "Dogs", "Birds", "", "Cats"],
        "text": [
            "Cats purr and cats sleep all day.",
            "Dogs bark at cats in the garden.",
            "Birds sing in the garden every morning.",
            "the of and",  # no index terms: Lucene leaves it out of N and avgdl
            "Cats purr and cats sleep all day.",  # same text as "a": ties break by corpus order
        ],
    }
)


def lucene_bm25(
    corpus: pd.DataFrame, query: str, k1: float = 0.9, b: float = 0.4
) -> dict[str, float]:
    """Lucene's BM25 computed directly from the formula (the test's own reference)."""
    tok = Tokenizer()
    docs = {
        d: tok.tokenize(passage_text(t, x))
        for d, t, x in zip(corpus.docid, corpus.title, corpus.text, strict=True)
    }
    docs = {d: t for d, t in docs.items() if t}
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    out = {}
    for d, terms in docs.items():
        s = 0.0
        for q in tok.tokenize(query):
            df = sum(q in t for t in docs.values())
            tf = terms.count(q)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf / (tf + k1 * (1 - b + b * len(terms) / avgdl))
        if s > 0:
            out[d] = s
    return out


@pytest.mark.parametrize("backend", FAST_BACKENDS)
@pytest.mark.parametrize("k1,b", [(0.9, 0.4), (1.2, 0.75)])
def test_scores_match_lucene_formula(backend, k1, b):
    r = BM25Retriever(backend, k1=k1, b=b).index(HAND)
    for query in ["cats garden", "purring cats", "birds morning sing", "dogs dogs"]:
        res = r.search([query], k=10)
        want = lucene_bm25(HAND, query, k1, b)
        got = dict(zip(res.docid, res.score, strict=True))
        assert set(got) == set(want)
        for d in want:
            assert got[d] == pytest.approx(want[d], rel=1e-5)
        assert res["rank"].tolist() == list(range(1, len(res) + 1))
        assert (np.diff(res["score"].to_numpy()) <= 1e-12).all()


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_ties_break_by_corpus_order_and_only_matching_docs_return(backend):
    r = BM25Retriever(backend).index(HAND)
    res = r.search(["purr"], k=10)
    assert res["docid"].tolist() == ["a", "e"]
    assert res["score"].iloc[0] == res["score"].iloc[1]
    # only stopwords: no index terms, no rows
    assert len(r.search(["the and of"], k=10)) == 0


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_results_schema_and_query_order(backend):
    r = BM25Retriever(backend).index(HAND)
    q = pd.DataFrame({"qid": ["z", "a", "m"], "question": ["garden", "cats", "zebra"]})
    res = r.search(q, k=2)
    assert list(res.columns) == ["qid", "docid", "score", "rank", "text"]
    assert res["qid"].tolist() == ["z", "z", "a", "a"]  # input order, "m" matches nothing
    assert res["text"].iloc[0] == passage_text(
        *HAND.loc[HAND.docid == res.docid.iloc[0], ["title", "text"]].iloc[0]
    )
    plain = r.search(["garden", "cats"], k=1)
    assert plain["qid"].tolist() == ["q0", "q1"]


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_save_load_round_trip(tmp_path, backend):
    r = BM25Retriever(backend, k1=1.1, b=0.5, tokenizer=Tokenizer(stemmer="english")).index(HAND)
    path = r.save(tmp_path / "idx")
    meta = json.loads((path / "params.json").read_text())
    assert meta["retriever"] == "bm25" and meta["params"]["backend"] == backend
    assert meta["params"]["tokenizer"]["stemmer"] == "english"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    loaded = Retriever.load(path)
    assert isinstance(loaded, BM25Retriever)
    q = ["cats garden", "birds"]
    pd.testing.assert_frame_equal(loaded.search(q, k=3), r.search(q, k=3))
    # saving again replaces the folder atomically
    BM25Retriever(backend).index(HAND.iloc[:2]).save(path)
    assert Retriever.load(path).n_docs == 2


# ---- bad input ------------------------------------------------------------------------------
def test_bad_queries():
    r = BM25Retriever().index(HAND)
    with pytest.raises(DataError, match="query 'q1' is empty"):
        r.search(["cats", ""])
    with pytest.raises(DataError, match="query 'x' is empty or whitespace only"):
        r.search(pd.DataFrame({"qid": ["x"], "question": ["  \t "]}))
    with pytest.raises(DataError, match=r"duplicate qid\(s\) 'a'"):
        r.search(pd.DataFrame({"qid": ["a", "a"], "question": ["cats", "dogs"]}))
    with pytest.raises(DataError, match=r"queries is missing column\(s\) \['question'\]"):
        r.search(pd.DataFrame({"qid": ["a"], "query": ["cats"]}))
    with pytest.raises(DataError, match="got one string"):
        r.search("cats")
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        r.search(["cats"], k=0)


def test_bad_corpus():
    with pytest.raises(DataError, match=r"corpus is missing column\(s\) \['title'\]"):
        BM25Retriever().index(HAND.drop(columns="title"))
    with pytest.raises(DataError, match=r"duplicate docid\(s\) 'a'"):
        BM25Retriever().index(pd.concat([HAND, HAND.iloc[:1]]))
    with pytest.raises(DataError, match="corpus has no documents"):
        BM25Retriever().index(HAND.iloc[:0])
    with pytest.raises(DataError, match="no indexable terms"):
        BM25Retriever().index(HAND.iloc[3:4])


def test_unknown_backend_and_bad_params():
    with pytest.raises(ConfigError, match="unknown BM25 backend 'elastic'"):
        BM25Retriever("elastic").index(HAND)
    with pytest.raises(ConfigError, match=r"b must be a number in \[0, 1\]"):
        BM25Retriever(b=1.5).index(HAND)
    with pytest.raises(ConfigError, match="tokenizer must be a Tokenizer"):
        BM25Retriever(tokenizer="porter").index(HAND)
    assert set(bm25_backends.names()) == {"bm25s", "rank_bm25", "pyserini"}
    assert bm25_backends.extra_for("pyserini") == "lucene"


def test_not_built_and_missing_index_dir(tmp_path):
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        BM25Retriever().search(["cats"])
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        Retriever.load(tmp_path / "nowhere")
    with pytest.raises(NotBuiltError, match="ltrr index CONFIG"):
        BM25Retriever.load(tmp_path)


# ---- pyserini: Java discovery and the import guard ------------------------------------------
def fake_jdk(root: Path, name: str, version: str | None) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    if version is not None:
        (home / "release").write_text(f'JAVA_VERSION="{version}"\n')
    return home


def test_find_java_home(tmp_path, monkeypatch):
    old = fake_jdk(tmp_path, "java-17-openjdk-amd64", "17.0.15")
    new = fake_jdk(tmp_path, "temurin-25-jdk-amd64", "25.0.3")
    fake_jdk(tmp_path, "temurin-21-jdk-amd64", None)  # version from the folder name
    monkeypatch.setenv("JAVA_HOME", str(old))
    assert bm25mod.find_java_home(jvm_root=tmp_path) == new
    mid = tmp_path / "temurin-21-jdk-amd64"
    monkeypatch.setenv("JAVA_HOME", str(mid))  # a suitable JAVA_HOME wins over a newer JDK
    assert bm25mod.find_java_home(jvm_root=tmp_path) == mid


def test_find_java_home_reads_macos_bundles_and_windows_jdks(tmp_path, monkeypatch):
    """A macOS JDK is a bundle whose home is ``<name>.jdk/Contents/Home`` (its version in its
    ``release`` file, or else in the bundle's name); a Windows JDK has ``bin/java.exe``."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    mac = tmp_path / "mac"
    fake_jdk(mac / "temurin-17.jdk" / "Contents", "Home", "17.0.2")
    named = fake_jdk(mac / "zulu-23.jdk" / "Contents", "Home", None)  # no release file
    assert bm25mod.find_java_home(jvm_root=mac) == named
    win = tmp_path / "win"
    home = win / "jdk-21.0.4"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java.exe").write_text("")
    assert bm25mod.find_java_home(jvm_root=win) == home
    # the default roots: macOS looks in its own folder too
    monkeypatch.setattr(bm25mod, "JVM_ROOT", str(tmp_path / "none"))
    monkeypatch.setattr(bm25mod, "MACOS_JVM_ROOT", str(mac))
    monkeypatch.setattr(bm25mod.sys, "platform", "darwin")
    assert bm25mod.find_java_home() == named
    monkeypatch.setattr(bm25mod.sys, "platform", "linux")
    with pytest.raises(MissingDependencyError, match="found none"):
        bm25mod.find_java_home()


def test_find_java_home_fails_with_advice(tmp_path, monkeypatch):
    fake_jdk(tmp_path, "java-17-openjdk-amd64", "17.0.15")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(
        MissingDependencyError, match=r"Java >= 21 JDK, found .*Java 17.*set JAVA_HOME"
    ):
        bm25mod.find_java_home(jvm_root=tmp_path)


def test_missing_pyserini_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(bm25mod, "_PYSERINI", None)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyserini" else real(name, *a)
    )
    with pytest.raises(MissingDependencyError, match=r"pip install 'ltrr\[lucene\]'"):
        BM25Retriever("pyserini").index(HAND)


@pytest.mark.slow
@pytest.mark.lucene
def test_pyserini_import_restores_environment():
    code = (
        "import os, json\n"
        "from ltrr.retrieval.bm25 import import_pyserini\n"
        "before = {k: os.environ.get(k) for k in ('OPENAI_API_KEY', 'JAVA_HOME')}\n"
        "import_pyserini()\n"
        "after = {k: os.environ.get(k) for k in ('OPENAI_API_KEY', 'JAVA_HOME')}\n"
        "print(json.dumps([before, after]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "JAVA_HOME")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == after == {"OPENAI_API_KEY": None, "JAVA_HOME": None}


@pytest.mark.slow
@pytest.mark.lucene
def test_pyserini_matches_formula_and_round_trips(tmp_path):
    r = BM25Retriever("pyserini").index(HAND)
    for query in ["cats garden", "birds morning sing"]:
        res = r.search([query], k=10)
        want = lucene_bm25(HAND, query)
        got = dict(zip(res.docid, res.score, strict=True))
        assert set(got) == set(want)
        for d in want:  # Anserini rounds scores to 4 decimals
            assert got[d] == pytest.approx(want[d], abs=1e-4)
    assert r.search(["purr"], k=10)["docid"].tolist() == ["a", "e"]
    loaded = Retriever.load(r.save(tmp_path / "lucene"))
    pd.testing.assert_frame_equal(
        loaded.search(["cats garden"], k=3), r.search(["cats garden"], k=3)
    )


# ---- agreement on the packaged Wikipedia corpus ---------------------------------------------
@pytest.fixture(scope="session")
def wiki():
    corpus = wiki_corpus()
    return corpus, wiki_queries(corpus, n=300, seed=0)


@pytest.fixture(scope="session")
def wiki_runs(wiki, tmp_path_factory):
    """Top-10 of each fast backend on the Wikipedia corpus; indexes built once and saved."""
    corpus, queries = wiki
    root = tmp_path_factory.mktemp("bm25-wiki")
    runs = {}
    for backend in FAST_BACKENDS:
        path = BM25Retriever(backend).index(corpus).save(root / backend)
        runs[backend] = Retriever.load(path).search(queries[["qid", "question"]], k=10)
    return runs


def top_lists(res: pd.DataFrame) -> dict[str, list[str]]:
    return {q: g.sort_values("rank")["docid"].tolist() for q, g in res.groupby("qid")}


def agreement(a: pd.DataFrame, b: pd.DataFrame, qids) -> tuple[float, float]:
    ta, tb = top_lists(a), top_lists(b)
    top1 = np.mean([ta.get(q, [None])[:1] == tb.get(q, [None])[:1] for q in qids])
    overlap = np.mean(
        [len(set(ta.get(q, [])) & set(tb.get(q, []))) / max(1, len(ta.get(q, []))) for q in qids]
    )
    return float(top1), float(overlap)


@pytest.mark.slow
def test_wiki_bm25s_agrees_with_rank_bm25(wiki, wiki_runs):
    _, queries = wiki
    top1, overlap = agreement(wiki_runs["bm25s"], wiki_runs["rank_bm25"], queries["qid"])
    assert top1 >= 0.95
    assert overlap >= 0.99
    m = wiki_runs["bm25s"].merge(wiki_runs["rank_bm25"], on=["qid", "docid"])
    np.testing.assert_allclose(m["score_x"], m["score_y"], rtol=1e-5)
    # the queries come from the corpus: the source document is usually found
    tops = top_lists(wiki_runs["bm25s"])
    found = [s in tops.get(q, []) for q, s in zip(queries.qid, queries.source, strict=True)]
    assert np.mean(found) >= 0.8


@pytest.mark.slow
@pytest.mark.lucene
def test_wiki_bm25s_agrees_with_lucene(wiki, wiki_runs, tmp_path_factory):
    corpus, queries = wiki
    path = BM25Retriever("pyserini").index(corpus).save(tmp_path_factory.mktemp("lucene") / "idx")
    lucene = Retriever.load(path).search(queries[["qid", "question"]], k=10)
    top1, overlap = agreement(wiki_runs["bm25s"], lucene, queries["qid"])
    assert top1 >= 0.95
    assert overlap >= 0.9
    # remaining differences come from Lucene's lossy document-length encoding: a few percent
    m = wiki_runs["bm25s"].merge(lucene, on=["qid", "docid"])
    np.testing.assert_allclose(m["score_x"], m["score_y"], rtol=0.05)
