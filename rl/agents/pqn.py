"""PQN (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning"): Q-learning with no replay memory and no
target network. Many envs act epsilon-greedily for `num_steps` steps; the rollout's Q(lambda) returns are computed
once (rl/memory/q_lambda.py) and the network regresses its Q-values of the taken actions on them for `epochs` epochs
of minibatches, as PPO does with its rollout. LayerNorm in the network (rl/models/layer_norm.py) is what keeps this
stable without a target network; RAdam (rl/agents/flat_radam.py) and a global-norm clip are the optimiser. After
purejaxql (the paper's code) and CleanRL's pqn.py / pqn_atari_envpool.py.

On-policy in its data flow, it reuses the `rollout` memory (rl/memory/rollout.py): the acting-time max_a Q(s_t, a)
is kept as the rollout's `values`, so within an episode the next state's value is already known and only the final
observations of ended episodes, and the rollout's last, are valued again (rl/memory/targets.py `bootstrap_values`).
A truncated episode bootstraps from its own final observation, a terminated one not at all, and the Q(lambda) trace
stops at every episode's end.

The learning rate decays linearly to 0 over `train_steps` with `lr_decay` (CleanRL's anneal_lr); epsilon falls
linearly from `exploration_initial_eps` to `exploration_final_eps` over `exploration_fraction` of the run
(rl/act_select/epsilon_greedy.py). The loss (`grad_comp`, kind `q_lambda`) is called as `loss_fn(q_values, batch,
diagnostics=...)` on the minibatch's Q-values [B, A], with gradient.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.agents.base import Agent
from rl.agents.common import check_same_step_autoreset, linear_decay
from rl.agents.flat_adam import FlatAdam
from rl.agents.flat_radam import FlatRAdam
from rl.envs.observations import action_mask
from rl.errors import ConfigError
from rl.memory.q_lambda import fill_q_lambda
from rl.models.mlp import init_orthogonal
from rl.models.q_network import num_actions
from rl.registry import act_select, agents, grad_comp, memory, models


@agents.register("pqn")
class PQN(Agent):
    """A Q-network with LayerNorm + epsilon-greedy acting + a rollout, learned from by Q(lambda) regression."""

    LIVE_SETTINGS = ("lr", "max_grad_norm", "exploration_final_eps", "q_lambda")
    LOSS_KINDS = ("q_lambda",)  # the loss's call (rl/grad_comp/contracts.py: QLambdaLoss)

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        if hp.num_workers > 0 or hp.num_grad_workers > 1:
            raise ConfigError(f"agent 'pqn' runs in one process (its envs are its workers): set num_workers=0 and "
                              f"num_grad_workers=1 (got {hp.num_workers} and {hp.num_grad_workers})")
        check_same_step_autoreset(hp)
        self.num_actions = num_actions(action_space)
        self.q = models[hp.model].build(hp, obs_space, action_space).to(self.device)
        if hp.ortho_init:
            init_orthogonal(self.q)  # every layer, the Q head too: CleanRL's layer_init (gain sqrt(2), zero biases)
        self.optimizer = (FlatRAdam(self.q, hp.lr, hp.adam_eps) if hp.optimizer == "radam"
                          else FlatAdam(self.q, hp.lr, hp.adam_eps))
        self.memory = memory[hp.memory].build(hp, obs_space, action_space, num_envs)
        self.explore = act_select[hp.act_select].build(hp, self.num_actions, seed=seed + 1)
        self.greedy = act_select["greedy"]()
        # `eval_deterministic=False`: evaluate with the final epsilon, from a generator of its own so that
        # evaluating never moves the training stream
        self.eval_explore = (None if hp.eval_deterministic
                             else act_select[hp.act_select].build(hp, self.num_actions, seed=seed + 3))
        self.loss_fn = grad_comp[hp.grad_comp]
        self.shuffle = torch.Generator().manual_seed(seed + 2)
        self.no_log_probs = np.zeros(num_envs, np.float32)  # the rollout's log_probs column: unused by Q-learning
        self._cache: tuple | None = None
        self.diagnostics: dict = {}

    def networks(self) -> dict:
        return {"q": self.q}

    def optimizers(self) -> dict:
        return {"optimizer": self.optimizer}

    # ------------------------------------------------------------------ acting
    def _q_values(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values [B, A] in fp32 (the network under bf16 autocast with `precision=bf16`)."""
        with self.autocast():
            return self.q(x).float()

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = self.to_tensor(obs)
        mask = action_mask(obs, getattr(self.q, "mask_key", None))  # exploration draws among the legal actions
        with torch.inference_mode():
            q = self._q_values(x)
        if deterministic:
            if self.eval_explore is not None:
                return self.eval_explore(q, self.hp.train_steps, mask=mask)
            return self.greedy(q, mask=mask)
        actions = self.explore(q, self.env_steps, mask=mask)
        self._cache = (x, q.amax(1))  # max_a Q(s_t, a): the next step's bootstrap value, within an episode
        return actions

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        if len(rewards) != self.num_envs:
            raise ConfigError(f"agent 'pqn' must observe all {self.num_envs} envs at every step; use vector_mode=sync "
                              f"or async")
        x, values = self._cache
        self.memory.add(x, actions, rewards, self.to_tensor(next_obs), terminated, truncated, values,
                        self.no_log_probs)
        self.env_steps += len(rewards)

    # ------------------------------------------------------------------ learning
    def update(self) -> dict:
        """Learn from a full rollout: its Q(lambda) returns, then `epochs` epochs of minibatch regression."""
        if not self.memory.full:
            return {}
        hp = self.hp
        self.optimizer.lr = hp.lr * (linear_decay(self.env_steps, hp.train_steps) if hp.lr_decay else 1.0)
        mem = self.memory  # acted by the current weights: no update since its first step
        fill_q_lambda(mem, mem.values[:mem.pos], self._max_q_of, hp.gamma, hp.q_lambda)
        batch_size = hp.batch_size if hp.batch_size > 0 else len(mem)
        batches = None
        for epoch in range(hp.epochs):
            if batches is None or len(batches) > 1:  # one minibatch holding the rollout: the same tensors each epoch
                batches = list(mem.minibatches(batch_size, self.shuffle))
            for i, batch in enumerate(batches):
                last = epoch == hp.epochs - 1 and i == len(batches) - 1  # the logged diagnostics are the last step's
                loss, info = self.loss_fn(self._q_values(batch.obs), batch, diagnostics=last)
                self.optimizer.zero_grad()
                loss.backward()
                if hp.max_grad_norm > 0:
                    self.optimizer.clip_grad_norm(hp.max_grad_norm)
                self.optimizer.step()
                self.grad_steps += 1
                self.diagnostics = info or self.diagnostics
        mem.reset()
        self.updates += 1
        return {**self.diagnostics, "charts/epsilon": self.explore.epsilon(self.env_steps),
                "charts/learning_rate": self.optimizer.lr}

    def _max_q_of(self, obs: torch.Tensor, hidden=None) -> torch.Tensor:
        """max_a Q(obs, a) of stored observations under the current network, on the CPU (`bootstrap_values`' hook)."""
        with torch.inference_mode():
            return self._q_values(obs.to(self.device)).amax(1).cpu()

    def settings_changed(self, values: dict) -> None:
        if "lr" in values:
            self.optimizer.lr = self.hp.lr * (linear_decay(self.env_steps, self.hp.train_steps)
                                              if self.hp.lr_decay else 1.0)
        if "exploration_final_eps" in values:
            self.explore.final_eps = self.hp.exploration_final_eps

    def in_effect(self, keys) -> dict:
        now = {"lr": self.optimizer.lr}
        return {k: now[k] if k in now else getattr(self.hp, k) for k in keys}

    # ------------------------------------------------------------------ checkpointing
    def extra_state(self) -> dict:
        return {"explore": self.explore.state_dict(), "shuffle": self.shuffle.get_state()}

    def load_extra_state(self, state: dict) -> None:
        """The envs restart their episodes after a load, so a stored partial rollout is cut there."""
        self.explore.load_state_dict(state["explore"])
        self.shuffle.set_state(state["shuffle"])
        if "memory" in state:
            self.memory.cut()
        else:
            self.memory.reset()
