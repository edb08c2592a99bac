"""The on-policy update's two walks of one rollout (`update()`'s loop, and a gradient worker's `minibatch_gradients`
+ `apply` halves), the one advantage standardisation, and the one linear rate decay."""

from __future__ import annotations

import copy

import pytest
import torch

from rl.agents.common import linear_decay
from rl.grad_comp.policy_gradient import standardized_advantages


def gradient_worker_walk(agent) -> dict:
    """What rl/parallel/roles.py's GradientWorker does with its rollout, each gradient applied at once."""
    for grad in agent.minibatch_gradients():
        agent._apply(grad)
    return agent.finish_update()


@pytest.mark.parametrize("overrides", ["epochs=3,batch_size=16,target_kl=0", "epochs=6,batch_size=16,target_kl=0.002"])
def test_update_and_a_gradient_workers_walk_take_the_same_steps(filled_rollout, overrides):
    """Bug caught: the two loops drifting apart (one not reshuffling each epoch, or stopping at target_kl at another
    minibatch, or standardising advantages differently)."""
    agent = filled_rollout("ppo_cartpole", f"num_steps=32,{overrides}")
    twin = copy.deepcopy(agent)
    info = agent.update()
    twin_info = gradient_worker_walk(twin)
    assert agent.grad_steps == twin.grad_steps > 0 and info["charts/epochs"] == twin_info["charts/epochs"]
    assert torch.equal(agent.optimizer.param, twin.optimizer.param)
    if "target_kl=0.002" in overrides:
        assert info["charts/epochs"] < 6  # the early stop happened, so the test compares where it happened


class OneProcessGroup:
    """A synchronous gradient group of one process: its mean of a tensor is the tensor."""

    world = 1

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_a_groups_standardisation_is_the_union_batches():
    """Bug caught: the group's variance from the moments without Bessel's n / (n - 1), so a group of one would not
    standardise as one process does."""
    adv = torch.tensor([1.0, 3.0, 4.0, 8.0])
    torch.testing.assert_close(standardized_advantages(adv, OneProcessGroup()), standardized_advantages(adv))
    standard = standardized_advantages(adv)
    assert abs(float(standard.mean())) < 1e-6 and float(standard.std()) == pytest.approx(1.0, abs=1e-6)


def test_linear_decay_reaches_zero_at_the_end_of_the_run_and_stays_there(filled_rollout):
    """Bug caught: the decay left unclamped past train_steps (a negative learning rate)."""
    assert linear_decay(0, 100) == 1.0 and linear_decay(25, 100) == 0.75 and linear_decay(150, 100) == 0.0
    agent = filled_rollout("ppo_cartpole", "num_steps=8,lr_decay=true,clip_decay=true")
    agent.env_steps = agent.hp.train_steps // 4
    lr, clip = agent._schedule()
    assert lr == pytest.approx(0.75 * agent.hp.lr) and clip == pytest.approx(0.75 * agent.hp.clip_range)
