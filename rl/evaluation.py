"""Evaluation: greedy episodes on fresh envs (`evaluate`), mp4 videos or a window (`record_videos`), and evaluation
mode (`test`: restore a checkpoint, play `test_episodes`, write `eval.json`).

Evaluation keeps its own short loop rather than the Collector: it scores whole games (on Atari a game spans several
lives) and stores nothing.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rl import signals
from rl.checkpoint import write_json
from rl.collector import env_error
from rl.envs import make_env
from rl.envs.episode_stats import game_over, game_rewards
from rl.video import env_fps, write_mp4


@dataclass
class Games:
    """What evaluation episodes gave: each one's return, its length in agent steps, and whether the time limit ended
    it (a greedy Atari policy that never serves again after a lost life plays on until the limit)."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    time_limited: list[bool] = field(default_factory=list)

    def summary(self) -> dict:
        """eval.json's fields beside the returns."""
        return {"lengths": self.lengths, "time_limited": int(sum(self.time_limited))}


def play(agent, hp, episodes: int, seed: int, stopped=lambda: False) -> Games | None:
    """`episodes` evaluation episodes (greedy unless `eval_deterministic` is off), one per env of a fresh vector env;
    on envs that report games (Atari) an episode is a whole game and its return the unclipped score. None when
    `stopped()` turns true before they end (a stop signal during training: a greedy Atari game can last 27,000 agent
    steps, minutes, and a pod's grace period after SIGTERM is 30 s by default, 120 s in k8s/)."""
    games = Games()
    while len(games.returns) < episodes:
        n = min(episodes - len(games.returns), 32)
        env = make_env(hp, num_envs=n, vector_mode="sync")
        obs, _ = _reset(env, agent, seed + len(games.returns))
        state = agent.eval_state(n)
        total, length = np.zeros(n), np.zeros(n, int)
        running, limited = np.ones(n, bool), np.zeros(n, bool)
        while running.any():
            if stopped():
                env.close()
                return None
            actions, state = agent.act_eval(obs, state)
            obs, rewards, terminated, truncated, info = _step(env, agent, actions)
            total += game_rewards(rewards, info) * running
            length += running
            over = game_over(terminated, truncated, info) & running
            limited |= over & np.asarray(truncated, bool) & ~np.asarray(terminated, bool)
            running &= ~over
        env.close()
        games.returns += total.tolist()
        games.lengths += length.tolist()
        games.time_limited += limited.tolist()
    return games


def _reset(env, agent, seed: int):
    try:
        return env.reset(seed=seed)
    except Exception as exc:  # noqa: BLE001 - the env's own failure: one line (rl/collector.py)
        env.close()
        raise env_error(env, agent, exc, "reset") from exc


def _step(env, agent, actions):
    try:
        return env.step(actions)
    except Exception as exc:  # noqa: BLE001 - the env's own failure: one line (rl/collector.py)
        env.close()
        raise env_error(env, agent, exc) from exc


def evaluate(agent, hp, episodes: int, seed: int) -> list[float]:
    """The returns of `play`'s episodes."""
    return play(agent, hp, episodes, seed).returns


def record_videos(agent, hp, episodes: int, folder: Path, seed: int, human: bool = False) -> tuple[list[float], list]:
    """Play `episodes` greedy episodes in one env, rendering to mp4 files (or to a window when `human`)."""
    env = make_env(hp, num_envs=1, render_mode="human" if human else "rgb_array", vector_mode="sync")
    returns, paths = [], []
    for ep in range(episodes):
        obs, _ = _reset(env, agent, seed + ep)
        state, done, total, frames = agent.eval_state(1), False, 0.0, []
        while not done:
            if not human:
                frames.append(env.call("render")[0])
            actions, state = agent.act_eval(obs, state)
            obs, reward, terminated, truncated, info = _step(env, agent, actions)
            total += float(game_rewards(reward, info)[0])
            done = bool(game_over(terminated, truncated, info)[0])
        returns.append(total)
        if not human:
            paths.append(write_mp4(folder / f"episode_{ep:03d}.mp4", frames, env_fps(env)))
    env.close()
    return returns, paths


def summarize(returns: list[float], **extra) -> dict:
    return {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
            "episodes": len(returns), "returns": [float(r) for r in returns], **extra}


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def test(hp, output_dir: Path, render: bool = False, record_video: bool = False, checkpoint: str = "latest") -> dict:
    """Restore a checkpoint (`checkpoint`: "latest", "best" or a file path), play `hp.test_episodes` greedy
    episodes, write `eval.json`. The memory is not restored: evaluation does not use it."""
    with signals.phase("during evaluation (--training False): nothing to save; run the same command to evaluate "
                       "again."):
        return _test(hp, output_dir, render, record_video, checkpoint)


def _test(hp, output_dir: Path, render: bool, record_video: bool, checkpoint: str) -> dict:
    from rl.trainer import evaluation_agent

    agent, path = evaluation_agent(hp, output_dir, checkpoint)
    videos: list = []
    human = render and has_display()
    if render and not human:
        print("--render: no display found (DISPLAY/WAYLAND_DISPLAY unset); use --record_video True to write mp4 "
              "files instead", file=sys.stderr)
    extra: dict = {}
    if human or record_video:
        returns, videos = record_videos(agent, hp, hp.test_episodes, output_dir / "videos", hp.seed + 20_000, human)
    else:
        games = play(agent, hp, hp.test_episodes, seed=hp.seed + 20_000)
        returns, extra = games.returns, games.summary()
    result = summarize(returns, checkpoint=checkpoint, checkpoint_path=str(path), env_steps=agent.env_steps,
                       videos=[str(p) for p in videos], **extra)
    write_json(output_dir / "eval.json", {"mode": "test", **result}, indent=2)
    print(f"evaluation of step {agent.env_steps} over {len(returns)} episodes: "
          f"{result['mean_return']:.2f} ± {result['std_return']:.2f} ({checkpoint} checkpoint: {path})")
    if videos:
        print(f"videos: {output_dir / 'videos'}")
    return result
