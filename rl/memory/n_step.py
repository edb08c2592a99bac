"""N-step returns (Sutton 1988; Rainbow, Hessel et al. 2018) for every replay memory, set by `n_step` in hparams.

`NStepWindow` sits in front of a memory's storage: each env keeps a window of its last n one-step transitions. When a
window is full its oldest transition leaves as the n-step transition
    (s_t, a_t, R = r_t + g r_{t+1} + ... + g^{n-1} r_{t+n-1}, s_{t+n}, terminated_{t+n-1}, truncated_{t+n-1}, g^n);
when an episode ends (terminated or truncated) the whole window leaves at once, each item with the k < n steps it has
left, so no return spans two episodes. The TD losses bootstrap with `discounts` (= g^k) times (1 - terminated): a
terminated tail never bootstraps; a truncated tail bootstraps from the final observation.

Batches carry one row per env. With next-step autoreset (native vector envs) the loop drops the rows of envs that
were reset this step; those are exactly the envs whose episode ended at the previous call, so the window maps the
remaining rows to envs by that mask. A caller that knows which env each row is (batches from several collection
workers, each owning a block of env rows) passes `rows` instead; the windows then grow to the largest row seen.

When the next transitions of some rows will not continue their episodes (a collection worker restarted, or one of its
shipments dropped), `close(rows)` ends those rows' episodes as truncated at the last step they sent: their pending
items leave with the k < n steps they hold, bootstrapping from that step's next_obs, and the rows' windows are empty.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.envs.observations import as_obs, obs_map, plain


def env_rows(rows, count: int) -> np.ndarray:
    """`rows` (the env row of each of a batch's `count` transitions) as distinct non-negative int64s, or a
    ValueError."""
    rows = np.asarray(rows)
    if rows.shape != (count,) or (count and not np.issubdtype(rows.dtype, np.integer)):
        raise ValueError(f"rows must be {count} ints, one per transition, got {rows.dtype} {rows.shape}")
    rows = rows.astype(np.int64, copy=False)
    if count and (rows.min() < 0 or len(np.unique(rows)) != count):
        raise ValueError(f"rows must be distinct non-negative env rows, got {rows.tolist()}")
    return rows


def closing_rows(rows) -> np.ndarray:
    """The env rows to close (`close_rows`): an explicit 1-D array of distinct non-negative ints (possibly empty),
    or a ValueError; None is refused rather than read as "every row" or "none"."""
    if rows is None:
        raise ValueError("close_rows needs the env rows to close (a 1-D array of ints), got None")
    rows = np.asarray(rows)
    if rows.ndim != 1:
        raise ValueError(f"rows must be a 1-D array of env rows, got shape {rows.shape}")
    return env_rows(rows, len(rows))


class NStepWindow:
    """Per-env windows of the last n transitions; `add` returns the n-step transitions that are complete."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")

    def __init__(self, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"n_step must be >= 1, got {n}")
        self.n, self.gamma = int(n), float(gamma)
        self._clear()

    def _clear(self) -> None:
        """No window yet: they are sized on the first add."""
        self.num_envs = 0
        self.length = np.zeros(0, np.int64)
        self.prev_done = np.zeros(0, bool)
        self.buf: dict[str, np.ndarray] = {}

    def _allocate(self, batch: dict[str, np.ndarray], num_envs: int) -> None:
        """Windows for `num_envs` envs: the existing ones kept, empty ones added (the first batch gives the fields'
        shapes and dtypes)."""
        if not self.buf:
            self.buf = {f: obs_map(lambda a: np.zeros((0, self.n, *a.shape[1:]), a.dtype), v)
                        for f, v in batch.items()}
        grow = num_envs - self.num_envs
        self.length = np.concatenate([self.length, np.zeros(grow, np.int64)])
        self.prev_done = np.concatenate([self.prev_done, np.zeros(grow, bool)])
        self.buf = {f: obs_map(lambda a: np.concatenate([a, np.zeros((grow, *a.shape[1:]), a.dtype)]), v)
                    for f, v in self.buf.items()}
        self.num_envs = num_envs

    def add(self, obs, actions, rewards, next_obs, terminated, truncated,
            rows=None) -> dict[str, np.ndarray] | None:
        """Append one transition per env; return the completed n-step transitions (with `discounts`) or None.
        `rows` are the envs of the batch's rows (distinct ints); by default rows 0..len-1, or with fewer rows than
        envs the envs that did not just end an episode (next-step autoreset)."""
        batch = dict(obs=obs_map(np.asarray, as_obs(obs)), actions=np.asarray(actions),
                     rewards=np.asarray(rewards, np.float32), next_obs=obs_map(np.asarray, as_obs(next_obs)),
                     terminated=np.asarray(terminated, bool),
                     truncated=np.asarray(truncated, bool))
        count = len(batch["rewards"])
        if rows is not None:
            envs = env_rows(rows, count)
            if not self.buf or envs.max(initial=-1) >= self.num_envs:  # sized by the largest row seen
                self._allocate(batch, max(self.num_envs, int(envs.max(initial=-1)) + 1))
        else:
            if not self.buf:
                self._allocate(batch, count)
            if count == self.num_envs:
                envs = np.arange(self.num_envs)
            else:  # next-step autoreset: the envs reset this step sent no row
                envs = np.flatnonzero(~self.prev_done)
                if len(envs) != count:
                    raise ValueError(f"n-step window: got {count} rows for {self.num_envs} envs, of which "
                                     f"{len(envs)} did not just end an episode")
        pos = self.length[envs]
        for f, v in batch.items():
            self.buf[f][envs, pos] = v
        self.length[envs] += 1
        done = np.zeros(self.num_envs, bool)
        done[envs] = batch["terminated"] | batch["truncated"]
        if rows is None:
            self.prev_done = done  # the envs that sent no row were reset: they did not just end
        else:
            self.prev_done[envs] = done[envs]  # the other envs' batches come on their own
        return self._emit(done)

    def _emit(self, done: np.ndarray) -> dict[str, np.ndarray] | None:
        """Pop the oldest item of every full window, and every item of windows whose episode ended."""
        full = (self.length == self.n) & ~done
        leaving = full | (done & (self.length > 0))
        if not leaving.any():
            return None
        n, length = self.n, self.length
        slot = np.arange(n)
        valid = slot[None, :] < length[:, None]
        rewards = np.where(valid, self.buf["rewards"], 0.0).astype(np.float64)
        returns = np.zeros_like(rewards)  # returns[e, j]: discounted sum of rewards j .. length-1 of env e
        acc = np.zeros(self.num_envs)
        for j in range(n - 1, -1, -1):
            acc = rewards[:, j] + self.gamma * acc
            returns[:, j] = acc
        take = valid & leaving[:, None] & (done[:, None] | (slot[None, :] == 0))
        env_idx, slot_idx = np.nonzero(take)
        last = length[env_idx] - 1
        out = {
            "obs": self.buf["obs"][env_idx, slot_idx],
            "actions": self.buf["actions"][env_idx, slot_idx],
            "rewards": returns[env_idx, slot_idx].astype(np.float32),
            "next_obs": self.buf["next_obs"][env_idx, last],
            "terminated": self.buf["terminated"][env_idx, last],
            "truncated": self.buf["truncated"][env_idx, last],
            "discounts": (self.gamma ** (length[env_idx] - slot_idx)).astype(np.float32),
        }
        if full.any():  # shift the full windows left by one
            for v in self.buf.values():
                v[full, :-1] = v[full, 1:]
        self.length[full] -= 1
        self.length[done] = 0
        return out

    def close(self, rows) -> dict[str, np.ndarray] | None:
        """End the episodes in flight in env rows `rows` as truncated at the last step each row sent (its env
        restarted, or the steps that followed were dropped): return every pending item of those rows (None if there
        is none), each with the discounted return of the k < n steps it holds, that step's next_obs, truncated and
        discount gamma^k, and empty the rows' windows, so a row's next add starts a new episode. Rows never seen are
        left as they are; other rows keep their windows."""
        envs = closing_rows(rows)
        envs = envs[envs < self.num_envs]
        if not self.buf or not len(envs):
            return None
        self.prev_done[envs] = False  # a closed row's next batch holds it (its env starts a new episode)
        envs = envs[self.length[envs] > 0]
        if not len(envs):
            return None
        self.buf["truncated"][envs, self.length[envs] - 1] = True
        closing = np.zeros(self.num_envs, bool)
        closing[envs] = True
        return self._emit(closing)

    def flush(self) -> dict[str, np.ndarray] | None:
        """End every episode in flight as truncated (a resumed run restarts its envs): emit all pending items."""
        if not self.buf or not self.length.any():
            return None
        pending = self.length > 0
        last = np.maximum(self.length - 1, 0)
        envs = np.flatnonzero(pending)
        self.buf["truncated"][envs, last[envs]] = True
        return self._emit(pending)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        if not self.buf:
            return {}
        return {"length": torch.from_numpy(self.length.copy()), "prev_done": torch.from_numpy(self.prev_done.copy()),
                "buf": {f: plain(obs_map(lambda a: torch.from_numpy(a.copy()), v)) for f, v in self.buf.items()}}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            self._clear()
            return
        self.buf = {f: as_obs(obs_map(lambda t: t.numpy().copy(), v)) for f, v in state["buf"].items()}
        self.length, self.prev_done = state["length"].numpy().copy(), state["prev_done"].numpy().copy()
        self.num_envs = len(self.length)
