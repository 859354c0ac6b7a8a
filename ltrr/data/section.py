"""The ``[data]`` config table: which dataset a run reads and how a demo dataset is built.

A leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections`, so
`ltrr.config` can assemble it from the ground floor (see ``[importlinter]`` in setup.cfg).
"""

from __future__ import annotations

from ltrr._sections import Section, section, setting

__all__ = ["DataSection"]


@section("data")
class DataSection(Section):
    """The ``[data]`` table (`ltrr.pipeline.Run.dataset`, `ltrr.data.demo.generate_demo`).

    Examples
    --------
    >>> DataSection.from_mapping({"dataset": "demo"}).max_queries
    0
    """

    dataset: str = setting(str, help='a built dataset name ("demo"), a folder or "irds:<id>"')
    # the build's counts slice seeded orders (a negative one took all but that many) and its
    # seed goes to numpy's default_rng, which refuses a negative one (`ltrr.data.demo.generate_demo`)
    build_seed: int = setting(int, 13, help="seed of a demo dataset's build", low=0)
    n_per_type: int = setting(int, 200, help="questions per query type of a demo build", low=0)
    n_noanswer: int = setting(int, 200, help="no-answer questions of a demo build", low=0)
    n_multihop: int = setting(int, 300, help="multi-hop questions of a demo build", low=0)
    grow_per_type: int = setting(int, 0, help="questions per type of a second build round (0: none)", low=0)
    grow_noanswer: int = setting(int, 0, help="no-answer questions of a second build round", low=0)
    builder: str = setting(str, "", help="the builder of a dataset named otherwise (default: the name)")
    exclude_qtypes: list = setting(list, [], help="query types the run leaves out (before max_queries)")
    max_queries: int = setting(int, 0, help="questions the run keeps (0: all; else a seeded, type-stratified "
                                            "sample)", low=0)
    answers: str = setting(str, "", help="a qid -> answers table for a dataset without them (irds:<id>)")
    split: str = setting(str, "", help="a BEIR folder's qrels split: its judgments, and only the queries judged "
                                       "in it (empty: every query, with the test split's judgments)")
