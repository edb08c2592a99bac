"""The Ray transport (rl/parallel/transports/ray.py) on a local two-node cluster (the `ray_cluster` fixture in
conftest.py): the learner of rl/parallel/learner.py driven step by step with a real agent, its workers as Ray actors.

Shipments of the right kind arrive from actors placed by their custom resource on the worker node; synchronous
collection has policy lag 0; a killed actor, or one whose call is older than worker_timeout, is replaced and training
goes on; a worker that cannot start ends the run with its error in one line; close() leaves no actor alive. No
assertion depends on how fast anything runs: the deadlines only keep a broken run from hanging the suite.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hparams  # noqa: F401 - registers the sets
from rl.errors import ConfigError
from rl.parallel.transports.ray_cluster import parse_resources
from rl.resolve import read_record
from tests.parallel.scripted import (
    ACTIONS,
    OBS,
    check_every_publish_reaches_the_worker,
    next_shipment,
    shipments_continue,
)
from tests.parallel.scripted import make_learner as scripted_learner

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------------- helpers
def make_learner(name: str, address: str, **settings):
    """rl.parallel.learner.Learner of set `name` with 2 workers as Ray actors (as rl/run.py builds it)."""
    from rl.envs import make_env
    from rl.envs.episode_stats import EpisodeStats
    from rl.parallel.learner import Learner, learner_hparams
    from rl.parallel.roles import make_worker
    from rl.registry import agents
    from rl.registry import hparams as sets

    hp = sets[name]()
    hp.num_workers, hp.ray_address, hp.seed = 2, address, 0
    for k, v in settings.items():
        setattr(hp, k, v)
    env = make_env(hp, num_envs=1, vector_mode="sync")
    spaces = env.single_observation_space, env.single_action_space
    env.close()
    lhp = learner_hparams(hp)
    agent = agents[hp.agent](lhp, *spaces, lhp.num_envs, seed=0)
    return Learner(hp, spaces, agent, EpisodeStats(1), seed=0, make_worker=make_worker, transport="ray")


class Recorder:
    """Wraps a transport's receive: every shipment's (kind, worker, version) as it arrives."""

    def __init__(self, transport):
        self.seen: list[tuple[str, int, int]] = []
        self.receive = transport.receive
        transport.receive = self

    def __call__(self, timeout: float = 0.5):
        shipment = self.receive(timeout)
        if shipment is not None:
            self.seen.append((shipment.kind, shipment.worker, shipment.version))
        return shipment


def run_until(learner, condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout:g} s (clock: {learner.clock})"
        learner.step()


def node_of(actor) -> str:
    import ray

    return ray.get(actor.node.remote(), timeout=60)


def alive_worker_actors_connected() -> list[str]:
    """Ids of the rl actors (collection and gradient workers) the cluster holds ALIVE (read from the GCS)."""
    import ray._private.state

    return [a for a, info in ray._private.state.actors().items()
            if info.get("State") == "ALIVE" and str(info.get("ActorClassName", "")).endswith(("WorkerActor",
                                                                                               "RankActor"))]


def alive_worker_actors(address: str, settle: float = 30) -> list[str]:
    """The same through a connection of our own, once none is left alive or after `settle` s (ray.kill is
    asynchronous)."""
    import ray

    ray.init(address=address, logging_level="warning")
    try:
        deadline = time.monotonic() + settle
        while (alive := alive_worker_actors_connected()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return alive
    finally:
        ray.shutdown()


# ---------------------------------------------------------------------------------------------------- settings
def test_worker_resources_parse_and_reject_bad_strings():
    assert parse_resources("") == {}
    assert parse_resources("cpu_node:1") == {"cpu_node": 1.0}
    assert parse_resources(" cpu_node:1 ; accelerator_type:A100:0.5 ;") == {"cpu_node": 1.0,
                                                                             "accelerator_type:A100": 0.5}
    for bad in ("cpu_node", "cpu_node:", ":1", "cpu_node:x", "cpu_node:0", "a:1;a:2", "cpu_node=1"):
        with pytest.raises(ConfigError) as err:
            parse_resources(bad)
        assert "\n" not in str(err.value) and "NAME:AMOUNT" in str(err.value)


@pytest.mark.ray
def test_an_unreachable_cluster_is_one_config_error_line():
    pytest.importorskip("ray", reason="Ray is not installed (bash setup.sh --ray)")
    import socket

    from rl.parallel.transports.ray import RayTransport
    from rl.registry import hparams as sets

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hp = sets["dqn_cartpole"]()
    hp.ray_address = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        RayTransport(hp).start([], None, None, {}, 0, False)
    message = str(err.value)
    assert "\n" not in message and f"cannot reach the Ray cluster at 127.0.0.1:{port}" in message
    assert "ray start --head" in message and "--ray_address" in message
    assert time.monotonic() - t0 < 30


# ---------------------------------------------------------------------------------------------------- on a cluster
@pytest.mark.ray
def test_sync_rollouts_from_the_worker_node_have_policy_lag_zero(ray_cluster):
    learner = make_learner("ppo_cartpole", ray_cluster.address, col_communication="sync",
                           ray_worker_resources="cpu_node:1")
    try:
        seen = Recorder(learner.transport)
        assert {node_of(a) for a in learner.transport.actors()} == {ray_cluster.worker_node}
        run_until(learner, lambda: learner.agent.updates >= 3, "3 updates")
        assert {k for k, _, _ in seen.seen} == {"rollout"}
        assert {w for _, w, _ in seen.seen} == {0, 1}
        assert list(learner.lags) and set(learner.lags) == {0}, list(learner.lags)
        # each round acted with the weights of the previous round's update: versions 0, 1, 2, ...
        assert [v for _, _, v in seen.seen[:6]] == [0, 0, 1, 1, 2, 2]
        assert learner.agent.env_steps >= 3 * 2 * 8 * 32
        assert learner.transport.restarts == 0
    finally:
        learner.close()


@pytest.mark.ray
def test_a_killed_actor_is_replaced_and_apex_training_goes_on(ray_cluster):
    import ray

    learner = make_learner("dqn_cartpole", ray_cluster.address, col_communication="async",
                           ray_worker_resources="cpu_node:1", learning_starts=200)
    transport = learner.transport
    try:
        seen = Recorder(transport)
        run_until(learner, lambda: len(seen.seen) >= 4, "4 shipments")
        assert {k for k, _, _ in seen.seen} == {"rows"}
        victim = transport.actors()[0]
        ray.kill(victim, no_restart=True)
        run_until(learner, lambda: transport.restarts >= 1, "a restart")
        assert learner.clock["scheme/restarts"] == 1
        assert transport.actors()[0] is not victim
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(victim.node.remote(), timeout=30)
        assert node_of(transport.actors()[0]) == ray_cluster.worker_node
        before, steps = len(seen.seen), learner.agent.env_steps
        run_until(learner, lambda: [w for _, w, _ in seen.seen[before:]].count(0) >= 2,
                  "shipments of the restarted worker")
        assert learner.agent.env_steps > steps
        run_until(learner, lambda: learner.agent.updates > 0, "an update after the restart")
        assert transport.restarts == 1 and transport.handles[0].failures == 0
    finally:
        learner.close()


@pytest.mark.ray
def test_a_call_older_than_worker_timeout_is_hung_its_actor_replaced(ray_cluster):
    import ray

    learner = make_learner("dqn_cartpole", ray_cluster.address, worker_timeout=60.0)
    transport = learner.transport
    try:
        # worker 1 placed (its hang clock running: under load a shipment of worker 0 may come first)
        run_until(learner, lambda: learner.agent.env_steps > 0
                  and transport._placed(transport.handles[1], time.monotonic()), "a shipment from a placed worker 1")
        h = transport.handles[1]
        victim = h.actor
        assert h.calls  # async: its next calls are in flight as soon as a shipment returns
        h.issued -= 1000.0  # as if issued long ago
        transport._check_hung()  # what receive() runs when nothing is pending (a step may find shipments waiting)
        assert transport.restarts == 1 and h.restarts == 1 and h.actor is not victim
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(victim.node.remote(), timeout=30)
        run_until(learner, lambda: h.failures == 0 and len(transport.handles[1].calls) > 0
                  and learner.clock["scheme/restarts"] == 1, "the replacement's first shipment")
    finally:
        learner.close()


@pytest.mark.ray
def test_a_worker_that_cannot_start_ends_the_run_in_one_line(ray_cluster):
    from rl.parallel.roles import make_worker
    from rl.parallel.spec import WorkerSpec
    from rl.parallel.transports.ray import RayTransport
    from rl.registry import hparams as sets

    hp = sets["dqn_cartpole"]()
    hp.ray_address, hp.env = ray_cluster.address, "NoSuchEnvAnywhere-v0"
    transport = RayTransport(hp)
    try:
        transport.start([WorkerSpec("rows", hp, 0, 1000, "ray")], make_worker, lambda spec: None, {}, 0, False)
        deadline = time.monotonic() + 180
        with pytest.raises(ConfigError) as err:
            while time.monotonic() < deadline:
                transport.receive(0.5)
        message = str(err.value)
        assert "\n" not in message and message.startswith("collection worker 0 failed 3 times in a row: ")
        assert "NoSuchEnvAnywhere" in message, message
        assert transport.restarts == 2
    finally:
        transport.close()


@pytest.mark.ray
def test_close_leaves_no_actor_alive_and_the_cluster_running(ray_cluster):
    import ray

    learner = make_learner("ppo_cartpole", "auto")  # the fixture's head wrote its address where "auto" looks
    ids = [a._actor_id.hex() for a in learner.transport.actors()]
    seen = Recorder(learner.transport)
    run_until(learner, lambda: {w for _, w, _ in seen.seen} == {0, 1}, "a shipment of each worker")
    assert set(ids) <= set(alive_worker_actors_connected())
    learner.close()
    assert not ray.is_initialized()  # the driver disconnected
    alive = alive_worker_actors(ray_cluster.address)  # the cluster still answers
    assert not set(ids) & set(alive) and not alive, alive


def dies(actor, method: str, timeout: float = 30) -> bool:
    """The actor answers no more within `timeout` s (ray.kill is asynchronous: a call may still get through)."""
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(getattr(actor, method).remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.5)
    return False


class Blocker:
    """Holds resources on the cluster until killed."""

    def ready(self) -> bool:
        return True


@pytest.mark.ray
def test_workers_waiting_for_a_node_are_not_hung_and_start_when_one_is_free(ray_cluster, capsys):
    """As on an autoscaling cluster: no node has a worker's resources free yet. Its hang clock starts when Ray has
    placed it, so waiting 3 x worker_timeout ends nothing; once the resources are free the workers ship."""
    import ray

    ray.init(address=ray_cluster.address, logging_level="warning")
    blocker = ray.remote(num_cpus=0, resources={"cpu_node": 4})(Blocker).remote()  # all of the worker node's
    learner = None
    try:
        ray.get(blocker.ready.remote(), timeout=60)
        learner = make_learner("dqn_cartpole", ray_cluster.address, ray_worker_resources="cpu_node:1",
                               worker_timeout=1.0)
        transport = learner.transport
        deadline = time.monotonic() + 4.5  # more than 3 x worker_timeout: three "hangs" in a row ended the run
        while time.monotonic() < deadline:
            learner.step()
        assert transport.restarts == 0 and not any(h.placed for h in transport.handles)
        assert "worker 0: waiting for a node with CPU:1, cpu_node:1 free" in capsys.readouterr().out
        ray.kill(blocker)
        seen = Recorder(transport)
        run_until(learner, lambda: {w for _, w, _ in seen.seen} == {0, 1}, "a shipment of each worker")
        assert transport.restarts == 0 and all(h.placed for h in transport.handles)
    finally:
        if learner is not None:
            learner.close()
        ray.kill(blocker)
        ray.shutdown()


@pytest.mark.ray
def test_the_weight_store_lives_on_the_learners_node_is_restarted_without_blame_and_close_kills_it(ray_cluster):
    """The driver was connected before the run (close() does not disconnect it): the store must still die."""
    import ray

    ray.init(address=ray_cluster.address, logging_level="warning")
    learner = None
    try:
        learner = make_learner("dqn_cartpole", ray_cluster.address, ray_worker_resources="cpu_node:1",
                               learning_starts=200)
        transport = learner.transport
        here = ray.get_runtime_context().get_node_id()
        assert ray.get(transport.store.node.remote(), timeout=60) == here
        seen = Recorder(transport)
        run_until(learner, lambda: len(seen.seen) >= 2, "2 shipments")
        first = transport.store
        ray.kill(first, no_restart=True)
        # ray.kill is asynchronous: until the store is gone, fills that reach it and shipments already made still
        # arrive (a loaded machine once took four shipments); count from its death
        assert dies(first, "get")
        run_until(learner, lambda: transport.store_restarts or transport.restarts, "restart of the store or a worker")
        before = len(seen.seen)
        run_until(learner, lambda: len(seen.seen) >= before + 4, "shipments after the store was restarted")
        assert transport.store_restarts == 1 and transport.store is not first
        assert transport.restarts == 0 and all(h.failures == 0 for h in transport.handles)  # no worker blamed
        assert ray.get(transport.store.node.remote(), timeout=60) == here
        store = transport.store
        learner.close()
        learner = None
        assert ray.is_initialized()  # this test's own connection stays
        assert dies(store, "get")
    finally:
        if learner is not None:
            learner.close()
        ray.shutdown()


@pytest.mark.ray
def test_ray_learner_cpus_hold_the_learners_node_for_it(ray_cluster):
    """Without a seat the workers may fill the learner's own node; with ray_learner_cpus those CPUs are held there."""
    import ray

    ray.init(address=ray_cluster.address, logging_level="warning")
    learner = None
    try:
        here = ray.get_runtime_context().get_node_id()
        cpus = {n["NodeID"]: n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]}[here]
        learner = make_learner("dqn_cartpole", ray_cluster.address, ray_learner_cpus=cpus)  # the node's every CPU
        transport = learner.transport
        assert ray.get(transport.seat.node.remote(), timeout=60) == here
        seen = Recorder(transport)
        run_until(learner, lambda: {w for _, w, _ in seen.seen} == {0, 1}, "a shipment of each worker")
        assert all(node_of(a) != here for a in transport.actors())  # no worker took the learner's CPUs
        seat = transport.seat
        learner.close()
        learner = None
        assert dies(seat, "ready")
    finally:
        if learner is not None:
            learner.close()
        ray.shutdown()


RANK_SCRIPT = """
import sys
import hparams, rl
from rl.registry import hparams as sets
from rl.parallel.collective import launch
from rl.parallel.follower import follow as real_follow
from functools import partial
from pathlib import Path

def broken(rank, address):
    raise ValueError(f"rank {rank} broke before it met its group")

hp = sets["ppo_cartpole"]().parse(sys.argv[2])
hp.ray_address = sys.argv[1]
follow = broken if sys.argv[3] == "broken" else partial(real_follow, hp, Path(sys.argv[4]))
group, children = launch(hp, follow)
"""


@pytest.mark.ray
@pytest.mark.parametrize("case", ["fails", "unplaceable"])
def test_a_ray_rank_that_fails_or_cannot_be_placed_ends_the_run_in_one_line_not_after_group_timeout(
        ray_cluster, tmp_path, case):
    """Rank 0 waits in gloo's rendezvous for group_timeout_s (600 here) for ranks that never come: the rank's own
    error, or the resources no node has, ends it at once instead, with a crash's status (not 129, which a job
    retries)."""
    override = "num_grad_workers=2,grad_communication=sync,group_timeout_s=600,ray_worker_resources=cpu_node:1"
    if case == "unplaceable":
        override = override.replace("group_timeout_s=600", "group_timeout_s=5") + ",ray_rank_resources=nowhere:1"
    began = time.monotonic()
    res = subprocess.run([sys.executable, "-c", RANK_SCRIPT, ray_cluster.address, override,
                          "broken" if case == "fails" else "real", str(tmp_path / "run")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 1, res.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    if case == "fails":
        assert errors[0] == "error: rank 1 (a Ray actor) failed: ValueError: rank 1 broke before it met its group"
        assert time.monotonic() - began < 120
    else:
        assert errors[0].startswith("error: rank 1 (a Ray actor) was not placed within group_timeout_s=5 s")
        assert "nowhere:1" in errors[0] and "cpu_node" not in errors[0]  # the ranks' resources, not the workers'
    assert not alive_worker_actors(ray_cluster.address)


# ---------------------------------------------------------------------------------------------------- end to end
RAY_RUNS = {  # name: (set, num_workers, steps, overrides): 2 collection workers for an on-policy, a replay and an
    # Atari set; DPPO's second rank as a Ray actor in a torch.distributed group with this process (the cluster's
    # 3 CPUs hold one rank actor, or 2 workers, at a time); Atari's games cut at 100 agent steps, so that its final
    # evaluation is not a whole game of Pong played by an untrained policy
    "ppo_cartpole": ("ppo_cartpole", 2, 2000, ""),
    "dqn_cartpole": ("dqn_cartpole", 2, 2000, ""),
    "ppo_atari": ("ppo_atari", 2, 512, ",worker_envs=2,num_steps=32,batch_size=64,epochs=1,max_episode_steps=100"),
    "dppo_cartpole": ("ppo_cartpole", 0, 1024, ",num_grad_workers=2,grad_communication=sync,target_kl=0.02,"
                      "ray_rank_resources=cpu_node:1"),
    "impala_vtrace": ("impala_cartpole", 2, 2048, ",max_policy_lag=2"),  # V-trace, stale data dropped past lag 2
    "a3c": ("a3c_cartpole", 0, 1000, ""),  # async gradient workers as actors
}


@pytest.mark.ray
@pytest.mark.parametrize("name", RAY_RUNS)
def test_train_py_with_ray_address_runs_on_the_cluster(ray_cluster, tmp_path, name):
    out = tmp_path / "run"
    hparams_set, workers, steps, extra = RAY_RUNS[name]
    proc = subprocess.run([sys.executable, "train.py", "--hparams", hparams_set, "--num_workers", str(workers),
                           "--ray_address", ray_cluster.address, "--train_steps", str(steps), "--eval_episodes", "1",
                           "--output_dir", str(out), "--hparam_override", "ray_worker_resources=cpu_node:1" + extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (out / "progress.csv").exists()
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= steps
    assert not alive_worker_actors(ray_cluster.address)


@pytest.mark.ray
def test_ctrl_c_on_ray_saves_exits_130_and_leaves_no_actor(ray_cluster, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "train.py", "--hparams", "ppo_cartpole", "--num_workers", "2",
                             "--ray_address", ray_cluster.address, "--train_steps", "10000000", "--output_dir",
                             str(out), "--hparam_override", "ray_worker_resources=cpu_node:1,log_interval=256"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "progress.csv").exists() or len((out / "progress.csv").read_text().splitlines()) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, text[-3000:]
    assert "saved a checkpoint" in text
    assert list((out / "checkpoints").glob("ckpt_*.pt"))
    assert not alive_worker_actors(ray_cluster.address)
    # the same command resumes on the cluster (a shorter budget, so that it ends)
    saved = read_record(out / "hparams.json")
    assert not saved["hparams"]["ray_address"] or saved["hparams"]["ray_address"] == ray_cluster.address
    import torch

    step = torch.load(sorted((out / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)["step"]
    again = subprocess.run([sys.executable, "train.py", "--hparams", "ppo_cartpole", "--num_workers", "2",
                            "--ray_address", ray_cluster.address, "--train_steps", str(step + 512), "--output_dir",
                            str(out), "--eval_episodes", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"resuming from step {step}" in again.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= step + 512


@pytest.mark.ray
def test_train_py_with_an_unreachable_ray_address_says_so_in_one_line(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (bash setup.sh --ray)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "train.py", "--hparams", "dqn_cartpole", "--num_workers", "2",
                           "--ray_address", f"127.0.0.1:{port}", "--train_steps", "100", "--output_dir",
                           str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "cannot reach the Ray cluster" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.ray
def test_the_ray_transport_delivers_every_shipment_and_every_publish(ray_cluster):
    """Bugs caught: the Ray transport dropping every second shipment (async collection goes on with half the data,
    and n-step windows and rollouts join steps that are not consecutive), or publishing only the first weights."""
    from rl.parallel.buffers import make_buffer
    from rl.parallel.roles import make_worker
    from rl.parallel.transports.ray import RayTransport

    learner, agent, _ = scripted_learner("ppo_cartpole", "num_workers=1,num_envs=1,num_steps=8,"
                                         f"col_communication=async,ray_address={ray_cluster.address}")
    spec = learner.specs[0]

    def buffer(s):
        return make_buffer("rollouts", s.hp, OBS, ACTIONS, None, 0)

    transport = RayTransport(learner.hp)
    transport.start([spec], make_worker, buffer, agent.acting_state(), 0, False)
    deadline = time.monotonic() + 300
    try:
        rollouts = []
        while len(rollouts) < 8:
            shipment = next_shipment(transport, deadline)
            rollouts.append(shipment.data)
            transport.release(shipment)
        assert shipments_continue(rollouts) >= 3
    finally:
        transport.close()
    check_every_publish_reaches_the_worker(RayTransport(learner.hp), agent, spec, buffer)
