"""Synchronous gradient workers: one step of 2 processes, each on half the batch, equals one step on the union (with
advantages normalised over the union); the group averages, and agrees on PPO's target_kl early stop."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
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


# a2c: one minibatch, a mean loss. ppo: 3 epochs of the whole rollout with advantages normalised, which the group
# must do over the union (per-rank statistics would give another step)
SETTINGS = {"a2c": ("a2c_cartpole", "max_grad_norm=0.5,optimizer=rmsprop,adam_eps=0.01"),
            "ppo": ("ppo_cartpole", "num_steps=5,batch_size=0,epochs=3,normalize_advantage=true,target_kl=0.0,lr=1e-2")}


def make_agent(kind: str, envs: int, extra: str = ""):
    import gymnasium as gym

    name, overrides = SETTINGS[kind]
    hp = sets[name]()
    torch.manual_seed(0)  # the networks' initialisation
    hp.parse(overrides + ("," + extra if extra else ""))  # clipping applies after averaging
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    return agents[hp.agent](hp, obs_space, gym.spaces.Discrete(2), envs, seed=0)


def one_update(agent, columns: slice, data: dict | None = None) -> torch.Tensor:
    """Hand `columns` of the fixed rollout to the agent (as the Scheme's learner does) and learn from them."""
    from rl.memory.rollout import RolloutMemory

    data = data or rollout()
    n = columns.stop - columns.start
    src = RolloutMemory(T, n, (4,), np.float32)
    for name, value in data.items():
        getattr(src, name)[:] = value[:, columns]
    # every agent counts the union's env steps (a rank counts its peers'), so their schedules agree
    assert agent.take_rollout(src, lag=0, steps=T * N)  # the rollout is complete
    agent.update()
    return agent.optimizer.param.detach().clone()


def record_gradients(agent) -> list[torch.Tensor]:
    """The gradient of every step as the optimizer takes it: after the group's all-reduce (the optimizer's
    `reduce_grad` hook, set by join_collective), before clipping and Adam, which would hide its scale."""
    seen: list[torch.Tensor] = []
    reduce = agent.optimizer.reduce_grad

    def reduce_grad(grad: torch.Tensor) -> None:
        if reduce is not None:
            reduce(grad)
        seen.append(grad.clone())

    agent.optimizer.reduce_grad = reduce_grad
    return seen


def rank_main(kind: str, extra: str, rank: int, port: int, out, skew: float) -> None:
    from rl.parallel.collective import GradientGroup

    torch.set_num_threads(1)
    agent = make_agent(kind, N // 2, extra)
    group = GradientGroup(rank, 2, port, "cpu")
    group.join(agent)  # rank 0's weights everywhere, then averaged gradients
    grads = record_gradients(agent)
    data = rollout()
    if skew:  # the agent's own log-probabilities, then rank 1's behaviour policy differs: its KL is larger
        with torch.no_grad():
            params, _, _ = agent.model(data["obs"].reshape(T * N, 4))
            data["log_probs"] = agent.policy.log_prob(params, data["actions"].reshape(-1)).reshape(T, N)
        data["log_probs"] = data["log_probs"] - skew * rank
    params = one_update(agent, slice(rank * 2, rank * 2 + 2), data)
    out.put((rank, params.numpy(), agent.grad_steps, torch.stack(grads).numpy()))
    group.close()


def run_group(kind: str, extra: str = "", skew: float = 0.0) -> dict:
    from rl.parallel.collective import free_port

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(kind, extra, r, port, out, skew)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = {rank: (params, steps, grads) for rank, params, steps, grads in (out.get(timeout=60) for _ in procs)}
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    for p in procs:
        assert p.exitcode == 0
    return results


@pytest.mark.parametrize("kind", ["a2c", "ppo"])
def test_two_sync_gradient_workers_equal_one_step_on_the_union_batch(kind):
    """Bug caught (by the gradients: clipping and Adam's normalisation hide a scale in the steps): the all-reduce
    summing the ranks' gradients instead of averaging them."""
    union_agent = make_agent(kind, N)
    union_grads = record_gradients(union_agent)
    before = union_agent.optimizer.param.detach().clone()
    union = one_update(union_agent, slice(0, N))
    assert not torch.equal(before, union)
    group = run_group(kind)
    # every gradient step of the group took the gradient of the union batch (a2c: one step, ppo: one per epoch)
    expected = torch.stack(union_grads).numpy()
    for _, _, grads in group.values():
        assert grads.shape == expected.shape and np.abs(expected).max() > 0
        np.testing.assert_allclose(grads, expected, rtol=1e-4, atol=1e-6)
    results = {r: params for r, (params, _, _) in group.items()}
    # both ranks hold the same weights, and they are the union step's (every agent starts from the same weights)
    np.testing.assert_allclose(results[0], results[1], rtol=0, atol=0)
    np.testing.assert_allclose(results[0], union.numpy(), rtol=1e-5, atol=1e-6)
    # and that is not what one worker's half alone would give
    half_agent = make_agent(kind, N // 2)
    half = one_update(half_agent, slice(0, 2))
    assert np.abs(half.numpy() - results[0]).max() > 1e-4


def _average_main(rank: int, port: int, out) -> None:
    from rl.parallel.collective import GradientGroup

    group = GradientGroup(rank, 2, port, "cpu")
    grad = torch.full((3,), float(rank + 1))  # 1 on rank 0, 2 on rank 1
    group.average(grad)
    out.put((rank, grad.tolist(), group.mean(torch.tensor([float(rank)])).item()))
    group.close()


def test_the_group_averages_gradients_and_statistics_rather_than_summing():
    from rl.parallel.collective import free_port

    ctx = mp.get_context("fork")
    out, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_average_main, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    for _, grad, mean in results:
        assert grad == [1.5, 1.5, 1.5] and mean == 0.5


def test_ranks_agree_on_the_target_kl_early_stop():
    """Rank 1's data says stop after the first epoch, rank 0's says go on: they must stop together (per-rank
    decisions unpair the all-reduces: gloo fails, NCCL hangs) and hold the same weights."""
    results = run_group("ppo", extra="epochs=8,target_kl=0.01", skew=0.2)
    (params0, steps0, _), (params1, steps1, _) = results[0], results[1]
    assert steps0 == steps1 and 0 < steps0 < 8
    np.testing.assert_allclose(params0, params1, rtol=0, atol=0)
