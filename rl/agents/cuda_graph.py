"""A gradient step recorded as CUDA graphs and replayed (torch.cuda.CUDAGraph), for the off-policy actor-critics.

Why: at the continuous-control sets' sizes (400x300 networks, batch 100-256) a gradient step on a GPU is about a
hundred kernels of a few microseconds each, and launching them from Python, not the GPU's work, sets the step's time
(about 4 ms for SAC on an H200 eagerly; docs/performance.md). A replay launches the recorded kernels as one.

What is recorded is the step exactly as it runs eagerly (`step(batch, *variant)`: the loss, backward, clipping, the
optimizers' steps, the Polyak updates), once per variant (e.g. TD3's steps with and without the delayed actor), on
static batch tensors into which each sampled batch is copied. The random draws inside it (SAC's reparameterised
actions, gSDE's noise matrix, TD3's target smoothing) are drawn afresh at each replay: torch registers its default
CUDA generator with every graph. The optimizers must be capturable (`FlatAdam(capturable=True)`): their step counts
and learning rates are read on the device, not baked in. Each variant first runs eagerly on a side stream for
`WARMUP` steps (CUDA's rule before a capture: lazy initialisations happen outside it); those are real gradient steps.
A setting the recording baked in (a Python number the step reads) changes only through `reset()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from rl.memory.replay import Transitions


class GraphedStep:
    """Call like `step(batch, *variant)`: eager for the first WARMUP calls of a variant, then recorded, then replayed.
    Returns the step's outputs (a dict of tensors), valid until the next call of the same variant."""

    WARMUP = 3

    def __init__(self, step: Callable[..., dict]):
        self.step = step
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, Transitions, dict]] = {}
        self.calls: Counter = Counter()

    def reset(self) -> None:
        """Forget the recordings: the next calls warm up and record again (after a baked-in setting changed)."""
        self.graphs.clear()
        self.calls.clear()

    def __call__(self, batch: Transitions, *variant) -> dict:
        recorded = self.graphs.get(variant)
        if recorded is not None:
            graph, static, outputs = recorded
            for dst, src in zip(static, batch):
                if dst is not None:
                    dst.copy_(src, non_blocking=True)
            graph.replay()
            return dict(outputs)
        self.calls[variant] += 1
        if self.calls[variant] <= self.WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                outputs = self.step(batch, *variant)
            torch.cuda.current_stream().wait_stream(side)
            return outputs
        static = Transitions(*(None if f is None else f.clone() for f in batch))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = self.step(static, *variant)
        self.graphs[variant] = (graph, static, outputs)
        graph.replay()  # capturing records the kernels without running them: this call's step runs now
        return dict(outputs)
