"""The contracts of the grad_comp registry's losses: one per kind, saying what its callers pass in and what it must
give back.

The agents call their loss in six different ways, so a loss declares at registration which call it takes
(`@grad_comp.register("my_td", kind="td")`; the kinds are rl/registry.py's LOSS_KINDS) and an agent class names the
kinds it calls (`LOSS_KINDS`). `check_loss` runs at start (rl/resolve.py's `check_assembly`) and refuses in one line a
loss of a kind the agent does not call, a loss whose parameters cannot take its kind's call, and a loss declared
without per-sample errors where the memory updates priorities from them.

Every loss returns `(loss, diagnostics)`: `loss` is the scalar whose autograd gradient trains the agent (nothing else
computes gradients), `diagnostics` a dict of numbers namespaced for the logs (`"losses/my_term"`, `"charts/alpha"`),
or `{}`. The one name without a namespace is `td_error`: a per-sample error [B], detached, which a prioritized memory
(one with `update_priorities`: `memory=prioritized`, `mixed`) turns into priorities. A loss that never gives one works
with any other memory; declare `per_sample_error=False` at registration so that a prioritized run is refused at start
rather than at its first update.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from rl.errors import ConfigError
from rl.memory.replay import Transitions
from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp

Diagnostics = dict[str, torch.Tensor | float]


class TDLoss(Protocol):
    """Kind `td`, called by the DQN agent (rl/agents/dqn.py) once per gradient step: `td`, `double_td`, `c51`.

    In: the online network `q_net` (with gradient) and the target network `target_net` (none), each mapping a batch of
    observations [B, ...] to Q-values [B, A] (a distributional network, `model=c51_network`, also has `log_probs(obs)`,
    [B, A, atoms], and a `support` buffer [atoms]: declare `distributional=True` to have the agent refuse any other;
    a quantile network, `model=quantile_network`, has `quantiles(obs)` [B, A, N]: declare `distributional="quantiles"`);
    `batch`, a `Transitions` of B sampled transitions: `obs`, `actions` [B] (ints), `rewards` [B] (the n-step return's
    discounted sum with `n_step` > 1), `next_obs`, `terminated` and `truncated` [B] (0/1 floats: bootstrap unless
    terminated), `discounts` [B] (gamma^k for the k-step return in `rewards`, k = n_step or fewer at an episode's end:
    the factor of the bootstrap, gamma already in it), `weights` [B] (prioritized replay's importance weights; None
    where sampling is uniform: take a plain mean) and `indices`; `loss`, the `loss` setting (`huber`, `mse`);
    `diagnostics`, False where nobody reads the diagnostics (return `{}`, and skip their cost).
    `target`: the batch's targets, passed only to a loss registered with a `targets` hook (`TDTargets`).

    Out: the mean loss, and diagnostics with `td_error` [B] where `diagnostics` is True and the loss has one."""

    def __call__(self, q_net: Callable[[torch.Tensor], torch.Tensor],
                 target_net: Callable[[torch.Tensor], torch.Tensor], batch: Transitions, loss: str, *,
                 diagnostics: bool = True, target: torch.Tensor | None = None) -> tuple[torch.Tensor, Diagnostics]: ...


class TDTargets(Protocol):
    """A TD loss's optional hook, declared at registration (`register("td", kind="td", targets=td_targets)`): the
    targets of `batch` [B] from the target network alone, without gradient. Where nothing a training phase changes
    moves them (uniform replay, no noisy nets), the agent computes a whole phase's at once and passes each minibatch's
    to the loss as `target=`."""

    def __call__(self, target_net: Callable[[torch.Tensor], torch.Tensor], batch: Transitions) -> torch.Tensor: ...


class PolicyGradientLoss(Protocol):
    """Kind `policy_gradient`, called by the on-policy agents `vpg`, `a2c` and `ppo` (rl/agents/on_policy.py) once
    per minibatch: `pg`, `a2c`, `ppo_clip`.

    In: the current policy on the minibatch, with gradient: `log_probs` [B] of the taken actions, `entropy` [B] (None
    where `ent_coef` is 0 and no diagnostics are wanted) and the value head's `values` [B] (the model's forward returns
    the policy's parameters, the values and the next hidden state; the agent turns them into these); `batch`, a
    `RolloutBatch`: `actions`, `old_log_probs` and `old_values` (the acting policy's), `advantages` (GAE's, or
    V-trace's; already standardised where `normalize_advantage` is set: the loss is passed False) and `returns` (the
    value targets); the keywords `diagnostics`, `clip_range` (decayed where `clip_decay` is set),
    `clip_range_vf`, `ent_coef`, `vf_coef` and `normalize_advantage` (take `**_` for those it ignores).

    Out: the mean loss over the minibatch, and diagnostics where `diagnostics` is True."""

    def __call__(self, log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor,
                 batch: RolloutBatch, *, diagnostics: bool = True, clip_range: float = 0.2, clip_range_vf: float = 0.0,
                 ent_coef: float = 0.0, vf_coef: float = 0.5,
                 normalize_advantage: bool = False) -> tuple[torch.Tensor, Diagnostics]: ...


class VTraceLoss(Protocol):
    """Kind `vtrace`: a policy-gradient loss (`PolicyGradientLoss`, whose call the on-policy agents make) that trains on
    V-trace targets: its kind makes the on-policy agents compute V-trace's (rl/grad_comp/vtrace.py) instead of GAE into
    `batch.advantages` and `batch.returns`. The `impala` agent also calls it, over T x k steps of composed sequences,
    with `ent_coef`, `vf_coef`, `diagnostics=True` and the replay corrections, all keywords with defaults: `mask` [n]
    (LASER's 0/1 trust region, or None), `policy_kl` [n] (KL(pi || mu) with gradient, or None),
    `clear_policy_coef` and `clear_value_coef` (CLEAR's cloning weights). `vtrace` is the one of this kind."""

    def __call__(self, log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor,
                 batch: RolloutBatch, *, diagnostics: bool = True, clip_range: float = 0.2, clip_range_vf: float = 0.0,
                 ent_coef: float = 0.0, vf_coef: float = 0.5, normalize_advantage: bool = False,
                 mask: torch.Tensor | None = None, policy_kl: torch.Tensor | None = None,
                 clear_policy_coef: float = 0.0, clear_value_coef: float = 0.0) -> tuple[torch.Tensor, Diagnostics]: ...


class ActorCriticLoss(Protocol):
    """Kind `actor_critic`, called by the `ddpg` and `td3` agents (rl/agents/continuous.py) once per gradient step:
    `ddpg`, `td3`.

    In: the deterministic `actor` and `target_actor`, observations [B, ...] -> actions [B, d] in [-1, 1]; the `critics`
    and `target_critics`, `(obs, actions, detach=False, first=False)` -> Q-values [K, B] of the K critics (`detach`:
    the critics' weights without gradient, for the actor's term; `first`: only the first critic, [1, B]); `batch`, a
    `Transitions` as for `TDLoss` (actions [B, d] in [-1, 1]; `discounts` hold gamma^k); `update_actor`, whether this
    step trains the actor (TD3's delay); the td3 agent adds its target smoothing `target_noise` and
    `target_noise_clip` (take `**_` to ignore them).

    Out: ONE scalar, the critic loss plus, on `update_actor` steps, the actor loss: one backward pass trains both, each
    network through its own optimizer; diagnostics always, with `td_error` [B] for prioritized replay."""

    def __call__(self, actor: Callable[[torch.Tensor], torch.Tensor], critics: Callable[..., torch.Tensor],
                 target_actor: Callable[[torch.Tensor], torch.Tensor], target_critics: Callable[..., torch.Tensor],
                 batch: Transitions, *, update_actor: bool = True, target_noise: float = 0.0,
                 target_noise_clip: float = 0.5) -> tuple[torch.Tensor, Diagnostics]: ...


class SoftActorCriticLoss(Protocol):
    """Kind `soft_actor_critic`, called by the `sac` agent (rl/agents/continuous.py) once per gradient step: `sac`.

    In: `policy`, observations -> (reparameterised actions [B, d] in [-1, 1], their log-probabilities [B]);
    `critics` and `target_critics` as for `ActorCriticLoss`; `log_alpha`, the temperature's parameter (a scalar with
    gradient where `tune_alpha`); `batch`, a `Transitions` (see `TDLoss`); `target_entropy` (positional), the entropy
    the temperature steers towards; `update_actor` and `tune_alpha`.

    Out: ONE scalar, the critic loss plus the actor's and the temperature's on `update_actor` steps; diagnostics
    always, with `td_error` [B] for prioritized replay."""

    def __call__(self, policy: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                 critics: Callable[..., torch.Tensor], target_critics: Callable[..., torch.Tensor],
                 log_alpha: torch.Tensor, batch: Transitions, target_entropy: float, *, update_actor: bool = True,
                 tune_alpha: bool = True) -> tuple[torch.Tensor, Diagnostics]: ...


class QLambdaLoss(Protocol):
    """Kind `q_lambda`, called by the `pqn` agent (rl/agents/pqn.py) once per rollout minibatch: `pqn`.

    In: `q_values` [B, A], the current network's Q-values of the minibatch's observations, with gradient (the agent
    ran the network); `batch`, a `RolloutBatch` whose `actions` [B] are the taken actions, `returns` [B] their
    Q(lambda) returns (rl/memory/q_lambda.py, filled before the epochs, no gradient) and `old_values` [B] max_a Q of
    the observations when they were acted on; `diagnostics`, False where nobody reads them (return `{}`).

    Out: the mean loss over the minibatch, and diagnostics where `diagnostics` is True."""

    def __call__(self, q_values: torch.Tensor, batch: RolloutBatch, *,
                 diagnostics: bool = True) -> tuple[torch.Tensor, Diagnostics]: ...


CONTRACTS: dict[str, type] = {"td": TDLoss, "policy_gradient": PolicyGradientLoss, "vtrace": VTraceLoss,
                              "actor_critic": ActorCriticLoss, "soft_actor_critic": SoftActorCriticLoss,
                              "q_lambda": QLambdaLoss}


@dataclass(frozen=True)
class Call:
    """One way an agent calls a loss: how many positional arguments, which keywords; `only_with`: a declaration
    without which this call is never made (the TD target hook)."""

    positional: int
    keywords: tuple[str, ...]
    only_with: str | None = None


PG_KEYWORDS = ("diagnostics", "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "normalize_advantage")
CALLS: dict[str, tuple[Call, ...]] = {
    "td": (Call(4, ("diagnostics",)), Call(4, ("diagnostics", "target"), only_with="targets")),
    "policy_gradient": (Call(4, PG_KEYWORDS),),
    "vtrace": (Call(4, PG_KEYWORDS), Call(4, ("diagnostics", "ent_coef", "vf_coef", "mask", "policy_kl",
                                              "clear_policy_coef", "clear_value_coef"))),
    "actor_critic": (Call(5, ("update_actor",)), Call(5, ("update_actor", "target_noise", "target_noise_clip"))),
    "soft_actor_critic": (Call(6, ("update_actor", "tune_alpha")),),
    "q_lambda": (Call(2, ("diagnostics",)),),
}


def check_call(name: str) -> None:
    """One ConfigError line where the loss `name` cannot take a call its kind's agents make (a missing parameter, a
    keyword it does not accept): otherwise a TypeError at the first update. A callable whose signature Python cannot
    read is taken on trust."""
    fn, declared = grad_comp[name], grad_comp.declared(name)
    kind = declared["kind"]
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    for call in CALLS[kind]:
        if call.only_with is not None and declared.get(call.only_with) is None:
            continue
        try:
            signature.bind(*[None] * call.positional, **dict.fromkeys(call.keywords))
        except TypeError as exc:
            raise ConfigError(f"grad_comp {name!r} is registered as a {kind} loss but cannot take its call "
                              f"(rl/grad_comp/contracts.py, {CONTRACTS[kind].__name__}): {exc}") from None


def no_per_sample_error(name: str, memory: str) -> str:
    """The one line for a loss without `td_error` under a memory that updates priorities from it."""
    return (f"grad_comp {name!r} gives no per-sample error ('td_error' in its diagnostics), and memory {memory!r} "
            f"updates its priorities from one: return td_error, or use memory=replay")


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def check_loss(name: str, agent: str, agent_class, memory: str | None = None, memory_class=None) -> None:
    """The loss `name` for `agent` (its class names the loss kinds it calls, `LOSS_KINDS`; a class without them takes
    any) with the memory `memory`, refused in one ConfigError line: a loss of another kind, one that cannot take its
    kind's call, or one declared without per-sample errors where the memory updates priorities."""
    kind, takes = grad_comp.kind_of(name), getattr(agent_class, "LOSS_KINDS", None)
    if takes and kind not in takes:
        raise ConfigError(f"grad_comp {name!r} is {article(kind)} {kind} loss; agent {agent!r} takes "
                          f"{article(takes[0])} {' or '.join(takes)} loss: valid: "
                          f"{', '.join(grad_comp.names_of_kind(*takes))}")
    check_call(name)
    if hasattr(memory_class, "update_priorities") and grad_comp.declared(name).get("per_sample_error") is False:
        raise ConfigError(no_per_sample_error(name, memory) + " (it is registered with per_sample_error=False)")
