"""Off-policy actor-critic agents for continuous actions: DDPG (Lillicrap et al. 2016), TD3 (Fujimoto et al. 2018)
and SAC (Haarnoja et al. 2018), with TQC (Kuznetsov et al. 2020) as SAC with quantile critics, sharing one base that
owns the replay memory, the update schedule, one flat Adam per network (each with its own learning rate) and the
Polyak target updates.

Schedule: every `every` env steps after `learning_starts`, `num_updates` gradient steps. SB3 calls these
`train_freq`/`gradient_steps`, PyTorchRL `update_every`/`num_updates`; `update_schedule` maps the second pair onto
the first. Gradient step g updates the actor when g % policy_delay == 0 (TD3's delay; 1 for DDPG and SAC) and the
targets every `target_update_interval` actor updates. Actions live in [-1, 1]^d inside the agent (memory, networks,
noise) and are scaled to the env's bounds on the way out.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math

import numpy as np
import torch

from rl.act_select.continuous import BoxScaler
from rl.agents.base import Agent, cpu_has_bf16, resolve_device
from rl.agents.common import linear_decay
from rl.agents.cuda_graph import GraphedStep
from rl.agents.flat_adam import FlatAdam, flatten_parameters
from rl.agents.scheme import RowSource
from rl.errors import ConfigError, RunStopped
from rl.grad_comp.contracts import no_per_sample_error
from rl.registry import act_select, agents, grad_comp, memory, models

PRECISIONS = ("highest", "high", "medium")


def update_schedule(hp) -> tuple[int, int]:
    """(env steps between training phases, gradient steps per phase): PyTorchRL's `update_every`/`num_updates`
    when set (> 0), else SB3's `train_freq`/`gradient_steps`."""
    every = hp.update_every if hp.update_every > 0 else hp.train_freq
    steps = hp.num_updates if hp.num_updates > 0 else hp.gradient_steps
    if every < 1 or steps < 1:
        raise ConfigError(f"the update schedule needs train_freq/update_every >= 1 and gradient_steps/num_updates "
                          f">= 1, got every={every}, steps={steps}")
    return every, steps


@contextlib.contextmanager
def matmul_precision(precision: str):
    """torch's float32 matmul precision for the block, restored after it, so the setting stays this agent's:
    "medium" lets fp32 matmuls run on bf16 units (AMX on recent Intel CPUs), "high" on TF32 (GPUs)."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


class ActorCriticAgent(RowSource, Agent):
    """The shared machinery; subclasses say which target networks exist and how the loss is called."""

    LIVE_SETTINGS = ("lr", "max_grad_norm")

    TARGET_ACTOR = True  # DDPG and TD3 keep a target actor; SAC does not
    QUANTILE_CRITICS = False  # TQC's critics give atoms [K, B, N] (rl/models/quantile.py); the others Q values [K, B]
    LOSS_KINDS = ("actor_critic",)  # the loss's call (rl/grad_comp/contracts.py: ActorCriticLoss)

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        if hp.matmul_precision not in PRECISIONS:
            raise ConfigError(f"unknown matmul_precision {hp.matmul_precision!r}: valid: {', '.join(PRECISIONS)}")
        self.precision = hp.matmul_precision
        if self.precision == "medium" and self.device.type == "cpu" and not cpu_has_bf16():
            self.precision = "highest"  # emulated bf16 would be slower than fp32
        if not hasattr(action_space, "low") or len(action_space.shape) != 1:
            raise ConfigError(f"agent {hp.agent!r} needs a 1-d Box action space, the env has {action_space}")
        self.scaler = BoxScaler(action_space.low, action_space.high)
        self.graphed = hp.cuda_graph and self.device.type == "cuda"  # FlatAdam(capturable=...) in make_optimizers
        self.actor = models[hp.model].build(hp, obs_space, action_space).to(self.device)
        self.critic = models[hp.critic].build(hp, obs_space, action_space).to(self.device)
        if hasattr(self.critic, "num_quantiles") != self.QUANTILE_CRITICS:
            takes = "quantile critics (quantile_critics)" if self.QUANTILE_CRITICS else "Q critics (q_critic, twin_q)"
            raise ConfigError(f"agent {hp.agent!r} takes {takes}, not critic={hp.critic}")
        # one flat Adam per network (its own learning rate); flattening comes before the target copies, and the
        # targets are flattened too, so a Polyak update is one lerp_ per network
        self.optims = self.make_optimizers()
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False) if self.TARGET_ACTOR else None
        self._polyak_pairs = [(self.optims["critic"].param, flatten_parameters(self.target_critic)[0])]
        if self.target_actor is not None:
            self._polyak_pairs.append((self.optims["actor"].param, flatten_parameters(self.target_actor)[0]))
        self.memory = memory[hp.memory].build(hp, obs_space, action_space, seed=seed)
        self.explore = act_select[hp.act_select].build(hp, int(action_space.shape[0]), num_envs, seed=seed + 1)
        self.loss_fn = grad_comp[hp.grad_comp]
        self.every, self.num_updates = update_schedule(hp)
        self.actor_updates, self._seen = 0, 0
        self.learn_on_batch = GraphedStep(self.learn_on) if self.graphed else self.learn_on

    def networks(self) -> dict:
        nets = {"actor": self.actor, "critic": self.critic, "target_critic": self.target_critic}
        if self.target_actor is not None:
            nets["target_actor"] = self.target_actor
        return nets

    def optimizers(self) -> dict:
        return self.optims

    def base_rates(self) -> dict[str, float]:
        """Each optimizer's learning rate before any decay: the actor's own rate follows lr unless it is set apart."""
        return {"critic": self.hp.lr, "actor": self.hp.lr_actor or self.hp.lr}

    def schedule_rates(self) -> None:
        """Set every optimizer's rate for now: the base rate, times the fraction of the run left with `lr_decay`
        (SB3's `lin_` schedules, which it applies at each training phase)."""
        remaining = linear_decay(self.env_steps, self.hp.train_steps) if self.hp.lr_decay else 1.0
        rates = self.base_rates()
        for name, opt in self.optims.items():
            opt.lr = rates[name] * remaining

    def settings_changed(self, values: dict) -> None:
        if "lr" in values:
            self.schedule_rates()
        if "max_grad_norm" in values and self.graphed:  # a number the recorded step baked in
            self.learn_on_batch.reset()

    def in_effect(self, keys) -> dict:
        return {k: self.optims["critic"].lr if k == "lr" else getattr(self.hp, k) for k in keys}

    def make_optimizers(self) -> dict[str, FlatAdam]:
        hp = self.hp
        return {"critic": FlatAdam(self.critic, hp.lr, hp.adam_eps, capturable=self.graphed),
                "actor": FlatAdam(self.actor, hp.lr_actor or hp.lr, hp.adam_eps, capturable=self.graphed)}

    # ------------------------------------------------------------------ acting
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        if not deterministic and self.explore.warming_up(self.env_steps):
            return self.scaler.to_env(self.explore.random_actions(len(obs)))
        with torch.inference_mode():  # fp32: for a few rows, bf16 conversions cost more than they save
            out = self.actor.forward(self.to_tensor(obs))
        return self.scaler.to_env(self.explore(out, deterministic))

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated, rows=None) -> None:
        self.memory.add(obs, self.scaler.from_env(actions), rewards, next_obs, terminated, truncated, rows=rows)
        self.env_steps += len(rewards)

    def close_rows(self, rows: np.ndarray) -> None:
        self.memory.close_rows(rows)

    def reset_episodes(self, done: np.ndarray) -> None:
        self.explore.reset(done)

    # ------------------------------------------------------------------ learning
    def update(self) -> dict:
        # a phase whenever a multiple of `every` was crossed since the last call (SB3's rollouts of train_freq
        # steps), once past learning_starts
        crossed = self.env_steps // self.every > self._seen // self.every
        self._seen = self.env_steps
        if not crossed or self.env_steps <= self.hp.learning_starts:
            return {}
        self.schedule_rates()
        with matmul_precision(self.precision):
            for _ in range(self.num_updates):
                info = self.gradient_step()
        self.updates += 1
        info.pop("td_error", None)  # a loss without per-sample errors gives none
        if self.graphed:  # a replay's outputs are overwritten by the next one
            info = {k: v.clone() for k, v in info.items()}
        return info

    def gradient_step(self) -> dict:
        hp = self.hp
        batch = self.memory.sample(hp.batch_size)
        self.grad_steps += 1
        update_actor = self.grad_steps % hp.policy_delay == 0
        update_targets = update_actor and (self.actor_updates + 1) % hp.target_update_interval == 0
        info = self.learn_on_batch(batch, update_actor, update_targets)  # learn_on, or its CUDA graph's replay
        if update_actor:
            self.actor_updates += 1
        if hasattr(self.memory, "update_priorities"):
            if "td_error" not in info:
                raise RunStopped(no_per_sample_error(self.hp.grad_comp, self.hp.memory))
            self.memory.update_priorities(batch.indices, info["td_error"])
        return info

    def learn_on(self, batch, update_actor: bool, update_targets: bool) -> dict:
        """One gradient step on `batch`: the loss, one backward pass, each network's optimizer (the actor's and the
        temperature's on `update_actor` steps), the Polyak updates on `update_targets` steps. Tensors in, tensors
        out, no decision on their values: what rl/agents/cuda_graph.py records on a GPU."""
        hp = self.hp
        loss, info = self.loss(batch, update_actor)
        for opt in self.optims.values():
            opt.zero_grad()
        loss.backward()
        for name, opt in self.optims.items():
            if name == "critic" or update_actor:  # a zero gradient would still move Adam's parameters
                if hp.max_grad_norm > 0:  # per network: their gradients have unrelated scales
                    opt.clip_grad_norm(hp.max_grad_norm)
                opt.step()
        if update_targets:
            with torch.no_grad():
                for online, target in self._polyak_pairs:
                    target.lerp_(online, hp.tau)
        return info

    def loss(self, batch, update_actor: bool):
        """DDPG's and TD3's call (bound `forward`s skip nn.Module call overhead); SAC overrides it."""
        return self.loss_fn(self.actor.forward, self.critic.forward, self.target_actor.forward,
                            self.target_critic.forward, batch, update_actor=update_actor, **self.loss_settings())

    def loss_settings(self) -> dict:
        return {}

    # ------------------------------------------------------------------ checkpointing
    def extra_state(self) -> dict:
        return {"explore": self.explore.state_dict(),
                "schedule": {"actor_updates": self.actor_updates, "seen": self._seen}}

    def load_extra_state(self, state: dict) -> None:
        self.explore.load_state_dict(state["explore"])
        self.actor_updates, self._seen = state["schedule"]["actor_updates"], state["schedule"]["seen"]


@agents.register("ddpg")
class DDPG(ActorCriticAgent):
    """Deterministic actor, one critic, exploration noise; `grad_comp=ddpg`."""


@agents.register("td3")
class TD3(ActorCriticAgent):
    """DDPG with twin critics, target policy smoothing and a delayed actor (`policy_delay`); `grad_comp=td3`."""

    def loss_settings(self) -> dict:
        return {"target_noise": self.hp.target_noise, "target_noise_clip": self.hp.target_noise_clip}


@agents.register("sac")
class SAC(ActorCriticAgent):
    """Squashed-Gaussian actor (or gSDE's: `model=gsde_actor`, `act_select=gsde`), twin critics without a target
    actor, and a learned temperature alpha whose learning rate is its own (`lr_alpha`)."""

    TARGET_ACTOR = False
    LOSS_KINDS = ("soft_actor_critic",)  # the loss's call (rl/grad_comp/contracts.py: SoftActorCriticLoss)

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        if hp.initial_alpha <= 0:
            raise ConfigError(f"initial_alpha must be positive, got {hp.initial_alpha}")
        device = torch.device(resolve_device(hp.device))
        self.temperature = Temperature(hp.initial_alpha).to(device).requires_grad_(hp.tune_alpha)
        self.target_entropy = hp.target_entropy * float(np.prod(action_space.shape))
        super().__init__(hp, obs_space, action_space, num_envs, seed)

    def make_optimizers(self) -> dict[str, FlatAdam]:
        optimizers = super().make_optimizers()
        if self.hp.tune_alpha:
            optimizers["alpha"] = FlatAdam(self.temperature, self.hp.lr_alpha or self.hp.lr, self.hp.adam_eps,
                                           capturable=self.graphed)
        return optimizers

    def base_rates(self) -> dict[str, float]:
        return {**super().base_rates(), "alpha": self.hp.lr_alpha or self.hp.lr}

    def loss(self, batch, update_actor: bool):
        return self.loss_fn(self.actor.sampler(), self.critic.forward, self.target_critic.forward,
                            self.temperature.log_alpha, batch, self.target_entropy, update_actor=update_actor,
                            tune_alpha=self.hp.tune_alpha, **self.loss_settings())

    def networks(self) -> dict:
        return {**super().networks(), "temperature": self.temperature}


@agents.register("tqc")
class TQC(SAC):
    """TQC (Kuznetsov et al. 2020): SAC whose K critics each give N atoms of the return's distribution
    (`critic=quantile_critics`), and whose loss (`grad_comp=tqc`, rl/grad_comp/tqc.py) drops the largest
    `top_quantiles_to_drop_per_net` x K of their pooled atoms from the target."""

    QUANTILE_CRITICS = True

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        if not 0 <= hp.top_quantiles_to_drop_per_net < self.critic.num_quantiles:
            raise ConfigError(f"top_quantiles_to_drop_per_net must lie in [0, num_quantiles = "
                              f"{self.critic.num_quantiles}), got {hp.top_quantiles_to_drop_per_net}")
        params = inspect.signature(self.loss_fn).parameters.values()
        if not any(p.name == "top_quantiles_to_drop_per_net" or p.kind is p.VAR_KEYWORD for p in params):
            raise ConfigError(f"agent 'tqc' passes top_quantiles_to_drop_per_net to its loss, which grad_comp "
                              f"{hp.grad_comp!r} does not take: use grad_comp=tqc")

    def loss_settings(self) -> dict:
        return {"top_quantiles_to_drop_per_net": self.hp.top_quantiles_to_drop_per_net}


class Temperature(torch.nn.Module):
    """SAC's entropy temperature, learned as log(alpha)."""

    def __init__(self, initial_alpha: float):
        super().__init__()
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(initial_alpha)))
