"""Off-policy actor-critic losses for continuous actions: DDPG (Lillicrap et al. 2016), TD3 (Fujimoto et al. 2018)
and SAC with automatic entropy tuning (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications").

Each registered loss returns ONE scalar: the critic loss plus, on steps that update them, the actor loss (and SAC's
temperature loss). The actor's term evaluates the critics with detached weights, so one backward pass gives each
network exactly its own gradient and one optimizer step (with a learning rate per network) updates them all.
Targets (targets.py's `td_target`) bootstrap through truncations, never through terminations, with `batch.discounts`
(gamma^n) as the discount; per-sample critic losses are weighted by `batch.weights` (prioritized replay's importance
weights; None: uniform); `td_error` in the diagnostics is |target - Q| averaged over the critics, for priority
updates.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions
from rl.registry import grad_comp

Actor = Callable[[torch.Tensor], torch.Tensor]
Critics = Callable[..., torch.Tensor]  # (obs, actions, detach=False, first=False) -> Q values [K, B] ([1, B]: first)
Policy = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # obs -> reparameterised (actions, log pi)


def critic_loss(q: torch.Tensor, target: torch.Tensor,
                weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * sum over the K critics of the weighted mean squared TD error (SB3's scale), and the per-sample |TD|
    averaged over the critics."""
    err = q - target
    sq = err.pow(2) if weights is None else weights * err.pow(2)
    loss = 0.5 * sq.mean(-1).sum()
    return loss, err.detach().abs().mean(0)


def smoothed_target_actions(target_actor: Actor, next_obs: torch.Tensor, noise_std: float,
                            noise_clip: float) -> torch.Tensor:
    """TD3's target policy smoothing: mu'(s') + clip(N(0, noise_std^2), -c, c), clipped to the action box."""
    actions = target_actor(next_obs)
    if noise_std > 0:
        noise = (torch.randn_like(actions) * noise_std).clamp(-noise_clip, noise_clip)
        actions = (actions + noise).clamp(-1.0, 1.0)
    return actions


def deterministic_actor_critic(actor: Actor, critics: Critics, target_actor: Actor, target_critics: Critics,
                               batch: Transitions, update_actor: bool = True, target_noise: float = 0.0,
                               target_noise_clip: float = 0.5):
    """DDPG's and TD3's loss. The target is the minimum over the K target critics (K = 2: clipped double Q; K = 1:
    DDPG's single critic); the actor maximises the first critic, as in TD3's reference code."""
    with torch.no_grad():
        next_actions = smoothed_target_actions(target_actor, batch.next_obs, target_noise, target_noise_clip)
        next_q = target_critics(batch.next_obs, next_actions).min(0).values
        target = td_target(batch.rewards, batch.discounts, batch.terminated, next_q)
    q = critics(batch.obs, batch.actions)
    loss, td_error = critic_loss(q, target, batch.weights)
    info = {"losses/critic_loss": loss.detach(), "losses/q_values": q.detach().mean(), "td_error": td_error}
    if update_actor:
        actor_loss = -critics(batch.obs, actor(batch.obs), detach=True, first=True)[0].mean()
        info["losses/actor_loss"] = actor_loss.detach()
        loss = loss + actor_loss
    return loss, info


@grad_comp.register("ddpg", kind="actor_critic", per_sample_error=True)
def ddpg(actor: Actor, critics: Critics, target_actor: Actor, target_critics: Critics, batch: Transitions,
         update_actor: bool = True, **_):
    """DDPG: no target smoothing (any given is ignored); the critic stack normally holds one critic."""
    return deterministic_actor_critic(actor, critics, target_actor, target_critics, batch, update_actor, 0.0)


@grad_comp.register("td3", kind="actor_critic", per_sample_error=True)
def td3(actor: Actor, critics: Critics, target_actor: Actor, target_critics: Critics, batch: Transitions,
        update_actor: bool = True, target_noise: float = 0.2, target_noise_clip: float = 0.5):
    """TD3: clipped double Q and target policy smoothing; the agent delays the actor (`update_actor`)."""
    return deterministic_actor_critic(actor, critics, target_actor, target_critics, batch, update_actor,
                                      target_noise, target_noise_clip)


@grad_comp.register("sac", kind="soft_actor_critic", per_sample_error=True)
def sac(policy: Policy, critics: Critics, target_critics: Critics, log_alpha: torch.Tensor, batch: Transitions,
        target_entropy: float, update_actor: bool = True, tune_alpha: bool = True):
    """SAC: soft clipped-double-Q target r + gamma (min_k Q'_k(s', a') - alpha log pi(a'|s')), a' ~ pi(s');
    actor loss E[alpha log pi(a|s) - min_k Q_k(s, a)]; temperature loss -log(alpha) (log pi + target entropy), which
    raises alpha when the policy's entropy is below the target and lowers it above. `policy` draws reparameterised
    actions with their log-probabilities (the actor's `sampler()`: Gaussian noise, or gSDE's noise matrix)."""
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_actions, next_log_prob = policy(batch.next_obs)
        next_q = target_critics(batch.next_obs, next_actions).min(0).values
        target = td_target(batch.rewards, batch.discounts, batch.terminated, next_q - alpha * next_log_prob)
    q = critics(batch.obs, batch.actions)
    loss, td_error = critic_loss(q, target, batch.weights)
    info = {"losses/critic_loss": loss.detach(), "losses/q_values": q.detach().mean(), "charts/alpha": alpha,
            "td_error": td_error}
    if update_actor:
        loss = soft_actor_terms(loss, info, policy, lambda a: critics(batch.obs, a, detach=True).min(0).values,
                                log_alpha, batch.obs, target_entropy, tune_alpha)
    return loss, info


def soft_actor_terms(loss: torch.Tensor, info: dict, policy: Policy, value, log_alpha: torch.Tensor,
                     obs: torch.Tensor, target_entropy: float, tune_alpha: bool) -> torch.Tensor:
    """`loss` plus the soft actor's loss E[alpha log pi(a|s) - value(a)] (a ~ pi(s), reparameterised; `value` maps
    actions [B, A] to the critics' value [B] without gradient into the critics) and, with `tune_alpha`, the
    temperature's -log(alpha) (log pi + target entropy); their diagnostics added to `info`. SAC's and TQC's."""
    alpha = log_alpha.detach().exp()
    actions, log_prob = policy(obs)
    actor_loss = (alpha * log_prob - value(actions)).mean()
    loss = loss + actor_loss
    info["losses/actor_loss"] = actor_loss.detach()
    info["charts/entropy"] = -log_prob.detach().mean()
    if tune_alpha:
        alpha_loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
        loss = loss + alpha_loss
        info["losses/alpha_loss"] = alpha_loss.detach()
    return loss
