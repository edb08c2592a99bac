"""One-line bugs of the Scheme that change what trains, each caught in seconds (no learning, no timeout): the learner
against a scripted transport, real workers in this process, and the shared-memory transport's forked workers.

Each test names the bug it catches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.parallel.roles import make_worker
from tests.parallel.scripted import ACTIONS, OBS, check_every_publish_reaches_the_worker, make_learner, rows_shipment


def test_rows_shipment_dropped_for_max_policy_lag_closes_its_rows():
    """Bug caught: the learner drops a stale Ape-X shipment without closing its worker's rows, so the n-step windows
    left open by the worker's previous shipment go on with its next one: one return joins steps that are not
    consecutive (the dropped steps are missing from it)."""
    learner, agent, transport = make_learner("apex_dqn_cartpole",
                                             "num_envs=2,n_step=3,learning_starts=100000,max_policy_lag=1")
    g = agent.hp.gamma
    transport.queue.append(rows_shipment(1, 2, 2, reward=1.0, version=0))  # 2 steps: windows open, nothing stored
    learner.step()
    assert len(agent.memory) == 0 and learner.clock["scheme/dropped"] == 0
    agent.updates = 5  # the learner learned on: the next shipment, acted by version 0, is 5 updates old
    transport.queue.append(rows_shipment(1, 4, 2, reward=10.0, version=0))
    learner.step()
    assert learner.clock["scheme/dropped"] == 1
    transport.queue.append(rows_shipment(1, 3, 2, reward=1000.0, version=5))
    learner.step()
    rewards = np.asarray(agent.memory.rewards[:len(agent.memory)]).ravel()
    # the first shipment's windows closed as truncated when the second was dropped; the third's are its own
    assert sorted(rewards) == pytest.approx([1.0, 1.0, 1 + g, 1 + g] + [1000 * (1 + g + g * g)] * 2)


# ---------------------------------------------------------------------------------------------------- truncation
def test_truncated_episode_ends_of_a_workers_rollout_bootstrap_from_the_final_observation():
    """Bug caught: V(final observation) zeroed at episode ends, so a time limit reads as the end of the world (the
    return of a truncated step is its reward alone). A real worker fills a rollout of CartPole episodes cut at 5
    steps; the learner's targets at each truncation are r + gamma V(the episode's final observation)."""
    overrides = "num_workers=1,num_envs=2,num_steps=16,batch_size=0,max_episode_steps=5"
    learner, agent, transport = make_learner("ppo_cartpole", overrides, learns=False)
    worker = make_worker(learner.specs[0])
    try:
        worker.load(agent.acting_state(), agent.updates)
        buffer = transport.make_buffer(learner.specs[0])
        transport.queue.append(worker.fill(buffer, beat=lambda: None))
        transport.queue[0].data = buffer
    finally:
        worker.close()
    learner.step()
    assert agent.memory.full
    truncated = (buffer.dones > 0) & (buffer.terminated == 0)
    t, n = truncated.nonzero(as_tuple=True)
    assert len(t) >= 4  # 32 steps of 5-step episodes
    ongoing = t < buffer.num_steps - 1  # the final observation is not the next step's (reset) observation
    assert not torch.equal(buffer.next_obs[t[ongoing], n[ongoing]], buffer.obs[t[ongoing] + 1, n[ongoing]])
    agent.fill_targets()
    batch = next(agent.memory.minibatches(len(agent.memory), agent.shuffle, seq_len=0))  # the rollout, time-major
    with torch.no_grad():
        _, final_values, _ = agent.model(buffer.next_obs[t, n])
    expected = buffer.rewards[t, n] + agent.hp.gamma * final_values.flatten()
    assert final_values.abs().min() > 1e-3  # zeroing them would show
    returns = batch.returns.reshape(buffer.num_steps, -1)
    torch.testing.assert_close(returns[t, n], expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- transports
def test_the_shm_transport_delivers_every_publish():
    """Bug caught: the shared-memory transport publishing only the first weights (workers act with version 0 for
    ever; async collection goes on, so nothing hangs)."""
    from rl.parallel.buffers import make_buffer
    from rl.parallel.transports.shm import ShmTransport

    learner, agent, _ = make_learner("ppo_cartpole", "num_workers=1,num_envs=1,num_steps=8,col_communication=async")
    transport = ShmTransport(learner.hp)
    check_every_publish_reaches_the_worker(transport, agent, learner.specs[0],
                                           lambda s: make_buffer("rollouts", s.hp, OBS, ACTIONS, None, 0))
