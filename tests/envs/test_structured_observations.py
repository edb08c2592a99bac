"""Structured observations (rl/envs/observations.py) and action masks on their way from the env to the memories:
the PickItems env, the info mask made into the observation where the env is made (rl/envs/action_masks.py), the
final observation of an ending episode with its own mask, and the memories keeping one array per entry through
n-step windows, sampling, recurrent minibatches, worker rows and checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.collector import Collector
from rl.envs import make_env
from rl.envs.action_masks import _FOUND
from rl.envs.observations import DictObs, fields
from rl.envs.pick_items import PICKS, PickItems
from rl.envs.spaces import check_observation_space
from rl.errors import ConfigError
from rl.memory.replay import ReplayMemory
from rl.memory.rollout import RolloutMemory
from rl.parallel.buffers import Rows
from rl.registry import hparams as sets


def test_pick_items_pays_the_items_on_offer_and_ends_at_an_illegal_pick():
    """Bugs caught: an illegal pick that goes on (the mask would not matter), a mask that is not the offer, the
    Dict twin's mask differing from the info's."""
    env = PickItems()
    obs, info = env.reset(seed=0)
    assert (info["action_mask"] == env.action_masks()).all() and info["action_mask"].sum() == 4
    legal = int(np.flatnonzero(info["action_mask"])[0])
    _, reward, terminated, _, info = env.step(legal)
    assert reward == pytest.approx(obs[legal]) and not terminated and info["action_mask"][legal] == 0
    illegal = int(np.flatnonzero(info["action_mask"] == 0)[0])
    assert env.step(illegal)[1:3] == (0.0, True)
    twin = PickItems(dict_obs=True)
    obs, _ = twin.reset(seed=0)
    assert (obs["action_mask"] == twin.action_masks()).all() and obs["picks_left"] == PICKS
    steps = 0
    while True:
        steps += 1
        obs, _, terminated, _, _ = twin.step(int(np.flatnonzero(obs["action_mask"])[0]))
        if terminated:
            break
    assert steps == PICKS and obs["picked"].sum() == PICKS


def test_an_info_mask_becomes_the_observations_action_mask_and_the_final_one_is_the_final_steps(monkeypatch):
    """make_env finds PickItems-v0's info mask once and wraps the env: Dict(observation, action_mask). An ending
    episode's real next observation (same-step autoreset) keeps its own mask, not the reset's. Bugs caught: the probe
    repeated at every make_env (a reset each evaluation), the final observation's mask replaced by the new episode's
    (the collector copying a dict of arrays as a dict: the rows written as keys)."""
    hp = sets["ppo_masked_pick_items"]()
    env = make_env(hp, num_envs=3, vector_mode="sync")
    space = env.single_observation_space
    assert isinstance(space, gym.spaces.Dict) and set(space) == {"observation", "action_mask"}
    assert _FOUND[hp.env] is True
    resets = []
    monkeypatch.setattr(gym.vector.SyncVectorEnv, "reset", lambda self, **kw: resets.append(kw))
    make_env(hp, num_envs=1, vector_mode="sync").close()
    monkeypatch.undo()
    assert resets == []  # found once: the next make_env wraps the env without resetting it
    seen, acted = [], []

    class Agent:
        def act(self, obs):
            acted.append(obs["action_mask"].copy())
            mask = obs["action_mask"].astype(bool)
            return np.where(np.arange(3) == 0, np.argmax(mask, 1), np.argmin(mask, 1))  # env 0 legal, others not

        def observe(self, obs, actions, rewards, next_obs, terminated, truncated):
            seen.append((next_obs, terminated.copy()))

        def reset_episodes(self, done):
            pass

    collector = Collector(env, Agent(), seed=0)
    collector.step()
    next_obs, terminated = seen[0]
    assert isinstance(next_obs, DictObs) and terminated.tolist() == [False, True, True]
    after_reset = collector.obs["action_mask"]
    assert (next_obs["action_mask"][1:] == acted[0][1:]).all()  # the offer the illegal pick was made against
    assert (next_obs["action_mask"][1:] != after_reset[1:]).any(-1).all()  # not the new episode's
    env.close()


def test_structured_observations_are_kept_one_array_per_entry_through_replay_and_checkpoints(tmp_path):
    """n-step windows, sampling and a checkpoint saved and loaded with weights_only=True. Bugs caught: an object
    array of dicts (np.asarray of a dict), entries mixed up between keys, a checkpoint holding a DictObs (refused by
    weights_only loading)."""
    space = gym.spaces.Dict({"v": gym.spaces.Box(-1, 1, (3,), np.float32), "k": gym.spaces.Discrete(9),
                             "action_mask": gym.spaces.MultiBinary(4)})
    memory = ReplayMemory(100, *fields(space), gamma=0.9, n_step=3, num_envs=2)
    assert memory.obs["k"].dtype == np.int64 and memory.obs["action_mask"].dtype == np.int8
    for t in range(10):
        obs = {"v": np.full((2, 3), t, np.float32), "k": np.array([t, t]),
               "action_mask": np.eye(4, dtype=np.int8)[[t % 4] * 2]}
        nxt = {"v": np.full((2, 3), t + 1, np.float32), "k": np.array([t + 1] * 2),
               "action_mask": np.eye(4, dtype=np.int8)[[(t + 1) % 4] * 2]}
        memory.add(obs, np.array([0, 1]), np.ones(2), nxt, np.zeros(2, bool), np.zeros(2, bool))
    batch = memory.sample(32)
    k = batch.obs["k"]
    torch.testing.assert_close(batch.obs["v"][:, 0], k.float())
    torch.testing.assert_close(batch.next_obs["k"], k + 3)  # 3-step transitions
    torch.testing.assert_close(batch.next_obs["action_mask"].argmax(1), (k + 3) % 4)
    torch.save(memory.state_dict(), tmp_path / "m.pt")
    other = ReplayMemory(100, *fields(space), gamma=0.9, n_step=3, num_envs=2)
    other.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    for key in ("v", "k", "action_mask"):
        assert (other.obs[key][: memory.size] == memory.obs[key][: memory.size]).all()
    assert other.size >= memory.size  # the windows' pending items were stored at the cut


def test_rollouts_and_worker_rows_keep_structured_observations():
    """A recurrent rollout cuts sequences of every entry alike; Rows (a replay worker's shipment) store and give back
    each entry. Bugs caught: a sequence layout applied to one entry only, rows of a Tuple observation lost."""
    shapes, dtypes = fields(gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.MultiBinary(3))))
    rollout = RolloutMemory(4, 2, shapes, dtypes, hidden_shape=(1, 5))
    for t in range(4):
        obs = DictObs((torch.full((2, 2), float(t)), torch.full((2, 3), t % 2, dtype=torch.int8)))
        rollout.add(obs, torch.zeros(2), np.zeros(2), obs, np.zeros(2), np.zeros(2), torch.zeros(2), torch.zeros(2),
                    torch.zeros(2, 1, 5), torch.zeros(2, 1, 5), np.zeros(2))
    batch = next(rollout.minibatches(8, torch.Generator().manual_seed(0), seq_len=2))
    assert batch.obs["0"].shape == (2, 4, 2) and batch.obs["1"].shape == (2, 4, 3)
    torch.testing.assert_close(batch.obs["1"][..., 0].float(), batch.obs["0"][..., 0] % 2)
    rows = Rows(2, 3, gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(5))),
                gym.spaces.Discrete(2)).share_memory_()
    valid = np.array([True, False, True])
    obs = (np.ones((2, 2), np.float32), np.array([3, 4]))
    rows.add(0, valid, obs, np.array([1, 0]), np.ones(2), obs, np.zeros(2, bool), np.zeros(2, bool))
    (got, *_), env_rows = rows.step(0, row_offset=10)
    assert env_rows.tolist() == [10, 12] and got["1"].tolist() == [3, 4] and got["0"].shape == (2, 2)


def test_a_dict_inside_a_dict_is_refused_in_one_line():
    """Bug caught: a nested space reaching the multi-input torso (a TypeError at build)."""
    nested = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Dict({"c": gym.spaces.Discrete(2)})})
    with pytest.raises(ConfigError) as info:
        check_observation_space("Nested-v0", nested)
    assert "\n" not in str(info.value) and "whose entry 'b' is Dict('c': Discrete(2))" in str(info.value)
