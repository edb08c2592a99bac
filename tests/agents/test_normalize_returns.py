"""`normalize_returns` (Sample Factory): the value head learns standardised returns; targets are in return units."""

from __future__ import annotations

import numpy as np
import torch


def filled_agent(fill, overrides: str = ""):
    return fill("ppo_cartpole", "normalize_returns=true,num_steps=64" + ("," + overrides if overrides else ""))


def test_the_loss_sees_standardised_returns_and_the_statistics_track_the_returns(filled_rollout):
    agent = filled_agent(filled_rollout, "epochs=1")
    mem = agent.memory
    # the same rollout, its targets in return units
    expected = filled_agent(filled_rollout, "normalize_returns=false,epochs=1")
    expected.memory.compute_advantages(expected.next_values(expected.memory.values[:64]), 0.98, 0.8)
    # the first update: the head's outputs are returns standardised by (mean 0, var 1), i.e. the raw outputs
    agent.update()
    real = expected.memory.returns[:64].flatten().numpy()
    assert abs(agent.return_norm.mean - real.mean()) < 1e-3 * max(1.0, abs(real.mean()))
    assert abs(agent.return_norm.var - real.var()) < 1e-2 * real.var()
    seen = mem.returns[:64].flatten()
    assert abs(float(seen.mean())) < 1e-2 and abs(float(seen.std()) - 1.0) < 2e-2
    assert real.mean() > 1.0  # CartPole's returns are far from standard: the standardisation did something


def test_values_are_turned_back_into_returns_for_the_targets(filled_rollout):
    agent = filled_agent(filled_rollout)
    agent.return_norm.update(np.array([10.0, 30.0]))  # mean 20, std 10
    raw = agent.memory.values[:64].clone()
    real = agent._real(raw)
    torch.testing.assert_close(real, raw * float(np.sqrt(agent.return_norm.var + 1e-8)) + float(agent.return_norm.mean))
    torch.testing.assert_close(agent._standard(real), raw, rtol=1e-5, atol=1e-5)


def test_the_statistics_are_checkpointed(filled_rollout):
    agent = filled_agent(filled_rollout)
    agent.update()
    state = agent.state_dict(include_memory=False)
    other = filled_agent(filled_rollout)
    other.load_state_dict(state)
    assert other.return_norm.mean == agent.return_norm.mean and other.return_norm.var == agent.return_norm.var
