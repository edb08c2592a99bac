"""A local Ray cluster for the tests marked `ray`: one per test session, started on first use and stopped at the end.

Two nodes on this machine, as a real cluster would have them: a head node with 1 CPU and the custom resource
`head_node`, and a worker node with 2 CPUs and the custom resource `cpu_node` (so a test can ask for its workers to be
placed there with ray_worker_resources="cpu_node:1"). Each node's object store is kept small (200 MB). The processes
run in a temporary directory of their own and are ended by `cluster.shutdown()` alone (never `ray stop`, which would
stop every Ray on the machine). Without Ray installed (`bash setup.sh --ray`) the tests that use it are skipped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import pytest

OBJECT_STORE = 200 * 1024 * 1024


@dataclass
class RayCluster:
    address: str  # HOST:PORT of the head node's GCS (what --ray_address takes)
    head_node: str  # node ids
    worker_node: str


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (bash setup.sh --ray)")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    temp = tempfile.mkdtemp(prefix="rlray", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    os.makedirs("/tmp/ray", exist_ok=True)  # the head writes its address there (what address="auto" reads)
    common = {"object_store_memory": OBJECT_STORE, "temp_dir": temp}
    cluster = Cluster(initialize_head=True, shutdown_at_exit=True,
                      head_node_args={"num_cpus": 1, "resources": {"head_node": 1}, "include_dashboard": False,
                                      **common})
    try:
        worker = cluster.add_node(num_cpus=2, resources={"cpu_node": 4}, **common)
        cluster.wait_for_nodes()
        yield RayCluster(cluster.address, cluster.head_node.node_id, worker.node_id)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        os.environ.pop("RAY_ADDRESS", None)
