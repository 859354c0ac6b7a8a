"""The ``[eval]`` and ``[protocol]`` config tables: the evaluation stage and the pre-registered
design/test protocol (`ltrr protocol`, `ltrr.eval.headline`).

A leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections`, so
`ltrr.config` may assemble it although evaluation sits above the config (see ``[importlinter]``
in setup.cfg).
"""

from __future__ import annotations

from ltrr._errors import ConfigError
from ltrr._sections import Section, section, setting

__all__ = ["EvalSection", "ProtocolSection"]


@section("eval")
class EvalSection(Section):
    """The ``[eval]`` table.

    Examples
    --------
    >>> EvalSection.from_mapping({}).splits
    ['balanced', 'leave-one-type-out']
    """

    splits: list = setting(list, ["balanced", "leave-one-type-out"], help="the evaluation splits")
    test_size: float = setting(float, 0.3, help="the test part of a split", unit="share of the queries")
    n_folds: int = setting(int, 5, help="cross-validation folds")
    n_bootstrap: int = setting(int, 1000, help="bootstrap resamples of the confidence intervals")
    correction: str = setting(str, "bonferroni", help="the multiple-comparison correction of the paired tests")
    metric: str = setting(str, "", help="not read, and refused when set: the routers are judged on the labels' "
                                        "utility ([labels] metric); kept so that eval fingerprints stay")
    k: int = setting(int, 3, help="the routing cut-off")
    retrieval_measures: list = setting(list, [], help="ir_measures strings of the retrieval tables; [] = nDCG@10, "
                                                      "R@k at the arms' k, RR, P@1")
    n_jobs: int = setting(int, 1, help="splits fitted in parallel processes, one job each (same tables)")

    def __post_init__(self) -> None:
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

    design_size: float = setting(float, 0.7, help="the design part of the design/test partition",
                                 unit="share of the queries")
    rankers: list = setting(list, ["lambdamart-listwise"], help="candidate rankers, crossed with train_labels")
    train_labels: list = setting(list, ["norm_gain"], help="label columns: norm_gain, likelihood_norm_gain")
    feature_sets: list = setting(list, [], help="candidate feature sets (default: [features] set)")
    n_folds: int = setting(int, 5, help="cross-validation folds of the design part")
    routers: list = setting(list, [], help='more candidates as router specs, e.g. "knn:n_neighbors=50"')
    seeds: list = setting(list, [], help="more partition seeds: the headline's mean and sd over them")
    n_jobs: int = setting(int, 1, help="candidates cross-validated in parallel processes (same result)")
