"""Attentive Experience Replay (Sun, Zhou and Li, "Attentive Experience Replay", AAAI 2020).

Prefer the transitions whose states look like the states the current policy visits: each sample draws lambda * k
candidates uniformly (with replacement), scores them by the distance of their state's features to the agent's current
state(s), and keeps the k nearest. lambda starts at `attentive_lambda` and falls linearly to 1 (plain uniform replay)
over the first `attentive_anneal_fraction` of the run (the paper's "bias annealing"; no importance weights).

Where the two inputs come from (memory/ knows nothing of models):
- The current state: by default the `next_obs` of the newest batch added, i.e. where each env is now
  (elite_buffer_vtrace's modified AER uses "the last state of the most recently inserted rollout"); where batches
  of several workers each hold some env rows (`add(..., rows=...)`), the newest `next_obs` of every row seen. An
  agent may instead call `set_reference(obs)` with the observations it just acted on; the newest of the two is used.
  With N envs a candidate's distance is the one to its nearest current state. `close_rows(rows)` drops those rows'
  states from the reference (their envs restarted, or their steps were dropped: the rows' envs are no longer there)
  until the rows add again.
- The features: with `attentive_features=obs` the flattened raw observations (any agent, nothing to wire; frame
  stacked memories compare the decoded pixels, not the frame ids); with
  `attentive_features=model` a function the agent hands over with `set_feature_fn(fn)` (DQN passes its torso), called
  on a torch batch without gradients at sampling time, so the features are the current network's.
Similarity is the negative Euclidean distance between features (the paper leaves F open; elite_buffer_vtrace uses
the same L2 norm).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rl.errors import ConfigError
from rl.memory.replay import ReplayMemory, Transitions
from rl.registry import memory

FEATURES = ("obs", "model")


@memory.register("attentive")
class AttentiveMemory(ReplayMemory):
    """Uniform candidates, the k most similar to the agent's current state kept."""

    UNIFORM = False

    def __init__(self, *args, lam: float = 4.0, anneal_fraction: float = 1.0, features: str = "obs", **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.obs_shape, dict):
            raise ConfigError("memory=attentive compares observations as one array; the env's are structured (a Dict "
                              "or Tuple space): use memory=replay or prioritized")
        if lam < 1:
            raise ConfigError(f"attentive_lambda must be >= 1, got {lam}")
        if features not in FEATURES:
            raise ConfigError(f"unknown attentive_features {features!r}: valid: {', '.join(FEATURES)}")
        self.lam0, self.anneal_fraction, self.features = float(lam), float(anneal_fraction), features
        self.feature_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.reference: np.ndarray | None = None
        self.now = np.zeros((0, *self.obs_shape), self.obs_dtype)  # with `rows`: each env row's newest next_obs
        self.seen = np.zeros(0, bool)  # the rows `now` holds
        self.from_rows = False  # whether `reference` is `now[seen]` (else the newest batch's, or the agent's)

    @classmethod
    def options(cls, hp) -> dict:
        return {"lam": hp.attentive_lambda, "anneal_fraction": hp.attentive_anneal_fraction,
                "features": hp.attentive_features}

    @property
    def lam(self) -> float:
        """lambda, linearly from `lam0` to 1 over the first `anneal_fraction` of the run."""
        if self.anneal_fraction <= 0:
            return 1.0
        left = max(0.0, 1.0 - self.progress() / self.anneal_fraction)
        return 1.0 + (self.lam0 - 1.0) * left

    def set_feature_fn(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """The agent's feature function, used when `attentive_features=model`."""
        self.feature_fn = fn

    def set_reference(self, obs) -> None:
        """The states the agent is in now (a batch [N, ...])."""
        self.reference = np.array(obs, dtype=self.obs_dtype, copy=True).reshape(-1, *self.obs_shape)
        self.from_rows = False

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, rows=None) -> None:
        super().add(obs, actions, rewards, next_obs, terminated, truncated, rows=rows)
        if rows is None:
            self.set_reference(next_obs)
            return
        rows = np.asarray(rows, np.int64)  # checked by ReplayMemory.add
        grow = int(rows.max(initial=-1)) + 1 - len(self.seen)
        if grow > 0:
            self.now = np.concatenate([self.now, np.zeros((grow, *self.obs_shape), self.obs_dtype)])
            self.seen = np.concatenate([self.seen, np.zeros(grow, bool)])
        self.now[rows] = np.asarray(next_obs).reshape(-1, *self.obs_shape)
        self.seen[rows] = True
        self.set_reference(self.now[self.seen])
        self.from_rows = True

    def close_rows(self, rows) -> None:
        """ReplayMemory.close_rows; and the rows' newest states leave the reference (none left: no reference, so
        sampling is uniform until the next add)."""
        super().close_rows(rows)
        rows = np.asarray(rows, np.int64)  # checked by ReplayMemory.close_rows
        rows = rows[rows < len(self.seen)]
        if not self.seen[rows].any():
            return
        self.seen[rows] = False
        if self.from_rows:
            self.reference = self.now[self.seen].copy() if self.seen.any() else None

    def _features(self, obs: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(obs)
        if self.features == "obs":
            return x.flatten(1).float()
        if self.feature_fn is None:
            raise ConfigError("attentive_features=model needs an agent that provides its feature function "
                              "(memory.set_feature_fn); use attentive_features=obs with this agent")
        with torch.no_grad():
            return self.feature_fn(x.to(self.device)).flatten(1).float().cpu()

    def sample(self, batch_size: int) -> Transitions:
        if self.size == 0:
            raise ValueError("cannot sample from an empty memory")
        pool = max(batch_size, int(round(self.lam * batch_size)))
        candidates = self._uniform(pool)
        if pool == batch_size or self.reference is None:
            return self.gather(candidates)
        feats = self._features(np.concatenate([self._pixels(self.obs[candidates]), self.reference]))
        dist = torch.cdist(feats[:pool], feats[pool:]).min(dim=1).values.numpy()
        nearest = np.argpartition(dist, batch_size - 1)[:batch_size]
        return self.gather(candidates[nearest])

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        ref = {} if self.reference is None else {"reference": torch.from_numpy(self.reference.copy())}
        return {**super().state_dict(), **ref}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.reference = state["reference"].numpy().copy() if "reference" in state else None
