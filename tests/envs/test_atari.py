"""The atari family: ale-py's vector env with same-step autoreset, life loss, clipped rewards and whole-game scores."""

import numpy as np
import pytest

from rl.envs.atari import AtariVecEnv, check_atari_id, parse_atari_id
from rl.errors import ConfigError


def play(env, steps, seed=0, rng_seed=0):
    """Random play; yields (prev_obs, step result) pairs."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(rng_seed)
    for _ in range(steps):
        result = env.step(rng.integers(0, env.single_action_space.n, env.num_envs))
        yield obs, result
        obs = result[0]


def test_ids_parse_with_their_own_semantics_and_bad_ids_say_what_is_valid():
    assert parse_atari_id("PongNoFrameskip-v4") == ("pong", "v4")
    assert parse_atari_id("ALE/MsPacman-v5") == ("ms_pacman", "v5")
    assert parse_atari_id("CartPole-v1") is None
    with pytest.raises(ConfigError, match="did you mean 'breakout'"):
        check_atari_id("BreakoutXNoFrameskip-v4")
    with pytest.raises(ConfigError, match="PongNoFrameskip-v4"):
        check_atari_id("Pong-v0")
    sticky = AtariVecEnv("ALE/Pong-v5", 1, env_threads=1)
    assert sticky.sticky == 0.25
    assert AtariVecEnv("PongNoFrameskip-v4", 1, env_threads=1).sticky == 0.0
    assert AtariVecEnv("ALE/Pong-v5", 1, env_threads=1, sticky_actions=0.0).sticky == 0.0


def test_shapes_dtypes_and_clipped_rewards():
    env = AtariVecEnv("PongNoFrameskip-v4", 3, env_threads=1)
    assert env.single_observation_space.shape == (4, 84, 84)
    assert env.single_action_space.n == 6
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    for _, (obs, rewards, terminated, truncated, _info) in play(env, 200):
        assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
        assert rewards.dtype == np.float32 and rewards.shape == (3,)
        assert terminated.dtype == truncated.dtype == np.bool_
        assert np.all(np.abs(rewards) <= 1.0)
    env.close()


def test_same_step_final_observations_continue_the_stack_and_the_reset_starts_a_new_one():
    """Breakout with random actions loses lives within ~50 steps: life losses (game goes on) and game overs
    (reset in the same step) both happen."""
    env = AtariVecEnv("BreakoutNoFrameskip-v4", 2, terminal_on_life_loss=True, env_threads=1)
    life_losses = game_overs = 0
    for prev, (obs, _, terminated, truncated, info) in play(env, 1500, seed=3):
        done = terminated | truncated
        for i in range(2):
            if done[i]:
                final = info["final_obs"][i]
                assert np.array_equal(final[:3], prev[i, 1:]), "the final observation continues the episode"
            if done[i] and info["game_over"][i]:
                game_overs += 1
                assert not obs[i, :3].any() and obs[i, 3].any(), "a reset stack is zero-padded: a new game"
            elif done[i]:
                life_losses += 1
                assert np.array_equal(info["final_obs"][i], obs[i]), "a lost life does not reset: same obs"
            else:
                assert np.array_equal(obs[i, :3], prev[i, 1:])
    assert life_losses >= 8 and game_overs >= 2


def test_game_scores_are_unclipped_and_span_every_life():
    """Space Invaders pays 5-30 points an alien: the game score is the unclipped sum over all 3 lives, while the
    agent learns from clipped rewards in one episode per life."""
    env = AtariVecEnv("SpaceInvadersNoFrameskip-v4", 2, terminal_on_life_loss=True, env_threads=1)
    raw_sum, clipped_sum, episodes = np.zeros(2), np.zeros(2), np.zeros(2, int)
    games = []
    for _, (_, rewards, terminated, truncated, info) in play(env, 3000, seed=1):
        raw_sum += info["raw_reward"]
        clipped_sum += rewards
        episodes += terminated | truncated
        for i in np.flatnonzero(info["game_over"]):
            assert info["game_score"][i] == raw_sum[i]
            games.append((info["game_score"][i], clipped_sum[i], episodes[i]))
            raw_sum[i] = clipped_sum[i] = episodes[i] = 0
    assert len(games) >= 2
    for score, clipped, lives in games:
        assert lives == 3, "one learning episode per life"
        assert score > clipped > 0


def test_seeding_gives_identical_episodes():
    def trace(seed):
        env = AtariVecEnv("ALE/Breakout-v5", 2, env_threads=1)  # v5: sticky actions draw from the seeded RNG too
        out = [(o.copy(), r.copy()) for _, (o, r, *_) in play(env, 150, seed=seed)]
        env.close()
        return out

    a, b, c = trace(7), trace(7), trace(8)
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c))


def test_rgb_twin_plays_the_same_episodes():
    """Video frames come from a colour twin stepped with the same seed and actions: the emulator is deterministic,
    so the twin's rewards and game ends match the learner's env step for step (sticky actions included)."""
    env = AtariVecEnv("ALE/Breakout-v5", 2, render_mode="rgb_array", env_threads=1)
    env.reset(seed=5)
    rng = np.random.default_rng(0)
    frames, ends = set(), 0
    for _ in range(600):
        actions = rng.integers(0, 4, 2)
        _, r, term, trunc, _ = env.ale.step(actions)
        _, r2, term2, trunc2, _ = env.twin.step(actions)
        assert np.array_equal(r, r2) and np.array_equal(term | trunc, term2 | trunc2)
        ends += int((term | trunc).sum())
    assert ends >= 2
    env.reset(seed=5)
    for _ in range(100):
        env.step(rng.integers(0, 4, 2))
        rendered = env.call("render")
        assert len(rendered) == 2 and rendered[0].shape == (210, 160, 3) and rendered[0].dtype == np.uint8
        frames.add(rendered[0].tobytes())
    assert len(frames) > 20
