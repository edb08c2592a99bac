"""The same-step numpy CartPole: gymnasium's physics, finished envs reset in the step that ends them."""

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from rl.envs import is_same_step, make_gym_vec


def test_native_cartpole_is_same_step_and_matches_single_env_physics():
    env = make_gym_vec("CartPole-v1", 4, vector_mode="native")
    assert is_same_step(env)
    obs, _ = env.reset(seed=3)
    single = CartPoleEnv()
    single.reset(seed=0)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        actions = rng.integers(0, 2, size=4)
        expected = []
        for i in range(4):  # the same step taken by gymnasium's single-env CartPole from each env's state
            single.state = obs[i].astype(np.float64)
            single.steps_beyond_terminated = None
            expected.append(single.step(int(actions[i]))[:3])
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        final = np.where(done[:, None], info["final_obs"], next_obs) if done.any() else next_obs
        for i in range(4):
            np.testing.assert_allclose(final[i], expected[i][0], rtol=1e-5, atol=1e-6)
            assert rewards[i] == expected[i][1] == 1.0
            assert terminated[i] == expected[i][2]
        if done.any():
            ends += int(done.sum())
            assert info["_final_obs"].tolist() == done.tolist()
            assert np.all(np.abs(next_obs[done]) <= 0.05)  # a fresh episode's first observation
        obs = next_obs
    assert ends > 10  # random actions end episodes every ~20 steps


def test_native_cartpole_truncates_at_the_time_limit():
    env = make_gym_vec("CartPole-v1", 2, vector_mode="native")
    env.reset(seed=0)
    assert env.unwrapped.max_episode_steps == gym.spec("CartPole-v1").max_episode_steps == 500
    env.unwrapped.max_episode_steps = 3  # reach the limit before the pole can fall
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step(np.array([0, 1]))
    assert truncated.all() and not terminated.any()
    _, _, _, truncated, _ = env.step(np.array([0, 1]))
    assert not truncated.any()  # the step counters restarted with the episodes


def test_native_cartpole_step_equals_gymnasiums_vector_step_float_for_float():
    """Our step is gymnasium's CartPoleVectorEnv.step plus the same-step reset: from the same states and actions it
    must give the same observations (bit for bit, final observations where episodes end), terminations and
    truncations."""
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    ours = make_gym_vec("CartPole-v1", 16, vector_mode="native").unwrapped
    ours.reset(seed=1)
    theirs = CartPoleVectorEnv(num_envs=16)
    theirs.reset(seed=1)
    rng = np.random.default_rng(1)
    compared = 0
    for _ in range(400):
        theirs.state, theirs.steps = ours.state.copy(), ours.steps.copy()
        theirs.prev_done[:] = False
        actions = rng.integers(0, 2, size=16)
        expected = theirs.step(actions)
        obs, rewards, terminated, truncated, info = ours.step(actions)
        final = np.where((terminated | truncated)[:, None], info["final_obs"], obs) if info else obs
        np.testing.assert_array_equal(final, expected[0])
        for got, want in zip((rewards, terminated, truncated), expected[1:4]):
            np.testing.assert_array_equal(got, want)
        compared += 16
    assert compared == 6400
