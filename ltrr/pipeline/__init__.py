"""The stages of a run and the main job (`ltrr run`).

`Run` is the typed run context: a config's paths, its config sections, the dataset, the pool
and the seed, and one method per stage. `ltrr.pipeline.stages.stages` is the registry of the stages `ltrr run`
runs in order (data, index, retrieve, label, features, eval, train, policy when configured,
and the headline protocol), each also a command of its own (`ltrr retrieve CONFIG`, ...);
`run_stages` runs them.

Each stage writes its outputs under the run's workdir atomically and records a fingerprint of
its inputs in ``<workdir>/stages/<stage>.json``. A stage whose inputs are unchanged and whose
outputs exist is skipped, and the skip is said; an interrupted stage leaves no stage record, so
the next run redoes (or, for labelling, resumes) it.
"""

from ltrr.pipeline.context import RunContext
from ltrr.pipeline.evaluate import DEFAULT_RANKERS, TRAIN_FREE
from ltrr.pipeline.run import STAGES, Run

# the registry itself is `ltrr.pipeline.stages.stages`: exporting it here would hide the module
from ltrr.pipeline.stages import RUN_ORDER, Stage, StageOptions, run_stages

__all__ = ["Run", "RunContext", "Stage", "StageOptions", "run_stages", "RUN_ORDER", "STAGES",
           "DEFAULT_RANKERS", "TRAIN_FREE"]
