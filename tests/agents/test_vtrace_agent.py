"""The on-policy agent with V-trace targets: on its own rollout it is the n-step actor-critic; a stale rollout is
rescored by the current weights (what the Scheme's asynchronous workers hand it)."""

from __future__ import annotations

import copy

import pytest
import torch

from rl.errors import ConfigError
from rl.grad_comp.vtrace import vtrace_targets


def test_vtrace_on_its_own_rollout_is_the_lambda_1_return(filled_rollout):
    agent = filled_rollout("a2c_cartpole", "grad_comp=vtrace,num_steps=16")
    assert agent.vtrace
    mem = agent.memory
    agent.fill_targets()
    vs = mem.returns.clone()
    gae_agent = filled_rollout("a2c_cartpole", "grad_comp=a2c,num_steps=16,gae_lambda=1.0")  # same rollout, GAE(1)
    gae_agent.memory.compute_advantages(gae_agent.next_values(gae_agent.memory.values), 0.99, 1.0)
    torch.testing.assert_close(vs, gae_agent.memory.returns)


def test_stale_rescoring_with_unchanged_weights_changes_nothing(filled_rollout):
    fresh = filled_rollout("a2c_cartpole", "grad_comp=vtrace,num_steps=16")
    stale = copy.deepcopy(fresh)
    stale.memory.policy_lag[:] = 1  # rescored by a forward pass of the current weights: the same weights here
    fresh.fill_targets()
    stale.fill_targets()
    torch.testing.assert_close(stale.memory.returns, fresh.memory.returns, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stale.memory.advantages, fresh.memory.advantages, rtol=1e-5, atol=1e-5)


def test_a_stale_rollout_is_corrected_by_the_ratio_of_current_to_behaviour_policy(filled_rollout):
    agent = filled_rollout("a2c_cartpole", "grad_comp=vtrace,num_steps=16")
    mem = agent.memory
    mem.log_probs[:16] += 0.5  # the behaviour policy was surer of its actions: ratios exp(-0.5) < 1
    agent.memory.policy_lag[:] = 1  # acted by an older policy (the staleness the Scheme writes with the data)
    agent.fill_targets()
    T = mem.pos
    whole = next(mem.minibatches(len(mem), agent.shuffle, seq_len=0))
    with torch.inference_mode():
        log_probs, _, values = agent._evaluate(whole, need_entropy=False)
    values = values.reshape(T, -1)
    expected_vs, expected_adv = vtrace_targets(log_probs.reshape(T, -1) - mem.log_probs[:T], values,
                                               agent.next_values(values), mem.rewards[:T], mem.terminated[:T],
                                               mem.dones[:T], 0.99)
    torch.testing.assert_close(mem.returns[:T], expected_vs)
    torch.testing.assert_close(mem.advantages[:T], expected_adv)
    on_policy_vs, _ = vtrace_targets(torch.zeros(T, mem.num_envs), values, agent.next_values(values),
                                     mem.rewards[:T], mem.terminated[:T], mem.dones[:T], 0.99)
    assert (mem.returns[:T] - on_policy_vs).abs().max() > 1e-3  # the correction did something


def test_update_learns_from_vtrace_targets(filled_rollout):
    agent = filled_rollout("a2c_cartpole", "grad_comp=vtrace,num_steps=16")
    before = agent.optimizer.param.clone()
    info = agent.update()
    assert "losses/value_loss" in info and not torch.equal(before, agent.optimizer.param)


@pytest.mark.parametrize("overrides", ["grad_comp=vtrace,normalize_returns=true",
                                       "grad_comp=a2c,vtrace=true,normalize_returns=true"])
def test_normalize_returns_is_refused_with_vtrace(filled_rollout, overrides):
    """As Sample Factory: standardised V-trace targets collapse a shared torso (hparams/scheme.py, appo_atari)."""
    with pytest.raises(ConfigError, match="normalize_returns"):
        filled_rollout("a2c_cartpole", overrides)


def test_appo_atari_builds_without_normalize_returns():
    import hparams  # noqa: F401
    from rl.registry import hparams as sets
    hp = sets["appo_atari"]()
    assert hp.vtrace and not hp.normalize_returns
