"""Noisy linear layers with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks for Exploration", ICLR).

    y = (mu_w + sigma_w * (f(eps_out) f(eps_in)^T)) x + mu_b + sigma_b * f(eps_out),   f(e) = sign(e) sqrt(|e|)

with eps_in ~ N(0, I_p) and eps_out ~ N(0, I_q): p + q draws per layer instead of p * q. The network learns sigma, so
it learns how much to explore; agents act greedily on the noisy values (no epsilon). The noise is a buffer: it stays
fixed between `reset_noise()` calls (DQN resamples it, for the online and the target network, before every gradient
step) and is checkpointed with the weights. In eval mode (`module.eval()`) the layer uses the mean weights only, so
evaluation is deterministic. Draws use torch's global generator, whose state run.py checkpoints.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _scaled_noise(size: int, device: torch.device) -> torch.Tensor:
    x = torch.randn(size, device=device)
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """A drop-in nn.Linear with learned factorised Gaussian noise on weights and biases."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))
        self.reset_noise()

    @torch.no_grad()
    def reset_noise(self) -> None:
        self.eps_in.copy_(_scaled_noise(self.in_features, self.eps_in.device))
        self.eps_out.copy_(_scaled_noise(self.out_features, self.eps_out.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def linear(in_features: int, out_features: int, noisy: bool = False, sigma0: float = 0.5) -> nn.Module:
    """nn.Linear, or NoisyLinear when `noisy`: what heads use for their output layers."""
    return NoisyLinear(in_features, out_features, sigma0) if noisy else nn.Linear(in_features, out_features)


class NoisyMixin:
    """For networks: `reset_noise()` resamples every NoisyLinear inside; `noisy` says whether there is any."""

    def noisy_layers(self) -> list[NoisyLinear]:
        """The NoisyLinear modules inside, found once (deepcopy maps the cached list onto the copy's layers)."""
        if "_noisy_layers" not in self.__dict__:
            self.__dict__["_noisy_layers"] = [m for m in self.modules() if isinstance(m, NoisyLinear)]
        return self.__dict__["_noisy_layers"]

    @property
    def noisy(self) -> bool:
        return bool(self.noisy_layers())

    def reset_noise(self) -> None:
        for layer in self.noisy_layers():
            layer.reset_noise()
