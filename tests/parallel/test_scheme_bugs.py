"""One-line bugs of the Scheme that change what trains, each caught in seconds (no learning, no timeout): the learner
against a scripted transport, real workers in this process, and the shared-memory transport's forked workers.

Each test names the bug it catches (issue 34)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from rl.parallel.roles import make_worker
from tests.parallel.scripted import ACTIONS, OBS, make_learner, rows_shipment


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
    batch = next(agent.learning_batches())  # the whole rollout, time-major
    with torch.no_grad():
        _, final_values, _ = agent.model(buffer.next_obs[t, n])
    expected = buffer.rewards[t, n] + agent.hp.gamma * final_values.flatten()
    assert final_values.abs().min() > 1e-3  # zeroing them would show
    returns = batch.returns.reshape(buffer.num_steps, -1)
    torch.testing.assert_close(returns[t, n], expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- transports
def marked_state(agent, mark: float) -> dict:
    """The agent's acting state with a value head that says `mark` whatever it sees: the values a worker ships
    tell which weights acted."""
    state = dict(agent.acting_state())
    state["net.model.v_head.weight"] = torch.zeros_like(state["net.model.v_head.weight"])
    state["net.model.v_head.bias"] = torch.full_like(state["net.model.v_head.bias"], mark)
    return state


def next_shipment(transport, deadline: float):
    while True:
        shipment = transport.receive(timeout=0.5)
        if shipment is not None:
            return shipment
        assert time.monotonic() < deadline, "no shipment: the worker is stuck"  # only keeps a broken run from hanging


def check_every_publish_reaches_the_worker(transport, agent, spec, make_buffer) -> None:
    """Publish versions 1, 2, 3 with weights of their own: within a few shipments each, the worker ships one acted
    by that version, and its data was acted by that version's weights (a worker may finish what it started with the
    weights it held: two slots or calls in flight)."""
    deadline = time.monotonic() + 120
    transport.start([spec], make_worker, make_buffer, marked_state(agent, 100.0), 0, False)
    try:
        for version in (1, 2, 3):
            transport.publish(marked_state(agent, 100.0 + version), version)
            versions = []
            for _ in range(6):
                shipment = next_shipment(transport, deadline)
                versions.append(shipment.version)
                values = shipment.data.values.clone()
                transport.release(shipment)
                assert torch.all(values == 100.0 + shipment.version), "a shipment's version is not its weights'"
                if shipment.version == version:
                    break
            assert versions[-1] == version, f"publish {version} never reached the worker: shipped {versions}"
    finally:
        transport.close()


def test_the_shm_transport_delivers_every_publish():
    """Bug caught: the shared-memory transport publishing only the first weights (workers act with version 0 for
    ever; async collection goes on, so nothing hangs)."""
    from rl.parallel.buffers import make_buffer
    from rl.parallel.transports.shm import ShmTransport

    learner, agent, _ = make_learner("ppo_cartpole", "num_workers=1,num_envs=1,num_steps=8,col_communication=async")
    transport = ShmTransport(learner.hp)
    check_every_publish_reaches_the_worker(transport, agent, learner.specs[0],
                                           lambda s: make_buffer("rollouts", s.hp, OBS, ACTIONS, None, 0))


def shipments_continue(shipments) -> int:
    """How many consecutive pairs of one worker's rollouts were checked to continue each other (a rollout's first
    observation is the last one's next observation, unless an episode ended there); fails at a gap."""
    checked = 0
    for previous, current in zip(shipments, shipments[1:]):
        if previous.dones[-1].any():
            continue  # the final observation is followed by a reset one
        assert torch.equal(current.obs[0], previous.next_obs[-1]), "a shipment is missing between two delivered"
        checked += 1
    return checked


@pytest.mark.ray
def test_the_ray_transport_delivers_every_shipment_and_every_publish(ray_cluster):
    """Bugs caught: the Ray transport dropping every second shipment (async collection goes on with half the data,
    and n-step windows and rollouts join steps that are not consecutive), or publishing only the first weights."""
    from rl.parallel.buffers import make_buffer
    from rl.parallel.transports.ray import RayTransport

    learner, agent, _ = make_learner("ppo_cartpole", f"num_workers=1,num_envs=1,num_steps=8,col_communication=async,"
                                                     f"ray_address={ray_cluster.address}")
    spec = learner.specs[0]

    def buffer(s):
        return make_buffer("rollouts", s.hp, OBS, ACTIONS, None, 0)

    transport = RayTransport(learner.hp)
    transport.start([spec], make_worker, buffer, agent.acting_state(), 0, False)
    deadline = time.monotonic() + 300
    try:
        rollouts = []
        while len(rollouts) < 8:
            shipment = next_shipment(transport, deadline)
            rollouts.append(shipment.data)
            transport.release(shipment)
        assert shipments_continue(rollouts) >= 3
    finally:
        transport.close()
    check_every_publish_reaches_the_worker(RayTransport(learner.hp), agent, spec, buffer)
