"""What `--sys k8s --dry_run True` prints: the k8s/ templates filled from the command line. Every rendered document
is validated strictly (built-in kinds with kubernetes-validate, RayJob/PyTorchJob against the CRDs of KubeRay
and the training operator), every pod meets the restricted Pod Security Standard, and the train.py command inside is the
one typed, token for token, parsed by train.py's own parser (and, for one, run with a tiny budget)."""

from __future__ import annotations

import shlex

import pytest
import yaml

from tests.cloud import k8s_checks

TRICKY = ["--hparam_override", 'lr=1e-4,ray_worker_resources="cpu_node:1"', "--env", "ALE/Pong-v5", "--seed", "3"]


def render(capsys, *argv: str) -> list[dict]:
    import train

    assert train.main(["--sys", "k8s", "--output_dir", "runs/My Pong v5", *argv, "--dry_run", "True"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    for doc in docs:
        k8s_checks.validate(doc)
        for where, pod in k8s_checks.pod_specs(doc):
            k8s_checks.check_restricted(pod, where)
            k8s_checks.check_read_only_root(pod, where)
            k8s_checks.check_resources(pod, where)
    return docs


def containers(job: dict) -> list[dict]:
    return [c for _, pod in k8s_checks.pod_specs(job) for c in pod["containers"]]


def test_one_gpu_node_is_a_job_carrying_the_command_exactly(capsys):
    pvc, job = render(capsys, "--hparams", "appo_atari", *TRICKY, "--accelerator", "nvidia-h100-80gb:8")
    assert pvc["kind"] == "PersistentVolumeClaim" and job["kind"] == "Job"
    assert job["metadata"]["name"] == "my-pong-v5" and "namespace" not in job["metadata"]  # kubectl's own
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["--output_dir", "/runs/my-pong-v5", "--hparams", "appo_atari", *TRICKY]
    assert k8s_checks.train_argv(job) == [c["args"]]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8" and c["image"] == "rl:cuda"
    # no node selector: the nvidia.com/gpu request alone places the pod on a GPU node, on GKE, EKS, AKS or one's own
    # cluster (GKE's label would leave it Pending elsewhere, with no error)
    assert "nodeSelector" not in pod
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"name": "RL_EXPECT_CUDA", "value": "1"} in c["env"]  # no CUDA there: one line, exit 2
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600  # a finished Job frees its name
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "8192Mi"  # half of 16Gi


def test_node_selector_picks_the_nodes_on_any_cloud(capsys):
    _, job = render(capsys, "--hparams", "appo_atari", "--accelerator", "nvidia-l4:1", "--node_selector",
                    "nvidia.com/gpu.product=NVIDIA-L4,pool=gpu")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4", "pool": "gpu"}
    _, job = render(capsys, "--hparams", "appo_atari", "--accelerator", "nvidia-l4:1", "--node_selector",
                    "cloud.google.com/gke-accelerator=nvidia-l4")  # GKE with node auto-provisioning: name the type
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}


def test_a_cpu_job_asks_for_no_accelerator(capsys):
    _, job = render(capsys, "--hparams", "dqn_cartpole", "--cpus", "4", "--memory", "2Gi", "--namespace", "lab")
    pod = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert job["metadata"]["namespace"] == "lab"
    sizes = {"cpu": "4", "memory": "2Gi", "ephemeral-storage": "10Gi"}  # limited to what it requests: Guaranteed
    assert pod["containers"][0]["resources"] == {"requests": sizes, "limits": sizes}
    assert pod["containers"][0]["image"] == "rl:cpu"
    assert not [e for e in pod["containers"][0]["env"] if e["name"] == "RL_EXPECT_CUDA"]
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "1024Mi"


def test_a_tpu_host_is_a_job_on_gke_tpu_nodes(capsys):
    _, job = render(capsys, "--hparams", "ppo_atari", "--accelerator", "tpu-v6e:4")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                   "cloud.google.com/gke-tpu-topology": "2x2"}
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"


def test_workers_over_nodes_are_a_rayjob(capsys):
    _, job = render(capsys, "--hparams", "appo_atari", *TRICKY, "--num_workers", "16", "--nodes", "3",
                    "--accelerator", "nvidia-l4:1")
    assert job["kind"] == "RayJob"
    spec = job["spec"]
    (argv,) = k8s_checks.train_argv(job)  # as the driver gets it, through KubeRay's bash and Ray's /bin/sh
    assert argv == ["--output_dir", "/runs/my-pong-v5", "--hparams", "appo_atari", *TRICKY, "--num_workers", "16",
                    "--ray_address", "auto"]
    assert spec["entrypointNumGpus"] == 1  # the driver, our learner, runs on the GPU pod
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    cpu = groups["cpu-workers"]
    assert cpu["replicas"] == cpu["minReplicas"] == cpu["maxReplicas"] == 2  # --nodes 3: two CPU pods, one GPU pod
    assert cpu["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "8"  # 16 workers of 1 CPU
    k8s_checks.check_ray_head_private(job)


def test_ray_address_alone_makes_a_rayjob_with_auto(capsys):
    _, job = render(capsys, "--hparams", "appo_atari", "--ray_address", "10.0.0.5:6379")
    tokens = shlex.split(job["spec"]["entrypoint"])  # every word safe: the plain command
    assert tokens[:2] == ["python", "train.py"]
    assert job["kind"] == "RayJob" and tokens[-2:] == ["--ray_address", "auto"] and "10.0.0.5:6379" not in tokens


SHELL_SYNTAX = ["--hparam_override", """hidden_sizes=[64,64],ray_rank_resources="a;b $HOME x=(1,2) 'q' \\\\n" """,
                "--seed", "3"]  # a string setting that no run here reads: what matters is that it arrives whole


def test_a_rayjob_entrypoint_carries_shell_syntax_through_bash_and_sh(capsys, tmp_path):
    """KubeRay's submitter reads the entrypoint with bash, `ray job submit` joins the words, and Ray's supervisor
    runs them with /bin/sh: the real shells here give back the arguments as typed, every character."""
    _, job = render(capsys, "--hparams", "appo_atari", *SHELL_SYNTAX, "--nodes", "2")
    assert job["spec"]["entrypoint"].startswith("python -m rl.cloud.entry ")
    (argv,) = k8s_checks.train_argv(job)
    assert argv == ["--output_dir", "/runs/my-pong-v5", "--hparams", "appo_atari", *SHELL_SYNTAX, "--ray_address",
                    "auto"]
    import subprocess
    import sys

    from rl.cloud.entry import encode

    res = subprocess.run([sys.executable, "-m", "rl.cloud.entry", encode(["--list"])], cwd=k8s_checks.ROOT,
                         capture_output=True, text=True, timeout=120)  # the form runs train.py with them
    assert res.returncode == 0 and "agents" in res.stdout, res.stderr[-2000:]


def test_every_pod_of_a_rayjob_carries_its_name_and_a_cpu_run_keeps_the_driver_on_the_learner_pod(capsys):
    _, job = render(capsys, "--hparams", "appo_atari", "--num_workers", "8", "--nodes", "3", "--memory", "6Gi")
    for where, template in k8s_checks.pod_templates(job):
        assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "my-pong-v5", where
    spec = job["spec"]
    assert "entrypointNumGpus" not in spec and spec["entrypointResources"] == '{"rl_learner": 1}'
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert groups["gpu-learner"]["rayStartParams"]["resources"] == '"{\\"rl_learner\\": 1}"'
    assert "rl_learner" not in str(groups["cpu-workers"]["rayStartParams"])
    learner = groups["gpu-learner"]["template"]["spec"]
    assert learner["containers"][0]["resources"]["requests"]["cpu"] == "2"  # the 8 workers run on the CPU pods
    for group in groups.values():
        dshm = next(v for v in group["template"]["spec"]["volumes"] if v["name"] == "dshm")
        assert dshm["emptyDir"]["sizeLimit"] == "3072Mi"  # half of --memory


def test_a_gpu_pod_without_cuda_is_one_line_not_a_silent_cpu_run(tmp_path, monkeypatch):
    import subprocess
    import sys

    from rl.errors import ConfigError
    from rl.trainer import check_cuda_expected

    check_cuda_expected("auto", "cpu", environ={})  # no GPU asked for: the CPU is fine
    check_cuda_expected("cpu", "cpu", environ={"RL_EXPECT_CUDA": "1"})  # device=cpu on purpose
    with pytest.raises(ConfigError, match="asked for a GPU"):
        check_cuda_expected("auto", "cpu", environ={"RL_EXPECT_CUDA": "1"})
    import torch

    if torch.cuda.is_available():
        return
    res = subprocess.run([sys.executable, "train.py", "--hparams", "ppo_cartpole", "--hparam_override",
                          "device=auto", "--output_dir", str(tmp_path / "run"), "--train_steps", "64"],
                         cwd=k8s_checks.ROOT, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "RL_EXPECT_CUDA": "1"})
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr.strip()
    assert err.startswith("error: this pod asked for a GPU") and len(err.splitlines()) == 1


def test_gradient_ranks_over_nodes_are_a_pytorchjob(capsys):
    _, job = render(capsys, "--hparams", "ppo_atari", *TRICKY, "--nodes", "2", "--accelerator", "nvidia-l4:4")
    assert job["kind"] == "PyTorchJob"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 7  # one rank per GPU
    for c in containers(job):
        assert c["name"] == "pytorch" and c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert k8s_checks.train_argv(job) == [["--output_dir", "/runs/my-pong-v5", "--hparams", "ppo_atari", *TRICKY]] * 2


EVERY_KIND = {
    "gpu-job": ("--hparams", "appo_atari", "--accelerator", "nvidia-l4:1"),
    "cpu-job": ("--hparams", "dqn_cartpole", "--cpus", "4", "--memory", "2Gi"),
    "tpu-job": ("--hparams", "ppo_atari", "--accelerator", "tpu-v6e:4"),
    "search": ("--hparams", "ppo_cartpole", "--tune", "4", "--tune_space", "lr=loguniform(1e-4,1e-2)", "--nodes", "2"),
    "rayjob": ("--hparams", "appo_atari", "--num_workers", "8", "--nodes", "3", "--accelerator", "nvidia-l4:1"),
    "pytorchjob": ("--hparams", "ppo_atari", "--nodes", "2", "--accelerator", "nvidia-l4:1")}


@pytest.mark.parametrize("argv", EVERY_KIND.values(), ids=EVERY_KIND.keys())
def test_every_rendered_container_runs_read_only_with_cpu_and_disk_limited(capsys, argv):
    """Job, Indexed Job, RayJob (head, worker groups, submitter) and PyTorchJob (Master, Worker): the root filesystem
    read-only with /tmp an emptyDir (HOME on it), CPUs limited to their request and the local disk requested and
    limited (10Gi where train.py or Ray runs)."""
    _, job = render(capsys, *argv)
    pods = k8s_checks.pod_specs(job)
    assert len(pods) == {"RayJob": 4, "PyTorchJob": 2, "Job": 1}[job["kind"]]
    for where, pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            (tmp,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert "emptyDir" in volumes[tmp["name"]] and not tmp.get("readOnly"), where
            assert {"name": "HOME", "value": "/tmp"} in c["env"], where
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            assert limits["cpu"] == requests["cpu"] and limits["memory"] == requests["memory"], where
            disk = "1Gi" if where == "spec.submitterPodTemplate.spec" else "10Gi"
            assert limits["ephemeral-storage"] == requests["ephemeral-storage"] == disk, where


def test_the_local_disk_follows_its_flag_and_stays_on_this_machine(capsys):
    """--ephemeral_storage (where train.py's parser has it) sizes every pod that runs train.py or Ray; the flag is the
    cluster's, not the pod command's."""
    from pathlib import Path

    import rl.cloud.render as rendering
    import train
    from rl.errors import ConfigError
    from rl.resolve import resolve_hparams

    argv = ["--sys", "k8s", "--output_dir", "runs/x", "--hparams", "appo_atari", "--nodes", "3"]
    args = train.parser().parse_args(argv)
    hp = resolve_hparams(args, Path(args.output_dir))
    args.ephemeral_storage = "50Gi"
    _, job = rendering.render(rendering.plan(args, argv, hp))
    disks = {where: c["resources"]["limits"]["ephemeral-storage"] for where, pod in k8s_checks.pod_specs(job)
             for c in pod["containers"]}
    assert disks.pop("spec.submitterPodTemplate.spec") == "1Gi" and set(disks.values()) == {"50Gi"}, disks
    assert rendering.cluster_argv(["--ephemeral_storage", "50Gi", "--seed", "1", "--ephemeral_storage=5Gi"],
                                  "/runs/x", ray=False) == ["--seed", "1"]
    args.ephemeral_storage = "lots"
    with pytest.raises(ConfigError, match="--ephemeral_storage 'lots' is not a Kubernetes quantity"):
        rendering.plan(args, argv, hp)


@pytest.mark.parametrize("namespace", ["Bad_NS", "a/b", "-team", "team-", "team.a", "n" * 64, ""])
def test_a_namespace_kubernetes_would_refuse_is_one_line(capsys, namespace):
    import train

    assert train.main(["--sys", "k8s", "--output_dir", "runs/x", "--hparams", "appo_atari", f"--namespace={namespace}",
                       "--dry_run", "True"]) == 2
    out, err = capsys.readouterr()
    err = err.strip()
    assert not out and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: --namespace {namespace!r}") and "at most 63 lower-case letters" in err, err


def test_a_bad_namespace_is_refused_before_any_connection(capsys, monkeypatch, tmp_path):
    """Without --dry_run too: the name is judged here, not put in an API path (no kubeconfig is read)."""
    import train

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert train.main(["--sys", "k8s", "--output_dir", "runs/x", "--hparams", "appo_atari", "--namespace",
                       "a/b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --namespace 'a/b'") and "kubeconfig" not in err, err
    _, job = render(capsys, "--hparams", "appo_atari", "--namespace", "n" * 63)  # the longest valid one
    assert job["metadata"]["namespace"] == "n" * 63


@pytest.mark.parametrize("argv, needle", [
    (("--hparams", "ppo_atari", "--accelerator", "tpu-v6e:4", "--nodes", "2"), "one TPU host"),
    (("--hparams", "ppo_atari", "--nodes", "2", "--copies", "2"), "--copies"),
    (("--hparams", "ppo_atari", "--nodes", "0"), "--nodes must be at least 1"),
    (("--hparams", "ppo_atari", "--memory", "lots"), "not a Kubernetes quantity"),
    (("--hparams", "appo_atari", "--nodes", "2", "--run_name", "r" * 48), "at most 47")])
def test_refused_before_rendering(capsys, argv, needle):
    import train

    assert train.main(["--sys", "k8s", "--output_dir", "runs/x", *argv, "--dry_run", "True"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_the_rendered_command_runs(capsys, tmp_path):
    """The pod's command, parsed by train.py's parser and run in-process with a tiny budget."""
    import train

    _, job = render(capsys, "--hparams", "ppo_cartpole", "--hparam_override", "num_envs=2,num_steps=16")
    (argv,) = k8s_checks.train_argv(job)
    argv = [str(tmp_path / "run") if a.startswith("/runs/") else a for a in argv]
    train.parser().parse_args(argv)
    assert train.main([*argv, "--train_steps", "64", "--eval_episodes", "1"]) == 0
    assert (tmp_path / "run" / "eval.json").exists()


def test_a_search_over_nodes_is_an_indexed_job_sharing_one_journal_study(capsys):
    space = "lr=loguniform(1e-4,1e-2),batch_size=choice(64,256)"
    _, job = render(capsys, "--hparams", "ppo_cartpole", "--tune", "12", "--tune_space", space, "--nodes", "3",
                    "--cpus", "4")
    assert job["kind"] == "Job"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    k8s_checks.check_job_failure_policy(job)
    k8s_checks.check_run_volumes(spec["template"]["spec"])
    (argv,) = k8s_checks.train_argv(job)
    assert argv == ["--output_dir", "/runs/my-pong-v5", "--hparams", "ppo_cartpole", "--tune", "12", "--tune_space",
                    space, "--tune_storage", "/runs/my-pong-v5/study.journal", "--tune_jobs", "4"]
    args = __import__("train").parser().parse_args(argv)
    assert (args.tune, args.tune_storage, args.tune_jobs) == (12, "/runs/my-pong-v5/study.journal", 4)
    # one node: the plain Job of a search in study.db, as before; a URL the user gives is kept
    _, one = render(capsys, "--hparams", "ppo_cartpole", "--tune", "12", "--tune_space", space)
    assert "completionMode" not in one["spec"] and "--tune_storage" not in k8s_checks.train_argv(one)[0]
    _, db = render(capsys, "--hparams", "ppo_cartpole", "--tune", "12", "--tune_space", space, "--nodes", "2",
                   "--tune_storage", "postgresql://rl@db/optuna")
    assert k8s_checks.flag_values(k8s_checks.train_argv(db)[0], "--tune_storage") == ["postgresql://rl@db/optuna"]


def test_a_bad_search_is_refused_before_rendering(capsys):
    import train

    for extra, needle in [(["--tune_space", "lr=uniform(0,1)"], "'lr' must be"),
                          (["--tune_space", "env=choice(CartPole-v1,NoSuchEnv-v0)"], "NoSuchEnv-v0"),
                          (["--tune_space", "lr=uniform(0.1,1)", "--ray_address", "auto"], "--ray_address does not")]:
        assert train.main(["--sys", "k8s", "--output_dir", "runs/x", "--hparams", "ppo_cartpole", "--tune", "4",
                           "--nodes", "2", *extra, "--dry_run", "True"]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, (extra, err)
