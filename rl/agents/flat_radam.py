"""RAdam (Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and Beyond") over FlatAdam's one flat buffer:
the optimizer of PQN as purejaxql (optax.radam) and CleanRL's pqn.py (torch.optim.RAdam) run it.

Adam's moments, but while the variance of the adaptive rate is intractable (rho_t <= 5, the first few steps: 5 with
beta2 = 0.999) the step is the bias-corrected momentum alone, lr * m_hat; after that Adam's step times the
rectification r_t, which rises to 1. torch.optim.RAdam's arithmetic (no weight decay), step for step
(tests/agents/test_pqn.py). Clipping, the synchronous group's all-reduce and checkpoints are FlatAdam's.
"""

from __future__ import annotations

import math

from rl.agents.flat_adam import FlatAdam


class FlatRAdam(FlatAdam):
    """FlatAdam whose step is RAdam's."""

    def __init__(self, module, lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999)):
        super().__init__(module, lr, eps, betas)
        self.kind = "radam"

    def step(self) -> None:
        self._gather()
        self._reduce()
        self._steps += 1
        self._step.fill_(self._steps)
        beta1, beta2 = self.betas
        t = self._steps
        self.exp_avg.lerp_(self.grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(self.grad, self.grad, value=1 - beta2)
        correction1, correction2 = 1 - beta1**t, 1 - beta2**t
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * t * beta2**t / correction2
        if rho_t <= 5.0:  # too few steps to trust the second moment: momentum SGD
            self.param.add_(self.exp_avg, alpha=-self.lr / correction1)
            return
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        denom = self.exp_avg_sq.sqrt().add_(self.eps)
        self.param.addcdiv_(self.exp_avg, denom, value=-self.lr * rect * math.sqrt(correction2) / correction1)
