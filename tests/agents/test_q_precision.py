"""`precision=bf16` for the Q agents: the torso's forward passes under bf16 autocast, the heads, TD targets and losses
in fp32 (as the on-policy agents' heads are), so a DQN-family set on Atari gets the CNN speed-up without Q-values
rounded to bf16's 8 mantissa bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rl.agents.base as agent_base
from rl.registry import hparams as sets
from rl.registry import models

SETS = ["dqn_cartpole", "qrdqn_cartpole", "rainbow_cartpole"]  # Q head, quantile head, categorical head


@pytest.mark.parametrize("name", SETS)
def test_the_heads_stay_fp32_under_autocast(name):
    """Bug caught: a Q network whose head runs under autocast too (Q-values, atoms or log-probabilities in bf16)."""
    hp = sets[name]()
    from gymnasium.spaces import Box, Discrete

    torch.manual_seed(0)
    net = models[hp.model].build(hp, Box(-1, 1, (4,), np.float32), Discrete(2))
    obs = torch.randn(8, 4)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        assert net.torso(obs).dtype == torch.bfloat16  # the torso does run in bf16
        outputs = [net(obs)] + [getattr(net, f)(obs) for f in ("quantiles", "log_probs") if hasattr(net, f)]
    assert all(out.dtype == torch.float32 for out in outputs)
    with torch.no_grad():
        assert torch.allclose(net(obs), outputs[0], rtol=0.02, atol=0.02)  # the same values, to bf16's precision


def torso_dtypes(agent) -> list[torch.dtype]:
    """The dtypes of the online and target torsos' outputs, call by call (the networks call `torso.forward`
    directly, past any hook)."""
    seen = []
    for net in (agent.q, agent.target):
        def forward(obs, inner=net.torso.forward):
            out = inner(obs)
            seen.append(out.dtype)
            return out
        net.torso.forward = forward
    return seen


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_the_agent_acts_and_learns_under_autocast_with_bf16(monkeypatch, build, precision, dtype):
    """Bug caught: `precision=bf16` read by the on-policy agents only (the DQN family silently fp32), or the update's
    loss computed outside the autocast block."""
    monkeypatch.setattr(agent_base, "cpu_has_bf16", lambda: True)  # bf16 on any CPU (emulated where it has no units)
    agent = build("qrdqn_cartpole", precision=precision, learning_starts=16, train_freq=4, gradient_steps=2,
                  batch_size=8, buffer_size=64)
    seen = torso_dtypes(agent)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(1, 4)).astype(np.float32)
    for _ in range(20):
        nxt = rng.normal(size=(1, 4)).astype(np.float32)
        agent.observe(obs, agent.act(obs), np.ones(1, np.float32), nxt, np.zeros(1, bool), np.zeros(1, bool))
        obs = nxt
    seen.clear()
    agent.act(obs, deterministic=True)
    assert seen == [dtype]
    before = [p.detach().clone() for p in agent.q.parameters()]
    seen.clear()
    info = agent.update()
    assert seen and set(seen) == {dtype}  # every torso pass of the update (online and target)
    loss = info["losses/qrdqn_loss"]
    assert torch.isfinite(loss) and loss.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in agent.q.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.q.parameters()))
