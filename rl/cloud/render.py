"""`--sys k8s`: the run's own command line, rendered into the manifests of k8s/ (they are the templates: what
`kubectl apply -f k8s/...` runs as it stands is what this changes, field by field).

The kind follows from where the run's processes go:
- one node (`--nodes 1`, the default): a batch/v1 Job (k8s/job-gpu.yaml; k8s/job-tpu.yaml for a TPU host);
- collection or asynchronous gradient workers over several nodes, or `--ray_address`: a KubeRay RayJob
  (k8s/rayjob.yaml: the learner is the driver, on the accelerator pod; the workers are Ray actors on CPU pods);
- synchronous gradient workers over several nodes (DPPO: `num_workers` 0): a Kubeflow PyTorchJob
  (k8s/pytorchjob.yaml: one rank a pod, one accelerator a rank; the operator sets RANK and WORLD_SIZE);
- a search (`--tune N`) over several nodes: an Indexed Job of `--nodes` pods (k8s/job-gpu.yaml), each running the
  same search on one study in an Optuna journal file on the shared volume (`--tune_storage`, unless given:
  rl/tune/study.py), taking trials until N are done; each pod runs as many trials at once as it has CPUs.

The train.py command travels as a list of arguments (a RayJob's entrypoint, which bash and then /bin/sh read, as
plain words where every argument is safe from both, else carried whole by `python -m rl.cloud.entry`), so every flag
and `--hparam_override` arrives exactly as typed; only the cluster's own flags are dropped,
`--output_dir` becomes the run's folder on the shared volume, and `--ray_address` becomes `auto` inside a RayJob.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from rl.cloud.accelerators import Accelerator, parse_accelerator
from rl.errors import ConfigError

TEMPLATES = Path(__file__).resolve().parents[2] / "k8s"
RUNS_MOUNT = "/runs"  # where every pod mounts the run folders' volume (k8s/pvc.yaml)
# flags of train.py that say where and how to submit: they stay on this machine
CLUSTER_FLAGS = ("--sys", "--image", "--namespace", "--run_name", "--accelerator", "--nodes", "--cpus", "--memory",
                 "--ephemeral_storage", "--node_selector", "--dry_run")
EXPECT_CUDA = "RL_EXPECT_CUDA"  # set in GPU pods: train.py fails in one line where torch finds no CUDA device
TTL_S = 3600  # a finished Job or PyTorchJob is deleted an hour after (its logs with it), freeing its name
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # DNS-1035: Services (PyTorchJob, Ray head) need a leading letter
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # DNS-1123 label, at most 63 characters
QUANTITY = re.compile(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?")  # what --memory and --ephemeral_storage accept
# local disk of each pod that runs train.py or Ray (requested = limited): /tmp (caches, Ray's session folder and its
# spilled objects) and the container logs; the root filesystem is read-only and the run folder is on the claim
EPHEMERAL_STORAGE = "10Gi"
# longest names the controllers accept: a Job's name is a label value (63); KubeRay derives RayCluster and Service
# names from a RayJob's (47); the training operator names Services NAME-worker-N (63 - len("-worker-") - 7)
MAX_NAME = {"Job": 63, "RayJob": 47, "PyTorchJob": 48}


@dataclass
class Plan:
    """Everything the manifests need, decided from the flags and the resolved settings."""

    kind: str  # Job, RayJob, PyTorchJob
    name: str
    namespace: str | None  # None: the namespace of kubectl's current context
    image: str
    accelerator: Accelerator
    train_args: list[str]  # train.py's arguments inside the pod
    cpus: int
    memory: str
    ephemeral_storage: str = EPHEMERAL_STORAGE
    replicas: int = 1  # PyTorchJob: ranks (one pod each); RayJob: CPU worker pods
    worker_cpus: int = 0  # RayJob: CPUs of each CPU worker pod
    node_selector: dict | None = None  # the accelerator pods' (None: the accelerator's own rule, `_place`)

    @property
    def output_dir(self) -> str:
        return f"{RUNS_MOUNT}/{self.name}"


def load_template(name: str) -> dict:
    path = TEMPLATES / name
    if not path.exists():
        raise ConfigError(f"the manifest template {path} is missing: --sys k8s renders the k8s/ folder of a clone "
                          f"of this repository")
    return yaml.safe_load(path.read_text())


def run_name(text: str) -> str:
    """A name Kubernetes accepts, from an output folder's name: runs/Pong v5 -> pong-v5."""
    name = re.sub(r"[^a-z0-9-]+", "-", Path(text.rstrip("/")).name.lower()).strip("-")
    name = re.sub(r"-+", "-", name)
    return name if name[:1].isalpha() else f"rl-{name}".rstrip("-")


def check_name(name: str, kind: str) -> None:
    limit = MAX_NAME[kind]
    if not NAME.match(name) or len(name) > limit:
        raise ConfigError(f"--run_name {name!r} is a name Kubernetes would refuse for a {kind}: use at most {limit} "
                          f"lower-case letters, digits and '-', starting with a letter and not ending with '-'")


def check_namespace(namespace: str | None) -> None:
    """--namespace as the API server would take it (a DNS-1123 label), refused here rather than put in a path."""
    if namespace is not None and (not NAMESPACE.match(namespace) or len(namespace) > 63):
        raise ConfigError(f"--namespace {namespace!r} is a namespace name Kubernetes would refuse: use at most 63 "
                          f"lower-case letters, digits and '-', starting and ending with a letter or digit (e.g. "
                          f"team-a), or leave it out for the current context's namespace")


def check_quantity(flag: str, value: str, example: str) -> str:
    if not QUANTITY.fullmatch(value):
        raise ConfigError(f"{flag} {value!r} is not a Kubernetes quantity: e.g. {example}, 512Mi")
    return value


def cluster_argv(argv: list[str], output_dir: str, ray: bool) -> list[str]:
    """train.py's arguments for the pod: `argv` as typed, less the cluster's flags, with `--output_dir` on the
    volume and, for a RayJob, `--ray_address auto`. Tokens are kept whole (`--flag=value` too), never re-quoted."""
    out: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        flag, eq, _ = token.partition("=")
        if flag in CLUSTER_FLAGS + ("--output_dir", "--ray_address"):
            if not eq:
                next(tokens, None)  # its value
            if flag == "--output_dir":
                out += ["--output_dir", output_dir]
            continue
        out.append(token)
    return out + (["--ray_address", "auto"] if ray else [])


def choose_kind(hp, accelerator: Accelerator, nodes: int) -> str:
    from rl.trainer import uses_scheme

    if accelerator.is_tpu:
        if nodes != 1 or hp.ray_address:
            raise ConfigError("a TPU run is one Job on one TPU host (--nodes 1, no --ray_address): rl has no TPU "
                              "backend and trains on the host's CPUs (k8s/README.md)")
        return "Job"
    if hp.ray_address or (nodes > 1 and uses_scheme(hp)):
        return "RayJob"
    return "Job" if nodes == 1 else "PyTorchJob"


def plan(args, argv: list[str], hp) -> Plan:
    """Decide the kind, name, image and sizes of the run's manifests."""
    check_namespace(args.namespace)
    accelerator = parse_accelerator(args.accelerator)
    nodes = 1 if args.nodes is None else args.nodes
    if nodes < 1:
        raise ConfigError(f"--nodes must be at least 1, got {nodes}")
    tune = getattr(args, "tune", None) is not None
    if tune and hp.ray_address:
        raise ConfigError("a search runs its trials in its own pods: --ray_address does not apply to --tune")
    kind = "Job" if tune else choose_kind(hp, accelerator, nodes)
    if kind == "PyTorchJob" and args.copies > 1:
        raise ConfigError("--copies runs independent seeds in one pod; with --nodes > 1 the pods are one run's ranks: "
                          "submit each copy with --nodes 1, or drop --copies")
    name = args.run_name or run_name(args.output_dir)
    check_name(name, kind)
    image = args.image or ("rl:cuda" if accelerator.is_gpu else "rl:cpu")
    # the learner's pod: itself and its worker processes (a RayJob's workers have pods of their own)
    cpus = args.cpus or (2 if kind == "RayJob" else max(2, 1 + hp.num_workers))
    memory = check_quantity("--memory", args.memory or "16Gi", "16Gi")
    storage = check_quantity("--ephemeral_storage", getattr(args, "ephemeral_storage", None) or EPHEMERAL_STORAGE,
                             "10Gi")
    p = Plan(kind, name, args.namespace, image, accelerator, [], cpus, memory, storage,
             node_selector=parse_node_selector(getattr(args, "node_selector", None)))
    p.train_args = cluster_argv(argv, p.output_dir, ray=kind == "RayJob")
    if tune and nodes > 1:  # the pods of an Indexed Job share one study
        p.replicas = nodes
        if not getattr(args, "tune_storage", None):
            p.train_args += ["--tune_storage", f"{p.output_dir}/study.journal"]
        if getattr(args, "tune_jobs", None) is None:  # the pod's CPUs, not its node's (os.cpu_count in a pod)
            p.train_args += ["--tune_jobs", str(max(1, cpus // (1 + hp.num_workers)))]
    elif kind == "PyTorchJob":
        p.replicas = nodes * max(1, accelerator.count)  # one rank a pod, one accelerator a rank
    elif kind == "RayJob":
        p.replicas = max(1, nodes - 1)  # CPU pods for the workers; the learner has the accelerator pod
        p.worker_cpus = max(1, math.ceil(max(1, hp.num_workers) * hp.ray_worker_cpus / p.replicas))
    return p


# --- the manifests -------------------------------------------------------------------------------------------------

def _size(container: dict, cpus: int, memory: str, storage: str, accelerator: Accelerator, per_pod: int) -> None:
    """CPUs, memory, local disk and `per_pod` of the accelerator, each limited to what it requests: a Guaranteed pod,
    the last one a node under pressure evicts, and one that cannot crowd out its neighbours."""
    requests = {"cpu": str(cpus), "memory": memory, "ephemeral-storage": storage}
    if accelerator.resource and per_pod:
        requests[accelerator.resource] = str(per_pod)
    container["resources"] = {"requests": requests, "limits": dict(requests)}  # two dicts: no YAML alias


def _storage(container: dict, storage: str) -> None:
    """The local disk of a container whose other sizes the template keeps (the Ray head)."""
    for part in ("requests", "limits"):
        container.setdefault("resources", {}).setdefault(part, {})["ephemeral-storage"] = storage


def parse_node_selector(text: str | None) -> dict | None:
    """`--node_selector KEY=VALUE[,KEY=VALUE]` -> {KEY: VALUE}; "" -> {} (none); None -> None (not given)."""
    if text is None:
        return None
    selector = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        key, eq, value = entry.partition("=")
        if not eq or not key.strip() or not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_./]*", key.strip()) \
                or not re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value.strip()):
            raise ConfigError(f"bad --node_selector entry {entry!r}: expected KEY=VALUE[,KEY=VALUE] with node label "
                              f"keys and values (e.g. nvidia.com/gpu.product=NVIDIA-L4)")
        selector[key.strip()] = value.strip()
    return selector


def _place(pod: dict, accelerator: Accelerator, selector: dict | None = None) -> None:
    """Toleration of the accelerator, and a node selector: `--node_selector` where given; for a TPU, GKE's TPU labels
    (TPUs are GKE's); for a GPU none, since the nvidia.com/gpu request alone places the pod on a GPU node on any
    cloud (GKE's label would keep it Pending, silently, on EKS, AKS or a cluster of one's own). CPU pods: none."""
    pod.pop("nodeSelector", None)
    pod.pop("tolerations", None)
    if accelerator.resource:
        pod["tolerations"] = [accelerator.toleration]
        chosen = selector if selector is not None else (dict(accelerator.node_selector) if accelerator.is_tpu else {})
        if chosen:
            pod["nodeSelector"] = dict(chosen)


def _expect_cuda(container: dict, accelerator: Accelerator) -> None:
    """A GPU pod's train.py must find CUDA: without it (the rl:cpu image, no driver) the run would be a silent CPU
    run on a GPU node."""
    env = [e for e in container.get("env") or [] if e.get("name") != EXPECT_CUDA]
    if accelerator.is_gpu:
        env.append({"name": EXPECT_CUDA, "value": "1"})
    container["env"] = env


def _shm(pod: dict, memory: str) -> None:
    """/dev/shm (a memory emptyDir, which counts against the pod's memory) sized to half the pod's memory."""
    for volume in pod.get("volumes") or []:
        if volume.get("name") == "dshm":
            volume["emptyDir"]["sizeLimit"] = half(memory)


def half(quantity: str) -> str:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity)
    number, unit = float(m.group(1)), m.group(2) or ""
    smaller = {"Ti": "Gi", "Gi": "Mi", "Mi": "Ki", "T": "G", "G": "M", "M": "k"}
    if unit in smaller:
        return f"{int(number * 1024 / 2) if unit.endswith('i') else int(number * 1000 / 2)}{smaller[unit]}"
    return str(max(1, int(number / 2))) + unit


def _label(meta: dict, name: str) -> None:
    meta.setdefault("labels", {})["app.kubernetes.io/instance"] = name


def _container(pod: dict, name: str) -> dict:
    for c in pod["containers"]:
        if c["name"] == name:
            return c
    raise ConfigError(f"the k8s/ templates have no container named {name!r}: restore them from the repository")


def _metadata(doc: dict, p: Plan) -> None:
    doc["metadata"]["name"] = p.name
    if p.namespace:
        doc["metadata"]["namespace"] = p.namespace
    _label(doc["metadata"], p.name)


def render_job(p: Plan) -> dict:
    doc = load_template("job-tpu.yaml" if p.accelerator.is_tpu else "job-gpu.yaml")
    _metadata(doc, p)
    template = doc["spec"]["template"]
    _label(template.setdefault("metadata", {}), p.name)
    pod = template["spec"]
    if p.replicas > 1:  # a search's pods: one Job of `replicas` indexed pods, all at once
        doc["spec"].update({"completionMode": "Indexed", "completions": p.replicas, "parallelism": p.replicas})
    c = _container(pod, "train")
    c["image"], c["args"] = p.image, list(p.train_args)
    _size(c, p.cpus, p.memory, p.ephemeral_storage, p.accelerator, p.accelerator.count)
    _place(pod, p.accelerator, p.node_selector)
    _expect_cuda(c, p.accelerator)
    _shm(pod, p.memory)
    doc["spec"]["ttlSecondsAfterFinished"] = TTL_S
    return doc


SHELL_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # what bash and then /bin/sh both leave as it is


def entrypoint(train_args: list[str]) -> str:
    """A RayJob's entrypoint: `python train.py ARGS` where every argument survives KubeRay's bash and then Ray's
    /bin/sh unchanged, else the same command carried whole by `python -m rl.cloud.entry` (rl/cloud/entry.py)."""
    if all(SHELL_SAFE.fullmatch(a) for a in train_args):
        return " ".join(["python", "train.py", *train_args])
    from rl.cloud.entry import encode

    return f"python -m rl.cloud.entry {encode(train_args)}"


def render_rayjob(p: Plan) -> dict:
    doc = load_template("rayjob.yaml")
    _metadata(doc, p)
    spec = doc["spec"]
    spec["entrypoint"] = entrypoint(p.train_args)
    spec["entrypointNumCpus"] = 1
    spec.pop("entrypointNumGpus", None)
    if p.accelerator.is_gpu:
        spec["entrypointNumGpus"] = p.accelerator.count  # the driver (the learner) lands on the accelerator pod
    cluster = spec["rayClusterSpec"]
    for group in cluster["workerGroupSpecs"]:
        _label(group["template"].setdefault("metadata", {}), p.name)
        pod = group["template"]["spec"]
        c = _container(pod, "ray-worker")
        c["image"] = p.image
        _shm(pod, p.memory)
        if group["groupName"] == "cpu-workers":
            group["replicas"] = group["minReplicas"] = group["maxReplicas"] = p.replicas
            _size(c, p.worker_cpus, p.memory, p.ephemeral_storage, Accelerator(), 0)
        else:  # the learner's pod
            _size(c, p.cpus, p.memory, p.ephemeral_storage, p.accelerator, p.accelerator.count)
            _place(pod, p.accelerator, p.node_selector)
            _expect_cuda(c, p.accelerator)
    head = cluster["headGroupSpec"]["template"]
    _storage(_container(head["spec"], "ray-head"), p.ephemeral_storage)  # the head keeps Ray's logs in /tmp/ray
    for pod_template in [head, spec.get("submitterPodTemplate")]:  # all on --image
        if pod_template:
            _label(pod_template.setdefault("metadata", {}), p.name)
            for c in pod_template["spec"]["containers"]:
                c["image"] = p.image
    return doc


def render_pytorchjob(p: Plan) -> dict:
    doc = load_template("pytorchjob.yaml")
    _metadata(doc, p)
    replicas = doc["spec"]["pytorchReplicaSpecs"]
    replicas["Master"]["replicas"] = 1
    replicas["Worker"]["replicas"] = p.replicas - 1
    for spec in replicas.values():
        _label(spec["template"].setdefault("metadata", {}), p.name)
        pod = spec["template"]["spec"]
        c = _container(pod, "pytorch")
        c["image"], c["args"] = p.image, list(p.train_args)
        _size(c, p.cpus, p.memory, p.ephemeral_storage, p.accelerator, 1 if p.accelerator.resource else 0)
        _place(pod, p.accelerator, p.node_selector)
        _expect_cuda(c, p.accelerator)
        _shm(pod, p.memory)
    doc["spec"].setdefault("runPolicy", {})["ttlSecondsAfterFinished"] = TTL_S
    return doc


def render(p: Plan) -> list[dict]:
    """The volume claim for the run folders, then the run's job."""
    pvc = load_template("pvc.yaml")
    if p.namespace:
        pvc["metadata"]["namespace"] = p.namespace
    job = {"Job": render_job, "RayJob": render_rayjob, "PyTorchJob": render_pytorchjob}[p.kind](p)
    return [pvc, job]


def to_yaml(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=1_000_000)
