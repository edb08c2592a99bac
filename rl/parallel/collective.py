"""Synchronous gradient workers (`num_grad_workers` M > 1, `grad_communication=sync`): DPPO, and RAPID with
collection workers.

M processes (rank 0 forks the others here, or starts them as Ray actors; or torchrun or Kubeflow's PyTorchJob started
all M, maybe on several machines, and each reads its place from the environment: `group_from_env`) each run the whole
training step on data of their own: their own envs (or their own `--num_workers` collection workers), their own share
of the batch. Every gradient step averages the gradient across the M processes with one `torch.distributed`
all-reduce (gloo on the CPU, NCCL on GPUs) before clipping, so every process applies the same step to the same
weights: one step on the union of their batches. Rank 0 alone evaluates, logs and checkpoints; the others follow
(with rank 0's settings and state, so a rank on another machine needs only the code and the run folder).

The all-reduce also carries three flags, "a process got SIGTERM", "a process got SIGINT" and "a process reached
train_steps", so every process leaves the loop after the same gradient step; every other per-step decision that
depends on a rank's own data (PPO's `target_kl` early stop) and every statistic that must be the union's (advantage
normalisation) goes through `mean`, so the ranks agree and their collectives stay paired. Env steps count for the
whole group: each process adds its peers' steps (they take as many as it does).

A stop signal on any rank (a drained node, an evicted pod: Kubernetes sends SIGTERM to that pod alone) thus stops
the whole group: rank 0 checkpoints (a rank > 0 also posts its stop to the group's store at once, so rank 0 gives up
an evaluation that the rank would otherwise wait out in its all-reduce, past the pod's grace period), and every
rank exits with 128 + the signal (143 for SIGTERM, on the ranks that did not get it too), a status that Kubeflow's
PyTorchJob retries (`restartPolicy: ExitCode` recreates a pod that failed with 128 or more; OnFailure restarts any
non-zero exit). A rank that exited 0 after a stop would stay Succeeded, and the recreated rank 0 would wait for it
alone. So the whole group is started again, and resumes.

A peer that dies (or says nothing for `group_timeout_s`) makes every surviving rank leave with one line and
EXIT_GROUP_LOST: the group cannot go on without it, and the last checkpoint is where a restarted group resumes.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rl.agents.base import resolve_device
from rl.errors import ConfigError, first_line

FLAGS = (signal.SIGTERM, signal.SIGINT, 0)  # what rides in every all-reduce: these signals, then train_steps reached
EXIT_GROUP_LOST = 129
"""Exit status of a rank whose group broke. At least 128, so Kubeflow's PyTorchJob with `restartPolicy: ExitCode`
retries the job (it resumes from the last checkpoint), while 2 (bad input, a ConfigError) is permanent."""


@dataclass(frozen=True)
class GroupEnv:
    """This process's place in a group that torchrun or Kubeflow's PyTorchJob started: the variables they set."""

    rank: int
    world: int
    local_rank: int  # this process's index on its machine: its GPU
    master: str  # MASTER_ADDR:MASTER_PORT, where rank 0's store meets the group

    def settle(self, hp) -> None:
        """The run becomes this group's synchronous gradient workers, one rank a process: what cannot be is a
        ConfigError."""
        started = f"this process is rank {self.rank} of WORLD_SIZE={self.world} (started by torchrun or PyTorchJob)"
        if hp.ray_address:
            raise ConfigError(f"ray_address {hp.ray_address!r} starts ranks as Ray actors, but {started}: unset "
                              f"--ray_address and RAY_ADDRESS, or start train.py once, without torchrun")
        if hp.grad_communication != "sync":
            raise ConfigError(f"grad_communication={hp.grad_communication!r}, but {started}, and such a group's "
                              f"ranks average their gradients every step: use grad_communication=sync")
        if hp.num_grad_workers != self.world:
            if self.rank == 0:
                print(f"num_grad_workers {hp.num_grad_workers} -> {self.world}: {started}", flush=True)
            hp.num_grad_workers = self.world


def group_from_env(environ) -> GroupEnv | None:
    """The group torchrun or PyTorchJob started this process in (WORLD_SIZE > 1), or None; a missing or malformed
    variable is a ConfigError naming it. PyTorchJob sets no LOCAL_RANK (one process a pod): it is then 0."""
    world = _variable(environ, "WORLD_SIZE", 1, None, "the number of processes in the group", default="1")
    if world == 1:
        return None
    rank = _variable(environ, "RANK", 0, world - 1, f"this process's rank in the group of WORLD_SIZE={world}")
    local_rank = _variable(environ, "LOCAL_RANK", 0, None, "this process's index on its machine", default="0")
    port = _variable(environ, "MASTER_PORT", 1, 65535, "the port where rank 0 meets the group")
    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        raise ConfigError(f"MASTER_ADDR is not set: WORLD_SIZE={world} needs the host name or address of rank 0 "
                          f"(torchrun and PyTorchJob set it)")
    if rank == 0 and environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and \
            int(environ.get("TORCHELASTIC_MAX_RESTARTS") or 0) > 0:
        print("warning: torchrun keeps its store across restarts, and a restarted group can read the last one's "
              "addresses and fail to form (pytorch/pytorch#135712): start torchrun with "
              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", file=sys.stderr, flush=True)
    return GroupEnv(rank, world, local_rank, f"{addr}:{port}")


def _variable(environ, name: str, low: int, high: int | None, what: str, default: str | None = None) -> int:
    valid = f"an integer {low}..{high}" if high is not None else f"an integer >= {low}"
    raw = environ.get(name, default)
    if raw is None:
        raise ConfigError(f"{name} is not set: it must be {valid}, {what} (torchrun and PyTorchJob set it)")
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise ConfigError(f"{name} must be {valid} ({what}), got {raw!r}")
    return value


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class GradientGroup:
    """This process's place in the group: the all-reduce hook, the agreed stop, the group's step count."""

    def __init__(self, rank: int, world: int, address, device: str, timeout_s: float = 1800.0,
                 local_rank: int | None = None):
        """`address`: a port on this machine, or a torch.distributed init method (tcp://HOST:PORT of rank 0, or env://
        for MASTER_ADDR and MASTER_PORT); `timeout_s`: how long a collective waits for the slowest rank (rank 0
        evaluates while the others wait); `local_rank`: this process's index on its machine (default: `rank`, all on
        this one)."""
        backend = "nccl" if resolve_device(device).startswith("cuda") else "gloo"
        if backend == "nccl":  # one GPU a process where there are several ("cuda" then means this one)
            torch.cuda.set_device((rank if local_rank is None else local_rank) % torch.cuda.device_count())
        init = address if isinstance(address, str) else f"tcp://127.0.0.1:{address}"
        self.rank, self.world = rank, world
        timeout = datetime.timedelta(seconds=timeout_s)
        with self.collective():  # the store init_process_group would meet at, kept: stops travel through it too
            store, _, _ = next(dist.rendezvous(init, rank, world, timeout=timeout))
            store.set_timeout(timeout)
            dist.init_process_group(backend, store=dist.PrefixStore("default_pg", store), rank=rank, world_size=world,
                                    timeout=timeout)
        self.stops = dist.PrefixStore("rl_stop", store)
        if rank == 0:  # a store that outlived an earlier group (a launcher's) holds no stop of that group's
            self.stops.delete_key("signum")
        self.looked_at = 0.0  # when rank 0 last looked for a stop in the store (peer_stopped)
        self.peer_signum = 0  # the stop a rank > 0 posted, once rank 0 has seen it
        self.flags = torch.zeros(len(FLAGS))  # [SIGTERM, SIGINT, train_steps reached], summed across the group
        self.agreed = False
        self.stop_signum = 0  # the stop signal some rank got, once an all-reduce carried it (0: none)
        self.buffers: dict[int, torch.Tensor] = {}

    def average(self, grad: torch.Tensor) -> None:
        """Average `grad` across the group in place; the flags ride along."""
        n = grad.numel()
        buf = self.buffers.get(id(grad))
        if buf is None:
            buf = self.buffers[id(grad)] = torch.empty(n + len(FLAGS), dtype=grad.dtype, device=grad.device)
        buf[:n].copy_(grad)
        buf[n:].copy_(self.flags)
        with self.collective():
            dist.all_reduce(buf)
        grad.copy_(buf[:n]).div_(self.world)
        seen = buf[n:].cpu()
        self.agreed = self.agreed or bool((seen > 0).any())
        if not self.stop_signum:
            self.stop_signum = next((int(sig) for sig, count in zip(FLAGS, seen, strict=False)
                                     if sig and count > 0), 0)

    def tell_stop(self, signum: int) -> None:
        """A rank > 0 got `signum`: post it to the store now (called from the signal watcher thread while this rank
        may wait in an all-reduce for rank 0), so rank 0 gives up an evaluation under way (`peer_stopped`). The stop
        itself still travels in the next all-reduce's flags."""
        self.stops.set("signum", str(int(signum)))

    def peer_stopped(self, every_s: float = 0.5) -> int:
        """The stop signal a rank > 0 posted (0: none); the store is asked at most every `every_s` seconds (rank 0,
        between the env steps of an evaluation)."""
        now = time.monotonic()
        if self.peer_signum or now - self.looked_at < every_s:  # a stop once seen stays seen
            return self.peer_signum
        self.looked_at = now
        try:
            self.peer_signum = int(self.stops.get("signum")) if self.stops.check(["signum"]) else 0
        except RuntimeError:  # the store's host is gone: the next all-reduce says so
            pass
        return self.peer_signum

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of `x` over the group (a new tensor): what every rank decides from is the same."""
        out = x.detach().clone()
        with self.collective():
            dist.all_reduce(out)
        return out / self.world

    def settings(self, hp):
        """Rank 0's settings, on every rank: a rank that torchrun or PyTorchJob started resolved its own (from its
        flags and its view of the run folder), and any difference would unpair the collectives."""
        box = [hp.to_dict() if self.rank == 0 else None]
        with self.collective():
            dist.broadcast_object_list(box, src=0)
        return hp.copy().update(box[0]) if self.rank else hp

    def join(self, agent) -> None:
        """Every process starts from rank 0's agent (weights, optimizer moments, counters, statistics: a resumed
        group stays one, and a rank on another machine needs no checkpoint), and averages its gradients from now
        on."""
        state = [agent.state_dict(include_memory=False) if self.rank == 0 else None]
        with self.collective():
            dist.broadcast_object_list(state, src=0)
        if self.rank:
            agent.load_state_dict(state[0])
        agent.join_collective(self)

    @contextmanager
    def collective(self):
        """A peer that died, or said nothing for the timeout, ends this process: one line, EXIT_GROUP_LOST. Gloo
        raises a plain RuntimeError, so only the group's own calls are guarded."""
        try:
            yield
        except RuntimeError as exc:
            raise SystemExit(lost(self.rank, exc)) from None

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


_explain_loss = None  # rank 0 with Ray rank actors: what one of them failed with (RankWatch.explain)


def lost(rank: int, exc: BaseException) -> int:
    """Say in one line that `rank` lost its group; EXIT_GROUP_LOST. Gloo's message starts with its source location
    and ends in advice for its own developers: the first sentence is kept. Where a rank actor failed (Ray), its own
    error is the line, and the exit status is a crash's (1), or bad input's (2): retrying the group would not help."""
    failure = _explain_loss() if _explain_loss is not None else None
    if failure is not None:
        print(failure[0], file=sys.stderr, flush=True)
        return failure[1]
    text = re.sub(r"^\[[^\]]*\]\s*", "", first_line(exc))
    print(f"error: rank {rank} lost its group ({text.split('. ')[0].rstrip('.')}); the job restarts the group from "
          f"the last checkpoint", file=sys.stderr, flush=True)
    return EXIT_GROUP_LOST


class GroupTrainer:
    """Wraps a trainer (one process, or the Scheme's collection workers) for a member of the group."""

    def __init__(self, trainer, agent, group: GradientGroup, train_steps: int):
        self.trainer, self.agent, self.group, self.train_steps = trainer, agent, group, train_steps
        self.clock = trainer.clock
        self.stats = trainer.stats

    def step(self) -> dict:
        before = self.agent.env_steps
        diagnostics = self.trainer.step()
        self.agent.count_env_steps((self.group.world - 1) * (self.agent.env_steps - before))
        return diagnostics

    def finished(self, signum: int) -> bool:
        """Only an all-reduce ends the loop, so every process leaves it after the same gradient step."""
        for i, sig in enumerate(FLAGS):
            self.group.flags[i] = float(bool(signum) and signum == sig) if sig else \
                float(self.agent.env_steps >= self.train_steps)
        return self.group.agreed

    def close(self) -> None:
        self.trainer.close()


def launch(hp, follow, member: GroupEnv | None = None) -> tuple[GradientGroup, list]:
    """Join the group as rank 0. Ranks 1..M-1 are started here (each runs `follow(rank, address)` and exits):
    forked processes, or Ray actors with `ray_address`; unless torchrun or PyTorchJob started them (`member`)."""
    import multiprocessing as mp

    if hp.grad_communication != "sync":
        raise ConfigError(f"unknown grad_communication {hp.grad_communication!r}: valid: sync, async")
    if member is not None:
        return GradientGroup(0, member.world, "env://", hp.device, hp.group_timeout_s, member.local_rank), []
    if hp.ray_address:
        from rl.parallel.transports.ray_ranks import launch_ranks

        address, children, watch = launch_ranks(hp, follow, free_port())
        global _explain_loss
        _explain_loss = watch.explain
        return GradientGroup(0, hp.num_grad_workers, address, hp.device, hp.group_timeout_s), children
    port = free_port()
    context = mp.get_context("fork")
    children = []
    for rank in range(1, hp.num_grad_workers):
        p = context.Process(target=_follower, args=(follow, rank, port, os.getpid()), name=f"rl-grad-worker-{rank}")
        p.start()
        children.append(p)
    return GradientGroup(0, hp.num_grad_workers, port, hp.device, hp.group_timeout_s), children


def serve(follow, member: GroupEnv) -> None:
    """Rank > 0 of a group that torchrun or PyTorchJob started: `follow(rank, "env://", local_rank, signals=True)`.
    Its pod gets SIGTERM of its own (an eviction, a drain of its node): the rank flags the stop in the next all-reduce,
    so rank 0 checkpoints, and every rank leaves after that step with 128 + the signal (`stop_code`)."""
    print(f"rank {member.rank} of {member.world}: training with rank 0 at {member.master}, which evaluates, logs "
          f"and checkpoints", flush=True)
    follow(member.rank, "env://", member.local_rank, signals=True)


def stop_code(own: int, group: GradientGroup) -> int:
    """The exit status of a rank > 0 after the loop: 0 when the group reached train_steps, else 128 + the stop signal
    (its own, or one that another rank got: the rank is needed again when the job restarts), with one line."""
    signum = own or group.stop_signum
    if not signum:
        return 0
    where = "" if own else " on another rank"
    print(f"rank {group.rank}: {signal.Signals(signum).name}{where}: the group stopped, rank 0 checkpoints, and the "
          f"same command resumes the group", flush=True)
    return 128 + int(signum)


def _follower(follow, rank: int, port: int, parent_pid: int) -> None:
    from rl.parallel.processes import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when the group stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent(parent_pid)
    follow(rank, port)
    os._exit(0)


def reap(children: list, timeout: float = 30.0) -> None:
    global _explain_loss
    _explain_loss = None
    for p in children:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
