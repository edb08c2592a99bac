"""Evaluation episodes (rl/evaluation.py's `play`): each one's length and whether the time limit ended it, so that an
evaluation cut short by the limit (a greedy Atari policy that never serves again) shows in eval.json and progress.csv
instead of passing for a finished game."""

from __future__ import annotations

from rl.envs import make_env
from rl.evaluation import play
from rl.registry import hparams as sets
from rl.trainer import build_agent


def agent_for(hp):
    env = make_env(hp)
    try:
        return build_agent(hp, env, seed=0)
    finally:
        env.close()


def test_games_cut_by_the_time_limit_are_counted_and_their_lengths_kept():
    hp = sets["dqn_cartpole"]()
    hp.max_episode_steps = 7  # an untrained CartPole policy lasts at least 8 steps: every episode hits the limit
    games = play(agent_for(hp), hp, episodes=3, seed=0)
    assert games.lengths == [7, 7, 7] and games.returns == [7.0, 7.0, 7.0]  # reward 1 per step
    assert games.time_limited == [True, True, True]
    assert games.summary() == {"lengths": [7, 7, 7], "time_limited": 3}


def test_games_that_end_on_their_own_are_not_counted_as_time_limited():
    hp = sets["dqn_cartpole"]()  # the id's own limit, 500 steps: an untrained policy falls long before
    games = play(agent_for(hp), hp, episodes=3, seed=0)
    assert games.time_limited == [False, False, False]
    assert games.lengths == [int(r) for r in games.returns] and max(games.lengths) < 500
