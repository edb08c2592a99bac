"""On-policy rollout storage with GAE(lambda) (Schulman et al. 2016, "High-Dimensional Continuous Control Using
Generalized Advantage Estimation"), batched over N envs as in ChainerRL's batch PPO.

A rollout is (num_steps x num_envs) transitions in preallocated CPU tensors. Each step stores the observation, the
action, the policy's log-probability and value at acting time, the reward, and the *real* next observation (the final
observation where an episode ended). Every step bootstraps from V(real_next_obs_t) * (1 - terminated_t) and the
recursion is cut by (1 - (terminated_t | truncated_t)), so termination (no bootstrap), truncation (bootstrap from the
final observation) and the rollout's last step (bootstrap from the next observation) are one rule, applied in one
vectorised backward pass over time. Recurrent policies also store the hidden state used to act, the one it produced
(to value real_next_obs), and episode-start flags; their minibatches are whole per-env sequences. Structured
observations (a Dict or Tuple space) are stored one array per entry (rl/envs/observations.py), an action mask
among them: a minibatch's observations carry the masks they were acted under.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from rl.envs.observations import as_obs, fields, obs_map, plain, zeros
from rl.registry import memory


class RolloutBatch(NamedTuple):
    """A minibatch. Feed-forward: flat [B, ...]. Recurrent: `obs`, `starts` are [T, n, ...] sequences and `hidden`
    the [n, ...] state before their first step; every other field is flat [T * n] in time-major order."""

    obs: torch.Tensor  # or a DictObs
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    hidden: torch.Tensor | None = None
    starts: torch.Tensor | None = None


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
        dones: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Advantages [T, N] from per-step next values (already V(real_next_obs_t)); one backward pass over T."""
    deltas = rewards + gamma * (1.0 - terminated) * next_values - values
    carry = gamma * lam * (1.0 - dones)
    adv = np.empty_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in range(len(deltas) - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        adv[t] = last
    return adv


def _numpy(x) -> np.ndarray:
    """An array (or each array of structured observations) as numpy."""
    return obs_map(lambda a: a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a), as_obs(x))


def _storage_dtype(dtype) -> torch.dtype:
    dtype = np.dtype(dtype)
    return torch.float32 if np.issubdtype(dtype, np.floating) else torch.from_numpy(np.zeros(0, dtype)).dtype


@memory.register("rollout")
class RolloutMemory:
    """Preallocated (num_steps x num_envs) on-policy storage; `full` after num_steps batched adds."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "dones", "values", "log_probs")
    RECURRENT_FIELDS = ("hidden", "next_hidden", "starts")
    BEHAVIOUR_FIELDS = ("features", "logits")  # optional: what sequence replay keeps of the acting policy

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (),
                 action_dtype=np.int64, hidden_shape: tuple | None = None, device: str | torch.device = "cpu",
                 behaviour: dict[str, int] | None = None):
        """`behaviour`: per-step vectors of the acting policy to keep, by name and width (`features`: elite
        replay's feature vectors [T, N, F]; `logits`: CLEAR's and LASER's behaviour logits [T, N, A])."""
        self.num_steps, self.num_envs, self.device = int(num_steps), int(num_envs), torch.device(device)
        T, N = self.num_steps, self.num_envs
        # pinned (page-locked) on a CUDA run: minibatches of observations then copy to the GPU asynchronously
        pin = self.device.type == "cuda"
        self.obs = zeros((T, N), obs_shape, obs_dtype,
                         lambda shape, dtype: torch.zeros(shape, dtype=_storage_dtype(dtype), pin_memory=pin))
        self.next_obs = obs_map(lambda x: torch.zeros_like(x, pin_memory=pin), self.obs)
        self.actions = torch.zeros((T, N, *action_shape), dtype=_storage_dtype(action_dtype))
        for name in ("rewards", "terminated", "dones", "values", "log_probs", "advantages", "returns"):
            setattr(self, name, torch.zeros((T, N)))
        self.recurrent = hidden_shape is not None
        if self.recurrent:
            self.hidden = torch.zeros((T, N, *hidden_shape))
            self.next_hidden = torch.zeros_like(self.hidden)
            self.starts = torch.zeros((T, N))
        self.behaviour_widths = dict(behaviour or {})
        self.behaviour = tuple(sorted(self.behaviour_widths))
        for name, width in self.behaviour_widths.items():
            if name not in self.BEHAVIOUR_FIELDS:
                raise ValueError(f"unknown behaviour field {name!r}: valid: {', '.join(self.BEHAVIOUR_FIELDS)}")
            setattr(self, name, torch.zeros((T, N, width)))
        self.pos = 0
        # columns written whole by `write_columns` (a collection worker's rollout), and how many learner updates
        # old the policy that acted each column was: staleness travels with the data
        self.columns_written = 0
        self.policy_lag = torch.zeros(N, dtype=torch.int64)
        self._views = {f: getattr(self, f).numpy() for f in self._fields()}

    @classmethod
    def build(cls, hp, obs_space, action_space, num_envs: int, hidden_shape: tuple | None = None) -> RolloutMemory:
        return cls(hp.num_steps, num_envs, *fields(obs_space), action_space.shape, action_space.dtype,
                   hidden_shape=hidden_shape, device=hp.device)

    def __len__(self) -> int:
        return self.pos * self.num_envs

    @property
    def full(self) -> bool:
        return self.pos == self.num_steps

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, values: torch.Tensor,
            log_probs: torch.Tensor, hidden=None, next_hidden=None, starts=None, **behaviour) -> None:
        """Store one batched step (a leading env dimension on every argument); `behaviour` holds the vectors named
        at construction (features=..., logits=...)."""
        t, views = self.pos, self._views  # numpy views of the storage: a numpy copy costs far less than a torch one
        views["obs"][t] = _numpy(obs)
        views["actions"][t] = _numpy(actions)
        views["next_obs"][t] = _numpy(next_obs)
        views["rewards"][t] = rewards
        views["terminated"][t] = terminated
        np.logical_or(terminated, truncated, out=views["dones"][t], casting="unsafe")
        views["values"][t] = _numpy(values)
        views["log_probs"][t] = _numpy(log_probs)
        if self.recurrent:
            views["hidden"][t], views["next_hidden"][t] = _numpy(hidden), _numpy(next_hidden)
            views["starts"][t] = starts
        for name in self.behaviour:
            views[name][t] = _numpy(behaviour[name])
        self.pos += 1

    def write_columns(self, start: int, src: RolloutMemory, policy_lag: int = 0) -> None:
        """Copy a whole rollout `src` (num_steps x n envs, e.g. a collection worker's) into env columns
        start..start+n, acted by a policy `policy_lag` learner updates old; full once every column is written."""
        n = src.num_envs
        if src.num_steps != self.num_steps or start + n > self.num_envs:
            raise ValueError(f"a rollout of {src.num_steps}x{n} does not fit columns {start}.. of "
                             f"{self.num_steps}x{self.num_envs}")
        if src.behaviour != self.behaviour:
            raise ValueError(f"a rollout keeping {src.behaviour} does not fit one keeping {self.behaviour}")
        for f in self._fields():
            getattr(self, f)[:, start:start + n] = getattr(src, f)
        self.policy_lag[start:start + n] = policy_lag
        self.columns_written += n
        if self.columns_written >= self.num_envs:
            self.pos = self.num_steps

    @property
    def stale(self) -> bool:
        """True when some column was acted by an older policy than the current one (V-trace rescores it)."""
        return bool(self.policy_lag.any())

    def compute_advantages(self, next_values: torch.Tensor, gamma: float, lam: float) -> None:
        """Fill `advantages` and `returns` (= advantages + values) from V(real_next_obs) of every stored step."""
        n = self.pos
        adv = gae(self.rewards[:n].numpy(), self.values[:n].numpy(), next_values.reshape(n, -1).cpu().numpy(),
                  self.terminated[:n].numpy(), self.dones[:n].numpy(), gamma, lam)
        self.advantages[:n] = torch.from_numpy(adv)
        torch.add(self.advantages[:n], self.values[:n], out=self.returns[:n])

    def minibatches(self, batch_size: int, generator: torch.Generator, seq_len: int = 0) -> Iterator[RolloutBatch]:
        """One epoch of minibatches. Feed-forward: shuffled transitions (no shuffle, no copy when one minibatch
        holds the rollout). Recurrent: shuffled sequences, batch_size // seq_len of them a minibatch; a sequence is
        an env's whole rollout (seq_len 0), or a seq_len-step piece of it that starts from the stored hidden state
        (backpropagation through time truncated to seq_len steps: seq_len sequential GRU steps instead of T)."""
        T, N = self.pos, self.num_envs
        dev = self.device
        if not self.recurrent:  # the rollout moves to the device once (a no-op on the CPU), minibatches index it there
            flat = [x[:T].flatten(0, 1).to(dev, non_blocking=True)
                    for x in (self.obs, self.actions, self.log_probs, self.values, self.advantages, self.returns)]
            total = T * N
            if batch_size >= total:
                yield RolloutBatch(*flat)
                return
            perm = torch.randperm(total, generator=generator).to(dev)
            for start in range(0, total, batch_size):
                idx = perm[start:start + batch_size]
                yield RolloutBatch(*(x[idx] for x in flat))
            return
        L = seq_len if 0 < seq_len < T and T % seq_len == 0 else T
        chunks = T // L  # each env's rollout is cut into `chunks` sequences of L steps

        def seq(x):  # [T, N, ...] -> [L, chunks * N, ...]: sequence j = (chunk j // N, env j % N)
            return obs_map(lambda a: a[:T].reshape(chunks, L, N, *a.shape[2:]).transpose(0, 1)
                           .reshape(L, chunks * N, *a.shape[2:]), x)

        layout = [seq(x).to(dev, non_blocking=True) for x in (self.obs, self.actions, self.log_probs, self.values,
                                                              self.advantages, self.returns, self.starts)]
        first_hidden = self.hidden[:T:L].reshape(chunks * N, *self.hidden.shape[2:]).to(dev)  # each sequence's start
        count = chunks * N
        per_batch = max(1, batch_size // L)
        perm = (torch.randperm(count, generator=generator) if per_batch < count else torch.arange(count)).to(dev)
        for start in range(0, count, per_batch):
            idx = perm[start:start + per_batch]
            obs, actions, log_probs, values, adv, returns, starts = (x[:, idx] for x in layout)
            flat = [x.flatten(0, 1) for x in (actions, log_probs, values, adv, returns)]
            yield RolloutBatch(obs, *flat, first_hidden[idx], starts)

    def share_memory_(self) -> RolloutMemory:
        """Move the storage to shared memory (a collection worker's slot, rl/parallel): a forked worker writes the
        same pages the learner reads."""
        for f in self._fields():
            getattr(self, f).share_memory_()
        self._views = {f: getattr(self, f).numpy() for f in self._fields()}
        return self

    def reset(self) -> None:
        self.pos = self.columns_written = 0
        self.policy_lag.zero_()

    def cut(self) -> None:
        """End every env's trajectory at the last stored step (a truncation: bootstrap, stop the recursion); used
        when the envs restart their episodes, as they do on resume."""
        if self.pos:
            self.dones[self.pos - 1] = 1.0

    # ------------------------------------------------------------------ checkpointing
    def _fields(self) -> tuple[str, ...]:
        return self.FIELDS + (self.RECURRENT_FIELDS if self.recurrent else ()) + self.behaviour

    def state_dict(self) -> dict:
        return {"pos": self.pos, "data": {f: plain(getattr(self, f)[: self.pos].clone()) for f in self._fields()}}

    def load_state_dict(self, state: dict) -> None:
        self.pos = int(state["pos"])
        for f in self._fields():
            getattr(self, f)[: self.pos] = state["data"][f]

    def __getstate__(self):  # shipped by value (Ray): the tensors, not the numpy views of them
        return {k: v for k, v in self.__dict__.items() if k != "_views"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views = {f: getattr(self, f).numpy() for f in self._fields()}
