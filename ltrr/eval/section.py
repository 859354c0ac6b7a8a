"""The ``[eval]`` and ``[protocol]`` config tables: the evaluation stage and the pre-registered
design/test protocol (`ltrr protocol`, `ltrr.eval.headline`).

A leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections`, so
`ltrr.config` may assemble it although evaluation sits above the config (see ``[importlinter]``
in setup.cfg).
"""

from __future__ import annotations

from ltrr._errors import ConfigError
from ltrr._sections import Section, section, setting

__all__ = ["EvalSection", "ProtocolSection", "CORRECTIONS"]

#: The multiple-comparison corrections of the paired tests (`ltrr.eval.stats.correct_pvalues`,
#: which imports them from here: the config checks ``[eval] correction`` against them on load).
CORRECTIONS = ("none", "bonferroni", "holm")


@section("eval")
class EvalSection(Section):
    """The ``[eval]`` table.

    Examples
    --------
    >>> EvalSection.from_mapping({}).splits
    ['balanced', 'leave-one-type-out']
    """

    splits: list = setting(list, ["balanced", "leave-one-type-out"], help="the evaluation splits", items=str)
    # `ltrr.eval.splits`: balanced_split wants a test share in (0, 1), grouped_kfold two folds or more
    test_size: float = setting(float, 0.3, help="the test part of a split", unit="share of the queries",
                               low=0, high=1, low_open=True, high_open=True)
    # 1 is allowed: only the kfold split reads it, and wants two or more (`__post_init__`)
    n_folds: int = setting(int, 5, help="cross-validation folds (of the kfold split)", low=1)
    n_bootstrap: int = setting(int, 1000, help="bootstrap resamples of the confidence intervals", low=1)
    correction: str = setting(str, "bonferroni", help="the multiple-comparison correction of the paired tests",
                              choices=CORRECTIONS)
    metric: str = setting(str, "", help="not read, and refused when set: the routers are judged on the labels' "
                                        "utility ([labels] metric); kept so that eval fingerprints stay")
    k: int = setting(int, 3, help="the routing cut-off", low=1)
    retrieval_measures: list = setting(list, [], help="ir_measures strings of the retrieval tables; [] = nDCG@10, "
                                                      "R@k at the arms' k, RR, P@1")
    n_jobs: int = setting(int, 1, help="splits fitted in parallel processes, one job each (same tables)", low=1)

    def __post_init__(self) -> None:
        if "kfold" in self.splits and self.n_folds < 2:
            raise ConfigError(f"config key [eval].n_folds must be an integer >= 2 for the kfold split, got "
                              f"{self.n_folds}")
        if self.metric:  # the key stays, empty, so that every config's eval fingerprint stays
            raise ConfigError(f"[eval] metric = {self.metric!r} is not read: the routers are judged on the labels' "
                              "utility, so set [labels] metric instead (and drop [eval] metric)")


@section("protocol")
class ProtocolSection(Section):
    """The ``[protocol]`` table.

    Examples
    --------
    >>> ProtocolSection.from_mapping({"design_size": 0.5}).design_size
    0.5
    """

    # `ltrr.eval.protocol.design_test_partition` wants a design share in (0, 1)
    design_size: float = setting(float, 0.7, help="the design part of the design/test partition",
                                 unit="share of the queries", low=0, high=1, low_open=True, high_open=True)
    rankers: list = setting(list, ["lambdamart-listwise"], help="candidate rankers, crossed with train_labels",
                            items=str)
    train_labels: list = setting(list, ["norm_gain"], help="label columns: norm_gain, likelihood_norm_gain",
                                 items=str)
    feature_sets: list = setting(list, [], help="candidate feature sets (default: [features] set)", items=str)
    n_folds: int = setting(int, 5, help="cross-validation folds of the design part", low=2)
    routers: list = setting(list, [], help='more candidates as router specs, e.g. "knn:n_neighbors=50"',
                            items=str)
    seeds: list = setting(list, [], help="more partition seeds: the headline's mean and sd over them",
                          items=int, low=0, high=2**32 - 1)  # as [run] seed: scikit-learn's random_state
    n_jobs: int = setting(int, 1, help="candidates cross-validated in parallel processes (same result)", low=1)
