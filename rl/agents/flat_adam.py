"""Adam (Kingma and Ba 2015), or RMSprop, over one flat buffer that holds every parameter of a module.

The module's parameters become views of a single contiguous tensor, and their gradients views of another, so zeroing,
clipping by global norm and the Adam step are each one op on one tensor, whatever the number of layers: the step is
aten's fused Adam kernel (what torch.optim.Adam(fused=True) runs) on that tensor. The arithmetic is torch.optim.Adam's
(non-amsgrad, no weight decay), step for step (tests/agents/test_flat_adam.py). `kind="rmsprop"` (IMPALA's optimizer)
is torch.optim.RMSprop's arithmetic (not centred, no momentum) in three ops on the same buffers.

Why not torch.optim.Adam: on small networks the per-step cost is Python and dispatch overhead, not arithmetic.
`benchmarks/optimizer_step.py --rounds 5` times a whole DQN gradient step (forward, backward, clipping, Adam) on
dqn_cartpole's network (4-256-256-2, batch 64, one thread): median 665 us with FlatAdam against 849 us with
torch.optim.Adam(fused=True) and 1049 us with foreach=True (AMD EPYC, 2026-11-23), about 4.5 s of dqn_cartpole's
24.6k gradient steps; constructing or stepping a torch.optim optimizer also imports torch._dynamo (1.2-1.7 s of every
learner's and every evaluation's start-up here, which is why RMSprop is not torch.optim's either).

`capturable=True` makes the step safe to record in a CUDA graph (rl/agents/cuda_graph.py): the step count is advanced
and the learning rate read on the device, not baked into the recording as the Python numbers of that moment.

Safe under the usual patterns: `model.zero_grad()` (which sets gradients to None), a gradient assigned by hand, or a
parameter re-bound (`p.data = ...`, `load_state_dict` copies in place and needs nothing) are noticed at the next
`zero_grad`/`clip_grad_norm`/`step`, which gathers them back into the flat buffers before working on them.
"""

from __future__ import annotations

import torch
from torch import nn

from rl.errors import ConfigError


def flatten_parameters(module: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Move every parameter of `module` into one contiguous tensor; return it and each parameter's view of it. A
    frozen target network flattened this way takes a Polyak update as one `lerp_`."""
    params = list(module.parameters())
    flat = torch.cat([p.detach().flatten() for p in params])
    views, offset = [], 0
    for p in params:
        views.append(flat[offset:offset + p.numel()].view_as(p))
        p.data = views[-1]
        offset += p.numel()
    return flat, views


class FlatAdam:
    """Adam over a module's flattened parameters, with global-norm gradient clipping."""

    def __init__(self, module: nn.Module, lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999),
                 kind: str = "adam", rmsprop_alpha: float = 0.99, capturable: bool = False):
        self.params = list(module.parameters())
        self.param, self.param_views = flatten_parameters(module)
        self.grad = torch.zeros_like(self.param)
        self.grad_views = [self.grad[pv.storage_offset():pv.storage_offset() + pv.numel()].view_as(pv)
                           for pv in self.param_views]
        for p, gv in zip(self.params, self.grad_views):
            p.grad = gv
        self._ptrs = [pv.data_ptr() for pv in self.param_views]
        self.capturable = capturable and kind == "adam"
        self._lr_tensor = torch.tensor(float(lr), device=self.param.device) if self.capturable else None
        self.lr, self.eps, self.betas = lr, eps, betas
        self.exp_avg = torch.zeros_like(self.param)
        self.exp_avg_sq = torch.zeros_like(self.param)
        self._step = torch.zeros((), dtype=torch.float32, device=self.param.device)  # the kernel reads the count here
        self._steps = 0
        if kind not in ("adam", "rmsprop"):
            raise ConfigError(f"unknown optimizer {kind!r}: valid: adam, rmsprop")
        self.kind = kind
        self.rmsprop_alpha = rmsprop_alpha
        # synchronous gradient workers (Agent.join_collective) set this to average the gradient across processes;
        # it runs once per backward pass, before clipping
        self.reduce_grad = None
        self._reduced = False

    @property
    def steps(self) -> int:
        """Steps taken; a capturable optimizer counts on the device (a graph's replays run no Python)."""
        return int(self._step.item()) if self.capturable else self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        self._steps = int(value)
        self._step.fill_(self._steps)

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        if self._lr_tensor is not None:
            self._lr_tensor.fill_(self._lr)

    def _gather(self) -> None:
        """Bring parameters and gradients that something re-bound back into the flat buffers (a few identity checks
        per step when nothing did). A gradient set to None counts as zero."""
        for p, pv, gv, ptr in zip(self.params, self.param_views, self.grad_views, self._ptrs):
            if p.grad is not gv:
                if p.grad is None:
                    gv.zero_()
                else:
                    gv.copy_(p.grad)
                p.grad = gv
            if p.data_ptr() != ptr:
                pv.copy_(p.data)
                p.data = pv

    def zero_grad(self) -> None:
        self._gather()
        self.grad.zero_()
        self._reduced = False

    def _reduce(self) -> None:
        if self.reduce_grad is not None and not self._reduced:
            self.reduce_grad(self.grad)
            self._reduced = True

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scale the gradient to global L2 norm at most `max_norm` (torch.nn.utils.clip_grad_norm_'s rule); returns
        the norm before clipping."""
        self._gather()
        self._reduce()
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
        return norm

    def step(self) -> None:
        """One Adam step in a single pass over the buffer (aten's fused kernel: one op instead of six), or one RMSprop
        step (torch.optim.RMSprop's update, not centred, no momentum; exp_avg_sq is its square_avg)."""
        self._gather()
        self._reduce()
        if self.kind == "rmsprop":
            self._steps += 1
            alpha = self.rmsprop_alpha
            self.exp_avg_sq.mul_(alpha).addcmul_(self.grad, self.grad, value=1 - alpha)
            self.param.addcdiv_(self.grad, self.exp_avg_sq.sqrt().add_(self.eps), value=-self.lr)
            return
        if self.capturable:  # advanced on the device, so that each replay of a recorded step advances it
            self._step.add_(1)
        else:
            self._steps += 1
            self._step.fill_(self._steps)
        torch._fused_adam_([self.param], [self.grad], [self.exp_avg], [self.exp_avg_sq], [], [self._step],
                           amsgrad=False, lr=self._lr_tensor if self.capturable else self.lr, beta1=self.betas[0],
                           beta2=self.betas[1], weight_decay=0.0, eps=self.eps, maximize=False)

    def state_dict(self) -> dict:
        return {"exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone(), "steps": self.steps,
                "lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        self.steps, self.lr = int(state["steps"]), float(state["lr"])
        old = state.get("rmsprop", {}).get("state", {}).get(0)  # written before 2026-11-28 by torch.optim.RMSprop
        if old is not None:
            self.exp_avg_sq.copy_(old["square_avg"])
