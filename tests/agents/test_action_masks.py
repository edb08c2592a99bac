"""Action masks honoured by the discrete agents: exploration that never picks an illegal action (epsilon-greedy, the
DQN agent's warm-up and evaluation), the masks stored with the transitions and obeyed again at update time (PPO's
log-probabilities, DQN's bootstrap), and the PickItems sets learning with the mask and failing without it."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.act_select.epsilon_greedy import EpsilonGreedy, Greedy, uniform_actions
from rl.envs import make_env
from rl.grad_comp.td import td_targets
from rl.registry import hparams as sets
from rl.trainer import build_agent

MASK = np.array([[0, 1, 0, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 1]], bool)
BEST_ILLEGAL = np.array([[9.0, 1, 9, 2, 9], [0, 9, 9, 9, 9], [9, 9, 9, 9, 1]])  # the unmasked argmax is illegal


def test_epsilon_greedy_never_picks_an_illegal_action_and_explores_the_legal_ones_uniformly():
    """Greedy steps take the best legal action, random ones a uniform legal one. Bugs caught: exploration drawing
    from every action (an illegal pick ends a PickItems episode), the argmax taken over illegal actions, a random
    draw that favours some legal actions."""
    for eps in (0.0, 1.0, 0.5):
        explore = EpsilonGreedy(5, total_steps=1, fraction=1.0, initial_eps=eps, final_eps=eps, seed=0)
        rows = np.tile(MASK, (2000, 1))
        actions = explore(np.tile(BEST_ILLEGAL, (2000, 1)), step=0, mask=rows)
        assert rows[np.arange(len(rows)), actions].all(), eps
        if eps == 0.0:
            assert (actions.reshape(-1, 3) == [3, 0, 4]).all()
    assert (Greedy()(torch.tensor(BEST_ILLEGAL), mask=MASK) == [3, 0, 4]).all()
    counts = np.bincount(uniform_actions(np.random.default_rng(0), 5, 30_000, np.tile(MASK[:1], (30_000, 1))),
                         minlength=5)
    assert counts[[0, 2, 4]].sum() == 0 and abs(counts[1] - counts[3]) < 600  # 15,000 each, sd 87


def _rollout_masks_obeyed(agent, env, steps: int) -> None:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        actions = agent.act(obs)
        assert obs["action_mask"][np.arange(len(actions)), actions].all()
        obs, *_ = env.step(actions)


def test_the_dqn_agent_acts_legally_in_warm_up_exploration_and_evaluation():
    """Bugs caught: the warm-up's uniform actions (SB3's) or epsilon-greedy's random ones drawn from every action;
    evaluation's epsilon (eval_deterministic=false) ignoring the mask."""
    hp = sets["dqn_masked_pick_items"]()
    hp.eval_deterministic = False
    env = make_env(hp, num_envs=4, vector_mode="sync")
    agent = build_agent(hp, env, 0)
    for env_steps in (0, hp.learning_starts + 1, hp.train_steps):  # warm-up, epsilon near 1, epsilon at its end
        agent.env_steps = env_steps
        _rollout_masks_obeyed(agent, env, 200)
    obs, _ = env.reset(seed=1)
    for _ in range(200):
        actions = agent.act(obs, deterministic=True)
        assert obs["action_mask"][np.arange(4), actions].all()
        obs, *_ = env.step(actions)
    env.close()


def test_the_dqn_bootstrap_takes_the_max_over_the_next_legal_actions():
    """Transitions observed by the agent keep each next observation's mask in the replay memory, and the TD target
    bootstraps from the best legal next action. Bug caught (the mask dropped at update time): the Q network's values
    left unmasked, which acting alone would not show (epsilon-greedy masks its own argmax), and the target taking an
    illegal action's value."""
    hp = sets["dqn_masked_pick_items"]()
    env = make_env(hp, num_envs=2, vector_mode="sync")
    agent = build_agent(hp, env, 0)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        actions = agent.act(obs)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        agent.observe(obs, actions, rewards, next_obs, terminated, truncated)
        obs = next_obs
    env.close()
    batch = agent.memory.sample(64)
    mask = batch.next_obs["action_mask"].bool()
    assert (~mask).any(-1).all()  # every stored next observation forbids some items
    with torch.no_grad():
        raw = agent.target.head(agent.target.torso(batch.next_obs))
        expected = batch.rewards + batch.discounts * (1 - batch.terminated) * raw.masked_fill(~mask, -1e30).amax(1)
        assert not torch.allclose(raw.amax(1), raw.masked_fill(~mask, -1e30).amax(1))  # the mask matters here
        torch.testing.assert_close(td_targets(agent.target, batch), expected)


def test_ppo_reads_the_stored_masks_again_at_update_time(filled_rollout):
    """A rollout of the masked set holds the masks it was acted under: before any gradient step the update's
    log-probabilities equal the acting ones (PPO's ratio 1) and its entropies are at most log(4), the 4 items on
    offer. Bug caught: the mask applied when acting only (the ratio of a legal action then differs from 1 and the
    entropy counts the 16 items)."""
    agent = filled_rollout("ppo_masked_pick_items")
    memory = agent.memory
    stored = memory.obs["action_mask"].bool()
    assert stored.gather(-1, memory.actions.long().unsqueeze(-1)).all()  # every stored action was legal
    batch = next(memory.minibatches(len(memory), torch.Generator().manual_seed(0)))
    with torch.no_grad():
        log_probs, entropy, _ = agent._evaluate(batch, need_entropy=True)
    torch.testing.assert_close(log_probs, batch.old_log_probs, atol=1e-5, rtol=0)
    assert (entropy <= np.log(4) + 1e-5).all()


def eval_return(train_cli, folder, name: str, steps: int, seed: int, *overrides: str) -> float:
    result = train_cli("--hparams", name, "--output_dir", str(folder), "--train_steps", str(steps), "--seed",
                       str(seed), *overrides, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((folder / "eval.json").read_text())["mean_return"]


@pytest.mark.learning
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ppo_learns_pick_items_with_its_mask(train_cli, tmp_path, seed):
    """PickItems tells its offer only through the mask: PPO with it passes 4.9 (a random legal policy scores 4.0, the
    best one 5.6) in 20k steps: seeds 1-3 gave 5.35, 5.20, 5.27."""
    assert eval_return(train_cli, tmp_path / "run", "ppo_masked_pick_items", 20_000, seed) >= 4.9


@pytest.mark.learning
def test_ppo_without_the_mask_fails_pick_items(train_cli, tmp_path):
    """The same set with `mask_actions=false`: illegal picks end the episodes, and the return stays under 1."""
    assert eval_return(train_cli, tmp_path / "run", "ppo_masked_pick_items", 20_000, 1,
                       "--hparam_override", "mask_actions=false") < 1.0


@pytest.mark.learning
@pytest.mark.parametrize("seed", [1, 2])
def test_dqn_learns_pick_items_with_its_mask(train_cli, tmp_path, seed):
    """DQN's masked exploration and bootstrap: past 5.0 in 12k steps (seeds 1-3 gave 5.31, 5.32, 5.33)."""
    assert eval_return(train_cli, tmp_path / "run", "dqn_masked_pick_items", 12_000, seed) >= 5.0


def test_a_mask_that_does_not_fit_the_actions_is_one_line():
    """Bugs caught: a mask of the wrong width reaching the network (a shape error at the first step), a mask for a Box
    action space silently ignored."""
    from rl.envs.spaces import check_observation_space
    from rl.errors import ConfigError

    space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "action_mask": gym.spaces.MultiBinary(4)})
    check_observation_space("E-v0", space, gym.spaces.Discrete(4))
    with pytest.raises(ConfigError, match="the action mask has 4 flags for 5 actions"):
        check_observation_space("E-v0", space, gym.spaces.Discrete(5))
    with pytest.raises(ConfigError, match="masks are honoured for Discrete action spaces"):
        check_observation_space("E-v0", space, gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(ConfigError, match="an action mask is a MultiBinary"):
        check_observation_space("E-v0", gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (3,)),
                                                         "action_mask": gym.spaces.Discrete(4)}))
