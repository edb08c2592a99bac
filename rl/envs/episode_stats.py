"""Return and length of every finished episode in a vector env, and their means over the last 100.

Some envs learn from episodes that are not what their users score: Atari clips rewards and may end a learning
episode at each lost life. Such an env reports whole games in its info (`game_over`, `raw_reward`, `game_score`,
`game_length`: rl/envs/atari.py); the statistics then also hold the game scores, and evaluation plays and scores whole
games (`game_rewards`, `game_over`).
"""

from __future__ import annotations

from collections import deque

import numpy as np


def game_rewards(rewards: np.ndarray, info: dict) -> np.ndarray:
    """The rewards a score adds up: unclipped where the env clips what the agent learns from."""
    return info.get("raw_reward", rewards)


def game_over(terminated: np.ndarray, truncated: np.ndarray, info: dict) -> np.ndarray:
    """Where a whole game ended: the env's own mark where a learning episode can be shorter (a lost life)."""
    return info.get("game_over", terminated | truncated)


class EpisodeStats:
    """Accumulates per-env rewards; a finished episode's return and length go into 100-long deques."""

    def __init__(self, num_envs: int, window: int = 100):
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0
        self.recent_scores: deque[float] = deque(maxlen=window)  # whole games, unclipped (envs that report them)
        self.recent_game_lengths: deque[int] = deque(maxlen=window)
        self.games = 0

    def update_games(self, info: dict) -> None:
        """Record the games that ended this step, where the env reports them (`game_score`)."""
        if "game_score" not in info:
            return
        for i in np.flatnonzero(info["game_over"]):
            self.recent_scores.append(float(info["game_score"][i]))
            self.recent_game_lengths.append(int(info["game_length"][i]))
            self.games += 1

    def update(self, rewards: np.ndarray, dones: np.ndarray, counted: np.ndarray | None = None) -> None:
        """`counted` masks out steps that are not part of an episode (next-step autoreset's reset step)."""
        if counted is None:
            self.returns += rewards
            self.lengths += 1
        else:
            self.returns += rewards * counted
            self.lengths += counted
        if dones.any():
            for i in np.flatnonzero(dones):
                self.recent_returns.append(float(self.returns[i]))
                self.recent_lengths.append(int(self.lengths[i]))
            self.episodes += int(dones.sum())
            self.returns[dones] = 0.0
            self.lengths[dones] = 0

    def since(self, reported: tuple[int, int]) -> tuple[dict, tuple[int, int]]:
        """The episodes and games that ended after `reported` = (episodes, games) had: a worker's shipment of them
        (`add_finished` on the learner's side), and the new count."""
        new_eps, new_games = self.episodes - reported[0], self.games - reported[1]

        def tail(window, n):
            return list(window)[len(window) - min(n, len(window)):]

        finished = {"returns": tail(self.recent_returns, new_eps), "lengths": tail(self.recent_lengths, new_eps),
                    "scores": tail(self.recent_scores, new_games),
                    "game_lengths": tail(self.recent_game_lengths, new_games)}
        return finished, (self.episodes, self.games)

    def add_finished(self, finished: dict) -> None:
        """Count episodes and games that ended elsewhere (a worker's `since`)."""
        self.recent_returns.extend(finished["returns"])
        self.recent_lengths.extend(finished["lengths"])
        self.episodes += len(finished["returns"])
        self.recent_scores.extend(finished["scores"])
        self.recent_game_lengths.extend(finished["game_lengths"])
        self.games += len(finished["scores"])

    # checkpoint keys of the windows (the keys older checkpoints used for the first two)
    WINDOWS = {"returns": "recent_returns", "lengths": "recent_lengths", "scores": "recent_scores",
               "game_lengths": "recent_game_lengths"}

    def state_dict(self) -> dict:
        return {key: list(getattr(self, name)) for key, name in self.WINDOWS.items()}

    def load_state_dict(self, state: dict) -> None:
        for key, name in self.WINDOWS.items():
            getattr(self, name).extend(state.get(key, []))

    def summary(self) -> dict:
        """`episode_*`: the learning episodes, with the rewards the agent learns from; `game_*`: whole games and
        their unclipped scores, for envs that report them."""
        out = {}
        if self.recent_returns:
            out.update({"charts/episode_return_mean": float(np.mean(self.recent_returns)),
                        "charts/episode_length_mean": float(np.mean(self.recent_lengths)),
                        "charts/episodes": self.episodes})
        if self.recent_scores:
            out.update({"charts/game_score_mean": float(np.mean(self.recent_scores)),
                        "charts/game_length_mean": float(np.mean(self.recent_game_lengths)),
                        "charts/games": self.games})
        return out
