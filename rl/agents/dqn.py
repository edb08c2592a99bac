"""DQN (Mnih et al. 2015) with the usual extensions selected by settings: double Q (`grad_comp=double_td`),
dueling heads (`dueling=True`), Polyak or hard target updates (`tau`), SB3's `train_freq`/`gradient_steps` schedule,
and the Rainbow parts (Hessel et al. 2018): noisy nets (`noisy=True`, act_select=greedy: the noise explores;
resampled before every env step and, for the online and target networks, before every gradient step; off to
evaluate), C51 (`model=c51_network`, `grad_comp=c51` or `double_c51`), prioritized replay (`memory=prioritized`) and
n-step returns (`n_step`).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from rl.act_select.epsilon_greedy import fixed_worker_epsilon, uniform_actions
from rl.agents.base import Agent
from rl.agents.common import polyak_update
from rl.agents.flat_adam import FlatAdam
from rl.agents.scheme import RowSource
from rl.envs.observations import action_mask, num_rows
from rl.errors import ConfigError, RunStopped
from rl.grad_comp.contracts import no_per_sample_error
from rl.registry import act_select, agents, grad_comp, memory, models


@agents.register("dqn")
class DQN(RowSource, Agent):
    """Q-learning from a replay memory with a target network; collection workers ship it replay rows (Ape-X)."""

    LIVE_SETTINGS = ("lr", "max_grad_norm", "exploration_final_eps")
    LOSS_KINDS = ("td",)  # the loss's call (rl/grad_comp/contracts.py: TDLoss)

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        self.q = models[hp.model].build(hp, obs_space, action_space).to(self.device)
        self.optimizer = FlatAdam(self.q, hp.lr, hp.adam_eps)  # flattens q's parameters: before the deepcopy
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.params, self.target_params = list(self.q.parameters()), list(self.target.parameters())
        self.memory = memory[hp.memory].build(hp, obs_space, action_space, seed=seed)
        if hasattr(self.memory, "set_feature_fn"):  # attentive replay may compare states by the torso's features
            self.memory.set_feature_fn(self.q.torso)
        self.explore = act_select[hp.act_select].build(hp, int(action_space.n), seed=seed + 1)
        self.greedy = act_select["greedy"]()
        # `eval_deterministic=False`: evaluate with the final epsilon (Mnih et al. 2015 used 0.05), from a generator
        # of its own so that evaluating never moves the training stream
        self.eval_explore = (None if hp.eval_deterministic
                             else act_select[hp.act_select].build(hp, int(action_space.n), seed=seed + 3))
        self.loss_fn = grad_comp[hp.grad_comp]
        declared = grad_comp.declared(hp.grad_comp)
        self.loss_targets = declared.get("targets")  # the loss's hook computing its targets ahead, if it has one
        reads = declared.get("distributional")  # True: C51's `log_probs`; or the method it names (QR-DQN: quantiles)
        reads = "log_probs" if reads is True else reads
        if reads and not hasattr(self.q, reads):
            fits = " or ".join(f"model={name}" for name in models if hasattr(models[name], reads))
            raise ConfigError(f"grad_comp={hp.grad_comp} needs a distributional network (with {reads}): set {fits}")
        self.noisy = bool(getattr(self.q, "noisy", False))
        self.num_actions = int(action_space.n)
        self.warmup_rng = np.random.default_rng(seed + 2)  # uniform actions before learning_starts, as SB3 takes
        self._last_train = 0  # env step at which the last training phase ran
        self._last_target = 0  # env step at which the target was last updated
        # Ape-X with `worker_epsilon`: each collection worker acts with a fixed epsilon of its own (worker_settings)
        # and this learner's schedule acts nowhere, so no charts/epsilon is logged (no worker follows that schedule)
        self.logs_epsilon = not (hp.num_workers > 0 and "worker_epsilon" in hp and hp.worker_epsilon > 0)

    def networks(self) -> dict:
        return {"q": self.q, "target": self.target}

    def optimizers(self) -> dict:
        return {"optimizer": self.optimizer}

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        # the legal actions of an env with an action mask (None without): exploration draws among them, and the
        # network's values already rank illegal actions last (rl/models/multi_input.py)
        n, mask = num_rows(obs), action_mask(obs, getattr(self.q, "mask_key", None))

        def q_values() -> torch.Tensor:
            with torch.inference_mode(), self.autocast():  # the torso in bf16 with precision=bf16, the head in fp32
                return self.q(self.to_tensor(obs))

        if deterministic and self.noisy:  # evaluate with the mean weights
            self.q.eval()
            actions = self.greedy(q_values())
            self.q.train()
            return actions
        if deterministic and self.eval_explore is not None:
            return self.eval_explore(q_values, self.hp.train_steps, n, mask=mask)
        if deterministic:
            return self.greedy(q_values())
        if self.env_steps < self.hp.learning_starts:  # warm-up: SB3's off-policy algorithms act uniformly at random
            return uniform_actions(self.warmup_rng, self.num_actions, n, mask)
        if self.noisy:
            self.q.reset_noise()  # a fresh policy sample per env step, as well as per gradient step
        return self.explore(q_values, self.env_steps, n, mask=mask)  # epsilon-greedy skips the forward pass if it can

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated, rows=None) -> None:
        self.memory.add(obs, actions, rewards, next_obs, terminated, truncated, rows=rows)
        self.env_steps += len(rewards)
        hp = self.hp
        if self.env_steps // hp.target_update_interval > self._last_target // hp.target_update_interval:
            polyak_update(self.params, self.target_params, hp.tau)
            self._last_target = self.env_steps

    def close_rows(self, rows: np.ndarray) -> None:
        self.memory.close_rows(rows)

    @classmethod
    def worker_settings(cls, hp, rank: int, count: int):
        """A replay worker's (RowSource), and with `worker_epsilon` Ape-X's own fixed epsilon for worker `rank`: a
        schedule from eps to eps."""
        w = super().worker_settings(hp, rank, count)
        if (eps := fixed_worker_epsilon(hp, rank, count)) is not None:
            w.exploration_initial_eps = w.exploration_final_eps = eps
        return w

    def update(self) -> dict:
        hp = self.hp
        # train every `train_freq` env steps (aligned to multiples, as SB3 does) once past `learning_starts`
        if self.env_steps <= hp.learning_starts or self.env_steps // hp.train_freq == self._last_train // hp.train_freq:
            return {}
        self._last_train = self.env_steps
        prioritized = hasattr(self.memory, "update_priorities")
        for step, (batch, target) in enumerate(self._phase(hp.batch_size, hp.gradient_steps)):
            # diagnostics (and TD errors) only where read: priorities need them each step, the log the last one's
            diagnostics = prioritized or step == hp.gradient_steps - 1
            if self.noisy:
                self.q.reset_noise()
                self.target.reset_noise()
            ahead = {} if target is None else {"target": target}  # only a loss with a `targets` hook takes them
            with self.autocast():  # the torsos' forward passes in bf16 with precision=bf16; heads and loss in fp32
                loss, info = self.loss_fn(self.q, self.target, batch, hp.loss, diagnostics=diagnostics, **ahead)
            if prioritized and "td_error" not in info:  # before any weight moves
                raise RunStopped(no_per_sample_error(hp.grad_comp, hp.memory))
            self.optimizer.zero_grad()
            loss.backward()
            if hp.max_grad_norm > 0:
                self.optimizer.clip_grad_norm(hp.max_grad_norm)
            self.optimizer.step()
            self.grad_steps += 1
            if prioritized:
                self.memory.update_priorities(batch.indices, info["td_error"])
        self.updates += 1
        info.pop("td_error", None)  # a loss without per-sample errors gives none
        if self.logs_epsilon:
            info["charts/epsilon"] = self.explore.epsilon(self.env_steps) if hasattr(self.explore, "epsilon") else 0.0
        return info

    def _phase(self, batch_size: int, steps: int):
        """(minibatch, precomputed TD targets or None) for each gradient step of a training phase. When the memory
        draws i.i.d. uniform samples and the loss's targets depend on the target network alone (a loss registered
        with a `targets` hook, as `td` is; no noisy nets), nothing the phase changes affects them: one draw and one
        batched target forward serve all `steps` (per-call overhead, not arithmetic, is the cost of these small
        networks)."""
        targets_fn = self.loss_targets
        if targets_fn is None or self.noisy or not getattr(self.memory, "UNIFORM", False):
            for _ in range(steps):
                yield self.memory.sample(batch_size), None
            return
        whole = self.memory.sample(batch_size * steps)
        with self.autocast():
            targets = targets_fn(self.target, whole)
        yield from zip(whole.split(batch_size), targets.split(batch_size))

    def settings_changed(self, values: dict) -> None:
        if "lr" in values:
            self.optimizer.lr = self.hp.lr
        if "exploration_final_eps" in values and hasattr(self.explore, "final_eps"):
            self.explore.final_eps = self.hp.exploration_final_eps

    def extra_state(self) -> dict:
        return {"explore": self.explore.state_dict(), "warmup_rng": self.warmup_rng.bit_generator.state,
                "schedule": {"last_train": self._last_train, "last_target": self._last_target}}

    def load_extra_state(self, state: dict) -> None:
        self.explore.load_state_dict(state["explore"])
        self.warmup_rng.bit_generator.state = state["warmup_rng"]
        self._last_train, self._last_target = state["schedule"]["last_train"], state["schedule"]["last_target"]
