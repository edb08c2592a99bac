"""NaN and inf where a run meets them: a loss after an update, a weight at a log row. Either ends the run
(`NonFiniteStop`) before a checkpoint of the broken state is written (rl/checkpoint.py refuses one too)."""

from __future__ import annotations

import math

import torch

from rl.errors import RunStopped


def nonfinite_value(values: dict) -> str | None:
    """`name = value` of the first diagnostic that is NaN or infinite (a loss), else None. Values on a GPU are left
    to the log rows (reading one here would wait for the device at every update)."""
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu" or value.numel() != 1 or not value.is_floating_point():
                continue
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} = {value}"
    return None


def nonfinite_weight(agent) -> str | None:
    """The name of the first network parameter holding NaN or inf, else None."""
    for net_name, net in agent.networks().items():
        for name, param in net.named_parameters():
            if param.is_floating_point() and not bool(torch.isfinite(param).all()):
                return f"{net_name}.{name}"
    return None


class NonFiniteStop(RunStopped):
    """A NaN or inf loss or weight: the run ends without saving the broken state."""

    def __init__(self, what: str):
        super().__init__(f"{what}: the run stopped (lower lr, or check the env's rewards and observations)")
