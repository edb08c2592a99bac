"""PickItems: an env that needs its action mask (`PickItems-v0`, `PickItemsDict-v0`).

Sixteen items get values drawn uniformly from [0, 1) at reset. Each of the 8 steps of an episode, 4 of the items not
yet picked are on offer; the agent picks one and earns its value. Picking an item that is not on offer ends the
episode with nothing. The offer is told only by the action mask, not by the observation (the values of the items not
yet picked, and which were picked), so an agent that ignores the mask can only guess: a policy that always picks the
most valuable item left scores about 0.3 on average, a uniformly random legal policy 4.0 and the best one (the most
valuable item on offer) 5.6.

- `PickItems-v0` gives the mask as gymnasium does, `info["action_mask"]` (int8 flags), and sb3-contrib's MaskablePPO
  reads it through `action_masks()`; its observation is one Box [values, picked] of 32 entries.
- `PickItemsDict-v0` gives it as RLlib does, inside a Dict observation: values Box(16), picked MultiBinary(16),
  picks_left Discrete(9) and action_mask MultiBinary(16): the multi-input torso's env (rl/models/multi_input.py).

Importing this module registers both ids with gymnasium.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ITEMS, OFFER, PICKS = 16, 4, 8
ENV_ID, DICT_ENV_ID = "PickItems-v0", "PickItemsDict-v0"


class PickItems(gym.Env):
    """Pick the most valuable of the items on offer, 8 times; an item not on offer ends the episode."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(self, dict_obs: bool = False, render_mode: str | None = None):
        self.dict_obs, self.render_mode = dict_obs, render_mode
        self.action_space = gym.spaces.Discrete(ITEMS)
        if dict_obs:
            self.observation_space = gym.spaces.Dict({
                "values": gym.spaces.Box(0.0, 1.0, (ITEMS,), np.float32), "picked": gym.spaces.MultiBinary(ITEMS),
                "picks_left": gym.spaces.Discrete(PICKS + 1), "action_mask": gym.spaces.MultiBinary(ITEMS)})
        else:
            self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * ITEMS,), np.float32)
        self.values = np.zeros(ITEMS, np.float32)
        self.picked = np.zeros(ITEMS, bool)
        self.offer = np.zeros(ITEMS, bool)
        self.t = 0

    def action_masks(self) -> np.ndarray:
        """The items on offer (sb3-contrib's MaskablePPO calls this)."""
        return self.offer.copy()

    def _deal(self) -> None:
        self.offer[:] = False
        self.offer[self.np_random.choice(np.flatnonzero(~self.picked), OFFER, replace=False)] = True

    def _observe(self):
        values = np.where(self.picked, 0.0, self.values).astype(np.float32)
        mask = self.offer.astype(np.int8)
        if self.dict_obs:
            return {"values": values, "picked": self.picked.astype(np.int8), "picks_left": PICKS - self.t,
                    "action_mask": mask}, {}
        return np.concatenate([values, self.picked.astype(np.float32)]), {"action_mask": mask}

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.values = self.np_random.random(ITEMS, dtype=np.float32)
        self.picked[:] = False
        self.t = 0
        self._deal()
        return self._observe()

    def step(self, action):
        a = int(action)
        if not self.offer[a]:  # an illegal pick: the episode ends with nothing
            obs, info = self._observe()
            return obs, 0.0, True, False, info
        reward = float(self.values[a])
        self.picked[a] = True
        self.t += 1
        done = self.t == PICKS
        if not done:
            self._deal()
        obs, info = self._observe()
        return obs, reward, done, False, info


    def render(self) -> np.ndarray:
        """A 64 x 256 frame: an item a column, green by its value, grey once picked, a blue band above those on
        offer."""
        frame = np.zeros((64, ITEMS * 16, 3), np.uint8)
        cells = frame[16:].reshape(48, ITEMS, 16, 3)
        cells[..., 1] = np.where(self.picked, 0, (255 * self.values).astype(np.uint8))[None, :, None]
        cells[..., :] += np.where(self.picked, 80, 0).astype(np.uint8)[None, :, None, None]
        frame[2:12].reshape(10, ITEMS, 16, 3)[..., 2] = np.where(self.offer, 255, 0).astype(np.uint8)[None, :, None]
        return frame


def make_pick_items(**kwargs) -> gym.Env:
    return PickItems(**kwargs)


for _id, _dict in ((ENV_ID, False), (DICT_ENV_ID, True)):
    if _id not in gym.registry:
        gym.register(_id, entry_point="rl.envs.pick_items:make_pick_items", kwargs={"dict_obs": _dict},
                     reward_threshold=5.0)
