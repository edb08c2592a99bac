"""Batches from several collection workers, each owning a block of env rows of one memory (`add(..., rows=...)`):
interleaved in any order, they store exactly what one vector env over all the rows stores in full batches: n-step
windows, frame-stack continuity and every memory kind keyed by the rows given, not by the batch's row positions."""

import gymnasium as gym
import numpy as np
import pytest

from hparams.dqn import dqn_cartpole
from rl.memory.mixed import MixedMemory
from rl.memory.n_step import NStepWindow
from rl.memory.replay import ReplayMemory
from rl.registry import memory

G = 0.9
WORKERS, PER_WORKER = 2, 2
ENVS = WORKERS * PER_WORKER
FRAME = (6, 5)  # small frames: the frame store takes any (H, W)
STACK = 4


def vector_steps(steps: int, seed: int = 0) -> list[tuple]:
    """`steps` full batches of ENVS envs with observations [1] unique to each (env, step); episodes end (terminated
    or truncated) at different random times in each env, more often in the higher envs."""
    rng = np.random.default_rng(seed)
    end_rate = np.linspace(0.05, 0.25, ENVS)
    out = []
    for t in range(steps):
        obs = (np.arange(ENVS) * 10_000 + t).astype(np.float32).reshape(-1, 1)
        done = rng.random(ENVS) < end_rate
        terminated = done & (rng.random(ENVS) < 0.6)
        truncated = done & ~terminated
        out.append((obs, rng.integers(0, 3, ENVS), rng.normal(size=ENVS).astype(np.float32), obs + 0.5,
                    terminated, truncated))
    return out


def frame_steps(steps: int, seed: int = 0) -> list[tuple]:
    """`steps` full batches of ENVS envs of uint8 frame stacks [STACK, *FRAME], as Atari wrappers build them: each
    step shifts in a new frame; an episode's end (terminated or truncated, same-step autoreset: next_obs is the final
    observation) is followed by a reset stack, zero-padded with one new frame; some steps are flagged terminated while
    the stack goes on (terminal_on_life_loss)."""
    rng = np.random.default_rng(seed)

    def frame():
        return rng.integers(1, 256, (1, *FRAME), dtype=np.uint8)

    def reset():
        return np.concatenate([np.zeros((STACK - 1, *FRAME), np.uint8), frame()])

    stacks = [reset() for _ in range(ENVS)]
    out = []
    for _ in range(steps):
        obs = np.stack(stacks)
        next_obs = np.stack([np.concatenate([s[1:], frame()]) for s in stacks])
        ended = rng.random(ENVS) < np.linspace(0.04, 0.15, ENVS)
        life_lost = ~ended & (rng.random(ENVS) < 0.05)
        terminated = (ended & (rng.random(ENVS) < 0.6)) | life_lost
        truncated = ended & ~terminated
        out.append((obs, rng.integers(0, 4, ENVS), rng.normal(size=ENVS).astype(np.float32), next_obs,
                    terminated, truncated))
        stacks = [reset() if ended[e] else next_obs[e] for e in range(ENVS)]
    return out


def block(step: tuple, worker: int) -> tuple:
    """Worker `worker`'s share of a full batch: its env rows."""
    return tuple(x[worker * PER_WORKER: (worker + 1) * PER_WORKER] for x in step)


def worker_rows(worker: int) -> np.ndarray:
    return np.arange(worker * PER_WORKER, (worker + 1) * PER_WORKER)


def feed_full(mem, steps: list[tuple]) -> None:
    for step in steps:
        mem.add(*step)


def feed_workers(mem, steps: list[tuple], seed: int | None = 0) -> None:
    """Each worker adds its rows of every step, in its own order; the workers' adds interleave at random (seed None:
    strictly alternating, worker 0 first)."""
    rng = None if seed is None else np.random.default_rng(seed)
    done = [0] * WORKERS
    turn = 0
    while min(done) < len(steps):
        if rng is None:
            w = turn % WORKERS
            turn += 1
        else:
            w = int(rng.choice([i for i in range(WORKERS) if done[i] < len(steps)]))
        mem.add(*block(steps[done[w]], w), rows=worker_rows(w))
        done[w] += 1


def items(mem: ReplayMemory) -> list[tuple]:
    """Every held transition as comparable values (frame stacks decoded to pixels), sorted."""
    idx = np.arange(mem.size)
    obs, next_obs = mem._pixels(mem.obs[idx]), mem._pixels(mem.next_obs[idx])
    return sorted((obs[i].tobytes(), next_obs[i].tobytes(), mem.actions[i].item(), mem.rewards[i].item(),
                   mem.terminated[i].item(), mem.truncated[i].item(), mem.discounts[i].item()) for i in idx)


def test_interleaved_workers_store_the_n_step_items_of_one_vector_env():
    steps = vector_steps(80)
    full = ReplayMemory(1000, (1,), np.float32, gamma=G, n_step=3)
    workers = ReplayMemory(1000, (1,), np.float32, gamma=G, n_step=3)
    feed_full(full, steps)
    feed_workers(workers, steps)
    assert full.size > 200 and items(workers) == items(full)
    assert np.unique(full.discounts[: full.size]) == pytest.approx([G ** 3, G ** 2, G])
    assert full.terminated[: full.size].any() and full.truncated[: full.size].any()
    # the windows still in flight and the episode ends last seen are each env's, row for row
    assert workers.window.num_envs == ENVS
    assert np.array_equal(workers.window.length, full.window.length) and full.window.length.any()
    assert np.array_equal(workers.window.prev_done, full.window.prev_done)
    for f in NStepWindow.FIELDS:
        for e in range(ENVS):
            k = full.window.length[e]
            assert np.array_equal(workers.window.buf[f][e, :k], full.window.buf[f][e, :k])


@pytest.mark.parametrize("n_step", [1, 3])
def test_interleaved_workers_share_a_frame_memory(n_step):
    steps = frame_steps(120)
    shape = (STACK, *FRAME)
    stacks = ReplayMemory(2000, shape, np.uint8, gamma=G, n_step=n_step)
    full = ReplayMemory(2000, shape, np.uint8, gamma=G, n_step=n_step, frames=True, num_envs=ENVS)
    workers = ReplayMemory(2000, shape, np.uint8, gamma=G, n_step=n_step, frames=True, num_envs=ENVS)
    feed_full(stacks, steps)
    feed_full(full, steps)
    feed_workers(workers, steps, seed=1)
    assert not workers._lost(np.arange(workers.size)).any()
    assert items(workers) == items(stacks) == items(full)
    # one frame per step where stacks go on: each worker's rows continue their own stacks, not the other worker's
    assert workers.store.next_id == full.store.next_id < 1.2 * ENVS * len(steps)
    # what is gathered and sampled is what was added: (obs, action) pairs, and next observations
    added = {(o.tobytes(), a.item()) for step in steps for o, a in zip(step[0], step[1])}
    finals = {n.tobytes() for step in steps for n in step[3]}
    for batch in (workers.gather(np.arange(workers.size)), workers.sample(64)):
        held = {(o.tobytes(), a.item()) for o, a in zip(batch.obs.numpy(), batch.actions.numpy())}
        assert held <= added and {n.tobytes() for n in batch.next_obs.numpy()} <= finals
        if n_step == 1 and len(batch.obs) == workers.size:
            assert held == added and len(held) == workers.size == ENVS * len(steps)


@pytest.mark.parametrize("kind", ["replay", "prioritized", "attentive", "queue"])
def test_every_memory_kind_takes_rows(kind):
    steps = vector_steps(60, seed=2)
    make = memory[kind]
    full, workers = (make(500, (1,), np.float32, gamma=G, seed=5, n_step=3, total_steps=1000) for _ in range(2))
    feed_full(full, steps)
    feed_workers(workers, steps, seed=None)  # strictly alternating: the same items in the same slots
    assert full.size > 100 and items(workers) == items(full)
    for f in ReplayMemory.FIELDS:
        assert np.array_equal(getattr(workers, f)[: full.size], getattr(full, f)[: full.size]), f
    a, b = full.sample(32), workers.sample(32)
    assert all(x is None and y is None or np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))


def test_mixed_memory_passes_rows_to_every_buffer():
    hp = dqn_cartpole()
    hp.update({"memory": "mixed", "n_step": 3, "num_envs": ENVS, "gamma": G,
               "replay_parameters": '[{"type": "queue", "capacity": 8, "sample_ratio": 0.5}, '
                                    '{"type": "prioritized", "capacity": 500, "sample_ratio": 0.5}]'})
    space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    full, workers = (MixedMemory.build(hp, space, gym.spaces.Discrete(3), seed=0) for _ in range(2))
    steps = vector_steps(60, seed=3)
    feed_full(full, steps)
    feed_workers(workers, steps, seed=None)
    for a, b in zip(full.buffers, workers.buffers):
        assert a.size > 0 and items(b) == items(a)
    x, y = full.sample(16), workers.sample(16)
    assert all(np.array_equal(u.numpy(), v.numpy()) for u, v in zip(x, y))
    # and in any order, the prioritized buffer holds the same items
    shuffled = MixedMemory.build(hp, space, gym.spaces.Discrete(3), seed=0)
    feed_workers(shuffled, steps, seed=4)
    assert items(shuffled.buffers[1]) == items(full.buffers[1])


def test_windows_grow_to_the_largest_row_and_bad_rows_are_refused():
    w = NStepWindow(2, G)
    one = (np.zeros((1, 1), np.float32), np.zeros(1), np.ones(1), np.zeros((1, 1), np.float32), np.zeros(1, bool),
           np.zeros(1, bool))
    assert w.add(*one, rows=[3]) is None and w.num_envs == 4 and w.length.tolist() == [0, 0, 0, 1]
    w.add(*one, rows=np.array([1]))
    assert w.length.tolist() == [0, 1, 0, 1]
    two = tuple(np.concatenate([x, x]) for x in one)
    ends = (*two[:4], np.array([True, False]), np.zeros(2, bool))
    w.add(*ends, rows=[0, 1])  # env 0's episode ends: its window leaves, and it is marked as just ended
    assert w.length.tolist() == [0, 1, 0, 1] and w.prev_done.tolist() == [True, False, False, False]
    w.add(*ends, rows=[3, 2])  # another worker's rows: env 0's mark stays
    assert w.length.tolist() == [0, 1, 1, 0] and w.prev_done.tolist() == [True, False, False, True]
    for bad in ([0, 0], [0], [-1, 2], [0.0, 1.0]):
        with pytest.raises(ValueError, match="rows must be"):
            w.add(*two, rows=bad)
    mem = ReplayMemory(10, (STACK, *FRAME), np.uint8, frames=True, num_envs=2)
    stack = np.zeros((1, STACK, *FRAME), np.uint8)
    with pytest.raises(ValueError, match="sized for 2 envs got env row 2"):
        mem.add(stack, np.zeros(1), np.ones(1), stack, np.zeros(1, bool), np.zeros(1, bool), rows=[2])
