"""Synchronous gradient workers: one step of 2 processes, each on half the batch, equals one step on the union."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import torch

import hparams  # noqa: F401 - registers the sets
from rl.registry import agents
from rl.registry import hparams as sets

T, N = 5, 4  # the union rollout: 5 steps of 4 envs; each of 2 workers holds 2 of the envs


def rollout(seed: int = 0) -> dict[str, torch.Tensor]:
    """A fixed rollout with episode ends (one termination, one truncation)."""
    g = torch.Generator().manual_seed(seed)
    data = {"obs": torch.randn(T, N, 4, generator=g), "next_obs": torch.randn(T, N, 4, generator=g),
            "actions": torch.randint(0, 2, (T, N), generator=g), "rewards": torch.rand(T, N, generator=g),
            "values": torch.randn(T, N, generator=g), "log_probs": -torch.rand(T, N, generator=g) - 0.3,
            "terminated": torch.zeros(T, N), "dones": torch.zeros(T, N)}
    data["terminated"][2, 1] = data["dones"][2, 1] = 1.0
    data["dones"][3, 2] = 1.0
    return data


def make_agent(name: str, envs: int):
    import gymnasium as gym

    hp = sets[name]()
    torch.manual_seed(0)  # the networks' initialisation
    hp.parse("max_grad_norm=0.5,optimizer=rmsprop,adam_eps=0.01")  # clipping applies after averaging
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    return agents[hp.agent](hp, obs_space, gym.spaces.Discrete(2), envs, seed=0)


def one_update(agent, columns: slice) -> torch.Tensor:
    data = rollout()
    mem = agent.memory
    for name, value in data.items():
        getattr(mem, name)[:T] = value[:, columns]
    mem.pos = T
    agent.update()
    return agent.optimizer.param.detach().clone()


def rank_main(rank: int, port: int, out) -> None:
    from rl.parallel.grad_workers import GradientGroup

    torch.set_num_threads(1)
    agent = make_agent(NAME, N // 2)
    group = GradientGroup(rank, 2, port, "cpu")
    group.join(agent)  # rank 0's weights everywhere, then averaged gradients
    out.put((rank, one_update(agent, slice(rank * 2, rank * 2 + 2)).numpy()))
    group.close()


NAME = "a2c_cartpole"  # one minibatch (the whole rollout), a mean loss: the union's gradient is the halves' mean


def test_two_sync_gradient_workers_equal_one_step_on_the_union_batch():
    name = NAME
    from rl.parallel.grad_workers import free_port

    union_agent = make_agent(name, N)
    before = union_agent.optimizer.param.detach().clone()
    union = one_update(union_agent, slice(0, N))
    assert not torch.equal(before, union)

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    # both ranks hold the same weights, and they are the union step's (every agent starts from the same weights)
    np.testing.assert_allclose(results[0], results[1], rtol=0, atol=0)
    np.testing.assert_allclose(results[0], union.numpy(), rtol=1e-5, atol=1e-6)
    # and that is not what one worker's half alone would give
    half_agent = make_agent(name, N // 2)
    half = one_update(half_agent, slice(0, 2))
    assert np.abs(half.numpy() - results[0]).max() > 1e-4
