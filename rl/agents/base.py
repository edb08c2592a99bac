"""The batched agent interface (Acme's select_action/observe/update; ChainerRL's batch_act/batch_observe).

The loop in `rl/run.py` calls, for N envs at once:
    actions = agent.act(obs)                          # numpy [N, ...]
    agent.observe(obs, actions, rewards, next_obs, terminated, truncated)
    diagnostics = agent.update()                      # {} unless the algorithm's schedule says to learn
`next_obs` is the true successor of `obs` (the final observation where an episode ended), so no transition spans
two episodes. `state_dict` holds everything a resumed run needs: networks, optimizers, counters, RNG, memory.
"""

from __future__ import annotations

import abc
import contextlib

import numpy as np
import torch

from rl.errors import ConfigError

PRECISIONS = ("fp32", "bf16")


def resolve_device(name: str) -> str:
    """`auto` is CUDA when torch sees a GPU, else the CPU; any other name is torch's."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def cpu_has_bf16() -> bool:
    """True when this CPU runs bfloat16 natively (AVX-512 BF16 or AMX); elsewhere bf16 is emulated, slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class Agent(abc.ABC):
    """Base class: counts environment steps and moves observations to torch."""

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        self.hp, self.obs_space, self.action_space = hp, obs_space, action_space
        self.num_envs, self.seed = num_envs, seed
        hp.device = resolve_device(hp.device)  # the memories and models read it too
        self.device = torch.device(hp.device)
        self.env_steps = 0
        if hp.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {hp.precision!r}: valid: {', '.join(PRECISIONS)}")
        # bf16 where the hardware has it (CUDA; CPUs with AVX-512 BF16/AMX); emulated bf16 would only be slower
        self.bf16 = hp.precision == "bf16" and (self.device.type == "cuda" or cpu_has_bf16())

    def autocast(self):
        """The forward passes and losses run under bfloat16 autocast with `precision=bf16` (weights, optimizer state
        and gradients stay fp32); a no-op otherwise."""
        return torch.autocast(self.device.type, torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(obs)).to(self.device)

    @abc.abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Actions for a batch of observations; `deterministic` for evaluation."""

    @abc.abstractmethod
    def observe(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Record a batch of transitions and advance the step counter. Replay agents also take `rows`: the env rows
        of the batch's transitions, where the batches of several collection workers share one memory."""

    @abc.abstractmethod
    def update(self) -> dict:
        """Learn if the schedule says so; return diagnostics (namespaced names -> numbers or tensors)."""

    @abc.abstractmethod
    def state_dict(self, include_memory: bool = True) -> dict:
        """Everything needed to continue exactly: weights, optimizers, counters, RNG, memory."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""

    def reset_episodes(self, done: np.ndarray) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called with the mask of envs whose episode ended (recurrent agents reset their state)."""

    def eval_state(self, num_envs: int):
        """A fresh evaluation state for `num_envs` episodes (recurrent agents: their initial hidden state)."""
        return None

    def act_eval(self, obs: np.ndarray, state):
        """Deterministic actions for evaluation, threading the evaluation state through."""
        return self.act(obs, deterministic=True), state
