"""Convolutional torsos for stacked Atari frames.

- `nature_cnn`: the DQN network of Mnih et al. 2015, "Human-level control through deep reinforcement learning"
  (Nature): conv 32 8x8 s4, conv 64 4x4 s2, conv 64 3x3 s1, Linear 512, ReLU after each. 1,684,128 parameters at
  4x84x84.
- `impala_cnn`: the residual network of Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
  Weighted Actor-Learner Architectures" (ICML; deepmind/scalable_agent experiment.py): three stages of (16, 32, 32)
  channels, each a conv 3x3, a max-pool 3x3 s2 and two residual blocks; then ReLU, Linear 256, ReLU. 1,089,232
  parameters at 4x84x84.

  With `fixup_init` the residual blocks follow Fixup (Zhang, Dauphin and Ma 2019, "Fixup Initialization: Residual
  Learning Without Normalization", ICLR), as PyTorchRL (Bou et al. 2022) does for its IMPALA CNN: the second conv of
  each block starts at zero, so every block starts as the identity, the first is He-initialised and scaled by
  L^(-1/(2m-2)) = 1/sqrt(6) (L = 6 blocks, m = 2 convs per branch), and the block's conv biases give way to the paper's
  four scalar biases and one scalar multiplier (PyTorchRL uses one per channel). That makes 1,088,942 parameters at
  4x84x84 (320 conv biases fewer, 30 scalars more). The torso sets `self_initialised`, so `init_orthogonal`
  (ActorCritic's ortho_init) leaves it alone.

- `elite_cnn`: elite_buffer_vtrace's network (its `model/network.py`): conv 64 3x3 s3, conv 64 3x3 s2, conv 128 3x3 s2,
  Linear 4608 -> 512, ReLU after each, on raw 0-255 pixels (elite_buffer_vtrace never scales them), Glorot-uniform
  weights and zero biases (its `weights_init`). 2,472,960 parameters and 13.05M multiply-adds per 4x84x84 frame stack,
  against the Nature CNN's 1.68M and 9.3M.

The first two take uint8 frames [B, C, H, W] and scale them to [0, 1] themselves: observations travel to the device
as uint8, a quarter of the bytes of float32. With `channels_last` the weights and the input are in channels-last memory
format (NHWC), which oneDNN and cuDNN run faster on some hardware; the features are the same.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rl.envs.observations import leaves
from rl.errors import ConfigError
from rl.models.multi_input import observation_torso
from rl.registry import models


def structured(build):
    """A CNN's `build`, handing a Dict or Tuple observation space to the multi-input torso (rl/models/multi_input.py),
    which gives this CNN the image entries."""
    def build_torso(cls, hp, obs_space):
        if leaves(obs_space) is not None:
            return observation_torso(hp, obs_space)
        return build(cls, hp, obs_space)
    return build_torso


def image_shape(obs_space, name: str) -> tuple[int, int, int]:
    if len(obs_space.shape) != 3:
        raise ConfigError(f"{name} needs image observations [channels, height, width], the env has {obs_space.shape}")
    return tuple(int(d) for d in obs_space.shape)


class ConvTorso(nn.Module):
    """Input handling shared by the conv torsos: uint8 to float in [0, 1], in the configured memory format."""

    READS_IMAGES = True  # the multi-input torso gives a Dict's image entries to this torso

    def __init__(self, channels_last: bool):
        super().__init__()
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def frames(self, obs: torch.Tensor) -> torch.Tensor:
        """The frames as floats in [0, 255]; under autocast (precision=bf16) straight in the autocast dtype, the cast
        the first conv would make anyway: uint8 values are exact in bfloat16, and on CPU the float32 copy of a batch
        cost more than the first conv."""
        device = obs.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        # copy=True: a float input in the right layout would otherwise come back as itself, and an in-place op after
        # would change it
        return obs.to(dtype, memory_format=self.memory_format, copy=True)

    def scaled(self, obs: torch.Tensor) -> torch.Tensor:
        """The frames in [0, 1]."""
        return self.frames(obs).div_(255.0)

    def finish(self, channels_last: bool):
        """The built torso, its weights moved to channels-last layout if asked."""
        return self.to(memory_format=torch.channels_last) if channels_last else self


@models.register("nature_cnn")
class NatureCNN(ConvTorso):
    """Mnih et al. 2015's torso; `out_dim` = 512."""

    def __init__(self, in_shape: tuple[int, int, int], channels_last: bool = False):
        super().__init__(channels_last)
        c, h, w = in_shape
        self.convs = nn.ModuleList([nn.Conv2d(c, 32, 8, 4), nn.Conv2d(32, 64, 4, 2), nn.Conv2d(64, 64, 3, 1)])
        for conv in self.convs:  # valid convolutions: (size - kernel) // stride + 1
            h, w = (h - conv.kernel_size[0]) // conv.stride[0] + 1, (w - conv.kernel_size[1]) // conv.stride[1] + 1
        if h < 1 or w < 1:
            raise ConfigError(f"nature_cnn needs frames of at least 36x36, got {in_shape[1]}x{in_shape[2]}")
        self.fc = nn.Linear(64 * h * w, 512)
        self.out_dim = 512

    @classmethod
    @structured
    def build(cls, hp, obs_space) -> NatureCNN:
        return cls(image_shape(obs_space, "nature_cnn"), hp.channels_last).finish(hp.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        first = self.convs[0]  # conv(x / 255) as a conv with weights / 255: no pass over every pixel to scale it
        x = F.relu(F.conv2d(self.frames(obs), first.weight / 255.0, first.bias, first.stride))
        for conv in self.convs[1:]:
            x = F.relu(conv(x))
        return F.relu(self.fc(x.flatten(1)))


class ResidualBlock(nn.Module):
    """x + conv(ReLU(conv(ReLU(x)))), scalable_agent's block; with `fixup` the convs lose their biases to Fixup's
    scalar biases (before each conv and activation, and after the branch) and scalar multiplier."""

    def __init__(self, channels: int, fixup: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=not fixup)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=not fixup)
        self.fixup = fixup
        if fixup:
            self.biases = nn.Parameter(torch.zeros(4))
            self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fixup:
            return x + self.conv2(F.relu(self.conv1(F.relu(x))))
        b = self.biases
        out = F.relu(self.conv1(F.relu(x) + b[0]) + b[1])
        return x + self.conv2(out + b[2]) * self.scale + b[3]


class Stage(nn.Module):
    """conv 3x3, max-pool 3x3 s2 (halves the frame, rounding up), two residual blocks."""

    def __init__(self, in_channels: int, channels: int, fixup: bool):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.blocks = nn.ModuleList([ResidualBlock(channels, fixup), ResidualBlock(channels, fixup)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv(x), 3, 2, 1)
        for block in self.blocks:
            x = block(x)
        return x


@models.register("impala_cnn")
class ImpalaCNN(ConvTorso):
    """Espeholt et al. 2018's residual torso; `out_dim` = 256."""

    CHANNELS = (16, 32, 32)

    def __init__(self, in_shape: tuple[int, int, int], channels_last: bool = False, fixup_init: bool = False):
        super().__init__(channels_last)
        c, h, w = in_shape
        stages = []
        for channels in self.CHANNELS:
            stages.append(Stage(c, channels, fixup_init))
            c, h, w = channels, (h + 1) // 2, (w + 1) // 2
        self.stages = nn.ModuleList(stages)
        self.fc = nn.Linear(c * h * w, 256)
        self.out_dim = 256
        self.self_initialised = fixup_init
        if fixup_init:
            self.init_fixup()

    @torch.no_grad()
    def init_fixup(self) -> None:
        """He initialisation everywhere, then each residual branch's first conv scaled by L^(-1/(2m-2)) and its last
        conv zeroed, so the blocks start as identities and the output variance does not grow with depth."""
        blocks = [block for stage in self.stages for block in stage.blocks]
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for block in blocks:
            block.conv1.weight.mul_(len(blocks) ** (-1 / (2 * 2 - 2)))
            nn.init.zeros_(block.conv2.weight)

    @classmethod
    @structured
    def build(cls, hp, obs_space) -> ImpalaCNN:
        return cls(image_shape(obs_space, "impala_cnn"), hp.channels_last, hp.fixup_init).finish(hp.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.scaled(obs)
        for stage in self.stages:
            x = stage(x)
        return F.relu(self.fc(F.relu(x).flatten(1)))


@models.register("elite_cnn")
class EliteCNN(ConvTorso):
    """elite_buffer_vtrace's torso; `out_dim` = 512. Self-initialised (Glorot uniform, as published), so ortho_init
    leaves it alone; it reads the frames unscaled, as elite_buffer_vtrace's network does."""

    def __init__(self, in_shape: tuple[int, int, int], channels_last: bool = False):
        super().__init__(channels_last)
        c, h, w = in_shape
        self.convs = nn.ModuleList([nn.Conv2d(c, 64, 3, 3), nn.Conv2d(64, 64, 3, 2), nn.Conv2d(64, 128, 3, 2)])
        for conv in self.convs:
            h, w = (h - 3) // conv.stride[0] + 1, (w - 3) // conv.stride[1] + 1
        if h < 1 or w < 1:
            raise ConfigError(f"elite_cnn needs frames of at least 21x21, got {in_shape[1]}x{in_shape[2]}")
        self.fc = nn.Linear(128 * h * w, 512)
        self.out_dim = 512
        self.self_initialised = True
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    @classmethod
    @structured
    def build(cls, hp, obs_space) -> EliteCNN:
        return cls(image_shape(obs_space, "elite_cnn"), hp.channels_last).finish(hp.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.frames(obs)
        for conv in self.convs:
            x = F.relu(conv(x))
        return F.relu(self.fc(x.flatten(1)))
