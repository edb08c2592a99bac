"""`close_rows`: when a collection worker restarts or one of its shipments is dropped, its env rows' next
transitions start new episodes. Closing the rows stores their pending partial n-step transitions as truncated (the
return of the steps taken, gamma^k, bootstrapping from the last next_obs they sent), empties their windows and makes
the frame store start their next stacks afresh, so no stored transition mixes two episodes; other rows go on."""

import gymnasium as gym
import numpy as np
import pytest

from hparams.dqn import dqn_cartpole
from rl.memory.mixed import MixedMemory
from rl.memory.n_step import NStepWindow
from rl.memory.replay import ReplayMemory
from rl.registry import memory

G = 0.5
N = 3
ENVS = 4
CLOSED, OPEN = np.array([2, 3]), np.array([0, 1])
NEW = 1000.0  # the reward of every step of the new episodes: a return holding one shows it
STACK, FRAME = 4, (6, 5)


def batch(rows: np.ndarray, t: int, episode: int, reward, truncated: bool = False) -> tuple:
    """Step t of `episode` in env rows `rows`: obs row*10_000 + episode*1_000 + t -> + 1, reward `reward`."""
    obs = (rows * 10_000 + episode * 1_000 + t).astype(np.float32).reshape(-1, 1)
    k = len(rows)
    return (obs, np.full(k, t), np.full(k, reward, np.float32), obs + 1, np.zeros(k, bool), np.full(k, truncated))


def held(mem: ReplayMemory) -> list[tuple]:
    """The stored transitions: (obs, return, next_obs, terminated, truncated, discount), sorted."""
    i = np.arange(mem.size)
    return sorted(zip(mem.obs[i, 0].tolist(), mem.rewards[i].tolist(), mem.next_obs[i, 0].tolist(),
                      mem.terminated[i].tolist(), mem.truncated[i].tolist(), mem.discounts[i].tolist()))


def run(mem, close: bool) -> None:
    """Two steps of episode 0 in every row (rewards 1, 2); then, with `close`, rows 2 and 3 are closed (without: the
    second step is flagged truncated, which is what closing must amount to); then every row adds 4 more steps, rows
    2 and 3 from a new episode 1 whose rewards are NEW, rows 0 and 1 going on with episode 0."""
    for t, reward in enumerate((1.0, 2.0)):
        mem.add(*batch(OPEN, t, 0, reward), rows=OPEN)
        mem.add(*batch(CLOSED, t, 0, reward, truncated=t == 1 and not close), rows=CLOSED)
    if close:
        mem.close_rows(CLOSED)
    for t in range(2, 6):
        mem.add(*batch(OPEN, t, 0, 3.0), rows=OPEN)
        mem.add(*batch(CLOSED, t - 2, 1, NEW), rows=CLOSED)


def first_episode(mem) -> dict[float, tuple]:
    """The stored transitions of rows 2 and 3 that start in episode 0, by obs."""
    out = {}
    for item in held(mem):
        row, rest = divmod(item[0], 10_000)
        if row in CLOSED and rest < 1_000:
            assert item[0] not in out, "a transition stored twice"
            out[item[0]] = item
    return out


@pytest.mark.parametrize("kind", ["replay", "prioritized", "attentive", "queue"])
def test_closed_rows_store_their_partial_n_step_transitions_as_truncated(kind):
    mem = memory[kind](100, (1,), np.float32, gamma=G, n_step=N, total_steps=100, num_envs=ENVS)
    for t, reward in enumerate((1.0, 2.0)):
        mem.add(*batch(OPEN, t, 0, reward), rows=OPEN)
        mem.add(*batch(CLOSED, t, 0, reward), rows=CLOSED)
    assert mem.size == 0 and mem.window.length.tolist() == [2, 2, 2, 2]
    mem.close_rows(CLOSED)
    # rows 2 and 3 ended at their second step: both of their steps are stored now, the others keep their windows
    assert mem.window.length.tolist() == [2, 2, 0, 0] and mem.size == 4
    for row in CLOSED:
        start = row * 10_000
        assert [x for x in held(mem) if x[0] // 10_000 == row] == [
            (start, 1 + G * 2, start + 2, 0.0, 1.0, G ** 2),  # 2 steps taken: return r0 + g r1, discount g^2
            (start + 1, 2.0, start + 2, 0.0, 1.0, G),  # bootstrapping from the last next_obs sent, not terminated
        ]
    if kind == "prioritized":
        assert mem.tree.get(np.arange(mem.size)).tolist() == [mem.max_priority] * mem.size
    for t in range(2, 6):
        mem.add(*batch(OPEN, t, 0, 3.0), rows=OPEN)
        mem.add(*batch(CLOSED, t - 2, 1, NEW), rows=CLOSED)
    # nothing added after the close entered a transition of the first episode, and none mixes the two
    before = first_episode(mem)
    assert sorted(before) == [20_000, 20_001, 30_000, 30_001]
    for item in held(mem):
        if item[0] % 10_000 < 1_000:
            assert item[1] < NEW and item[2] % 10_000 < 1_000  # no new reward, no new observation
        else:
            assert item[1] >= NEW and item[2] % 10_000 >= 1_000
    # the new episode's windows started empty: its n-step transitions are whole ones
    new = [x for x in held(mem) if x[0] % 10_000 >= 1_000]
    assert len(new) == 2 * 2 and all(x[1:] == (NEW * (1 + G + G * G), x[0] + 3, 0.0, 0.0, G ** 3) for x in new)
    # the rows not closed went on: their first items hold 3 steps of the episode that started before the close
    kept = [x for x in held(mem) if x[0] % 10_000 == 0 and x[0] // 10_000 in OPEN]
    assert kept == [(r * 10_000, 1 + G * 2 + G * G * 3, r * 10_000 + 3, 0.0, 0.0, G ** 3) for r in OPEN]


@pytest.mark.parametrize("kind", ["replay", "prioritized", "attentive", "queue"])
def test_closing_rows_amounts_to_truncating_their_last_step(kind):
    closed, truncated = (memory[kind](100, (1,), np.float32, gamma=G, n_step=N, num_envs=ENVS) for _ in range(2))
    run(closed, close=True)
    run(truncated, close=False)
    assert closed.size == truncated.size > 10 and held(closed) == held(truncated)
    assert np.array_equal(closed.window.length, truncated.window.length)


def test_mixed_memory_closes_the_rows_of_every_buffer():
    hp = dqn_cartpole()
    hp.update({"memory": "mixed", "n_step": N, "num_envs": ENVS, "gamma": G,
               "replay_parameters": '[{"type": "queue", "capacity": 50, "sample_ratio": 0.5}, '
                                    '{"type": "prioritized", "capacity": 50, "sample_ratio": 0.5}]'})
    space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    closed, truncated = (MixedMemory.build(hp, space, gym.spaces.Discrete(3), seed=0) for _ in range(2))
    run(closed, close=True)
    run(truncated, close=False)
    for a, b in zip(closed.buffers, truncated.buffers):
        assert a.size == b.size > 10 and held(a) == held(b)
        assert sorted(first_episode(a)) == [20_000, 20_001, 30_000, 30_001]


def test_the_window_closes_only_rows_with_pending_steps():
    w = NStepWindow(N, G)
    assert w.close([0, 5]) is None  # nothing seen yet
    w.add(*batch(np.array([1, 4]), 0, 0, 1.0), rows=[1, 4])
    w.add(*batch(np.array([0]), 0, 0, 1.0, truncated=True), rows=[0])  # row 0's episode ended: nothing pending
    assert w.length.tolist() == [0, 1, 0, 0, 1] and w.prev_done[0]
    assert w.close([0, 2, 9]) is None and w.length.tolist() == [0, 1, 0, 0, 1] and not w.prev_done[0]
    out = w.close(np.array([4]))
    assert out["obs"][:, 0].tolist() == [40_000] and out["truncated"].tolist() == [True]
    assert w.length.tolist() == [0, 1, 0, 0, 0] and w.close([4]) is None


def test_close_rows_needs_explicit_rows():
    mem = ReplayMemory(10, (1,), np.float32, gamma=G, n_step=N)
    mem.add(*batch(CLOSED, 0, 0, 1.0), rows=CLOSED)
    for bad in (None, 2, [[2, 3]], [2, 2], [-1], [2.0]):
        with pytest.raises(ValueError, match="rows"):
            mem.close_rows(bad)
    assert mem.window.length.tolist() == [0, 0, 1, 1] and mem.size == 0
    mem.close_rows([])  # no rows: nothing happens
    assert mem.window.length.tolist() == [0, 0, 1, 1] and mem.size == 0
    frames = ReplayMemory(10, (STACK, *FRAME), np.uint8, n_step=N, frames=True, num_envs=2)
    with pytest.raises(ValueError, match="sized for 2 envs got env row 2"):
        frames.close_rows([0, 2])


def test_one_step_memories_take_close_rows_as_a_no_op():
    mem = memory["prioritized"](10, (1,), np.float32, gamma=G, n_step=1)
    mem.add(*batch(CLOSED, 0, 0, 1.0), rows=CLOSED)
    mem.close_rows(CLOSED)
    mem.add(*batch(CLOSED, 0, 1, NEW), rows=CLOSED)
    assert held(mem) == [(20_000, 1.0, 20_001, 0.0, 0.0, G), (21_000, NEW, 21_001, 0.0, 0.0, G),
                         (30_000, 1.0, 30_001, 0.0, 0.0, G), (31_000, NEW, 31_001, 0.0, 0.0, G)]


def test_attentive_reference_drops_the_closed_rows():
    mem = memory["attentive"](10, (1,), np.float32, gamma=G, n_step=N)
    mem.add(*batch(OPEN, 0, 0, 1.0), rows=OPEN)
    mem.add(*batch(CLOSED, 0, 0, 1.0), rows=CLOSED)
    assert sorted(mem.reference[:, 0].tolist()) == [1, 10_001, 20_001, 30_001]
    mem.close_rows(CLOSED)
    assert sorted(mem.reference[:, 0].tolist()) == [1, 10_001]
    mem.close_rows(OPEN)
    assert mem.reference is None
    mem.add(*batch(OPEN, 1, 0, 1.0), rows=OPEN)
    assert sorted(mem.reference[:, 0].tolist()) == [2, 10_002]
    mem.set_reference(np.array([[7.0]], np.float32))  # the agent's own reference is not the rows'
    mem.close_rows(OPEN)
    assert mem.reference.tolist() == [[7.0]]


def stacks(rng, k: int) -> np.ndarray:
    return rng.integers(1, 256, (k, STACK, *FRAME), dtype=np.uint8)


@pytest.mark.parametrize("n_step", [1, N])
def test_closed_rows_start_fresh_frame_stacks(n_step):
    """After close_rows a row's next stack is written anew even where it equals the row's last next_obs (a worker
    that restarted from the same state, or sent the stack that followed a dropped shipment by chance); the rows not
    closed keep sharing frames with their previous stacks; everything decodes to what was added."""
    rng = np.random.default_rng(0)
    mem = ReplayMemory(100, (STACK, *FRAME), np.uint8, gamma=G, n_step=n_step, frames=True, num_envs=ENVS)
    ref = ReplayMemory(100, (STACK, *FRAME), np.uint8, gamma=G, n_step=n_step)  # whole stacks, truncating instead
    obs = {r: stacks(rng, 1)[0] for r in range(ENVS)}

    def step(rows, reward, closing=False):
        o = np.stack([obs[r] for r in rows])
        nxt = np.concatenate([o[:, 1:], stacks(rng, len(rows))[:, :1]], axis=1)
        args = (o, np.zeros(len(rows), np.int64), np.full(len(rows), reward, np.float32), nxt,
                np.zeros(len(rows), bool))
        mem.add(*args, np.zeros(len(rows), bool), rows=rows)
        ref.add(*args, np.full(len(rows), closing and n_step > 1), rows=rows)  # one-step items: stored already
        for r, s in zip(rows, nxt):
            obs[r] = s

    for t in range(2):
        step(OPEN, 1.0)
        step(CLOSED, 1.0, closing=t == 1)
    last = mem.store.last.copy()
    mem.close_rows(CLOSED)
    assert mem.store.has_last.tolist() == [True, True, False, False]
    if n_step == N:
        assert mem.window.length.tolist() == [2, 2, 0, 0]
    before = mem.store.next_id
    step(OPEN, 3.0)
    step(CLOSED, NEW)  # obs = the rows' last next_obs, yet a new episode's
    # rows 0 and 1 went on: one new frame each; rows 2 and 3 wrote their whole obs stack again (and next_obs' frame)
    assert mem.store.next_id - before == 2 * 1 + 2 * (STACK + 1)
    assert not set(mem.store.last[CLOSED].ravel()) & set(last[CLOSED].ravel())
    assert set(mem.store.last[OPEN, :-1].ravel()) <= set(last[OPEN].ravel())
    for _ in range(3):
        step(OPEN, 3.0)
        step(CLOSED, NEW)
    assert mem.size == ref.size > 10 and not mem._lost(np.arange(mem.size)).any()
    i = np.arange(mem.size)
    assert np.array_equal(mem._pixels(mem.obs[i]), ref.obs[i])
    assert np.array_equal(mem._pixels(mem.next_obs[i]), ref.next_obs[i])
    for f in ("rewards", "terminated", "truncated", "discounts"):
        assert np.array_equal(getattr(mem, f)[i], getattr(ref, f)[i]), f
