"""gymnasium's numpy-vectorised CartPole (`CartPoleVectorEnv`) with same-step autoreset.

gymnasium's own vector CartPole steps all envs in one pass of numpy operations (measured here: about 110 us for 8
envs, against about 155 us for a SyncVectorEnv of 8 CartPole-v1 envs with their per-env Python steps, wrappers and
checks), but it autoresets on the *next* step, and an on-policy rollout must store every env at every step. This
subclass keeps gymnasium's physics and resets finished envs in the step that ends them, reporting their final
observations in `info["final_obs"]` (masked by `info["_final_obs"]`), as Sync/AsyncVectorEnv do with
`AutoresetMode.SAME_STEP`.
"""

from __future__ import annotations

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import AutoresetMode


class SameStepCartPoleVectorEnv(CartPoleVectorEnv):
    """CartPole-v1 dynamics, rewards and time limit, numpy-vectorised, resetting finished envs at once."""

    metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(np.asarray(action))
        done = terminated | truncated
        self.prev_done[:] = False  # the parent would reset these envs on the next step; they are reset here
        if done.any():
            info = {"final_obs": obs.copy(), "_final_obs": done}
            self.state[:, done] = self.np_random.uniform(low=self.low, high=self.high, size=(4, int(done.sum())))
            self.steps[done] = 0
            obs[done] = self.state[:, done].T
        return obs, reward, terminated, truncated, info


# gymnasium ids whose native vector env has a same-step version here
SAME_STEP_NATIVE = {"CartPole-v1": SameStepCartPoleVectorEnv, "CartPole-v0": SameStepCartPoleVectorEnv}
