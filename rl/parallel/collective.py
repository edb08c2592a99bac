"""Synchronous gradient workers (`num_grad_workers` M > 1, `grad_communication=sync`): DPPO, and RAPID with
collection workers.

M processes (this one is rank 0, the others are forked from it) each run the whole training step on data of their
own: their own envs (or their own `--num_workers` collection workers), their own share of the batch. Every gradient
step averages the gradient across the M processes with one `torch.distributed` all-reduce (gloo on the CPU, NCCL
on GPUs) before clipping, so every process applies the same step to the same weights: one step on the union of
their batches. Rank 0 alone evaluates, logs and checkpoints; the others follow.

The all-reduce also carries two flags, "a process was asked to stop" and "a process reached train_steps", so every
process leaves the loop after the same gradient step; every other per-step decision that depends on a rank's own data
(PPO's `target_kl` early stop) and every statistic that must be the union's (advantage normalisation) goes through
`mean`, so the ranks agree and their collectives stay paired. Env steps count for the whole group: each process adds
its peers' steps (they take as many as it does).
"""

from __future__ import annotations

import datetime
import os
import signal
import socket

import torch
import torch.distributed as dist

from rl.agents.base import resolve_device
from rl.errors import ConfigError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class GradientGroup:
    """This process's place in the group: the all-reduce hook, the agreed stop, the group's step count."""

    def __init__(self, rank: int, world: int, address, device: str):
        """`address`: a port on this machine, or a torch.distributed init method (tcp://HOST:PORT of rank 0)."""
        backend = "nccl" if resolve_device(device).startswith("cuda") else "gloo"
        if backend == "nccl":  # one GPU a process where there are several ("cuda" then means this one)
            torch.cuda.set_device(rank % torch.cuda.device_count())
        init = address if isinstance(address, str) else f"tcp://127.0.0.1:{address}"
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(hours=6))  # rank 0 evaluates while the others wait
        self.rank, self.world = rank, world
        self.flags = torch.zeros(2)  # [stop asked, train_steps reached], summed across the group
        self.agreed = False
        self.buffers: dict[int, torch.Tensor] = {}

    def average(self, grad: torch.Tensor) -> None:
        """Average `grad` across the group in place; the flags ride along."""
        n = grad.numel()
        buf = self.buffers.get(id(grad))
        if buf is None:
            buf = self.buffers[id(grad)] = torch.empty(n + 2, dtype=grad.dtype, device=grad.device)
        buf[:n].copy_(grad)
        buf[n:].copy_(self.flags)
        dist.all_reduce(buf)
        grad.copy_(buf[:n]).div_(self.world)
        self.agreed = self.agreed or bool((buf[n:] > 0).any())

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of `x` over the group (a new tensor): what every rank decides from is the same."""
        out = x.detach().clone()
        dist.all_reduce(out)
        return out / self.world

    def join(self, agent) -> None:
        """Every process starts from rank 0's agent (weights, optimizer moments, counters, statistics: a resumed
        group stays one, and a rank on another machine needs no checkpoint), and averages its gradients from now
        on."""
        state = [agent.state_dict(include_memory=False) if self.rank == 0 else None]
        dist.broadcast_object_list(state, src=0)
        if self.rank:
            agent.load_state_dict(state[0])
        agent.join_collective(self)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class GroupTrainer:
    """Wraps a trainer (one process, or the Scheme's collection workers) for a member of the group."""

    def __init__(self, trainer, agent, group: GradientGroup, train_steps: int):
        self.trainer, self.agent, self.group, self.train_steps = trainer, agent, group, train_steps
        self.clock = trainer.clock
        self.stats = trainer.stats

    def step(self) -> dict:
        before = self.agent.env_steps
        diagnostics = self.trainer.step()
        self.agent.env_steps += (self.group.world - 1) * (self.agent.env_steps - before)
        return diagnostics

    def finished(self, signum: int) -> bool:
        """Only an all-reduce ends the loop, so every process leaves it after the same gradient step."""
        self.group.flags[0] = float(bool(signum))
        self.group.flags[1] = float(self.agent.env_steps >= self.train_steps)
        return self.group.agreed

    def close(self) -> None:
        self.trainer.close()


def launch(hp, follow) -> tuple[GradientGroup, list]:
    """Start ranks 1..M-1 (each runs `follow(rank, address)` and exits): forked processes, or Ray actors with
    `ray_address`; then join the group as rank 0."""
    import multiprocessing as mp

    if hp.grad_communication != "sync":
        raise ConfigError(f"unknown grad_communication {hp.grad_communication!r}: valid: sync, async")
    if hp.ray_address:
        from rl.parallel.transports.ray import launch_ranks

        address, children = launch_ranks(hp, follow, free_port())
        return GradientGroup(0, hp.num_grad_workers, address, hp.device), children
    port = free_port()
    context = mp.get_context("fork")
    children = []
    for rank in range(1, hp.num_grad_workers):
        p = context.Process(target=_follower, args=(follow, rank, port, os.getpid()), name=f"rl-grad-worker-{rank}")
        p.start()
        children.append(p)
    return GradientGroup(0, hp.num_grad_workers, port, hp.device), children


def _follower(follow, rank: int, port: int, parent_pid: int) -> None:
    from rl.parallel.transports.shm import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when the group stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent(parent_pid)
    follow(rank, port)
    os._exit(0)


def reap(children: list, timeout: float = 30.0) -> None:
    for p in children:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
