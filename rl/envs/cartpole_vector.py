"""gymnasium's numpy-vectorised CartPole (`CartPoleVectorEnv`) with same-step autoreset.

gymnasium's own vector CartPole steps all envs in one pass of numpy operations, but it autoresets on the *next*
step, and an on-policy rollout must store every env at every step. This subclass keeps gymnasium's env (constants,
spaces, reset, rendering) and resets finished envs in the step that ends them, reporting their final observations in
`info["final_obs"]` (masked by `info["_final_obs"]`), as Sync/AsyncVectorEnv do with `AutoresetMode.SAME_STEP`.

Its `step` is gymnasium's Euler step, term for term in the same order (so the same floats), updating the state rows
in place: on 8 envs gymnasium's step spends more time on its action-space check, `np.stack` and the masked next-step
resets than on the physics (measured here: 55 us against 100 us per step, which is PPO CartPole's second largest cost
after the gradient steps). tests/envs/test_cartpole_vector.py checks it against gymnasium's step, float for float.
"""

from __future__ import annotations

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import AutoresetMode


class SameStepCartPoleVectorEnv(CartPoleVectorEnv):
    """CartPole-v1 dynamics, rewards and time limit, numpy-vectorised, resetting finished envs at once."""

    metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}

    def step(self, action):
        action = np.asarray(action)
        if action.shape != (self.num_envs,) or ((action != 0) & (action != 1)).any():
            raise ValueError(f"{action!r} invalid: expected {self.num_envs} actions, each 0 or 1")
        if self.state is None or self.kinematics_integrator != "euler":
            raise RuntimeError("call reset() before step(); only the Euler integrator (CartPole-v1's) is supported")
        state = self.state
        x, x_dot, theta, theta_dot = state  # views of the rows: updated in place below
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x += self.tau * x_dot  # Euler: positions move with the old velocities
        x_dot += self.tau * xacc
        theta += self.tau * theta_dot
        theta_dot += self.tau * thetaacc
        terminated = (np.abs(x) > self.x_threshold) | (np.abs(theta) > self.theta_threshold_radians)
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        reward = -terminated.astype(np.float32) if self._sutton_barto_reward else np.ones(self.num_envs, np.float32)
        obs = state.T.astype(np.float32)
        done = terminated | truncated
        info = {}
        if done.any():
            info = {"final_obs": obs.copy(), "_final_obs": done}
            state[:, done] = self.np_random.uniform(low=self.low, high=self.high, size=(4, int(done.sum())))
            self.steps[done] = 0
            obs[done] = state[:, done].T
        return obs, reward, terminated, truncated, info


# gymnasium ids whose native vector env has a same-step version here
SAME_STEP_NATIVE = {"CartPole-v1": SameStepCartPoleVectorEnv, "CartPole-v0": SameStepCartPoleVectorEnv}
