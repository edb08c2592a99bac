"""The Scheme (PyTorchRL, Bou et al. 2022): collection workers and gradient workers around one learner.

- `scheme.py`: the learner side of `--num_workers N`: N collection worker processes (`worker.py`) fill preallocated
  shared-memory slots (`shared.py`); the learner feeds them to the unchanged agent and publishes versioned weights.
- `grad_workers.py`: `num_grad_workers` M > 1: sync (torch.distributed all-reduce of the gradient: DPPO) or async
  (each worker's gradient applied as it arrives: A3C).

Nothing here is imported by a single-process run (`--num_workers 0`).
"""
