"""TQC: the truncated mixture and the loss against hand computations, the agent's assembly checks, the batched
quantile critics, and a train.py run on Pendulum-v1 that checkpoints and resumes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from rl.errors import ConfigError
from rl.grad_comp.tqc import truncated_mixture
from rl.memory.replay import Transitions
from rl.registry import grad_comp
from rl.registry import hparams as sets


def test_the_mixture_drops_the_top_atoms_of_the_pool():
    """Two critics of three atoms, [1, 5, 9] and [2, 6, 7]; dropping 1 per critic drops the pool's 2 largest (9 and
    7, one from each critic here, but only by chance: the pool is what is truncated). Bug caught: the bottom atoms
    dropped (which keeps [5, 6, 7, 9]), or the top one of each critic dropped separately."""
    atoms = torch.tensor([[[1.0, 5.0, 9.0]], [[2.0, 6.0, 7.0]]])  # [K=2, B=1, N=3]
    assert torch.equal(truncated_mixture(atoms, 1), torch.tensor([[1.0, 2.0, 5.0, 6.0]]))
    uneven = torch.tensor([[[1.0, 8.0, 9.0]], [[2.0, 3.0, 4.0]]])  # both dropped atoms come from critic 0
    assert torch.equal(truncated_mixture(uneven, 1), torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    assert truncated_mixture(atoms, 0).shape == (1, 6)


class FixedCritics(torch.nn.Module):
    """Critics whose atoms [K, N] do not depend on the state or action: (obs, actions, detach, first) -> [K, B, N]."""

    def __init__(self, atoms):
        super().__init__()
        self.atoms = torch.nn.Parameter(torch.tensor(atoms))

    def forward(self, obs, actions, detach=False, first=False):
        atoms = self.atoms.detach() if detach else self.atoms
        return atoms[:1 if first else None].unsqueeze(1).expand(-1, len(obs), -1)


def policy(obs):
    """One action, log pi = -1 everywhere."""
    return torch.zeros(len(obs), 1), torch.full((len(obs),), -1.0)


def one_transition():
    one = torch.ones(1)
    return Transitions(obs=torch.zeros(1, 3), actions=torch.zeros(1, 1), rewards=one, next_obs=torch.zeros(1, 3),
                       terminated=0 * one, truncated=0 * one, discounts=0.5 * one, weights=None, indices=one.long())


TARGET_ATOMS = [[0.0, 4.0], [1.0, 2.0]]  # pooled [0, 1, 2, 4]: dropping 1 per critic keeps [0, 1]


def test_critic_loss_by_hand():
    """alpha = 1, log pi(a'|s') = -1: target atoms 1 + 0.5 ([0, 1] + 1) = [1.5, 2]. Every critic's atoms are [0, 0]
    (fractions 0.25, 0.75): 0.25 (1.5 - 0.5) = 0.25, 0.25 (2 - 0.5) = 0.375, 0.75 * 1 = 0.75, 0.75 * 1.5 = 1.125;
    their mean, 0.625. Bug caught: the bottom atoms dropped (targets [2.5, 3.5]: 1.75), nothing dropped, or the
    entropy term's sign flipped."""
    loss, info = grad_comp["tqc"](policy, FixedCritics([[0.0, 0.0], [0.0, 0.0]]), FixedCritics(TARGET_ATOMS),
                                  torch.tensor(0.0), one_transition(), -1.0, update_actor=False,
                                  top_quantiles_to_drop_per_net=1)
    assert torch.isclose(loss, torch.tensor(0.625)) and torch.allclose(info["td_error"], torch.tensor([0.625]))


def test_the_actor_maximises_the_mean_of_every_atom():
    """The actor's loss is alpha log pi - mean over all critics' atoms, untruncated: 1 * -1 - mean(0, 0, 0, 4) = -2
    (truncating the actor's critics too would give -1). Its gradient reaches no critic weight (detach=True)."""
    critics = FixedCritics([[0.0, 0.0], [0.0, 4.0]])
    log_alpha = torch.tensor(0.0, requires_grad=True)
    loss, info = grad_comp["tqc"](policy, critics, FixedCritics(TARGET_ATOMS), log_alpha, one_transition(), -1.0,
                                  top_quantiles_to_drop_per_net=1)
    assert torch.isclose(info["losses/actor_loss"], torch.tensor(-2.0))
    critic_only, _ = grad_comp["tqc"](policy, critics, FixedCritics(TARGET_ATOMS), log_alpha, one_transition(), -1.0,
                                      update_actor=False, tune_alpha=False, top_quantiles_to_drop_per_net=1)
    # the temperature's loss: -log_alpha (log pi + target entropy) = 0 at log_alpha = 0
    assert torch.isclose(loss, critic_only - 2.0)
    loss.backward()
    assert math.isclose(log_alpha.grad.item(), 2.0)  # -(log pi + target entropy) = -(-1 - 1)


# ---------------------------------------------------------------------------------------------------- the agent
def test_quantile_critics_are_batched_and_the_agent_learns_from_them(build):
    agent = build("tqc_pendulum", hidden_sizes=[16, 16], batch_size=8, learning_starts=10, buffer_size=100)
    obs, actions = torch.zeros(5, 3), torch.zeros(5, 1)
    assert agent.critic(obs, actions).shape == (2, 5, 25)
    assert agent.critic(obs, actions, first=True).shape == (1, 5, 25)
    assert agent.critic.weights[0].shape == (2, 4, 16)  # K critics in one [K, in, out] weight per layer
    rng = np.random.default_rng(0)
    for _ in range(12):
        o = rng.normal(size=(1, 3)).astype(np.float32)
        agent.observe(o, agent.act(o), np.ones(1), o, np.zeros(1), np.zeros(1))
    before = agent.critic.weights[-1].detach().clone()
    info = agent.update()
    assert {"losses/critic_loss", "losses/actor_loss", "charts/alpha"} <= set(info)
    assert not torch.equal(before, agent.critic.weights[-1])


@pytest.mark.parametrize("values, message", [
    ({"agent": "sac"}, "agent 'sac' takes Q critics"),
    ({"critic": "twin_q"}, "agent 'tqc' takes quantile critics"),
    ({"top_quantiles_to_drop_per_net": 25}, "top_quantiles_to_drop_per_net must lie in"),
    ({"grad_comp": "sac"}, "use grad_comp=tqc"),
])
def test_the_agent_refuses_what_would_break_its_loss(values, message, build):
    """Bug caught: SAC's loss fed [K, B, N] atoms (it would broadcast them into a wrong loss, or fail mid-run), a
    truncation that keeps nothing, or a loss that cannot take the drop count (a TypeError at the first update)."""
    with pytest.raises(ConfigError, match=message):
        build("tqc_pendulum", **values)


def test_sets_follow_the_zoo():
    cheetah, hopper = sets["tqc_halfcheetah_bullet"](), sets["tqc_hopper_bullet"]()
    assert cheetah.time_feature and cheetah.model == "gsde_actor" and cheetah.log_std_init == -3.0
    assert (cheetah.train_freq, cheetah.gradient_steps, cheetah.lr, cheetah.hidden_sizes) == (8, 8, 7.3e-4,
                                                                                            [400, 300])
    assert (cheetah.top_quantiles_to_drop_per_net, hopper.top_quantiles_to_drop_per_net) == (2, 5)
    assert hopper.lr_decay and not cheetah.lr_decay
    assert (cheetah.num_quantiles, cheetah.num_critics) == (25, 2)


# ---------------------------------------------------------------------------------------------------- train.py
def test_tqc_pendulum_trains_checkpoints_and_resumes(tmp_path, train_cli):
    out = tmp_path / "run"
    args = ("--hparams", "tqc_pendulum", "--output_dir", str(out), "--eval_episodes", "1", "--hparam_override",
            "learning_starts=100,train_freq=50,gradient_steps=4,buffer_size=1000,batch_size=32,hidden_sizes=[32,32],"
            "eval_interval=0,checkpoint_interval=150,log_interval=150,max_episode_steps=50")
    res = train_cli(*args, "--train_steps", "300")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 300
    assert "critic_loss" in (out / "progress.csv").read_text()
    res = train_cli(*args, "--train_steps", "450")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step 300" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 450
