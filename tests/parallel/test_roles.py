"""The workers of the Scheme run in this process: they are plain classes built from a WorkerSpec."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import torch

import hparams  # noqa: F401 - registers the sets
from rl.parallel.buffers import make_buffer
from rl.parallel.learner import worker_hparams
from rl.parallel.roles import make_worker
from rl.parallel.spec import WorkerSpec
from rl.registry import hparams as sets

# gymnasium's own vector CartPole: next-step autoreset (CartPole-v1's id gets rl's same-step one)
gym.register("NextStepCartPole-v1", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
             vector_entry_point="gymnasium.envs.classic_control.cartpole:CartPoleVectorEnv", max_episode_steps=500)


def worker_for(name: str, role: str, overrides: str = ""):
    hp = sets[name]()
    hp.parse(overrides)
    spec = WorkerSpec(role, worker_hparams(hp, rank=0, count=1), rank=0, seed=3)
    spec = pickle.loads(pickle.dumps(spec))  # a spec crosses any transport
    worker = make_worker(spec)
    space = worker.env.single_observation_space, worker.env.single_action_space
    grad = worker.agent.gradient_size() if role == "gradients" else 0
    hidden, behaviour = worker.agent.rollout_layout() if role == "rollouts" else (None, None)
    return worker, make_buffer(role, spec.hp, *space, hidden, grad, behaviour)


def test_rows_of_steps_skipped_by_next_step_autoreset_are_not_shipped():
    """Bug caught: a step where every env was resetting (no transition at all) keeps the previous shipment's rows
    in the buffer, and the learner stores them again."""
    worker, rows = worker_for("dqn_cartpole", "rows",
                              "env=NextStepCartPole-v1,num_envs=1,vector_mode=native,worker_steps=64")
    rows.valid.fill_(True)  # what a previous shipment left
    shipment = worker.fill(rows, beat=lambda: None)
    assert len(shipment.episodes["returns"]) >= 1  # an episode ended: at least one step was a reset
    assert int(rows.valid.sum()) == shipment.steps < 64
    worker.close()


def test_a_rollout_worker_ships_the_behaviour_policys_outputs():
    worker, buffer = worker_for("ppo_cartpole", "rollouts", "num_envs=2,num_steps=16")
    shipment = worker.fill(buffer, beat=lambda: None)
    assert shipment.kind == "rollout" and shipment.steps == 32 and buffer.full
    with torch.no_grad():  # the stored log-probabilities are the acting policy's
        params, values, _ = worker.agent.model(buffer.obs.flatten(0, 1))
        log_probs = worker.agent.policy.log_prob(params, buffer.actions.flatten(0, 1))
    torch.testing.assert_close(buffer.log_probs.flatten(), log_probs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(buffer.values.flatten(), values.flatten(), rtol=1e-4, atol=1e-5)
    worker.close()


def test_a_gradient_worker_ships_the_gradient_of_its_agents_loss():
    """Bug caught: a gradient worker that steps its own weights with the gradient it ships (the learner would then
    get gradients of weights it never published)."""
    worker, grad = worker_for("a3c_cartpole", "gradients")
    before = [p.detach().clone() for p in worker.agent.model.parameters()]
    shipment = worker.fill(grad, beat=lambda: None)
    assert shipment.kind == "gradient" and shipment.steps == 5  # t_max 5 on one env
    assert grad.abs().sum() > 0
    assert all(torch.equal(a, b) for a, b in zip(before, worker.agent.model.parameters()))  # it never steps
    worker.close()


def test_a_worker_ships_the_statistics_it_gathered_once():
    worker, buffer = worker_for("ppo_cartpole", "rollouts", "num_envs=2,num_steps=8,normalize_obs=true")
    first = worker.fill(buffer, beat=lambda: None).statistics["obs"]
    assert first["count"] == 16
    second = worker.fill(buffer, beat=lambda: None).statistics["obs"]
    assert second["count"] == 16 and not np.allclose(first["mean"], second["mean"])
    worker.close()
