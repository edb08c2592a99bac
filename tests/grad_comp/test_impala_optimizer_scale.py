"""`impala`'s RMSprop epsilon and gradient clip are elite_buffer_vtrace's, rescaled for our mean loss.

elite_buffer_vtrace (agent/algorithms/v_trace.py, learner) sums its loss over the batch's k = batch_size x r_f_steps
= 10 x 10 elements and steps torch.optim.RMSprop(lr, eps=0.01) after clip_grad_norm_(40). Our `vtrace` loss is the
mean over the same k elements, i.e. its loss / k: the same optimizer trajectory needs eps / k and clip / k, with k
recomputed from the run's T and batch whatever overrides them (summed_eps, summed_clip)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hparams  # noqa: F401  (fills the hparams registry)
from rl.agents.flat_adam import FlatAdam
from rl.agents.impala import ImpalaAgent
from rl.agents.on_policy import OnPolicyAgent
from rl.grad_comp.vtrace import vtrace
from rl.memory.rollout import RolloutBatch
from rl.registry import hparams as sets

REF_RMSPROP_EPS, REF_CLIP, REF_ENT, REF_VALUE = 0.01, 40.0, 0.01, 0.5  # elite_buffer_vtrace's option_flags defaults


def summed_reference_loss(logits, values, actions, adv, vs):
    """elite_buffer_vtrace's v_trace() losses: sums over time and batch."""
    log_pi = F.log_softmax(logits, -1)
    policy = -(log_pi.gather(-1, actions[:, None]).squeeze(-1) * adv).sum()
    value = REF_VALUE * 0.5 * ((vs - values) ** 2).sum()
    entropy = REF_ENT * (log_pi.exp() * log_pi).sum()
    return policy + value + entropy


OBS, ACT = gym.spaces.Box(-1, 1, (8,), np.float32), gym.spaces.Discrete(6)


@pytest.mark.parametrize("num_steps, columns", [(10, 10), (50, 10), (20, 3)])
def test_a_mean_loss_step_with_the_set_settings_is_the_reference_summed_step(num_steps, columns):
    hp = sets["impala"]().update({"num_steps": num_steps, "batch_rollouts": columns})
    agent = OnPolicyAgent(hp, OBS, ACT, num_envs=columns)  # a learner's columns: batch_rollouts trajectories
    k = num_steps * columns  # r_f_steps x batch_size sequences: the elements the reference sums over
    assert agent.loss_elements() == k
    torch.manual_seed(0)
    obs, actions = torch.randn(k, 8), torch.randint(0, 6, (k,))
    adv, vs = 3.0 * torch.randn(k), torch.randn(k)  # large enough that the reference's clip at 40 binds
    net = torch.nn.Linear(8, 7)
    ours, ref = torch.nn.Linear(8, 7), torch.nn.Linear(8, 7)
    ours.load_state_dict(net.state_dict()), ref.load_state_dict(net.state_dict())
    opt_ref = torch.optim.RMSprop(ref.parameters(), lr=hp.lr, alpha=0.99, eps=REF_RMSPROP_EPS)
    opt = FlatAdam(ours, hp.lr, agent.optimizer_eps(), kind=hp.optimizer, rmsprop_alpha=hp.rmsprop_alpha)
    clipped = 0
    for _ in range(5):
        out = ref(obs)
        opt_ref.zero_grad()
        summed_reference_loss(out[:, :6], out[:, 6], actions, adv, vs).backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(ref.parameters(), REF_CLIP)) > REF_CLIP
        opt_ref.step()

        out = ours(obs)
        dist = torch.distributions.Categorical(logits=out[:, :6])
        batch = RolloutBatch(obs, actions, torch.zeros(k), torch.zeros(k), adv, vs)
        loss, _ = vtrace(dist.log_prob(actions), dist.entropy(), out[:, 6], batch, ent_coef=hp.ent_coef,
                         vf_coef=hp.vf_coef, diagnostics=False)
        opt.zero_grad()
        loss.backward()
        opt.clip_grad_norm(agent.grad_clip())
        opt.step()
        for p, q in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert clipped  # the clip was exercised


def test_impala_agent_scales_by_its_batch_whatever_overrides_it():
    """agent=impala: k = T x the batch's sequences, from the overrides, not the set's 100."""
    hp = sets["impala_cartpole"]().update({"agent": "impala", "summed_eps": 0.01, "summed_clip": 40.0,
                                           "num_steps": 50, "batch_rollouts": 10, "replay_parameters":
                                           '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                                           '{"type": "standard", "capacity": 100, "sample_ratio": 0.5}]'})
    agent = ImpalaAgent(hp, OBS, ACT, num_envs=2)
    assert agent.loss_elements() == 500
    assert agent.optimizer.eps == pytest.approx(0.01 / 500) and agent.grad_clip() == pytest.approx(40 / 500)
    off = ImpalaAgent(hp.copy().update({"summed_eps": 0.0, "summed_clip": 0.0}), OBS, ACT, num_envs=2)
    assert off.optimizer.eps == hp.adam_eps and off.grad_clip() == hp.max_grad_norm
