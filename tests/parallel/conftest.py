"""A local Ray cluster for the tests marked `ray`: one per test session, started on first use and stopped at the end.

Two nodes on this machine, as a real cluster would have them: a head node with 1 CPU and the custom resource
`head_node`, and a worker node with 2 CPUs and the custom resource `cpu_node` (so a test can ask for its workers to be
placed there with ray_worker_resources="cpu_node:1"). Each node's object store is kept small (200 MB). The processes
run in a temporary directory of their own and are ended by `cluster.shutdown()` alone (never `ray stop`, which would
stop every Ray on the machine). Without Ray installed (`bash setup.sh --ray`) the tests that use it are skipped.

The tests that use the cluster run in one child pytest, never in the test process itself: a process that has talked
to a Ray cluster (ray.init, or cluster_utils' own GCS client) keeps Ray's C++ threads (gcs_client_io_service, gRPC's
pollers and timers) running after ray.shutdown() and cluster.shutdown() until it exits, and such threads racing the
interpreter's teardown are a known cause of a SIGSEGV at exit. The child gets the selected tests' ids, reports each
result to a JSON file, and the test process reports them as its own, with the child's time of each (the first such
test waits for the whole child). A child that crashes (killed by a signal, even after reporting every test) fails
every cluster test, and one that gives no results (timed out, results unreadable) fails them at once, with the
reason: failed tests, not a session status, so that pytest-xdist's workers (`-n 2`) report it too. The cluster tests
are one xdist group (tests/conftest.py), which `--dist loadgroup` gives to one worker: it runs the child while the other
runs the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

OBJECT_STORE = 200 * 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]
CHILD = "RL_TESTS_RAY_RESULTS"  # set in the child pytest: where it writes its results
RESULTS = pytest.StashKey[tuple]()  # in the test process: what run_child returned


@dataclass
class RayCluster:
    address: str  # HOST:PORT of the head node's GCS (what --ray_address takes)
    head_node: str  # node ids
    worker_node: str


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (bash setup.sh --ray)")
    if CHILD not in os.environ:  # the test process: the child pytest runs these tests (pytest_pyfunc_call)
        yield None
        return
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


def uses_cluster(item) -> bool:
    return "ray_cluster" in getattr(item, "fixturenames", ())


def child_id(item) -> str:
    """The test's id in the child pytest: without the `@ray_cluster` that pytest-xdist's loadgroup appends in a worker
    (tests/conftest.py puts the cluster tests in that group)."""
    return item.nodeid.removesuffix("@ray_cluster")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """In the test process, a cluster test's body is not run here: its result comes from the child pytest, which the
    first such test starts for all the session's cluster tests."""
    if CHILD in os.environ or not uses_cluster(pyfuncitem):
        return None
    stash = pyfuncitem.config.stash
    if RESULTS not in stash:
        try:
            stash[RESULTS] = run_child([child_id(i) for i in pyfuncitem.session.items if uses_cluster(i)])
        except Exception as e:  # timed out, or corrupt results: the other cluster tests fail at once, not run it again
            stash[RESULTS] = ({}, None, f"{type(e).__name__}: {e}")
    results, status, output = stash[RESULTS]
    why = "gave no results" if status is None else f"(exit status {status}) did not report this test"
    missing = ("failed", f"the child pytest {why}:\n{output}", 0.0)
    outcome, text, _ = results.get(child_id(pyfuncitem), missing)
    if status not in (None, 0, 1):  # killed (a signal at exit included): none of its results can be trusted
        pytest.fail(f"the child pytest of the Ray cluster tests ended with status {status} (it reported this test "
                    f"{outcome}):\n{output}", pytrace=False)
    if outcome == "skipped":
        pytest.skip(text)
    if outcome != "passed":
        pytest.fail(f"(in the child pytest)\n{text}", pytrace=False)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A cluster test's call takes the time it took in the child (what --durations shows)."""
    report = yield
    results = item.config.stash.get(RESULTS, ({},))[0]
    if report.when == "call" and child_id(item) in results:
        report.duration = results[child_id(item)][2]
    return report


def run_child(nodeids: list[str]) -> tuple[dict, int, str]:
    """Run `nodeids` in a child pytest: {nodeid: (outcome, text, seconds)}, its exit status, its output's end."""
    with tempfile.TemporaryDirectory(prefix="rlraytests") as folder:
        path = Path(folder) / "results.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # one process, not a worker
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodeids], cwd=ROOT,
                             env={**env, CHILD: str(path)}, capture_output=True, text=True, timeout=3600)
        results = json.loads(path.read_text()) if path.is_file() else {}
    return {k: tuple(v) for k, v in results.items()}, res.returncode, (res.stdout + res.stderr)[-3000:]


def pytest_runtest_logreport(report):
    """In the child: each test's outcome (a failure in setup or teardown counts) with its report's text."""
    path = os.environ.get(CHILD)
    if not path or (report.when != "call" and report.passed):
        return
    results = json.loads(Path(path).read_text()) if Path(path).is_file() else {}
    if report.skipped:
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        text = text.removeprefix("Skipped: ")
    else:
        text = report.longreprtext
    if report.when == "call" or not report.passed and results.get(report.nodeid, ("passed",))[0] == "passed":
        results[report.nodeid] = (report.outcome, text, report.duration)
    Path(path).write_text(json.dumps(results))
