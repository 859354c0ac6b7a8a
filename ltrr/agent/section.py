"""The ``[agent]`` config table: the multi-round router (`ltrr agent sft|rl|eval`).

A leaf module: it imports only the standard library, `ltrr._errors` and `ltrr._sections`, so
`ltrr.config` may assemble it although the agent sits above the config (see ``[importlinter]``
in setup.cfg). ``sft`` and ``grpo`` are validated by their owners (`ltrr.agent.sft.SFTSpec`,
`ltrr.agent.grpo.GRPOSpec`) when they are used.
"""

from __future__ import annotations

from ltrr._sections import Section, section, setting

__all__ = ["AgentSection"]


@section("agent")
class AgentSection(Section):
    """The ``[agent]`` table.

    Examples
    --------
    >>> AgentSection.from_mapping({"alpha": 0.5}).alpha
    0.5
    """

    enabled: bool = setting(bool, False, help="`ltrr run` also runs the agent stage (SFT unless `policy` names "
                                              "one, then `ltrr agent eval`); off unless asked")
    # the ranges of `ltrr.agent.loop.AgentLoop` (k, max_turns, the token caps), of the rewards
    # (`ltrr.agent.rewards.total_reward`: alpha, token_price) and of the rollouts' batch
    # (`ltrr.agent.batching.rollout_many`), checked when the config loads instead of at the agent stage
    k: int = setting(int, 1, help="passages per search", low=1)
    max_turns: int = setting(int, 3, help="searches before the answer-only turn", low=0)
    max_obs_tokens: int = setting(int, 150, help="tokens of passages per <information>", unit="tokens", low=1)
    max_new_tokens: int = setting(int, 96, help="tokens per model turn", unit="tokens", low=1)
    alpha: float = setting(float, 0.2, help="the cost reward's weight, counted only for a correct answer",
                           low=0, high=1)
    reward: str = setting(str, "ltrr", help="a named reward of ltrr.agent.reward_options.REWARDS: ltrr or router-r1")
    token_price: float = setting(float, 0.001, help="cost of one injected token", unit="arm-cost units per token",
                                 low=0, high=float("inf"), high_open=True)
    metric: str = setting(str, "recall", help="the outcome reward (a registry metric)")
    correct_threshold: float = setting(float, 1.0, help="outcome at which an answer counts as correct")
    n_eval: int = setting(int, 150, help="test questions per policy (multihop first, then a type-stratified "
                                         "sample)", low=1)
    policy: str = setting(str, "", help='a policy folder (SFT or RL), or a packaged model\'s name (e.g. '
                          '"smollm2-135m": a policy other than the labels\' generator); "" = the generator\'s model')
    holdout_arms: list = setting(list, [], help="arms kept from SFT and the prompt; `agent eval --holdout` adds them",
                                 items=str)
    device: str = setting(str, "cpu", help='torch device of the policy: SFT, GRPO, RFT and evaluation ("cuda" on '
                                           'a GPU)')
    rollout_batch: int = setting(int, 1, help="rollouts decoded together (ltrr.agent.batching); 1 = one at a time",
                                 low=1)
    sft: dict = setting(dict, {}, help="SFT settings (ltrr.agent.sft.SFTSpec): epochs, learning_rate, "
                                       "max_examples, ...")
    grpo: dict = setting(dict, {}, help="GRPO settings (ltrr.agent.grpo.GRPOSpec): steps, group_size, "
                                        "learning_rate, ...")
