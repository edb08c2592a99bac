"""Seed B's experiment settings (issue 31; REFERENCE 5.1, 5.4): the power-2 learning-rate decay and lambda's annealing
as the published code computes them."""

import gymnasium as gym
import numpy as np
import pytest

import hparams  # noqa: F401  (fills the hparams registry)
from rl.agents.impala import ImpalaAgent
from rl.registry import hparams as sets

OBS, ACT = gym.spaces.Box(-1, 1, (8,), np.float32), gym.spaces.Discrete(6)
REPLAY = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
          '{"type": "standard", "capacity": 100, "sample_ratio": 0.5}]')


def agent(**overrides) -> ImpalaAgent:
    hp = sets["impala_cartpole"]().update({"agent": "impala", "replay_parameters": REPLAY, **overrides})
    return ImpalaAgent(hp, OBS, ACT, num_envs=2)


def test_power_2_decay_from_8e4_to_1e5_at_start_half_and_end():
    a = agent(lr=8e-4, lr_end_value=1e-5, lr_decay=True, lr_decay_power=2.0, lr_scheduler_steps=70_000)
    values = {}
    for n in (0, 35_000, 70_000, 90_000):
        a.updates = n
        values[n] = a._lr()
    # seed B's PolynomialLRDecay: (lr - end) (1 - n / N)^2 + end
    assert values[0] == pytest.approx(8e-4)
    assert values[35_000] == pytest.approx((8e-4 - 1e-5) * 0.25 + 1e-5)  # 2.075e-4; power 1 would give 4.05e-4
    assert values[70_000] == pytest.approx(1e-5) and values[90_000] == pytest.approx(1e-5)
    a = agent(lr=8e-4, lr_end_value=1e-5, lr_decay=True, lr_scheduler_steps=70_000)  # power 1 stays available
    a.updates = 35_000
    assert a._lr() == pytest.approx((8e-4 + 1e-5) / 2)
