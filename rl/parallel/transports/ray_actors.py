"""The classes that live inside Ray actors, on whichever node Ray places them: a collection worker (`WorkerActor`),
the weight store that tells workers the newest publish (`WeightStore`) and the seat that holds resources on the
learner's node (`LearnerSeat`). They are plain classes, made actors by `ray.remote` in ray.py, and import Ray inside
their methods only."""

from __future__ import annotations


class WorkerActor:
    """One worker inside a Ray actor: built from its spec, filling its own buffer at every call. It settles as a
    forked worker does (one thread, its seeds: rl/parallel/processes.py) but never dies with a parent: Ray ends it."""

    def __init__(self, spec, make_worker, make_buffer):
        from rl.parallel.processes import settle_worker

        settle_worker(spec)
        self.worker = make_worker(spec)
        self.buffer = make_buffer(spec)
        self.held = -1  # the publish whose weights the worker holds

    def fill(self, store, publish: int, version: int, weights: list):
        """Load the newest published weights: the store's, or the publish this call was issued with where the store
        has not heard of it yet (calls from two callers are not ordered); fetched only when new. Ship one filled
        buffer."""
        import ray

        newest = ray.get(store.get.remote())
        if newest[0] > publish:
            publish, version, weights = newest
        if publish != self.held:
            self.worker.load(ray.get(weights[0]), version)
            self.held = publish
        shipment = self.worker.fill(self.buffer, _beat)
        shipment.data = self.buffer  # serialised when returned: the next fill may reuse it
        return shipment

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.worker.close()


class WeightStore:
    """The newest publish: (publish count, policy version, [object ref of the acting state]). A worker asks for it
    when it starts a fill, so it acts with the newest weights, as a worker of the shared-memory transport does."""

    def __init__(self):
        self.entry = (-1, -1, [None])

    def set(self, publish: int, version: int, weights: list) -> None:
        self.entry = (publish, version, weights)

    def get(self) -> tuple:
        return self.entry

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def _beat() -> None:
    """An actor's heartbeat: hung calls are found by their age on the learner's side, and actors are stopped by
    ray.kill."""


class LearnerSeat:
    """Holds `ray_learner_cpus`/`ray_learner_gpus` on the learner's node while the run lasts; does nothing."""

    def ready(self) -> bool:
        return True

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()
