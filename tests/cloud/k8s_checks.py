"""Offline checks of Kubernetes manifests: the files in k8s/ and what `train.py --sys k8s` renders from them.

- `validate(doc)`: strict schema validation. Built-in kinds (Job, PersistentVolumeClaim ...) with kubernetes-validate
  against Kubernetes' own OpenAPI schemas (strict: an unknown field is an error); custom resources (RayJob,
  RayCluster, PyTorchJob) with jsonschema against the openAPIV3Schema of their CRD (KubeRay, training operator), made
  strict by `additionalProperties: false` on every object that lists its properties. On top of the schemas, the
  rules of the API server and of the operators that need no cluster: names (DNS-1123 / DNS-1035 and the operators'
  length limits), label syntax, containers and volumes that refer to each other, a Job's pod failure policy, KubeRay's
  and the training operator's own spec checks.
- `pod_specs(doc)`: every pod template in a Job, RayJob (head, worker groups, submitter), RayCluster or PyTorchJob.
- `check_restricted(podspec)`: the `restricted` Pod Security Standard, plus our own rules (no service account token,
  no secrets).
- `train_argv(doc)`: the train.py arguments each pod runs, for parsing by train.py's own parser.
- `check_ray_head_private(doc)`, `check_run_volumes(podspec)`, `check_accelerators(podspec)`,
  `check_job_failure_policy(job)`, `check_read_only_root(podspec)`, `check_resources(podspec)`: the conventions of
  k8s/README.md.

Every check raises AssertionError with a message naming the document and the field. What these checks cannot see
(scheduling, image pulls, drivers, CEL rules and webhooks, storage classes, networking) is in k8s/README.md, "What the
offline checks prove, and what only a real cluster can".
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path, PurePosixPath

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]  # the repository
MANIFESTS = ROOT / "k8s"
# the CRDs (data files, not part of this repository): ../shared/k8s-schemas beside the clone (README.txt there)
SCHEMAS = ROOT.parent / "shared" / "k8s-schemas"
# Kubernetes versions the built-in kinds are validated against: 1.31 (podFailurePolicy GA, the oldest minor still
# offered by the big clouds' extended support) and the newest kubernetes-validate knows
K8S_VERSIONS = ("1.31", kubernetes_validate.latest_version())
CUSTOM_KINDS = {"RayJob", "RayCluster", "PyTorchJob"}

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# longest names the controllers accept: KubeRay derives RayCluster (<= 53) and Service names from a RayJob's
# (MaxRayJobNameLength = 53 - 6, ray-operator/controllers/ray/utils/constant.go); a Job's name is a label value
MAX_NAME = {"RayJob": 47, "RayCluster": 53, "Job": 63}

# the restricted Pod Security Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
ACCELERATORS = ("nvidia.com/gpu", "google.com/tpu")  # extended resources, each with its node taint


class ManifestError(AssertionError):
    """A manifest that a cluster (its API server, an operator) would refuse, or that breaks our conventions."""


def fail(doc_or_where, problems: list[str] | str) -> None:
    problems = [problems] if isinstance(problems, str) else problems
    if problems:
        where = describe(doc_or_where) if isinstance(doc_or_where, dict) else str(doc_or_where)
        raise ManifestError(f"{where}:\n  " + "\n  ".join(problems))


def describe(doc: dict) -> str:
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


# --- loading --------------------------------------------------------------------------------------------------------

def load_documents(path_or_text: str | Path) -> list[dict]:
    """The YAML documents of a file (a Path, or a str naming an existing file) or of YAML text; empty ones dropped."""
    if isinstance(path_or_text, Path) or ("\n" not in path_or_text and Path(path_or_text).is_file()):
        text = Path(path_or_text).read_text()
    else:
        text = path_or_text
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for d in docs:
        if not isinstance(d, dict):
            raise ManifestError(f"a YAML document that is not a mapping: {d!r:.200}")
    return docs


def manifest_files() -> list[Path]:
    return sorted(MANIFESTS.glob("*.yaml"))


# --- validation -----------------------------------------------------------------------------------------------------

def validate(doc: dict) -> None:
    """Strict validation of one document, built-in or custom, with the API server's and operators' offline rules."""
    for key in ("apiVersion", "kind", "metadata"):
        if key not in doc:
            fail(doc, f"no {key}")
    if doc["kind"] in CUSTOM_KINDS:
        validate_custom(doc)
    else:
        validate_builtin(doc)


def validate_builtin(doc: dict, versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    """kubernetes-validate in strict mode (unknown fields are errors) against each of `versions`, then the API
    server's checks that the OpenAPI schema does not express (names, labels, references, Job rules)."""
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:  # carries the attributes of jsonschema's error
            path = "/".join(str(p) for p in exc.absolute_path)
            fail(doc, f"Kubernetes {version} schema, at {path or '(top)'}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            fail(doc, f"no Kubernetes {version} schema for apiVersion {doc.get('apiVersion')!r} kind "
                      f"{doc.get('kind')!r}: {exc}")
    problems = check_metadata(doc, dns1035=False)
    if doc["kind"] == "Job":
        problems += job_rules(doc)
    if doc["kind"] == "PersistentVolumeClaim":
        problems += resource_problems((doc.get("spec") or {}).get("resources"), "spec.resources")
    for where, pod in pod_specs(doc):
        problems += [f"{where}: {p}" for p in pod_rules(pod)]
    for where, template in pod_templates(doc):
        problems += [f"{where}.metadata: {p}" for p in label_problems((template.get("metadata") or {}).get("labels"))]
    fail(doc, problems)


def validate_custom(doc: dict) -> None:
    """jsonschema against the CRD's openAPIV3Schema made strict, then the operator's own checks that need no
    cluster, then each pod template against Kubernetes' own PodTemplate schema."""
    schema = crd_schema(doc.get("apiVersion", ""), doc.get("kind", ""))
    errors = sorted(strict_validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    problems = [f"CRD schema, at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]
    fail(doc, problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else []))
    problems = check_metadata(doc, dns1035=True)
    problems += {"RayJob": rayjob_rules, "RayCluster": raycluster_rules, "PyTorchJob": pytorchjob_rules}[doc["kind"]](
        doc)
    for where, template in pod_templates(doc):
        problems += [f"{where}.spec: {p}" for p in pod_rules(template.get("spec") or {})]
        problems += [f"{where}.metadata: {p}" for p in label_problems((template.get("metadata") or {}).get("labels"))]
    fail(doc, problems)
    for where, template in pod_templates(doc):  # the pod spec as Kubernetes itself reads it
        try:
            validate_builtin({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
                              "template": template})
        except ManifestError as exc:
            fail(doc, f"{where}: {exc}")


@functools.cache
def _crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> CRD, from every YAML file in SCHEMAS."""
    if not SCHEMAS.is_dir():
        raise ManifestError(
            f"the CRD schemas are missing: {SCHEMAS} does not exist. The custom resources (RayJob, PyTorchJob) are "
            f"validated against the CRDs kept in the folder `shared/k8s-schemas` beside this repository "
            f"({ROOT.parent}); check it out there (README.txt in it names the upstream files and commits). This is a "
            f"failure, not a skip: without them the RayJob and PyTorchJob manifests are not checked at all.")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds = {}
    for path in sorted(SCHEMAS.glob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=loader):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                crds[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return crds


@functools.cache
def crd_schema(api_version: str, kind: str) -> dict:
    """The CRD's openAPIV3Schema for this apiVersion (group/version) and kind, made strict."""
    group, _, version = api_version.rpartition("/")
    crd = _crds().get((group, kind))
    if crd is None:
        known = ", ".join(f"{k} ({g})" for g, k in sorted(_crds()))
        raise ManifestError(f"no CRD for kind {kind!r} of group {group!r} in {SCHEMAS} (it has {known})")
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions or not versions[version].get("served", True):
        raise ManifestError(f"{kind} apiVersion {api_version!r}: the CRD serves {sorted(versions)}")
    return strict_schema(versions[version]["schema"]["openAPIV3Schema"])


def strict_schema(schema: dict) -> dict:
    """A copy in which every object schema that lists `properties` and says nothing about other keys
    (additionalProperties, x-kubernetes-preserve-unknown-fields) refuses unknown keys, as the API server's pruning
    would silently drop them; `nullable: true` becomes a null in `type`."""
    out = copy.deepcopy(schema)

    def walk(node):
        if not isinstance(node, dict):
            return
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        for sub in (node.get("properties") or {}).values():
            walk(sub)
        for key in ("items", "additionalProperties", "not"):
            walk(node.get(key))
        for key in ("anyOf", "allOf", "oneOf"):
            for sub in node.get(key) or []:
                walk(sub)

    walk(out)
    return out


def _list_map_keys(validator, keys, instance, schema):
    """x-kubernetes-list-type: map: no two items with the same keys (two containers named alike, two env vars ...)."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(instance, list):
        return
    seen = set()
    for item in instance:
        if isinstance(item, dict):
            key = tuple(repr(item.get(k)) for k in keys)
            if key in seen:
                yield jsonschema.ValidationError(f"duplicate item for keys {keys}: {dict(zip(keys, key))}")
            seen.add(key)


def _list_type(validator, kind, instance, schema):
    if kind == "set" and isinstance(instance, list):
        items = [repr(i) for i in instance]
        if len(set(items)) != len(items):
            yield jsonschema.ValidationError(f"duplicate items in a set: {instance}")


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys, "x-kubernetes-list-type": _list_type})


def strict_validator(schema: dict) -> jsonschema.protocols.Validator:
    return StrictValidator(schema)


# --- rules the schemas do not express -------------------------------------------------------------------------------

def label_problems(labels) -> list[str]:
    problems = []
    for key, value in (labels or {}).items():
        prefix, _, name = str(key).rpartition("/")
        if prefix and (len(prefix) > 253 or not all(DNS1123_LABEL.match(p) for p in prefix.split("."))):
            problems.append(f"label key {key!r}: its prefix is not a DNS-1123 subdomain")
        if not LABEL_NAME.match(name) or len(name) > 63:
            problems.append(f"label key {key!r} is not a valid label name")
        if not isinstance(value, str) or len(value) > 63 or (value and not LABEL_NAME.match(value)):
            problems.append(f"label {key}={value!r}: not a valid label value (a string of at most 63 characters)")
    return problems


def check_metadata(doc: dict, dns1035: bool) -> list[str]:
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    problems = []
    limit = MAX_NAME.get(doc.get("kind"), 63 if dns1035 else 253)
    pattern = DNS1035_LABEL if dns1035 else None
    if not isinstance(name, str) or not name:
        problems.append("metadata.name is missing")
    elif len(name) > limit:
        problems.append(f"metadata.name {name!r} is longer than {limit} characters")
    elif pattern is not None and not pattern.match(name):
        problems.append(f"metadata.name {name!r} is not a DNS-1035 label (lower-case letters, digits and '-', "
                        f"starting with a letter), as the operator requires")
    elif pattern is None and not all(DNS1123_LABEL.match(part) for part in name.split(".")):
        problems.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    if "namespace" in meta and not (isinstance(meta["namespace"], str) and DNS1123_LABEL.match(meta["namespace"])
                                    and len(meta["namespace"]) <= 63):
        problems.append(f"metadata.namespace {meta['namespace']!r} is not a DNS-1123 label")
    problems += label_problems(meta.get("labels"))
    return problems


QUANTITY = re.compile(r"^(?P<num>[+]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
SUFFIX = {"": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6,
          "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
          "Pi": 2**50, "Ei": 2**60}


def quantity(value) -> Decimal:
    """A Kubernetes resource quantity ("8", 500m, 32Gi, 1e3, or a number) as a Decimal; ValueError if malformed."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a quantity: {value!r}")
    m = QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    suffix = m.group("suffix") or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(m.group("num")) * Decimal(10) ** int(suffix[1:])
    return Decimal(m.group("num")) * SUFFIX[suffix]


def resource_problems(resources: dict | None, at: str) -> list[str]:
    """Quantities that parse; requests no larger than limits; extended resources (NAME/...) whole and requested
    exactly as limited (the API server's rules)."""
    problems = []
    parsed: dict[str, dict[str, Decimal]] = {}
    for part in ("requests", "limits"):
        for name, value in ((resources or {}).get(part) or {}).items():
            try:
                parsed.setdefault(part, {})[name] = quantity(value)
            except ValueError as exc:
                problems.append(f"{at}: {part}.{name}: {exc}")
                continue
            if "/" in name and "kubernetes.io/" not in name and parsed[part][name] != int(parsed[part][name]):
                problems.append(f"{at}: {part}.{name} must be a whole number")
    requests, limits = parsed.get("requests", {}), parsed.get("limits", {})
    for name, request in requests.items():
        if name in limits and request > limits[name]:
            problems.append(f"{at}: requests.{name} exceeds limits.{name}")
        if "/" in name and "kubernetes.io/" not in name and limits.get(name) != request:
            problems.append(f"{at}: the extended resource {name} must be limited to what it requests")
    return problems


def containers(pod: dict) -> list[dict]:
    """Every container of a pod spec: init, main and ephemeral."""
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or []), *(pod.get("ephemeralContainers") or [])]


def pod_rules(pod: dict) -> list[str]:
    """The API server's own checks of a pod spec that its OpenAPI schema does not make: names, references."""
    problems = []
    if not pod.get("containers"):
        problems.append("no containers")
    names = [c.get("name") for c in containers(pod)]
    for name in names:
        if not isinstance(name, str) or not DNS1123_LABEL.match(name) or len(name) > 63:
            problems.append(f"container name {name!r} is not a DNS-1123 label")
    if len(set(names)) != len(names):
        problems.append(f"container names repeat: {names}")
    volumes = [v.get("name") for v in pod.get("volumes") or []]
    if len(set(volumes)) != len(volumes):
        problems.append(f"volume names repeat: {volumes}")
    for v in pod.get("volumes") or []:
        if "sizeLimit" in (v.get("emptyDir") or {}):
            try:
                quantity(v["emptyDir"]["sizeLimit"])
            except ValueError as exc:
                problems.append(f"volume {v.get('name')}: sizeLimit: {exc}")
    for c in containers(pod):
        if not c.get("image"):
            problems.append(f"container {c.get('name')}: no image")
        problems += resource_problems(c.get("resources"), f"container {c.get('name')}")
        paths = []
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                problems.append(f"container {c.get('name')}: mounts volume {m.get('name')!r}, which the pod lacks")
            paths.append(m.get("mountPath"))
        if len(set(paths)) != len(paths):
            problems.append(f"container {c.get('name')}: mount paths repeat: {paths}")
        for e in c.get("env") or []:
            if "value" in e and not isinstance(e["value"], str):
                problems.append(f"container {c.get('name')}: env {e.get('name')} is not a string")
        for field in ("command", "args"):
            value = c.get(field)
            if value is not None and not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
                problems.append(f"container {c.get('name')}: {field} must be a list of strings, got {value!r}")
    return problems


def job_rules(job: dict) -> list[str]:
    """batch/v1 Job: the restart policy a Job allows, and a pod failure policy the API server accepts."""
    spec = job.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    problems = []
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        problems.append(f"spec.template.spec.restartPolicy must be Never or OnFailure for a Job, got {restart!r}")
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        if restart != "Never":
            problems.append("podFailurePolicy needs spec.template.spec.restartPolicy: Never")
        names = {c.get("name") for c in pod.get("containers") or []} | {
            c.get("name") for c in pod.get("initContainers") or []}
        for i, rule in enumerate(policy.get("rules") or []):
            where = f"podFailurePolicy.rules[{i}]"
            codes = rule.get("onExitCodes")
            if (codes is None) == (rule.get("onPodConditions") is None):
                problems.append(f"{where}: exactly one of onExitCodes and onPodConditions")
            if codes:
                values = codes.get("values") or []
                if codes.get("containerName") is not None and codes["containerName"] not in names:
                    problems.append(f"{where}: containerName {codes['containerName']!r} is not a container")
                if values != sorted(set(values)):
                    problems.append(f"{where}: values must be unique and in ascending order, got {values}")
                if codes.get("operator") == "In" and 0 in values:
                    problems.append(f"{where}: exit code 0 cannot be used with operator In")
            for cond in rule.get("onPodConditions") or []:
                if cond.get("status", "True") not in ("True", "False", "Unknown"):
                    problems.append(f"{where}: pod condition status {cond.get('status')!r}")
    return problems


def rayjob_rules(doc: dict) -> list[str]:
    """KubeRay v1.7's ValidateRayJobSpec and ValidateRayClusterSpec, where they need no cluster."""
    spec = doc.get("spec") or {}
    problems = []
    if spec.get("ttlSecondsAfterFinished", 0) > 0 and not spec.get("shutdownAfterJobFinishes"):
        problems.append("ttlSecondsAfterFinished needs shutdownAfterJobFinishes: true")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("a suspended RayJob needs shutdownAfterJobFinishes: true")
    if spec.get("backoffLimit", 0) < 0:
        problems.append("backoffLimit must not be negative")
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if key in spec and spec[key] <= 0:
            problems.append(f"{key} must be a positive integer")
    selector = spec.get("clusterSelector")
    if not spec.get("rayClusterSpec") and not selector:
        problems.append("one of rayClusterSpec and clusterSelector must be set")
    if spec.get("submissionMode") == "InteractiveMode" and spec.get("backoffLimit", 0) > 0:
        problems.append("backoffLimit is incompatible with InteractiveMode")
    if spec.get("submissionMode") == "SidecarMode" and ("submitterPodTemplate" in spec or "submitterConfig" in spec):
        problems.append("SidecarMode supports no submitterPodTemplate / submitterConfig")
    if not spec.get("entrypoint") and spec.get("submissionMode") != "InteractiveMode":
        problems.append("no entrypoint")
    submitter = spec.get("submitterPodTemplate")
    if submitter is not None:
        restart = (submitter.get("spec") or {}).get("restartPolicy")
        if restart not in ("Never", "OnFailure"):  # it becomes the pod template of a batch/v1 Job
            problems.append(f"submitterPodTemplate.spec.restartPolicy must be Never or OnFailure, got {restart!r}")
        if not (submitter.get("spec") or {}).get("containers"):
            problems.append("submitterPodTemplate has no container")
    if spec.get("rayClusterSpec"):
        problems += [f"rayClusterSpec: {p}" for p in cluster_spec_rules(spec["rayClusterSpec"])]
    return problems


def raycluster_rules(doc: dict) -> list[str]:
    return cluster_spec_rules(doc.get("spec") or {})


def cluster_spec_rules(spec: dict) -> list[str]:
    problems = []
    head = spec.get("headGroupSpec") or {}
    if not ((head.get("template") or {}).get("spec") or {}).get("containers"):
        problems.append("headGroupSpec should have at least one container")
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    groups = [("Head", head)] + [(g.get("groupName"), g) for g in spec.get("workerGroupSpecs") or []]
    names = [name for name, _ in groups[1:]]
    if len(set(names)) != len(names):
        problems.append(f"worker group names repeat: {names}")
    for name, group in groups:
        params = group.get("rayStartParams") or {}
        if any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")) and group.get("resources"):
            problems.append(f"group {name}: resources set both in rayStartParams and in resources")
        if "labels" in params:
            problems.append(f"group {name}: rayStartParams['labels'] is not supported, use labels")
        problems += [f"group {name}: {p}" for p in label_problems(group.get("labels"))]
        for key, value in params.items():
            if not isinstance(value, str):
                problems.append(f"group {name}: rayStartParams {key} must be a string, got {value!r}")
        if name == "Head":
            continue
        if not isinstance(name, str) or not DNS1123_LABEL.match(name):
            problems.append(f"worker group name {name!r} is not a DNS-1123 label")
        low, high, replicas = group.get("minReplicas"), group.get("maxReplicas"), group.get("replicas")
        if not autoscaling and (low is None or high is None):
            problems.append(f"worker group {name}: set minReplicas and maxReplicas when autoscaling is disabled")
        if low is not None and high is not None and low > high:
            problems.append(f"worker group {name}: minReplicas {low} > maxReplicas {high}")
        if replicas is not None and low is not None and high is not None and not low <= replicas <= high:
            problems.append(f"worker group {name}: replicas {replicas} outside [{low}, {high}]")
    return problems


PYTORCH_REPLICAS = ("Master", "Worker")


def pytorchjob_rules(doc: dict) -> list[str]:
    """The training operator v1.9's webhook (validatePyTorchJob), its enums, and the names of the Services it
    creates (NAME-master-0, NAME-worker-N: DNS-1035 labels of at most 63 characters)."""
    spec = doc.get("spec") or {}
    name = (doc.get("metadata") or {}).get("name") or ""
    problems = []
    replicas = spec.get("pytorchReplicaSpecs") or {}
    for rtype, rspec in replicas.items():
        if rtype not in PYTORCH_REPLICAS:
            problems.append(f"pytorchReplicaSpecs: unknown replica type {rtype!r} (valid: {PYTORCH_REPLICAS})")
            continue
        rspec = rspec or {}
        count = rspec.get("replicas", 1)
        if rtype == "Master" and count != 1:
            problems.append("pytorchReplicaSpecs.Master.replicas must be 1")
        if rtype == "Worker" and count < 1:
            problems.append("pytorchReplicaSpecs.Worker.replicas must be at least 1")
        if rspec.get("restartPolicy", "Never") not in ("Always", "OnFailure", "Never", "ExitCode"):
            problems.append(f"pytorchReplicaSpecs.{rtype}.restartPolicy {rspec.get('restartPolicy')!r}")
        pod = (rspec.get("template") or {}).get("spec") or {}
        if not any(c.get("name") == "pytorch" for c in pod.get("containers") or []):
            problems.append(f"pytorchReplicaSpecs.{rtype}: no container named 'pytorch' (the operator requires it)")
        service = f"{name}-{rtype.lower()}-{max(0, count - 1)}"
        if len(service) > 63:
            problems.append(f"the Service {service!r} the operator creates is longer than 63 characters")
    if "Master" not in replicas:
        problems.append("pytorchReplicaSpecs has no Master (MASTER_ADDR would be unset)")
    run = spec.get("runPolicy") or {}
    if run.get("cleanPodPolicy", "None") not in ("All", "Running", "None"):
        problems.append(f"runPolicy.cleanPodPolicy {run.get('cleanPodPolicy')!r}")
    if run.get("backoffLimit", 0) < 0:
        problems.append("runPolicy.backoffLimit must not be negative")
    nproc = spec.get("nprocPerNode")
    if nproc is not None and not (nproc in ("auto", "cpu", "gpu") or str(nproc).isdigit()):
        problems.append(f"nprocPerNode {nproc!r}: one of auto, cpu, gpu or an integer")
    if spec.get("elasticPolicy") and "Worker" not in replicas:
        problems.append("elasticPolicy needs a Worker replica spec")
    return problems


# --- pods -----------------------------------------------------------------------------------------------------------

def pod_templates(doc: dict) -> list[tuple[str, dict]]:
    """(where, pod template) of every pod a document makes."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind in ("Job", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet"):
        return [("spec.template", spec.get("template") or {})]
    if kind == "CronJob":
        return [("spec.jobTemplate.spec.template", ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")
                 or {})]
    if kind == "PodTemplate":
        return [("template", doc.get("template") or {})]
    if kind in ("RayJob", "RayCluster"):
        cluster, prefix = (spec.get("rayClusterSpec") or {}, "spec.rayClusterSpec.") if kind == "RayJob" else (
            spec, "spec.")
        out = [(f"{prefix}headGroupSpec.template", (cluster.get("headGroupSpec") or {}).get("template") or {})]
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            out.append((f"{prefix}workerGroupSpecs[{i}:{group.get('groupName')}].template",
                        group.get("template") or {}))
        if kind == "RayJob" and spec.get("submitterPodTemplate") is not None:
            out.append(("spec.submitterPodTemplate", spec["submitterPodTemplate"]))
        return out
    if kind == "PyTorchJob":
        return [(f"spec.pytorchReplicaSpecs.{rtype}.template", (rspec or {}).get("template") or {})
                for rtype, rspec in (spec.get("pytorchReplicaSpecs") or {}).items()]
    return []


def pod_specs(doc: dict) -> list[tuple[str, dict]]:
    """(where, pod spec) of every pod template in a Job, RayJob (head, worker groups, submitter), RayCluster or
    PyTorchJob (each replica type); a Pod's own spec; [] for kinds without pods."""
    if doc.get("kind") == "Pod":
        return [("spec", doc.get("spec") or {})]
    return [(f"{where}.spec", template.get("spec") or {}) for where, template in pod_templates(doc)]


def check_restricted(pod: dict, where: str = "pod") -> None:
    """The `restricted` Pod Security Standard (every rule that a pod spec can break), and ours: no service account
    token in the pod and no secrets (credentials) in volumes or the environment."""
    p: list[str] = []
    sc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            p.append(f"{key}: true")
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        p.append("securityContext.windowsOptions.hostProcess: true")
    for sysctl in sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            p.append(f"sysctl {sysctl.get('name')} is not in the safe set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            p.append(f"volume {volume.get('name')}: type {sorted(kinds - RESTRICTED_VOLUMES)} is not allowed "
                     f"(restricted allows {sorted(RESTRICTED_VOLUMES)})")
        if "secret" in kinds:
            p.append(f"volume {volume.get('name')}: a secret (no credentials in our pods)")
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source or "serviceAccountToken" in source:
                p.append(f"volume {volume.get('name')}: projects a secret or a service account token")
    if pod.get("automountServiceAccountToken") is not False:
        p.append("automountServiceAccountToken must be false (the pods need no Kubernetes API access)")

    def seccomp_ok(ctx):
        return (ctx.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")

    def selinux(ctx, at):
        opts = ctx.get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES:
            p.append(f"{at}: seLinuxOptions.type {opts.get('type')!r}")
        if opts.get("user") or opts.get("role"):
            p.append(f"{at}: seLinuxOptions.user/role must be unset")

    selinux(sc, "securityContext")
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        p.append("securityContext.seccompProfile: Unconfined")
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        p.append("securityContext.appArmorProfile: Unconfined")
    if sc.get("runAsNonRoot") is False:
        p.append("securityContext.runAsNonRoot: false")
    if sc.get("runAsUser") == 0:
        p.append("securityContext.runAsUser: 0 (root)")
    for c in containers(pod):
        at = f"container {c.get('name')}"
        csc = c.get("securityContext") or {}
        if csc.get("privileged"):
            p.append(f"{at}: privileged")
        if csc.get("allowPrivilegeEscalation") is not False:
            p.append(f"{at}: allowPrivilegeEscalation must be false")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            p.append(f"{at}: capabilities must drop ALL")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            p.append(f"{at}: adds capabilities {sorted(extra)} (only NET_BIND_SERVICE is allowed)")
        if not (csc.get("runAsNonRoot") is True or (sc.get("runAsNonRoot") is True
                                                     and csc.get("runAsNonRoot") is not False)):
            p.append(f"{at}: runAsNonRoot must be true (in the pod's or the container's securityContext)")
        if csc.get("runAsUser") == 0:
            p.append(f"{at}: runAsUser 0 (root)")
        ctype = (csc.get("seccompProfile") or {}).get("type")
        if ctype == "Unconfined" or not (seccomp_ok(csc) or (seccomp_ok(sc) and ctype is None)):
            p.append(f"{at}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        if (csc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            p.append(f"{at}: appArmorProfile Unconfined")
        if csc.get("procMount", "Default") != "Default":
            p.append(f"{at}: procMount {csc['procMount']}")
        if (csc.get("windowsOptions") or {}).get("hostProcess"):
            p.append(f"{at}: windowsOptions.hostProcess")
        selinux(csc, at)
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                p.append(f"{at}: hostPort {port['hostPort']}")
        for env in c.get("env") or []:
            if "secretKeyRef" in (env.get("valueFrom") or {}):
                p.append(f"{at}: env {env.get('name')} from a secret (no credentials in our pods)")
        for source in c.get("envFrom") or []:
            if "secretRef" in source:
                p.append(f"{at}: envFrom a secret (no credentials in our pods)")
    fail(where, p)


def check_run_volumes(pod: dict, where: str = "pod", claim: str = "rl-runs") -> None:
    """Every main container mounts the run folders' claim at /runs and a memory emptyDir at /dev/shm."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    p = []
    for c in pod.get("containers") or []:
        mounts = {m.get("mountPath"): volumes.get(m.get("name")) or {} for m in c.get("volumeMounts") or []}
        runs, shm = mounts.get("/runs") or {}, mounts.get("/dev/shm") or {}
        if (runs.get("persistentVolumeClaim") or {}).get("claimName") != claim:
            p.append(f"container {c.get('name')}: /runs is not the volume claim {claim}")
        if (mounts.get("/runs") and any(m.get("readOnly") for m in c.get("volumeMounts") or []
                                        if m.get("mountPath") == "/runs")):
            p.append(f"container {c.get('name')}: /runs is read-only")
        if (shm.get("emptyDir") or {}).get("medium") != "Memory":
            p.append(f"container {c.get('name')}: /dev/shm is not an emptyDir of medium Memory")
    fail(where, p)


# variables naming where a process writes (its home, caches, temporary files): on a read-only root filesystem each
# must name a writable volume; HOME must be set, since the image's own (/home/rl) is on the root filesystem
WRITE_ENV = ("HOME", "TMPDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
             "RAY_TMPDIR")
WRITABLE_VOLUMES = {"emptyDir", "persistentVolumeClaim", "ephemeral"}
GUARANTEED = ("cpu", "memory")  # limited to what they request on every container: the pod's QoS class is Guaranteed
LOCAL_DISK = "ephemeral-storage"


def check_read_only_root(pod: dict, where: str = "pod") -> None:
    """Every container runs on a read-only root filesystem, as the image is tested (tests/container: `--read-only`
    with the run folder and /tmp as volumes); every main container mounts a writable emptyDir at /tmp, sets HOME, and
    every variable of WRITE_ENV it sets names a path on a writable volume."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    p = []
    for c in containers(pod):
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            p.append(f"container {c.get('name')}: securityContext.readOnlyRootFilesystem must be true")
    for c in pod.get("containers") or []:
        at = f"container {c.get('name')}"
        mounts = {m.get("mountPath"): m for m in c.get("volumeMounts") or []}
        writable = [path for path, m in mounts.items() if not m.get("readOnly")
                    and set(volumes.get(m.get("name")) or {}) & WRITABLE_VOLUMES]
        tmp = mounts.get("/tmp") or {}
        if "emptyDir" not in (volumes.get(tmp.get("name")) or {}) or tmp.get("readOnly"):
            p.append(f"{at}: /tmp is not a writable emptyDir volume (the root filesystem is read-only)")
        env = {e.get("name"): e.get("value") for e in c.get("env") or []}
        if "HOME" not in env:
            p.append(f"{at}: HOME is not set (the image's /home/rl is on the read-only root filesystem)")
        for var in WRITE_ENV:
            if var in env and not any(PurePosixPath(str(env[var])).is_relative_to(root) for root in writable):
                p.append(f"{at}: {var}={env[var]!r} is not on a writable volume (writable: {writable})")
    fail(where, p)


def check_resources(pod: dict, where: str = "pod") -> None:
    """Every container requests and limits its CPUs, memory and local disk (ephemeral-storage: /tmp, its logs), with
    CPUs and memory limited to what they request: a Guaranteed pod, the last one a node under pressure evicts, and
    one that cannot take its neighbours' CPUs or disk."""
    p = []
    for c in containers(pod):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for name in (*GUARANTEED, LOCAL_DISK):
            if name not in requests or name not in limits:
                p.append(f"container {c.get('name')}: {name} must be requested and limited (requests "
                         f"{requests.get(name)!r}, limits {limits.get(name)!r})")
            elif name in GUARANTEED and quantity(requests[name]) != quantity(limits[name]):
                p.append(f"container {c.get('name')}: {name} requests {requests[name]} but limits {limits[name]} "
                         f"(equal makes the pod Guaranteed)")
    fail(where, p)


def check_accelerators(pod: dict, where: str = "pod") -> None:
    """A container asking for a GPU or TPU: the limit is set (extended resources are requested by limit), requests
    (if any) equal it, and the pod tolerates the taint of such nodes (key = the resource name); a TPU pod selects
    GKE's TPU labels (a GPU pod needs no selector: its nvidia.com/gpu request places it on any cloud)."""
    p = []
    tolerated = {(t.get("key"), t.get("operator"), t.get("effect")) for t in pod.get("tolerations") or []}
    for c in pod.get("containers") or []:
        res = c.get("resources") or {}
        for name in ACCELERATORS:
            limit, request = (res.get("limits") or {}).get(name), (res.get("requests") or {}).get(name)
            if limit is None and request is None:
                continue
            if limit is None or (request is not None and str(request) != str(limit)):
                p.append(f"container {c.get('name')}: {name} requests {request!r} and limits {limit!r} must be equal")
            if (name, "Exists", "NoSchedule") not in tolerated:
                p.append(f"{name} asked for but not tolerated: add {{key: {name}, operator: Exists, effect: "
                         f"NoSchedule}}")
            if name == "google.com/tpu" and not pod.get("nodeSelector"):  # GKE needs its TPU labels to place it
                p.append(f"{name} asked for without a nodeSelector naming the accelerator")
    fail(where, p)


def accelerator_limits(pod: dict) -> dict[str, int]:
    """Total of each accelerator the pod's containers limit to, e.g. {"nvidia.com/gpu": 1}."""
    out: dict[str, int] = {}
    for c in pod.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("limits") or {}).items():
            if name in ACCELERATORS:
                out[name] = out.get(name, 0) + int(value)
    return out


def check_job_failure_policy(job: dict) -> None:
    """Our Job's failure policy: exit code 2 (bad input) fails the Job at once; 143 (SIGTERM: a checkpoint was
    saved) and disruptions (eviction, preemption) are retried without counting to backoffLimit."""
    spec = job.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    names = [c.get("name") for c in pod.get("containers") or []]
    found = set()
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        codes = rule.get("onExitCodes") or {}
        if codes.get("operator") == "In" and codes.get("containerName") in (None, *names):
            found |= {(rule.get("action"), v) for v in codes.get("values") or []}
        for cond in rule.get("onPodConditions") or []:
            found.add((rule.get("action"), cond.get("type"), cond.get("status", "True")))
    p = [f"podFailurePolicy lacks {want}" for want in
         [("FailJob", 2), ("Ignore", 143), ("Ignore", "DisruptionTarget", "True")] if want not in found]
    if pod.get("restartPolicy") != "Never":
        p.append("spec.template.spec.restartPolicy must be Never (the failure policy sees every pod's exit)")
    if not isinstance(spec.get("backoffLimit"), int) or spec["backoffLimit"] < 1:
        p.append("backoffLimit: a few retries for crashes")
    fail(job, p)


# --- the command ----------------------------------------------------------------------------------------------------

TRAIN = ["python", "train.py"]
ENTRY = ["python", "-m", "rl.cloud.entry"]


def shell_words(shell: str, text: str) -> list[str]:
    """The words a real `shell` makes of `text` (it runs `printf` over them: our own rendered commands only)."""
    import subprocess

    out = subprocess.run([shell, "-c", "printf '%s\\0' " + text], capture_output=True, timeout=30)
    if out.returncode:
        raise ManifestError(f"{shell} could not read {text!r}: {out.stderr.decode()[-300:]}")
    return out.stdout.decode().split("\0")[:-1]


def ray_entrypoint_tokens(entrypoint: str) -> list[str]:
    """A RayJob's entrypoint as the driver gets it: KubeRay's submitter runs `ray job submit ... -- ENTRYPOINT` in
    bash, `ray job submit` joins the words it got into one string (subprocess.list2cmdline), and Ray's job
    supervisor runs that with /bin/sh."""
    import subprocess

    return shell_words("sh", subprocess.list2cmdline(shell_words("bash", entrypoint)))


def train_argv(doc: dict) -> list[list[str]]:
    """train.py's arguments in each pod of a Job or PyTorchJob (command + args of the container that runs
    `python train.py`, one per pod template), or in a RayJob's entrypoint (as the submitter's shell splits it)."""
    kind = doc.get("kind")
    if kind == "RayJob":
        tokens = ray_entrypoint_tokens((doc.get("spec") or {}).get("entrypoint") or "")
        if tokens[:3] == ENTRY and len(tokens) == 4:
            from rl.cloud.entry import decode

            return [decode(tokens[3])]
        if tokens[:2] != TRAIN:
            fail(doc, f"the entrypoint does not start with `python train.py`: {tokens[:4]}")
        return [tokens[2:]]
    out = []
    for where, pod in pod_specs(doc):
        runs = [[*(c.get("command") or []), *(c.get("args") or [])] for c in pod.get("containers") or []]
        runs = [tokens[2:] for tokens in runs if tokens[:2] == TRAIN]
        if len(runs) != 1:
            fail(doc, f"{where}: {len(runs)} containers run `python train.py` (want exactly one)")
        out.append(runs[0])
    if not out:
        fail(doc, "no pod runs `python train.py`")
    return out


def flag_values(argv: list[str], flag: str) -> list[str]:
    """The values given to `flag` in an argument list (`--flag value` or `--flag=value`)."""
    out = []
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif token.startswith(flag + "="):
            out.append(token[len(flag) + 1:])
    return out


def check_ray_head_private(doc: dict) -> None:
    """The Ray head's Service is ClusterIP (KubeRay's default when absent): the dashboard (8265, which accepts jobs:
    code execution) and the client port (10001) are reachable only from inside the cluster; no ingress."""
    spec = doc.get("spec") or {}
    cluster = spec.get("rayClusterSpec") if doc.get("kind") == "RayJob" else spec
    head = (cluster or {}).get("headGroupSpec") or {}
    p = []
    if head.get("serviceType", "ClusterIP") != "ClusterIP":
        p.append(f"headGroupSpec.serviceType {head.get('serviceType')!r} exposes the dashboard outside the cluster")
    service_type = ((head.get("headService") or {}).get("spec") or {}).get("type", "ClusterIP")
    if service_type != "ClusterIP":
        p.append(f"headGroupSpec.headService.spec.type {service_type!r}")
    if head.get("enableIngress"):
        p.append("headGroupSpec.enableIngress: true")
    for c in ((head.get("template") or {}).get("spec") or {}).get("containers") or []:
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                p.append(f"head container {c.get('name')}: hostPort {port['hostPort']}")
    fail(doc, p)


def iter_manifests() -> Iterator[tuple[Path, dict]]:
    """(file, document) of every YAML document in k8s/."""
    for path in manifest_files():
        for doc in load_documents(path):
            yield path, doc
