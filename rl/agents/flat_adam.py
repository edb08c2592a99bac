"""Adam (Kingma and Ba 2015) over one flat buffer that holds every parameter of a module.

The module's parameters become views of a single contiguous tensor, and their gradients views of another, so zeroing,
clipping by global norm and the Adam step are each a handful of tensor ops on one tensor, whatever the number of layers.
For the small networks of on-policy control (thousands of gradient steps on 256-sample batches) the per-step cost is
Python and dispatch overhead, not arithmetic: the step is one call of aten's fused Adam kernel on one tensor, where
torch.optim.Adam pays per-parameter bookkeeping and wrappers, and torch.optim's first use imports torch._dynamo
(seconds at start-up). The arithmetic is torch.optim.Adam's (non-amsgrad, no weight decay), step for step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def flatten_parameters(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Move every parameter of `module` into one contiguous tensor and point its `.grad` into another; return both.
    Gradients then accumulate in place: zero the flat gradient before each backward (never set grads to None)."""
    params = list(module.parameters())
    flat = torch.cat([p.detach().flatten() for p in params])
    grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset:offset + n].view_as(p)
        p.grad = grad[offset:offset + n].view_as(p)
        offset += n
    return flat, grad


class FlatAdam:
    """Adam over a module's flattened parameters, with global-norm gradient clipping."""

    def __init__(self, module: nn.Module, lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999)):
        self.param, self.grad = flatten_parameters(module)
        self.lr, self.eps, self.betas = lr, eps, betas
        self.exp_avg = torch.zeros_like(self.param)
        self.exp_avg_sq = torch.zeros_like(self.param)
        self._step = torch.zeros((), dtype=torch.float32, device=self.param.device)  # the kernel reads the count here
        self.steps = 0

    def zero_grad(self) -> None:
        self.grad.zero_()

    def clip_grad_norm(self, max_norm: float, numpy: bool = False) -> None:
        """Scale the gradient to global L2 norm at most `max_norm` (torch.nn.utils.clip_grad_norm_'s rule).
        numpy=True (CPU): through a numpy view, one dot product and one scale without torch's per-op dispatch (a
        third of the time for a PPO-sized network); equal up to float rounding."""
        if numpy:
            grad = self.grad.numpy()
            norm = float(np.sqrt(np.dot(grad, grad)))
            grad *= min(1.0, max_norm / (norm + 1e-6))
        else:
            norm = torch.linalg.vector_norm(self.grad)
            self.grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))

    def step(self) -> None:
        """One Adam step in a single pass over the buffer: aten's fused Adam kernel (what torch.optim.Adam(fused=True)
        runs), one op instead of six, each of which would stream the whole buffer through the cache again."""
        self.steps += 1
        self._step.fill_(self.steps)
        torch._fused_adam_([self.param], [self.grad], [self.exp_avg], [self.exp_avg_sq], [], [self._step],
                           amsgrad=False, lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0,
                           eps=self.eps, maximize=False)

    def state_dict(self) -> dict:
        return {"exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone(), "steps": self.steps,
                "lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        self.steps, self.lr = int(state["steps"]), float(state["lr"])
