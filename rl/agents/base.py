"""The batched agent interface (Acme's select_action/observe/update; ChainerRL's batch_act/batch_observe).

The loop calls, for N envs at once (act and observe in rl/collector.py, update in rl/trainer.py's `SingleProcess.step`):
    actions = agent.act(obs)                          # numpy [N, ...]
    agent.observe(obs, actions, rewards, next_obs, terminated, truncated)
    diagnostics = agent.update()                      # {} unless the algorithm's schedule says to learn
`next_obs` is the true successor of `obs` (the final observation where an episode ended), so no transition spans
two episodes.

The learner interface (what `rl/parallel` and checkpoints use; nothing else of an agent is touched from outside):
    networks(), optimizers()      declared once; `state_dict`/`load_state_dict` are written from them here
    acting_state() / load_acting_state(state)
                                  what a collection worker needs to act: the networks' weights, the normalisation
                                  statistics and the step count, as one flat dict of tensors (published by the learner)
    take_statistics() / merge_statistics(stats)
                                  the normalisation moments a worker gathered since it last shipped; the learner merges
Experience made elsewhere (the Scheme's learner, rl/parallel/learner.py, only dispatches shipments):
    count_env_steps(n)            env steps this agent did not observe (a rows worker's, a gradient group's peers')
    join_collective(collective)   a synchronous gradient group: every gradient averaged across it
The Scheme's roles are mixins an agent inherits where it takes part (rl/agents/scheme.py): RowSource (take_rows,
close_rows: replay rows), RolloutSource (take_rollout, rollout_ready, ship_rollout, rollout_layout: on-policy
rollouts) and GradientSource (minibatch_gradients, gradient_size, apply_gradients: gradient workers); each works out
its family's learner and worker settings (`SchemeSettings`).
`updates` counts the learner's updates (a rollout's epochs, a replay training phase, an applied gradient): the unit
of the policy version and of the policy lag.
"""

from __future__ import annotations

import abc
import contextlib
import re

import numpy as np
import torch
from torch import nn

from rl.envs.observations import to_tensor
from rl.errors import ConfigError

PRECISIONS = ("fp32", "bf16")


DEVICE_NAME = re.compile(r"cpu|auto|mps|cuda(:\d+)?")
DEVICE_NAMES = "cpu, auto (cuda where torch finds a GPU), cuda, cuda:N (the GPU of index N) or mps"


def is_device_name(name: str) -> bool:
    """A device name this code runs on, on some machine (`device`'s bound, hparams/base.py; what this machine has is
    `check_device`'s question)."""
    return DEVICE_NAME.fullmatch(name) is not None


def devices_here() -> list[str]:
    """The device names this process can use."""
    here = ["cpu", "auto"]
    if torch.cuda.is_available():
        here += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        here.append("mps")
    return here


def check_device(name: str) -> None:
    """One ConfigError line where this process cannot use device `name`, naming why and the names valid here: torch
    would otherwise fail at the first tensor moved, deep in a traceback (or, built without CUDA, at an assert)."""
    if name in ("cpu", "auto"):
        return
    here = devices_here()
    if name in here:
        return
    valid = f"valid here: {', '.join(here)}"
    version = torch.__version__.split("+")[0]
    if not is_device_name(name):
        raise ConfigError(f"device={name}: not a device name (valid: {DEVICE_NAMES}); {valid}")
    if name.startswith("cuda") and torch.version.cuda is None:
        raise ConfigError(f"device={name}: this torch {version} build has no CUDA (built for CPU); {valid}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name}: torch {version} (built for CUDA {torch.version.cuda}) finds no GPU (no "
                          f"NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them); {valid}")
    if name.startswith("cuda"):
        raise ConfigError(f"device={name}: torch finds {torch.cuda.device_count()} GPU(s); {valid}")
    raise ConfigError(f"device={name}: torch {version} finds no {name} device here; {valid}")


def resolve_device(name: str) -> str:
    """`auto` is CUDA when torch sees a GPU, else the CPU; any other name must be a device this process has
    (`check_device`)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    check_device(name)
    return name


def cpu_has_bf16() -> bool:
    """True when this CPU runs bfloat16 natively (AVX-512 BF16 or AMX); elsewhere bf16 is emulated, slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class Agent(abc.ABC):
    """Base class: counts environment steps and moves observations to torch."""

    # settings read afresh at every update, which `train.py --control` may change while the run goes on (rl/control.py)
    LIVE_SETTINGS: tuple[str, ...] = ()

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        self.hp, self.obs_space, self.action_space = hp, obs_space, action_space
        self.num_envs, self.seed = num_envs, seed
        hp.device = resolve_device(hp.device)  # the memories and models read it too
        self.device = torch.device(hp.device)
        self.env_steps = self.grad_steps = self.updates = 0
        self.collective = None  # set by join_collective (synchronous gradient workers)
        if hp.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {hp.precision!r}: valid: {', '.join(PRECISIONS)}")
        # bf16 where the hardware has it (CUDA; CPUs with AVX-512 BF16/AMX); emulated bf16 would only be slower
        self.bf16 = hp.precision == "bf16" and (self.device.type == "cuda" or cpu_has_bf16())

    def autocast(self):
        """The forward passes and losses run under bfloat16 autocast with `precision=bf16` (weights, optimizer state
        and gradients stay fp32); a no-op otherwise."""
        return torch.autocast(self.device.type, torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Observations on the agent's device; a Dict or Tuple space's as a DictObs (rl/envs/observations.py)."""
        return to_tensor(obs, self.device)

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

    # ------------------------------------------------------------------ the learner interface
    COUNTERS = ("env_steps", "grad_steps", "updates")

    @abc.abstractmethod
    def networks(self) -> dict[str, nn.Module]:
        """Every network whose weights are state (target networks too), by a stable name."""

    @abc.abstractmethod
    def optimizers(self) -> dict:
        """Every optimizer (rl.agents.flat_adam.FlatAdam), by a stable name."""

    def normalizers(self) -> dict:
        """Running statistics that acting updates (rl.agents.normalize.RunningMeanStd), by name."""
        return {}

    def extra_state(self) -> dict:
        """What else a resumed run needs (random generators, exploration state), as a dict."""
        return {}

    def load_extra_state(self, state: dict) -> None:  # noqa: B027 - optional hook
        """Restore `extra_state`; receives the whole state dict."""

    def change_settings(self, values: dict) -> None:
        """New values for some of `LIVE_SETTINGS`, between updates (train.py --control)."""
        unknown = [k for k in values if k not in self.LIVE_SETTINGS]
        if unknown:
            raise ConfigError(f"{', '.join(unknown)} cannot change while {self.hp.agent} runs; settings that can: "
                              f"{', '.join(self.LIVE_SETTINGS)}")
        for key, value in values.items():
            setattr(self.hp, key, value)
        self.settings_changed(values)

    def settings_changed(self, values: dict) -> None:  # noqa: B027 - optional hook
        """Push changed settings into the parts built from them (an optimizer's learning rate)."""

    def in_effect(self, keys) -> dict:
        """The values `keys` have where they are used now: a scheduled rate is the optimizer's, not its base (an
        agent with a schedule overrides this); --control prints them before and after a change."""
        return {k: getattr(self.hp, k) for k in keys}

    def state_dict(self, include_memory: bool = True) -> dict:
        """Everything needed to continue exactly: weights, optimizers, counters, statistics, RNG, memory."""
        state = {"networks": {k: m.state_dict() for k, m in self.networks().items()},
                 "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
                 "statistics": {k: s.state_dict() for k, s in self.normalizers().items()},
                 "counters": {k: getattr(self, k) for k in self.COUNTERS}, **self.extra_state()}
        if include_memory and getattr(self, "memory", None) is not None:
            state["memory"] = self.memory.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        for k, m in self.networks().items():
            m.load_state_dict(state["networks"][k])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        for k, s in self.normalizers().items():
            s.load_state_dict(state["statistics"][k])
        for k in self.COUNTERS:
            setattr(self, k, int(state["counters"][k]))
        if "memory" in state and getattr(self, "memory", None) is not None:
            self.memory.load_state_dict(state["memory"])
        self.load_extra_state(state)
        self.statistics_changed()

    def acting_state(self) -> dict[str, torch.Tensor]:
        """The networks' weights, the normalisation statistics and the step count (exploration schedules follow
        the learner's), flattened to names -> CPU tensors of fixed shapes (a transport can preallocate them)."""
        flat = {f"net.{k}.{key}": t.detach().cpu() for k, m in self.networks().items()
                for key, t in m.state_dict().items()}
        for k, s in self.normalizers().items():
            flat[f"stat.{k}.mean"] = torch.from_numpy(np.array(s.mean, np.float64))
            flat[f"stat.{k}.var"] = torch.from_numpy(np.array(s.var, np.float64))
            flat[f"stat.{k}.count"] = torch.tensor(float(s.count), dtype=torch.float64)
        flat["env_steps"] = torch.tensor(self.env_steps, dtype=torch.int64)
        return flat

    def load_acting_state(self, flat: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for k, m in self.networks().items():
                for key, t in m.state_dict().items():
                    t.copy_(flat[f"net.{k}.{key}"])
        for k, s in self.normalizers().items():
            s.mean, s.var = flat[f"stat.{k}.mean"].numpy().copy(), flat[f"stat.{k}.var"].numpy().copy()
            s.count = float(flat[f"stat.{k}.count"])
        self.statistics_changed()
        self.env_steps = int(flat["env_steps"])

    def take_statistics(self) -> dict:
        """The normalisation moments gathered since the last call (a worker ships them with its data)."""
        return {k: f for k, s in self.normalizers().items() if (f := s.take_fresh()) is not None}

    def merge_statistics(self, stats: dict) -> None:
        """Fold a worker's `take_statistics()` into this agent's statistics (the learner's)."""
        normalizers = self.normalizers()
        for k, f in stats.items():
            normalizers[k].merge(f["mean"], f["var"], f["count"])
        if stats:
            self.statistics_changed()

    def statistics_changed(self) -> None:  # noqa: B027 - optional hook
        """Called after the normalisation statistics changed from outside (cached forms re-read them)."""

    # ------------------------------------------------------------------ experience made elsewhere (rl/parallel)
    def count_env_steps(self, steps: int) -> None:
        """Count env steps this agent did not observe itself: a rows worker's transitions (shipped, not stored
        here), or those of a synchronous gradient group's peers. Exploration and learning schedules follow."""
        self.env_steps += steps

    def join_collective(self, collective) -> None:
        """Synchronous gradient workers: every gradient is averaged across the group before it is clipped, and
        every per-step decision that depends on data (early stops) is agreed through `collective.mean`."""
        self.collective = collective
        for opt in self.optimizers().values():
            opt.reduce_grad = collective.average

    def reset_episodes(self, done: np.ndarray) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called with the mask of envs whose episode ended (recurrent agents reset their state)."""

    def eval_state(self, num_envs: int):
        """A fresh evaluation state for `num_envs` episodes (recurrent agents: their initial hidden state)."""
        return None

    def act_eval(self, obs: np.ndarray, state):
        """Deterministic actions for evaluation, threading the evaluation state through."""
        return self.act(obs, deterministic=True), state
