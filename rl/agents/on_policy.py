"""The on-policy family: VPG (Williams 1992), A2C (Mnih et al. 2016) and PPO (Schulman et al. 2017), batched over
N envs as in ChainerRL's batch PPO, in one agent class.

The three agents differ only in settings: the loss (`grad_comp` pg, a2c or ppo_clip) and the update schedule
(`epochs` over the rollout in minibatches of `batch_size`; 0 means the whole rollout). Acting caches the policy's
log-probabilities, values and hidden states so `observe` can store them; `update` learns when the rollout holds
num_steps x num_envs transitions: it fills the rollout's targets (rl/memory/targets.py: GAE or V-trace), then runs
the epochs, each minibatch a loss, a backward pass, a clip and a step. The learning rate and PPO's clip range decay
linearly to 0 over `train_steps` when asked (`linear_decay`); `target_kl` stops the epochs early.

Every gradient step is autograd's gradient of the registered loss (`grad_comp`), whatever it computes: a loss is
called as `loss_fn(log_probs, entropy, values, batch, diagnostics=..., clip_range=..., clip_range_vf=...,
ent_coef=..., vf_coef=..., normalize_advantage=False)` on advantages already standardised
(`standardized_advantages`) and returns (loss, diagnostics).

The agent is a RolloutSource and a GradientSource (rl/agents/scheme.py): it takes collection workers' rollouts, and
its gradient steps can be split between gradient workers and a learner.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.agents.base import Agent
from rl.agents.common import check_same_step_autoreset, fp32_params, linear_decay
from rl.agents.flat_adam import FlatAdam
from rl.agents.normalize import ObsNormalizer, RewardNormalizer, RunningMeanStd
from rl.agents.scheme import GradientSource, RolloutSource
from rl.errors import ConfigError
from rl.grad_comp.policy_gradient import approx_kl, standardized_advantages
from rl.memory.rollout import RolloutMemory
from rl.memory.targets import bootstrap_values, fill_vtrace
from rl.registry import act_select, agents, grad_comp, memory, models


class OnPolicyAgent(RolloutSource, GradientSource, Agent):
    """Actor-critic + rollout memory + a policy-gradient loss, run for `epochs` epochs per rollout."""

    # read at every update: the learning rate and clip range through `_schedule` (their decay multiplies the new value)
    LIVE_SETTINGS = ("lr", "clip_range", "ent_coef", "vf_coef", "max_grad_norm", "target_kl")
    LOSS_KINDS = ("policy_gradient", "vtrace")  # the loss's call (rl/grad_comp/contracts.py: PolicyGradientLoss)

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        check_same_step_autoreset(hp)
        self.model = models[hp.model].build(hp, obs_space, action_space).to(self.device)
        self.optimizer = FlatAdam(self.model, hp.lr, self.optimizer_eps(), kind=hp.optimizer,
                                  rmsprop_alpha=hp.rmsprop_alpha)
        self.policy = act_select[hp.act_select].build(hp, action_space, seed=seed + 1)
        # evaluation acts greedily, or samples with a generator of its own (`eval_deterministic=False`), so that
        # evaluating never moves the training policy's random stream
        self.greedy = (act_select[f"deterministic_{hp.act_select}"].build(hp, action_space) if hp.eval_deterministic
                       else act_select[hp.act_select].build(hp, action_space, seed=seed + 3))
        self.loss_fn = grad_comp[hp.grad_comp]
        # V-trace targets instead of GAE: asked for (APPO), or wanted by the loss (its kind: IMPALA's `vtrace`)
        self.vtrace = hp.vtrace or grad_comp.kind_of(hp.grad_comp) == "vtrace"
        if self.vtrace and hp.normalize_returns:
            # as Sample Factory's cfg check. The units are right (targets in returns, the loss in standardised ones),
            # but the value loss then regresses zero-mean, unit-variance V-trace (lambda = 1) returns that nothing
            # predicts early on; its cheapest fit, a constant, shrinks a shared torso's features until the policy
            # can no longer move (appo_atari on Pong: entropy 1.789 of 1.792 after 1M steps)
            raise ConfigError("normalize_returns is not supported with V-trace (vtrace=True or grad_comp=vtrace); "
                              "use normalize_reward to rescale large returns")
        self.recurrent = self.model.hidden_shape is not None
        self.memory = memory[hp.memory].build(hp, obs_space, action_space, num_envs, self.model.hidden_shape)
        self.obs_norm = ObsNormalizer(obs_space.shape, hp.clip_obs) if hp.normalize_obs else None
        self.reward_norm = RewardNormalizer(num_envs, hp.gamma, hp.clip_reward) if hp.normalize_reward else None
        # Sample Factory's normalised returns: the value head learns standardised returns; the rollout keeps the
        # head's outputs, which an update turns back into returns with the statistics it has then
        self.return_norm = RunningMeanStd(()) if hp.normalize_returns else None
        self.shuffle = torch.Generator().manual_seed(seed + 2)
        self.hidden = self.model.initial_state(num_envs, self.device)
        self.starts = np.ones(num_envs, np.float32)  # 1 where the next act() begins an episode
        self._cache: tuple | None = None
        self._behaviour: dict = {}  # per-step vectors of the acting policy for a memory that keeps them (impala)
        self.diagnostics: dict = {}  # the last gradient step's (update, minibatch_gradients)
        self._clip = hp.clip_range  # the clip range in effect (clip_decay's schedule at the last update)
        self.epochs_run = 0

    def networks(self) -> dict:
        return {"model": self.model}

    def optimizers(self) -> dict:
        return {"optimizer": self.optimizer}

    def normalizers(self) -> dict:
        found = {"obs": None if self.obs_norm is None else self.obs_norm.rms,
                 "reward": None if self.reward_norm is None else self.reward_norm.rms, "return": self.return_norm}
        return {k: v for k, v in found.items() if v is not None}

    def statistics_changed(self) -> None:
        if self.obs_norm is not None:
            self.obs_norm.refresh()

    # ------------------------------------------------------------------ acting
    def _input(self, obs: np.ndarray, update_stats: bool = False) -> torch.Tensor:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs, update=update_stats)
        return self.to_tensor(obs)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        if deterministic:
            return self.act_eval(obs, self.hidden)[0]
        x = self._input(obs, update_stats=True)
        with torch.inference_mode():
            params, values, hidden = self._forward(x, self.hidden)
            step = self.policy(params)
        self._cache = (x, step.actions, step.log_probs, values, self.hidden, hidden)
        self.hidden = hidden
        return step.env_actions

    def eval_state(self, num_envs: int):
        return self.model.initial_state(num_envs, self.device)

    def act_eval(self, obs: np.ndarray, state):
        with torch.inference_mode():
            params, _, state = self._forward(self._input(obs), state)
            return self.greedy(params).env_actions, state

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        if len(rewards) != self.num_envs:
            raise ConfigError(f"agent {self.hp.agent!r} must observe all {self.num_envs} envs at every step; "
                              f"use vector_mode=sync or async")
        x, stored_actions, log_probs, values, hidden, next_hidden = self._cache
        if self.reward_norm is not None:
            rewards = self.reward_norm(rewards, np.logical_or(terminated, truncated))
        self.memory.add(x, stored_actions, rewards, self._input(next_obs), terminated, truncated, values, log_probs,
                        hidden, next_hidden, self.starts, **self._behaviour)
        self.starts[:] = 0.0
        self.env_steps += len(rewards)

    def reset_episodes(self, done: np.ndarray) -> None:
        self.starts[done] = 1.0
        if self.recurrent:
            with torch.inference_mode():
                self.hidden = self.hidden * torch.from_numpy(1.0 - self.starts).to(self.device).view(-1, 1, 1)

    # ------------------------------------------------------------------ learning
    def _schedule(self) -> tuple[float, float]:
        hp = self.hp
        remaining = linear_decay(self.env_steps, hp.train_steps)
        return (hp.lr * (remaining if hp.lr_decay else 1.0),
                hp.clip_range * (remaining if hp.clip_decay else 1.0))

    def loss_elements(self) -> int:
        """The elements the loss is the mean over: a minibatch of batch_size, or the whole rollout."""
        return self.hp.batch_size or self.hp.num_steps * self.num_envs

    def optimizer_eps(self) -> float:
        """adam_eps, or summed_eps / loss_elements: a summed loss's gradient is k times the mean's and so is
        RMSprop's sqrt(v), so the mean loss takes the same steps with eps / k (epsilon outside the root, as torch)."""
        hp = self.hp
        return hp.summed_eps / self.loss_elements() if hp.summed_eps > 0 else hp.adam_eps

    def grad_clip(self) -> float:
        """max_grad_norm, or summed_clip / loss_elements (a global-norm clip commutes with the 1 / k scale)."""
        hp = self.hp
        return hp.summed_clip / self.loss_elements() if hp.summed_clip > 0 else hp.max_grad_norm

    def settings_changed(self, values: dict) -> None:
        """A new base rate or clip takes effect now, at the schedule's point for this step (the next update
        recomputes both at its own step)."""
        if "lr" in values or "clip_range" in values:
            self.optimizer.lr, self._clip = self._schedule()

    def in_effect(self, keys) -> dict:
        now = {"lr": self.optimizer.lr, "clip_range": self._clip, "max_grad_norm": self.grad_clip()}
        return {k: now[k] if k in now else getattr(self.hp, k) for k in keys}

    def _forward(self, x: torch.Tensor, hidden: torch.Tensor | None = None):
        """The model's step, under bf16 autocast with `precision=bf16`; outputs in fp32 for the policy and loss."""
        with self.autocast():
            params, values, hidden = self.model(x, hidden)
        return fp32_params(params), values.float(), None if hidden is None else hidden.float()

    def _evaluate(self, batch, need_entropy: bool):
        with self.autocast():
            if self.recurrent:
                params, values = self.model.forward_sequence(batch.obs, batch.hidden, batch.starts)
            else:
                params, values, _ = self.model(batch.obs)
        params, values = fp32_params(params), values.float()
        entropy = self.policy.entropy(params) if need_entropy else None
        return self.policy.log_prob(params, batch.actions), entropy, values

    def update(self) -> dict:
        """Learn from a full rollout: each of `minibatch_gradients`' gradients (the targets, then `epochs` epochs of
        minibatches, stopped early where the policy moved past `target_kl`), clipped and stepped."""
        if not self.memory.full:
            return {}
        for gradient in self.minibatch_gradients():
            self._apply(gradient)  # clipped by global norm, then the optimizer's step
        return self.finish_update()

    def minibatch_gradients(self):
        """The update's gradients, one a minibatch: the targets, then epoch by epoch autograd's gradient of the
        registered loss on each minibatch, in the optimizer's flat buffer; it ends early where the policy moved past
        `target_kl`. `update()` steps on each in turn; a gradient worker (rl/parallel/roles.py) ships each to the
        learner instead."""
        hp = self.hp
        self.begin_update()
        batches = None
        for epoch in range(hp.epochs):
            batches = self._epoch_batches(batches)
            self.epochs_run = epoch + 1
            for i, batch in enumerate(batches):
                last = epoch == hp.epochs - 1 and i == len(batches) - 1  # the logged diagnostics are the last step's
                loss, past_target_kl = self.minibatch_loss(batch, diagnostics=hp.target_kl > 0 or last)
                if past_target_kl:
                    return  # the early stop: the policy moved far enough
                self.optimizer.zero_grad()
                loss.backward()
                yield self.optimizer.grad

    def begin_update(self) -> None:
        """This update's learning rate and clip range (their schedules at this step), and the rollout's targets."""
        self.optimizer.lr, self._clip = self._schedule()
        self.fill_targets()
        self.epochs_run, self.diagnostics = 0, {}

    def fill_targets(self) -> None:
        """Fill the rollout's advantages and returns (rl/memory/targets.py): GAE, or V-trace where asked for. A
        rollout acted by the current weights (one process, or sync workers) has V-trace ratio 1 and its acting-time
        values; a stale one (async workers) is valued and its actions scored by the current model first. With
        `normalize_returns` the value loss compares standardised values with standardised returns."""
        hp, mem = self.hp, self.memory
        T = mem.pos
        mem.values[:T] = self._real(mem.values[:T])
        if self.vtrace:
            values, log_rhos = mem.values[:T], torch.zeros(T, mem.num_envs)
            if mem.stale:
                whole = next(mem.minibatches(len(mem), self.shuffle, seq_len=0))  # the rollout in time-major order
                with torch.inference_mode():
                    log_probs, _, current = self._evaluate(whole, need_entropy=False)
                values = self._real(current.reshape(T, -1).cpu())
                log_rhos = log_probs.reshape(T, -1).cpu() - mem.log_probs[:T]
            fill_vtrace(mem, log_rhos, values, self.next_values(values), hp.gamma, hp.vtrace_rho, hp.vtrace_c,
                        hp.vtrace_pg_rho)
        else:
            mem.compute_advantages(self.next_values(mem.values[:T]), hp.gamma, hp.gae_lambda)
        if self.return_norm is not None:
            self.return_norm.update(mem.returns[:T].flatten().numpy())
            mem.returns[:T], mem.values[:T] = self._standard(mem.returns[:T]), self._standard(mem.values[:T])

    def next_values(self, values: torch.Tensor) -> torch.Tensor:
        """V(real_next_obs) of every stored step [T, N], given `values` [T, N] of the stored observations."""
        return bootstrap_values(self.memory, values, self._value_of)

    def _value_of(self, obs: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        """The current model's values of observations (and their recurrent states), in return units on the CPU."""
        hidden = None if hidden is None else hidden.to(self.device)
        with torch.inference_mode():
            _, values, _ = self._forward(obs.to(self.device), hidden)
        return self._real(values.cpu())

    def _epoch_batches(self, previous: list | None) -> list:
        """One epoch's minibatches of the rollout (shuffled afresh each epoch); where one minibatch holds the
        rollout, the same tensors every epoch."""
        if previous is not None and len(previous) == 1:
            return previous
        hp = self.hp
        batch_size = hp.batch_size if hp.batch_size > 0 else len(self.memory)
        return list(self.memory.minibatches(batch_size, self.shuffle, hp.recurrent_seq_len))

    def minibatch_loss(self, batch, diagnostics: bool) -> tuple[torch.Tensor, bool]:
        """The registered loss on one minibatch, its advantages standardised first where `normalize_advantage` is
        set (over the union of a synchronous gradient group's minibatches); and whether the policy has moved past
        `target_kl` (the group agrees on it). The loss's diagnostics, where computed, become the update's."""
        hp = self.hp
        log_probs, entropy, values = self._evaluate(batch, hp.ent_coef != 0 or diagnostics)
        if hp.normalize_advantage:
            batch = batch._replace(advantages=standardized_advantages(batch.advantages, self.collective))
        loss, info = self.loss_fn(log_probs, entropy, values, batch, diagnostics=diagnostics,
                                  clip_range=self._clip, clip_range_vf=hp.clip_range_vf, ent_coef=hp.ent_coef,
                                  vf_coef=hp.vf_coef, normalize_advantage=False)
        self.diagnostics = info or self.diagnostics
        return loss, self._past_target_kl(log_probs, batch)

    def _past_target_kl(self, log_probs: torch.Tensor, batch) -> bool:
        """The approximate KL of the current policy to the acting one above 1.5 x `target_kl` (0: never)."""
        hp = self.hp
        if hp.target_kl <= 0:
            return False
        kl = approx_kl(log_probs, batch.old_log_probs).float().reshape(1)
        if self.collective is not None:
            kl = self.collective.mean(kl)
        return kl.item() > 1.5 * hp.target_kl

    def _apply(self, grad: torch.Tensor) -> None:
        """One optimizer step on `grad`, clipped by global norm."""
        opt = self.optimizer
        if grad is not opt.grad:
            opt.zero_grad()
            opt.grad.copy_(grad)
        if self.grad_clip() > 0:
            opt.clip_grad_norm(self.grad_clip())
        opt.step()
        self.grad_steps += 1

    def finish_update(self) -> dict:
        """After the last minibatch: the rollout is spent; one learner update."""
        self.memory.reset()
        self.updates += 1
        info = {k: v for k, v in self.diagnostics.items()}
        info.update({"charts/learning_rate": self.optimizer.lr, "charts/clip_range": self._clip,
                     "charts/epochs": self.epochs_run})
        return info

    # ------------------------------------------------------------------ gradient workers (GradientSource)
    def gradient_size(self) -> int:
        return self.optimizer.grad.numel()

    def apply_gradients(self, grad: torch.Tensor, steps: int = 0) -> dict:
        """A gradient worker's gradient (A3C), applied with this learner's learning-rate schedule (read before its
        `steps` are counted)."""
        self.optimizer.lr, _ = self._schedule()
        self._apply(grad)
        self.updates += 1
        self.env_steps += steps
        return {"charts/learning_rate": self.optimizer.lr}

    # ------------------------------------------------------------------ rollouts made elsewhere (RolloutSource)
    def take_rollout(self, rollout: RolloutMemory, lag: int, steps: int) -> bool:
        """The worker's env columns go into the next free columns of this agent's rollout, with their policy lag
        (V-trace rescores stale ones); True once every column is in (`update()` learns from the whole batch)."""
        self.memory.write_columns(self.memory.columns_written, rollout, policy_lag=lag)
        self.env_steps += steps
        return self.memory.full

    def rollout_ready(self) -> bool:
        """A collection worker's agent: its rollout is full, to be shipped."""
        return self.memory.full

    def ship_rollout(self, buffer: RolloutMemory) -> None:
        """A collection worker's agent: its full rollout copied into `buffer` (rl/parallel/buffers.py), and a new
        one begun."""
        buffer.reset()
        buffer.write_columns(0, self.memory)
        self.memory.reset()

    def rollout_layout(self) -> tuple[tuple | None, dict[str, int]]:
        """What a worker's rollout buffer must hold to fit this agent's rollout: the recurrent state's shape (None:
        feed-forward) and the behaviour vectors kept (RolloutMemory's `behaviour`)."""
        return self.model.hidden_shape, dict(self.memory.behaviour_widths)

    def _real(self, values: torch.Tensor) -> torch.Tensor:
        """The value head's outputs as returns (with `normalize_returns` the head predicts standardised returns)."""
        rn = self.return_norm
        return values if rn is None else values * float(np.sqrt(rn.var + 1e-8)) + float(rn.mean)

    def _standard(self, returns: torch.Tensor) -> torch.Tensor:
        rn = self.return_norm
        return (returns - float(rn.mean)) / float(np.sqrt(rn.var + 1e-8))

    # ------------------------------------------------------------------ checkpointing
    def extra_state(self) -> dict:
        return {"policy": self.policy.state_dict(), "shuffle": self.shuffle.get_state()}

    def load_extra_state(self, state: dict) -> None:
        """The envs restart their episodes after a load, so a stored partial rollout is cut there."""
        self.policy.load_state_dict(state["policy"])
        self.shuffle.set_state(state["shuffle"])
        if self.reward_norm is not None:
            self.reward_norm.reset()
        if "memory" in state:
            self.memory.cut()
        else:
            self.memory.reset()
        self.hidden = self.model.initial_state(self.num_envs, self.device)
        self.starts[:] = 1.0


for _name in ("vpg", "a2c", "ppo"):
    agents.register(_name)(OnPolicyAgent)
