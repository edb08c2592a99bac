"""The Scheme (PyTorchRL, Bou et al. 2022): collection workers and gradient workers around one learner.

- `learner.py`: the learner side of `--num_workers N` and of async gradient workers (A3C): it receives shipments
  through a transport, hands them to the agent's public interface (rl/agents/base.py) and publishes versioned
  weights; the workers' and the learner's settings.
- `roles.py`: the workers, plain classes built from a `WorkerSpec` (`spec.py`, with the `Shipment` they return):
  collection workers (rollouts for on-policy agents, replay rows for Ape-X) and async gradient workers.
- `buffers.py`: what a worker fills: a rollout, replay `Rows`, or a flat gradient.
- `transports/`: where the workers run: `shm.py` forked processes with shared-memory slots (one machine), `ray.py` Ray
  actors (many machines), `faults.py` the restart bookkeeping both share.
- `collective.py`: `num_grad_workers` M > 1 with grad_communication=sync (DPPO, RAPID): M processes average their
  gradients with a torch.distributed all-reduce (forked here, Ray actors, or started by torchrun or PyTorchJob).
- `processes.py`: what a process started here does first: workers (forked or Ray actors) take one thread and their
  seeds (`settle_worker`); forked workers and forked gradient ranks die with their parent (`die_with_parent`); a
  gradient rank's threads and seeds are its run's (rl/parallel/follower.py's `follow`).

The import order is spec, buffers, processes, transports < learner < roles (an async RAPID gradient worker embeds a
learner, so the learner and transports take `roles.make_worker` from their caller), and processes, transports <
collective (imported by rl/run.py and rl/trainer.py only). Nothing here is imported by a single-process run
(`--num_workers 0`).
"""
