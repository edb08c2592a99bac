"""Atari through ale-py's own vector env (`ale_py.AtariVectorEnv`), whose C++ threads run the DeepMind
preprocessing (Mnih et al. 2015; Machado et al. 2018): frame skip with a max-pool of the last two frames, grayscale
84x84, frame stack, no-op starts, FIRE on reset and the 108,000-frame time limit.

Two id styles, with their own semantics: `PongNoFrameskip-v4` (no sticky actions) and `ALE/Pong-v5` (sticky actions
with probability 0.25). `AtariVecEnv` adds what a learner and a reader of scores both need on top:
- rewards are clipped here, not in C++, so the unclipped game score is still known (`info["raw_reward"]`);
- `terminal_on_life_loss` ends the learning episode on a lost life while the game goes on (OpenAI baselines'
  EpisodicLifeEnv): the step is `terminated`, and its true next observation is the continuing one;
- `info["game_over"]` marks the end of a whole game (every life, or the time limit), the unit of the score users
  know; `info["game_score"]` and `info["game_length"]` hold that game's unclipped score and agent steps;
- same-step autoreset: an env whose game ended is reset in the same step, its last observation in
  `info["final_obs"]` (for a life loss, the continuing observation), as the project's sync envs do.

`render_mode="rgb_array"` steps a twin env in lockstep (same game, seed and actions, full-size colour frames, no
stack): the emulator is deterministic given the seed, so the twin plays the same episode and its frames are the
video.
"""

from __future__ import annotations

import difflib
import os
import re

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from rl.envs.family import EnvFamily
from rl.errors import ConfigError
from rl.registry import envs, snake_case

ID_PATTERNS = {"v4": re.compile(r"^(?P<game>[A-Z][A-Za-z0-9]*)NoFrameskip-v4$"),
               "v5": re.compile(r"^ALE/(?P<game>[A-Z][A-Za-z0-9]*)-v5$")}
STICKY = {"v4": 0.0, "v5": 0.25}  # repeat_action_probability of each id style
FRAMES_PER_EPISODE = 108_000  # 30 minutes of play at 60 frames/s: the standard evaluation limit


def parse_atari_id(env_id: str) -> tuple[str, str] | None:
    """(ROM name, "v4" or "v5") for an Atari id, None for any other id."""
    for version, pattern in ID_PATTERNS.items():
        match = pattern.match(env_id)
        if match:
            return snake_case(match["game"]), version
    return None


def is_atari_id(env_id: str) -> bool:
    return parse_atari_id(env_id) is not None


def check_atari_id(env_id: str) -> tuple[str, str]:
    """The (ROM, version) of an Atari id, or a ConfigError saying which ids and games are valid."""
    from ale_py import roms

    parsed = parse_atari_id(env_id)
    if parsed is None:
        raise ConfigError(f"env_type=atari needs an Atari id such as 'PongNoFrameskip-v4' or 'ALE/Pong-v5', "
                          f"got {env_id!r}")
    game, _ = parsed
    valid = roms.get_all_rom_ids()
    if game not in valid:
        close = difflib.get_close_matches(game, valid, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "ale-py ships 100+ games"
        raise ConfigError(f"unknown Atari game {game!r} in {env_id!r}: {hint} (ids are CamelCase: "
                          f"MsPacmanNoFrameskip-v4, ALE/MsPacman-v5)")
    return parsed


class AtariVecEnv(VectorEnv):
    """`num_envs` games stepped together by ale-py's C++ threads; see the module docstring for the semantics."""

    def __init__(self, env_id: str, num_envs: int, *, frame_skip: int = 4, frame_stack: int = 4, noop_max: int = 30,
                 sticky_actions: float = -1.0, full_action_space: bool = False, terminal_on_life_loss: bool = False,
                 reward_clipping: bool = True, fire_reset: bool = True, max_episode_steps: int = 0,
                 env_threads: int = 0, render_mode: str | None = None):
        from ale_py import AtariVectorEnv

        game, version = check_atari_id(env_id)
        if render_mode not in (None, "rgb_array", "human"):
            raise ConfigError(f"atari envs render rgb_array or human, not {render_mode!r}")
        sticky = STICKY[version] if sticky_actions < 0 else sticky_actions
        frames = max_episode_steps * frame_skip if max_episode_steps > 0 else FRAMES_PER_EPISODE
        threads = env_threads if env_threads > 0 else min(num_envs, os.cpu_count() or 1)
        common = dict(frameskip=frame_skip, noop_max=noop_max, repeat_action_probability=sticky,
                      full_action_space=full_action_space, use_fire_reset=fire_reset,
                      max_num_frames_per_episode=frames, reward_clipping=False, autoreset_mode="SameStep")
        self.ale = AtariVectorEnv(game, num_envs, stack_num=frame_stack, num_threads=threads, **common)
        self.twin = None
        if render_mode is not None:  # full-size colour frames of the same episodes, for video or a window
            self.twin = AtariVectorEnv(game, num_envs, stack_num=1, img_height=210, img_width=160, grayscale=False,
                                       num_threads=1, **common)
        self.env_id, self.game, self.render_mode, self.sticky = env_id, game, render_mode, sticky
        self.num_envs = num_envs
        self.single_observation_space = self.ale.single_observation_space
        self.single_action_space = self.ale.single_action_space
        self.observation_space = self.ale.observation_space
        self.action_space = self.ale.action_space
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_fps": max(1, 60 // frame_skip),
                         "render_modes": ["rgb_array", "human"]}
        self.terminal_on_life_loss, self.reward_clipping = terminal_on_life_loss, reward_clipping
        self.lives = np.zeros(num_envs, np.int64)
        self.score = np.zeros(num_envs, np.float64)
        self.length = np.zeros(num_envs, np.int64)
        self._frames: np.ndarray | None = None
        self._window = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.ale.reset(seed=seed, options=options)
        if self.twin is not None:
            self._frames = self.twin.reset(seed=seed, options=options)[0][:, 0]
        self.lives[:] = info["lives"]
        self.score[:] = 0.0
        self.length[:] = 0
        return obs, info

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.int64)
        obs, raw, terminated, truncated, info = self.ale.step(actions)
        if self.twin is not None:
            self._frames = self.twin.step(actions)[0][:, 0]
        raw = raw.astype(np.float32)
        game_over = terminated | truncated
        self.score += raw
        self.length += 1
        info = dict(info)
        info["raw_reward"], info["game_over"] = raw, game_over
        if game_over.any():
            info["game_score"] = np.where(game_over, self.score, 0.0)
            info["game_length"] = np.where(game_over, self.length, 0)
            self.score[game_over] = 0.0
            self.length[game_over] = 0
        if self.terminal_on_life_loss:
            lost_life = (info["lives"] < self.lives) & ~game_over
            terminated = terminated | lost_life
        self.lives[:] = info["lives"]
        done = terminated | truncated
        if done.any():  # the true next observation of every finished learning episode
            final = obs.copy()
            if game_over.any():
                final[game_over] = info["final_obs"][game_over]
            info["final_obs"] = final
        reward = np.clip(raw, -1.0, 1.0) if self.reward_clipping else raw
        return obs, reward, terminated, truncated, info

    def render(self):
        """The frames of every env (rgb_array), or a window showing env 0 (human)."""
        if self._frames is None:
            raise ConfigError("this atari env was made without render_mode; make it with render_mode='rgb_array'")
        if self.render_mode == "human":
            self._show(self._frames[0])
            return None
        return self._frames

    def call(self, name: str, *args, **kwargs):
        """`call("render")`: one frame per env, as gymnasium's sync vector env returns them."""
        if name != "render":
            raise AttributeError(f"AtariVecEnv.call supports 'render' only, not {name!r}")
        frames = self.render()
        return tuple(frames) if frames is not None else (None,) * self.num_envs

    def _show(self, frame: np.ndarray) -> None:
        try:
            import pygame
        except ImportError:
            raise ConfigError("--render on an atari env needs pygame (pip install pygame); or use --record_video "
                              "True to write mp4 files") from None
        if self._window is None:
            pygame.init()
            self._window = pygame.display.set_mode((frame.shape[1] * 3, frame.shape[0] * 3))
        surface = pygame.surfarray.make_surface(frame.swapaxes(0, 1))
        self._window.blit(pygame.transform.scale(surface, self._window.get_size()), (0, 0))
        pygame.event.pump()
        pygame.display.flip()

    def close(self, **kwargs):
        self.ale.close()
        if self.twin is not None:
            self.twin.close()


@envs.register("atari")
class AtariFamily(EnvFamily):
    """ale-py's vector env for `hp.env` (`PongNoFrameskip-v4`, `ALE/Pong-v5` ...) with the atari settings;
    `vector_mode` does not apply (the C++ threads are the engine). An Atari id selects this family whatever the
    set's `env_type`."""

    @classmethod
    def claims(cls, env_id: str) -> bool:
        return is_atari_id(env_id)

    @classmethod
    def check(cls, hp) -> None:
        check_atari_id(hp.env)

    @classmethod
    def make(cls, hp, num_envs: int, render_mode: str | None = None, vector_mode: str | None = None):
        return AtariVecEnv(hp.env, num_envs, frame_skip=hp.frame_skip, frame_stack=hp.frame_stack,
                           noop_max=hp.noop_max, sticky_actions=hp.sticky_actions,
                           full_action_space=hp.full_action_space, terminal_on_life_loss=hp.terminal_on_life_loss,
                           reward_clipping=hp.reward_clipping, fire_reset=hp.fire_reset,
                           max_episode_steps=hp.max_episode_steps, env_threads=hp.env_threads,
                           render_mode=render_mode)
