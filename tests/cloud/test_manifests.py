"""The k8s/ manifests as `kubectl apply -f k8s/` reads them, checked offline (tests/cloud/k8s_checks.py):

- every document validates strictly: built-in kinds against Kubernetes' schemas, RayJob and PyTorchJob against their
  CRDs (KubeRay, training operator), unknown fields being errors, plus the API server's and operators' offline rules;
- every pod meets the restricted Pod Security Standard, mounts the run folders' claim at /runs and a memory emptyDir
  at /dev/shm, and tolerates the taint of the accelerator it asks for;
- the Jobs' failure policy (2 fails at once; 143 and evictions retried uncounted), the RayJob's private head and
  placement, the PyTorchJob's operator conventions, the Dockerfile's pins matching the RayJob;
- each manifest's train.py command is parsed by train.py's own parser, resolved to its settings, and run in-process
  with a tiny budget: a flag or set name typo in any manifest fails here.
The validators themselves are mutation-tested at the end (a misspelt field, a root pod, a misspelt RayJob field ...).
What only a real cluster proves: k8s/README.md, "What the offline checks prove, and what only a real cluster can".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tests.cloud import k8s_checks

ROOT = k8s_checks.ROOT
if str(ROOT) not in sys.path:  # train.py lives at the repository root
    sys.path.insert(0, str(ROOT))

import train  # noqa: E402

FILES = k8s_checks.manifest_files()
EXPECTED = {"pvc.yaml", "job-gpu.yaml", "job-tpu.yaml", "rayjob.yaml", "pytorchjob.yaml"}
RUN_KINDS = ("Job", "RayJob", "PyTorchJob")
GPU_LABEL = "cloud.google.com/gke-accelerator"


def docs_of(name: str) -> list[dict]:
    return k8s_checks.load_documents(k8s_checks.MANIFESTS / name)


def the(name: str) -> dict:
    (doc,) = docs_of(name)
    return doc


def runs() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path, doc in k8s_checks.iter_manifests() if doc["kind"] in RUN_KINDS]


def run_params() -> list:
    return [pytest.param(name, doc, id=name) for name, doc in runs()]


def test_the_folder_holds_the_documented_manifests():
    assert EXPECTED <= {p.name for p in FILES}, f"k8s/ lacks {EXPECTED - {p.name for p in FILES}}"
    assert (k8s_checks.MANIFESTS / "Dockerfile").is_file() and (k8s_checks.MANIFESTS / "README.md").is_file()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_document_validates_strictly(path):
    docs = k8s_checks.load_documents(path)
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        k8s_checks.validate(doc)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_pod_is_restricted_mounts_the_run_folders_and_tolerates_its_accelerator(path):
    for doc in k8s_checks.load_documents(path):
        for where, pod in k8s_checks.pod_specs(doc):
            where = f"{path.name} {k8s_checks.describe(doc)} {where}"
            k8s_checks.check_restricted(pod, where)
            k8s_checks.check_run_volumes(pod, where)
            k8s_checks.check_accelerators(pod, where)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_container_runs_on_a_read_only_root_with_cpu_memory_and_disk_limited(path):
    """As the image is tested (tests/container: `--read-only`, the run folder and /tmp as volumes): a read-only root
    filesystem, /tmp an emptyDir, HOME and the caches on it; CPUs and memory limited to their requests (Guaranteed
    pods) and the local disk (ephemeral-storage) requested and limited."""
    pods = [(f"{path.name} {k8s_checks.describe(doc)} {where}", pod) for doc in k8s_checks.load_documents(path)
            for where, pod in k8s_checks.pod_specs(doc)]
    for where, pod in pods:
        k8s_checks.check_read_only_root(pod, where)
        k8s_checks.check_resources(pod, where)
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            limits = c["resources"]["limits"]
            assert limits["cpu"] == c["resources"]["requests"]["cpu"] and "ephemeral-storage" in limits, where
    if path.name != "pvc.yaml":
        assert pods, path.name


@pytest.mark.parametrize("name, doc", run_params())
def test_runs_are_labelled_for_kubectl_selectors(name, doc):
    """`kubectl get pods -l app.kubernetes.io/instance=NAME` finds every pod of a run (k8s/README.md)."""
    want = {"app.kubernetes.io/name": "rl", "app.kubernetes.io/instance": doc["metadata"]["name"]}
    assert want.items() <= doc["metadata"].get("labels", {}).items(), name
    for where, template in k8s_checks.pod_templates(doc):
        assert want.items() <= (template.get("metadata") or {}).get("labels", {}).items(), f"{name} {where}"
    for _, pod in k8s_checks.pod_specs(doc):
        for c in pod["containers"]:
            assert c.get("imagePullPolicy") == "IfNotPresent" and c["image"] in ("rl:cpu", "rl:cuda"), (name, c)


@pytest.mark.parametrize("name", ["job-gpu.yaml", "job-tpu.yaml"])
def test_jobs_fail_at_once_on_bad_input_and_retry_preemptions_uncounted(name):
    job = the(name)
    k8s_checks.check_job_failure_policy(job)
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 6
    assert pod["terminationGracePeriodSeconds"] >= 120  # the last checkpoint is written after SIGTERM
    (c,) = pod["containers"]
    assert c["name"] == "train" and c["command"] == ["python", "train.py"]
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in c["env"]
    dshm = {v["name"]: v for v in pod["volumes"]}["dshm"]
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_the_gpu_job_asks_for_one_gke_gpu_node():
    pod = the("job-gpu.yaml")["spec"]["template"]["spec"]
    assert k8s_checks.accelerator_limits(pod) == {"nvidia.com/gpu": 1}
    assert pod["nodeSelector"] == {GPU_LABEL: "nvidia-l4"}
    assert pod["containers"][0]["image"] == "rl:cuda"
    res = pod["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "8" and res["requests"]["memory"] == res["limits"]["memory"] == "32Gi"


def test_the_tpu_job_asks_for_a_tpu_host_and_runs_the_cpu_image():
    """rl has no TPU backend: the CPU image trains on the host's CPUs; the TPU request places the pod (docs/cluster.md,
    k8s/README.md)."""
    pod = the("job-tpu.yaml")["spec"]["template"]["spec"]
    assert k8s_checks.accelerator_limits(pod) == {"google.com/tpu": 4}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                   "cloud.google.com/gke-tpu-topology": "2x2"}
    assert pod["containers"][0]["image"] == "rl:cpu"
    assert "torch_xla" not in (ROOT / "requirements.txt").read_text()  # if this changes, so must docs/cluster.md


def test_every_run_writes_its_own_folder_on_the_volume():
    seen = {}
    for name, doc in runs():
        for argv in k8s_checks.train_argv(doc):
            (out,) = k8s_checks.flag_values(argv, "--output_dir")
            path = PurePosixPath(out)
            assert path.is_absolute() and path.parent == PurePosixPath("/runs") and ".." not in path.parts, (name, out)
            seen.setdefault(out, set()).add(name)
    shared = {out: names for out, names in seen.items() if len(names) > 1}
    assert not shared, f"two manifests would resume each other's run folder: {shared}"


def test_the_rayjob_keeps_its_head_private_and_its_learner_on_the_gpu():
    job = the("rayjob.yaml")
    k8s_checks.check_ray_head_private(job)
    spec, cluster = job["spec"], job["spec"]["rayClusterSpec"]
    (argv,) = k8s_checks.train_argv(job)
    assert k8s_checks.flag_values(argv, "--ray_address") == ["auto"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    assert spec["entrypointNumCpus"] == 1 and spec["entrypointNumGpus"] == 1
    head = cluster["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["name"] == "ray-head"
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert set(groups) == {"cpu-workers", "gpu-learner"}
    for g in groups.values():
        assert g["template"]["spec"]["containers"][0]["name"] == "ray-worker"
    learner = groups["gpu-learner"]
    # the driver's 1 CPU fills the learner pod's Ray CPUs: no collection actor (1 CPU each) is placed beside it
    assert learner["rayStartParams"]["num-cpus"] == str(spec["entrypointNumCpus"])
    assert k8s_checks.accelerator_limits(learner["template"]["spec"]) == {"nvidia.com/gpu": 1}
    assert learner["template"]["spec"]["nodeSelector"] == {GPU_LABEL: "nvidia-l4"}
    cpu = groups["cpu-workers"]
    assert cpu["replicas"] == cpu["minReplicas"] == cpu["maxReplicas"] == 2
    assert k8s_checks.accelerator_limits(cpu["template"]["spec"]) == {}
    # the CPU pods offer Ray (from their CPU request) a CPU for each of the workers (ray_worker_cpus = 1)
    offered = cpu["replicas"] * k8s_checks.quantity(cpu["template"]["spec"]["containers"][0]["resources"]
                                                    ["requests"]["cpu"])
    (workers,) = k8s_checks.flag_values(argv, "--num_workers")
    assert offered >= int(workers) * 1.0, (offered, workers)
    submitter = spec["submitterPodTemplate"]["spec"]
    assert submitter["restartPolicy"] == "Never" and submitter["containers"][0]["image"] == "rl:cpu"


def test_the_rayjob_runs_the_ray_the_image_installs():
    dockerfile = (k8s_checks.MANIFESTS / "Dockerfile").read_text()
    pins = set(re.findall(r"ray\[default\]==([0-9][0-9.]*)", dockerfile))
    version = the("rayjob.yaml")["spec"]["rayClusterSpec"]["rayVersion"]
    assert pins == {version}, f"k8s/Dockerfile installs ray {pins}, the RayJob says rayVersion {version}"
    try:
        import ray
    except ImportError:
        return
    assert ray.__version__ == version, f"the Ray tests run ray {ray.__version__}; the RayJob says {version}"


def test_the_pytorchjob_follows_the_operators_conventions():
    job = the("pytorchjob.yaml")
    spec = job["spec"]
    assert spec["nprocPerNode"] == "1"  # one rank per pod
    assert spec["runPolicy"] == {"backoffLimit": 6, "cleanPodPolicy": "None", "ttlSecondsAfterFinished": 3600}
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] >= 1
    for rtype, rspec in replicas.items():
        assert rspec["restartPolicy"] == "ExitCode", rtype  # 1-127 permanent (2: bad input), 128-255 retried
        pod = rspec["template"]["spec"]
        (c,) = pod["containers"]
        assert c["name"] == "pytorch" and c["command"] == ["python", "train.py"]
        assert {"name": "pytorchjob-port", "containerPort": 23456} in c["ports"]
        assert k8s_checks.accelerator_limits(pod) == {"nvidia.com/gpu": 1}
        assert pod["terminationGracePeriodSeconds"] >= 120
    argvs = k8s_checks.train_argv(job)
    assert len(argvs) == 2 and argvs[0] == argvs[1], "every rank runs the same command"


# the training operator's own template of the init container it adds to every Worker pod (v1.9,
# pkg/controller.v1/pytorch/initcontainer.go), used unless /etc/config/initContainer.yaml exists
OPERATOR_INIT_CONTAINER = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'until nslookup {{.MasterAddr}}; do echo waiting for master; sleep 2; done;']"""


def operator_init_containers(template: str) -> list[dict]:
    """What the operator injects: its Go template filled in (the default image, the Master's name)."""
    filled = template.replace("{{.InitContainerImage}}", "alpine:3.10").replace("{{.MasterAddr}}",
                                                                                   "rl-dppo-pong-master-0")
    return yaml.safe_load(filled)


def test_worker_pods_meet_the_restricted_standard_once_the_operator_uses_our_init_container():
    """The operator adds `init-pytorch` to each Worker pod: with its own template the pod fails the restricted
    standard (no allowPrivilegeEscalation: false, no dropped capabilities); with k8s/operator's it passes."""
    (config,) = k8s_checks.load_documents(k8s_checks.MANIFESTS / "operator" / "pytorch-init-container.yaml")
    k8s_checks.validate(config)
    ours = operator_init_containers(config["data"]["initContainer.yaml"])
    theirs = operator_init_containers(OPERATOR_INIT_CONTAINER)
    assert [c["name"] for c in ours] == [c["name"] for c in theirs] == ["init-pytorch"]
    assert {k: v for k, v in ours[0].items() if k != "securityContext"} == theirs[0]  # the same container
    worker = the("pytorchjob.yaml")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    with pytest.raises(k8s_checks.ManifestError, match="init-pytorch"):
        k8s_checks.check_restricted({**worker, "initContainers": theirs}, "Worker with the operator's template")
    k8s_checks.check_restricted({**worker, "initContainers": ours}, "Worker with k8s/operator's template")
    k8s_checks.check_read_only_root({**worker, "initContainers": ours}, "Worker with k8s/operator's template")
    with pytest.raises(k8s_checks.ManifestError, match="init-pytorch: securityContext.readOnlyRootFilesystem"):
        k8s_checks.check_read_only_root({**worker, "initContainers": theirs}, "Worker with the operator's template")
    assert "kubectl apply -f k8s/" not in config["data"]["initContainer.yaml"]
    assert not (k8s_checks.MANIFESTS / "pytorch-init-container.yaml").exists()  # not applied by `-f k8s/`


def test_the_dockerfile_builds_both_targets_as_the_manifests_expect():
    """What the text says (tests/container builds the cpu target and runs it)."""
    text = (k8s_checks.MANIFESTS / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, flags=re.M)  # overridable: Debian's own packages
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, flags=re.M | re.I)
    names = {name for _, name in stages}
    assert {"cpu", "cuda"} <= names, stages
    assert all(base == "${BASE}" or base in names for base, _ in stages)
    assert "https://download.pytorch.org/whl/cpu" in text and text.count("torch==2.13.0") >= 2
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text()  # the pin the image repeats
    assert re.search(r"apt-get install -y --no-install-recommends wget\s", text)
    for tool in ("pytest", "hypothesis", "ruff", "kubernetes-validate"):  # test tools stay out of the image
        assert not re.search(rf"^{tool}\b", (ROOT / "requirements.txt").read_text(), flags=re.M), tool
        assert re.search(rf"^{tool}\b", (ROOT / "requirements-dev.txt").read_text(), flags=re.M), tool
    targets = set()
    for stage in re.split(r"^FROM\s", text, flags=re.M)[1:]:
        target = re.match(r"\S+\s+AS\s+(cpu|cuda)\s", stage)
        if target:
            targets.add(target.group(1))
            assert re.search(r"^USER 1000\s*$", stage, flags=re.M) and "COPY --from=packages" in stage
            assert "COPY rl /app/rl" in stage and "tests" not in stage  # the code, root-owned; no tests
        if re.match(r"\S+\s+AS\s+packages", stage):
            assert 'pip install $SOURCE -r requirements.txt "ray[default]==' in stage or \
                'requirements.txt "ray[default]==' in stage
    assert targets == {"cpu", "cuda"}
    assert "WORKDIR /app" in text and "PYTHONUNBUFFERED=1" in text and "PYTHONPATH=/app" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "runs", "*.egg-info"} <= set(ignored)


def test_the_readme_s_own_manifests_validate_and_are_restricted():
    """The YAML blocks of k8s/README.md (the TensorBoard pod) meet the same checks as the files."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (k8s_checks.MANIFESTS / "README.md").read_text(), flags=re.M | re.S)
    assert blocks, "k8s/README.md shows the TensorBoard pod as a yaml block"
    for block in blocks:
        for doc in k8s_checks.load_documents(block):
            k8s_checks.validate(doc)
            for where, pod in k8s_checks.pod_specs(doc):
                k8s_checks.check_restricted(pod, f"README {k8s_checks.describe(doc)} {where}")
                k8s_checks.check_read_only_root(pod, f"README {k8s_checks.describe(doc)} {where}")
                k8s_checks.check_resources(pod, f"README {k8s_checks.describe(doc)} {where}")
                volumes = {v["name"]: v for v in pod.get("volumes", [])}
                assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "rl-runs"


# --- the commands, as train.py reads them ---------------------------------------------------------------------------

def parse(argv: list[str]):
    """train.py's own parser; an unknown or misspelt flag is a test failure naming the argument list."""
    try:
        return train.parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"train.py's parser refuses {argv} (exit {exc.code}): see the captured stderr")


@pytest.mark.parametrize("name, doc", run_params())
def test_each_command_parses_and_resolves_its_settings(name, doc, tmp_path):
    """Fast: the command as written (set name, overrides, env id) is what train.py accepts."""
    from rl.resolve import resolve_hparams

    for argv in k8s_checks.train_argv(doc):
        args = parse(argv)
        assert args.hparams and args.output_dir and args.sys == "local", (name, argv)
        resolve_hparams(args, tmp_path / "fresh")  # a ConfigError names the bad setting


# shrinks a run to seconds where the set has these settings: the sets' own rollouts (8 x 128 steps) take ~15 s
# each to collect on a 2-core machine, and a full evaluation game ~10 s; the flags and the set are the manifest's
TINY = {"num_steps": "16", "eval_interval": "0", "max_episode_steps": "40", "checkpoint_interval": "128",
        "log_interval": "128"}
TINY_STEPS = "128"  # one update: a batch of 8 env rollouts x 16 steps
MAX_LOCAL_WORKERS = 2  # a RayJob's workers are actors spread over its CPU pods; here they would be processes on 2 cores


def tiny_argv(argv: list[str], out: Path) -> list[str]:
    """The manifest's arguments with the run folder in `out`, no Ray cluster (--ray_address dropped), at most
    MAX_LOCAL_WORKERS worker processes, and a tiny budget; the manifest's own overrides are kept (TINY after them)."""
    from rl.registry import hparams as sets

    args = parse(argv)
    known = sets[args.hparams]().to_dict()
    overrides, new, tokens = [], [], iter(argv)
    for token in tokens:
        flag, eq, value = token.partition("=")
        if flag in ("--output_dir", "--ray_address", "--num_workers", "--train_steps", "--eval_episodes",
                    "--hparam_override"):
            value = value if eq else next(tokens)
            if flag == "--output_dir":
                new += [flag, str(out)]
            elif flag == "--num_workers":
                new += [flag, str(min(int(value), MAX_LOCAL_WORKERS))]
            elif flag == "--hparam_override" and value:
                overrides.append(value)
            continue  # --ray_address: no cluster here; --train_steps, --eval_episodes: the tiny budget below
        new.append(token)
    overrides += [f"{k}={v}" for k, v in TINY.items() if k in known]
    return [*new, "--train_steps", TINY_STEPS, "--eval_episodes", "1", "--hparam_override", ",".join(overrides)]


@pytest.fixture
def local_process(monkeypatch):
    """No Ray cluster and no torch.distributed ranks from the environment; torch's and BLAS's thread counts (which a
    run sets for its whole process) restored afterwards."""
    import torch
    from threadpoolctl import threadpool_limits

    for var in ("RAY_ADDRESS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    threads = torch.get_num_threads()
    with threadpool_limits(limits=None):  # restores the BLAS pools' sizes on exit
        yield
    torch.set_num_threads(threads)


# 3-8 s each on a 2-core machine (up to ~15 s while it is busy): not `slow`, so a typo fails the quick loop too
@pytest.mark.parametrize("name", [name for name, _ in runs()])
def test_each_command_runs_with_a_tiny_budget(name, tmp_path, local_process, capsys):
    """The manifest's own command, in-process through train.main: parsed, resolved, trained and evaluated."""
    (doc,) = docs_of(name)
    argvs = k8s_checks.train_argv(doc)
    assert all(a == argvs[0] for a in argvs)  # a PyTorchJob's ranks run one command: running it once suffices
    argv = tiny_argv(argvs[0], tmp_path / "run")
    assert train.main(argv) == 0, capsys.readouterr().err[-3000:]
    assert (tmp_path / "run" / "eval.json").is_file() and (tmp_path / "run" / "hparams.json").is_file()


# --- the validators catch what they are for (mutations of a loaded copy) -------------------------------------------

def rejects(check, doc, *args, match: str | None = None):
    with pytest.raises(AssertionError, match=match):
        check(doc, *args)


def test_an_unknown_field_fails_validation():
    job = the("job-gpu.yaml")
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "IfNotPresent"
    rejects(k8s_checks.validate, job, match="imagePullPolicyy")
    pvc = the("pvc.yaml")
    pvc["spec"]["storageClass"] = "standard"  # storageClassName
    rejects(k8s_checks.validate, pvc, match="storageClass")


def test_broken_builtin_values_fail_validation():
    for mutate, match in [
        (lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(memory="32 Gi"),
         "not a quantity"),
        (lambda j: j["spec"]["template"]["spec"].update(restartPolicy="OnFailure"), "restartPolicy: Never"),
        (lambda j: j["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"].update(containerName="trian"), "trian"),
        (lambda j: j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0].update(name="run"), "'run'"),
        (lambda j: j["metadata"].update(name="RL_appo"), "DNS-1123"),
        (lambda j: j["spec"]["template"]["spec"]["containers"][0].update(args="--hparams appo_atari"),
         "list of strings|is not of type"),
    ]:
        job = the("job-gpu.yaml")
        mutate(job)
        rejects(k8s_checks.validate, job, match=match)


def test_a_root_or_privileged_pod_fails_the_restricted_check():
    for mutate, match in [
        (lambda p: p["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
        (lambda p: p["securityContext"].update(runAsUser=0), "runAsUser"),
        (lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "Escalation"),
        (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "SYS_ADMIN"),
        (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged"),
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccomp"),
        (lambda p: p.update(hostNetwork=True), "hostNetwork"),
        (lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
        (lambda p: p["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort"),
        (lambda p: p.pop("automountServiceAccountToken"), "automountServiceAccountToken"),
        (lambda p: p["containers"][0]["env"].append(
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}), "secret"),
        (lambda p: p["volumes"].append({"name": "creds", "secret": {"secretName": "s"}}), "secret"),
    ]:
        pod = the("job-gpu.yaml")["spec"]["template"]["spec"]
        mutate(pod)
        rejects(k8s_checks.check_restricted, pod, match=match)


def test_a_misspelt_or_malformed_custom_resource_fails_validation():
    job = the("rayjob.yaml")
    job["spec"]["shutdownAfterJobFinish"] = job["spec"].pop("shutdownAfterJobFinishes")
    rejects(k8s_checks.validate_custom, job, match="shutdownAfterJobFinish")
    for mutate, match in [
        (lambda s: s["rayClusterSpec"]["headGroupSpec"]["rayStartParams"].update({"num-cpus": 0}), "string"),
        (lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].update(minReplicas=3), "minReplicas"),
        (lambda s: s["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0].update(
            imagePullPolicyy="Always"), "imagePullPolicyy"),
        (lambda s: s.update(shutdownAfterJobFinishes=False), "shutdownAfterJobFinishes"),
        (lambda s: s["submitterPodTemplate"]["spec"].pop("restartPolicy"), "restartPolicy"),
    ]:
        job = the("rayjob.yaml")
        mutate(job["spec"])
        rejects(k8s_checks.validate_custom, job, match=match)
    job = the("rayjob.yaml")
    job["metadata"]["name"] = "r" * 48
    rejects(k8s_checks.validate_custom, job, match="47")
    for mutate, match in [
        (lambda s: s["runPolicy"].update(cleanPodPolicyy="None"), "cleanPodPolicyy"),
        (lambda s: s["pytorchReplicaSpecs"].update(Mastr=s["pytorchReplicaSpecs"].pop("Master")), "Mastr"),
        (lambda s: s["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="train"),
         "pytorch"),
        (lambda s: s["pytorchReplicaSpecs"]["Master"].update(replicas=2), "Master.replicas"),
        (lambda s: s["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "PYTHONUNBUFFERED", "value": "0"}), "duplicate"),
    ]:
        job = the("pytorchjob.yaml")
        mutate(job["spec"])
        rejects(k8s_checks.validate_custom, job, match=match)


def test_a_public_ray_head_fails_the_privacy_check():
    for mutate in [lambda h: h.update(serviceType="LoadBalancer"), lambda h: h.update(serviceType="NodePort"),
                   lambda h: h.update(enableIngress=True)]:
        job = the("rayjob.yaml")
        mutate(job["spec"]["rayClusterSpec"]["headGroupSpec"])
        rejects(k8s_checks.check_ray_head_private, job)


def test_the_conventions_catch_their_breaks():
    job = the("job-gpu.yaml")
    job["spec"]["podFailurePolicy"]["rules"].pop(1)  # 143 -> Ignore
    rejects(k8s_checks.check_job_failure_policy, job, match="143")
    pod = the("job-gpu.yaml")["spec"]["template"]["spec"]
    pod.pop("tolerations")
    rejects(k8s_checks.check_accelerators, pod, match="tolerated")
    pod = the("job-gpu.yaml")["spec"]["template"]["spec"]
    pod["volumes"][1]["emptyDir"].pop("medium")
    rejects(k8s_checks.check_run_volumes, pod, match="/dev/shm")


def test_a_writable_root_or_unlimited_container_fails_its_checks():
    def env(p, name):
        return next(e for e in p["containers"][0]["env"] if e["name"] == name)

    for check, mutate, match in [
        (k8s_checks.check_read_only_root, lambda p: p["containers"][0]["securityContext"].pop(
            "readOnlyRootFilesystem"), "readOnlyRootFilesystem"),
        (k8s_checks.check_read_only_root, lambda p: p["containers"][0]["volumeMounts"].pop(), "/tmp"),
        (k8s_checks.check_read_only_root, lambda p: p["volumes"].__setitem__(-1, {"name": "tmp", "configMap": {
            "name": "c"}}), "/tmp"),
        (k8s_checks.check_read_only_root, lambda p: p["containers"][0]["env"].remove(env(p, "HOME")), "HOME"),
        (k8s_checks.check_read_only_root, lambda p: env(p, "MPLCONFIGDIR").update(value="/home/rl/.mpl"),
         "MPLCONFIGDIR"),
        (k8s_checks.check_resources, lambda p: p["containers"][0]["resources"]["limits"].pop("cpu"), "cpu"),
        (k8s_checks.check_resources, lambda p: p["containers"][0]["resources"]["limits"].update(memory="64Gi"),
         "Guaranteed"),
        (k8s_checks.check_resources, lambda p: p["containers"][0]["resources"]["requests"].pop("ephemeral-storage"),
         "ephemeral-storage"),
    ]:
        pod = the("job-gpu.yaml")["spec"]["template"]["spec"]
        check(pod)  # the file itself passes
        mutate(pod)
        rejects(check, pod, match=match)


def test_a_flag_typo_in_a_manifest_fails_the_command_checks(tmp_path):
    job = the("job-gpu.yaml")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--hparams")] = "--hparam"
    (argv,) = k8s_checks.train_argv(job)
    with pytest.raises(pytest.fail.Exception, match="refuses"):
        parse(argv)
    job = the("rayjob.yaml")
    job["spec"]["entrypoint"] = job["spec"]["entrypoint"].replace("--num_workers", "--num-workers")
    with pytest.raises(pytest.fail.Exception, match="refuses"):
        parse(k8s_checks.train_argv(job)[0])
    job = the("rayjob.yaml")
    job["spec"]["entrypoint"] = job["spec"]["entrypoint"].replace("python train.py", "python3 train.py")
    rejects(k8s_checks.train_argv, job, match="python train.py")


@pytest.mark.parametrize("edit, match", [(("appo_atari", "appo_atarii"), "appo_atarii"),
                                         (("--num_workers", "--hparam_override lrr=1e-4 --num_workers"), "lrr")])
def test_a_set_or_setting_typo_in_a_manifest_fails_the_command_checks(edit, match, tmp_path):
    from rl.resolve import resolve_hparams

    job = the("rayjob.yaml")
    job["spec"]["entrypoint"] = job["spec"]["entrypoint"].replace(*edit)
    (argv,) = k8s_checks.train_argv(job)
    with pytest.raises(Exception, match=match):
        resolve_hparams(parse(argv), tmp_path / "fresh")


def test_missing_crds_fail_loudly_not_skip(monkeypatch, tmp_path):
    monkeypatch.setattr(k8s_checks, "SCHEMAS", tmp_path / "nowhere")
    k8s_checks._crds.cache_clear()
    k8s_checks.crd_schema.cache_clear()
    try:
        rejects(k8s_checks.validate, the("rayjob.yaml"), match="CRD schemas are missing")
    finally:
        k8s_checks._crds.cache_clear()
        k8s_checks.crd_schema.cache_clear()


def test_load_documents_reads_files_and_text():
    text = (k8s_checks.MANIFESTS / "pvc.yaml").read_text()
    assert k8s_checks.load_documents(text) == k8s_checks.load_documents(k8s_checks.MANIFESTS / "pvc.yaml")
    assert k8s_checks.load_documents(str(k8s_checks.MANIFESTS / "pvc.yaml"))[0]["kind"] == "PersistentVolumeClaim"
    assert k8s_checks.load_documents("---\n" + text + "\n---\n") == k8s_checks.load_documents(text)
