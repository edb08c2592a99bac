"""Actor-critic networks for the on-policy family (Mnih et al. 2016, A3C; Schulman et al. 2017, PPO).

A torso (`hp.torso`, e.g. mlp) feeds a policy head and a value head, either through one shared stream or through two
separate ones (`shared_torso`). The policy head is `categorical_policy` (logits, Discrete actions) or
`gaussian_policy` (a mean and a state-independent log-std, Box actions). Weights are orthogonal with gains sqrt(2)
(torso), 0.01 (policy; `pi_init_gain`) and 1 (value), as in the PPO/A2C implementations (Andrychowicz et al. 2021,
"What matters in on-policy RL").

With `recurrent=True` each stream gets a GRU cell (Cho et al. 2014) after its torso, all streams' cells evaluated
together (`StackedGRU`). The hidden state has shape [batch, streams, recurrent_hidden_size]; it is zeroed where an
episode starts, both when acting step by step and when a minibatch replays stored sequences (`forward_sequence`).

With `feature_head` the model also gives per-step feature vectors for elite experience replay (elite_buffer_vtrace): the
policy torso's activation (the shared torso's, or the policy stream's with two torsos; before the GRU, so they need no
hidden state and a stored sequence's are recomputed in one batched pass over its frames), through elite_buffer_vtrace's
scaling layer `Linear(out_dim -> feature_size)` with `feature_scaling_layer`, or that activation itself without it.
elite_buffer_vtrace never trains the scaling layer (its `ModelNetwork.features` is in the optimizer, but no loss reads
it, so its gradient stays None): it is a fixed random projection. Here it is held in buffers, not parameters: it is in
the state_dict (checkpointed, published to workers with the weights) but not in the optimizer's flat buffer, where it
would add 0.26M entries to every Adam step and norm clip of a 1.1M-parameter IMPALA CNN for an update that is zero.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from rl.errors import ConfigError
from rl.models.mlp import init_orthogonal
from rl.models.multi_input import mask_key, mask_out
from rl.registry import models


@models.register("categorical_policy")
class CategoricalHead(nn.Module):
    """Logits of a categorical distribution over `num_actions`."""

    def __init__(self, in_dim: int, num_actions: int):
        super().__init__()
        self.out = nn.Linear(in_dim, num_actions)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.out.weight, self.out.bias)


@models.register("gaussian_policy")
class GaussianHead(nn.Module):
    """A diagonal Gaussian: a state-dependent mean and a learned, state-independent log-std."""

    def __init__(self, in_dim: int, action_dim: int, log_std_init: float = 0.0):
        super().__init__()
        self.out = nn.Linear(in_dim, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.linear(features, self.out.weight, self.out.bias), self.log_std


class StackedGRU(nn.Module):
    """k independent GRU cells (Cho et al. 2014; PyTorch's gate equations), one per stream, evaluated together with
    batched matrix products: the state is [k, B, H], so a step costs the ops of one cell whatever k is."""

    def __init__(self, streams: int, in_dim: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        bound = 1.0 / math.sqrt(hidden_size)  # nn.GRU's initialisation

        def param(*shape):
            return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))

        self.weight_ih = param(streams, in_dim, 3 * hidden_size)  # transposed: x @ W
        self.weight_hh = param(streams, hidden_size, 3 * hidden_size)
        self.bias_ih, self.bias_hh = param(streams, 1, 3 * hidden_size), param(streams, 1, 3 * hidden_size)

    def input_gates(self, x: torch.Tensor) -> torch.Tensor:
        """The input's share of the gates, [k, M, 3H] from [k, M, in]: one product for every step of a sequence."""
        return torch.baddbmm(self.bias_ih, x, self.weight_ih)

    def cell(self, gi: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step from input gates gi [k, B, 3H] and state h [k, B, H] (gate order r, z, n as in nn.GRU)."""
        H = self.hidden_size
        gh = torch.baddbmm(self.bias_hh, h, self.weight_hh)
        rz = torch.sigmoid(gi[..., :2 * H] + gh[..., :2 * H])
        n = torch.tanh(gi[..., 2 * H:] + rz[..., :H] * gh[..., 2 * H:])
        return n + rz[..., H:] * (h - n)


class FeatureProjection(nn.Module):
    """elite_buffer_vtrace's untrained scaling layer: y = x W^T + b with W, b buffers (state, never optimised).
    Glorot-uniform weights and zero biases, as elite_buffer_vtrace's `weights_init` gives its Linear layers."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        bound = math.sqrt(6.0 / (in_dim + out_dim))
        self.register_buffer("weight", torch.empty(out_dim, in_dim).uniform_(-bound, bound))
        self.register_buffer("bias", torch.zeros(out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


@models.register("actor_critic")
class ActorCritic(nn.Module):
    """Torso stream(s) -> optional GRU -> policy head and value head."""

    def __init__(self, torsos: list[nn.Module], pi_head: nn.Module, recurrent_hidden_size: int = 0,
                 ortho_init: bool = True, feature_head: bool = False, feature_scaling_layer: bool = True,
                 feature_size: int = 512, pi_init_gain: float = 0.01):
        super().__init__()
        self.torsos = nn.ModuleList(torsos)  # one (shared) or two (policy, value)
        feat = torsos[0].out_dim
        self.recurrent = recurrent_hidden_size > 0
        self.hidden_size = recurrent_hidden_size
        self.gru = StackedGRU(len(torsos), feat, recurrent_hidden_size) if self.recurrent else None
        if self.recurrent:
            feat = recurrent_hidden_size
        self.pi_head = pi_head
        self.v_head = nn.Linear(feat, 1)
        self.mask_key = None  # the observation entry of the action mask, which the logits obey (build sets it)
        if ortho_init:
            for torso in self.torsos:
                init_orthogonal(torso, math.sqrt(2))
            init_orthogonal(self.pi_head, pi_init_gain)
            init_orthogonal(self.v_head, 1.0)
        # drawn last, so that the other weights are the same with the feature head on or off
        self.feature_layer = None
        self.feature_dim = None  # F, the width of a feature vector (None: no feature head)
        if feature_head:
            if feature_scaling_layer:
                if feature_size <= 0:
                    raise ConfigError(f"feature_scaling_layer needs feature_size > 0, got {feature_size}")
                self.feature_layer = FeatureProjection(torsos[0].out_dim, feature_size)
            self.feature_dim = feature_size if feature_scaling_layer else torsos[0].out_dim

    @classmethod
    def build(cls, hp, obs_space, action_space) -> ActorCritic:
        torsos = [models[hp.torso].build(hp, obs_space) for _ in range(1 if hp.shared_torso else 2)]
        feat = hp.recurrent_hidden_size if hp.recurrent else torsos[0].out_dim
        if hasattr(action_space, "n"):
            head = models["categorical_policy"](feat, int(action_space.n))
        elif getattr(action_space, "shape", None) and len(action_space.shape) == 1:
            head = models["gaussian_policy"](feat, int(action_space.shape[0]), hp.log_std_init)
        else:
            raise ConfigError(f"actor_critic needs a Discrete or a 1-d Box action space, the env has {action_space}")
        if hp.recurrent and hp.recurrent_hidden_size <= 0:
            raise ConfigError(f"recurrent=True needs recurrent_hidden_size > 0, got {hp.recurrent_hidden_size}")
        model = cls(torsos, head, hp.recurrent_hidden_size if hp.recurrent else 0, hp.ortho_init, hp.feature_head,
                    hp.feature_scaling_layer, hp.feature_size, hp.pi_init_gain)
        model.mask_key = mask_key(hp, obs_space)
        return model

    @property
    def hidden_shape(self) -> tuple[int, int] | None:
        """Shape of one env's hidden state, or None for a feed-forward network."""
        return (len(self.torsos), self.hidden_size) if self.recurrent else None

    def initial_state(self, batch: int, device=None) -> torch.Tensor | None:
        return torch.zeros(batch, *self.hidden_shape, device=device) if self.recurrent else None

    def _heads(self, feats: list[torch.Tensor], mask: torch.Tensor | None = None):
        """The heads run in fp32 even under bf16 autocast (precision=bf16 speeds up the torso): PPO's probability
        ratio and the value targets need more than bf16's 8 mantissa bits, and the heads cost nothing. The logits of
        the actions that `mask` forbids are the lowest float: probability 0 (rl/models/multi_input.py)."""
        with torch.autocast(feats[0].device.type, enabled=False):
            feats = [f.float() for f in feats]
            value = F.linear(feats[-1], self.v_head.weight, self.v_head.bias).squeeze(-1)
            return mask_out(self.pi_head.forward(feats[0]), mask), value

    def _features(self, torso_out: torch.Tensor) -> torch.Tensor:
        """Feature vectors [B, F] in fp32 from the policy torso's activation [B, out_dim] (fp32 like the heads: the
        elite distances compare them across model versions)."""
        if self.feature_dim is None:
            raise ConfigError("the model has no feature head: set feature_head=True")
        with torch.autocast(torso_out.device.type, enabled=False):
            x = torso_out.float()
            return x if self.feature_layer is None else self.feature_layer.forward(x)

    def features(self, obs: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Feature vectors [B, F] of a batch of observations, one pass through the policy torso. `hidden` is accepted
        and unused: the features are taken before the GRU."""
        return self._features(self.torsos[0].forward(obs))

    def forward(self, obs: torch.Tensor, hidden: torch.Tensor | None = None, with_features: bool = False):
        """One step: (policy parameters, values [B], next hidden state [B, streams, H] or None), and with
        `with_features` the feature vectors [B, F] as a fourth output, from the same torso pass."""
        feats = [torso.forward(obs) for torso in self.torsos]  # .forward: skips nn.Module call overhead
        features = self._features(feats[0]) if with_features else None
        if self.recurrent:
            h = self.gru.cell(self.gru.input_gates(torch.stack(feats)), hidden.transpose(0, 1))
            feats, hidden = list(h), h.transpose(0, 1)
        params, value = self._heads(feats, None if self.mask_key is None else obs[self.mask_key])
        if with_features:
            return params, value, hidden, features
        return params, value, hidden

    def forward_sequence(self, obs: torch.Tensor, hidden: torch.Tensor, starts: torch.Tensor):
        """Replay sequences obs [T, n, ...] from `hidden` [n, streams, H], zeroing the state where `starts` [T, n]
        is 1; returns policy parameters and values flattened to [T * n] (time-major)."""
        T, n = starts.shape
        x = torch.stack([torso(obs.flatten(0, 1)) for torso in self.torsos])  # the torsos run once over all steps
        gates = self.gru.input_gates(x).view(len(self.torsos), T, n, -1)
        keep = (1.0 - starts).unsqueeze(-1)
        h, seq = hidden.transpose(0, 1), []
        for t in range(T):
            h = self.gru.cell(gates[:, t], h * keep[t])
            seq.append(h)
        out = torch.stack(seq, 1).flatten(1, 2)  # [streams, T * n, H]
        return self._heads(list(out), None if self.mask_key is None else obs[self.mask_key].flatten(0, 1))
