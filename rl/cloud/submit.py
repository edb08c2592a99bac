"""Submitting rendered manifests with the `kubernetes` client, configured as `kubectl` is (the kubeconfig named by
KUBECONFIG or ~/.kube/config, its current context; inside a pod, the pod's service account). Every failure the user
can act on is one line: no kubeconfig, an API server that cannot be reached, a namespace that is forbidden or
missing, an operator whose CRD is not installed, a name already taken, a manifest the server refuses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rl.errors import ConfigError, first_line

FIELD_MANAGER = "rl-train"
TIMEOUT_S = 30
# kind -> (group, version, plural) of the operators' resources
CUSTOM = {"RayJob": ("ray.io", "v1", "rayjobs"), "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs")}
OPERATORS = {"RayJob": "KubeRay (https://docs.ray.io/en/latest/cluster/kubernetes/getting-started.html)",
             "PyTorchJob": "the Kubeflow training operator v1 (https://github.com/kubeflow/trainer, release v1.9)"}
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def connect():
    """(ApiClient, the current context's namespace, server URL), as kubectl would find them."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    kubeconfig = os.environ.get("KUBECONFIG") or None  # read now: the client reads it once, at its import
    try:
        check_exec_plugin(kubeconfig)
        api = config.new_client_from_config(kubeconfig)
        _, active = config.list_kube_config_contexts(kubeconfig)
        namespace = (active or {}).get("context", {}).get("namespace") or "default"
    except ConfigError:
        raise
    except (ConfigException, OSError) as exc:
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ConfigError(f"no kubeconfig for --sys k8s ({where}: {first_line(exc)}): get credentials for your "
                              f"cluster (e.g. gcloud container clusters get-credentials NAME), or --dry_run True to "
                              f"print the manifests") from None
        config.load_incluster_config()
        api = client.ApiClient()
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.exists() else "default"
    except Exception as exc:  # noqa: BLE001 - a kubeconfig the client cannot make sense of (YAML, its fields)
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(f"the kubeconfig {where} cannot be read ({type(exc).__name__}: {first_line(exc, 200)}): "
                          f"fix it, or point KUBECONFIG at a good one") from None
    import logging

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # an unreachable server: our one line, not retry warnings
    return api, namespace, api.configuration.host


def check_exec_plugin(kubeconfig: str | None) -> None:
    """The current context's user may authenticate with an exec plugin (GKE's gke-gcloud-auth-plugin, EKS's aws,
    kubelogin ...): one that is not installed is one line naming it, before the client logs its failure and then
    fails to connect."""
    import shutil

    import yaml

    path = Path(kubeconfig or Path.home() / ".kube" / "config").expanduser()
    try:
        doc = yaml.safe_load(path.read_text()) if path.exists() else None
    except (OSError, yaml.YAMLError):
        return  # the client says what is wrong with it
    if not isinstance(doc, dict):
        return
    try:
        context = next(c["context"] for c in doc.get("contexts") or [] if c["name"] == doc.get("current-context"))
        user = next(u["user"] for u in doc.get("users") or [] if u["name"] == context.get("user"))
        command = (user.get("exec") or {}).get("command")
    except (StopIteration, KeyError, TypeError, AttributeError):
        return
    if command and shutil.which(command) is None:
        hint = (user.get("exec") or {}).get("installHint") or ""
        hint = f" ({first_line(Exception(hint), 200)})" if hint.strip() else ""
        raise ConfigError(f"the kubeconfig's user authenticates with the exec plugin {command!r}, which is not "
                          f"installed here (not on PATH){hint}: install it, e.g. gke-gcloud-auth-plugin for GKE, the "
                          f"aws CLI for EKS, kubelogin for AKS")


def api_message(exc) -> str:
    """The API server's own message from an ApiException's Status body."""
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return first_line(exc)


def submit(docs: list[dict], namespace: str | None) -> str:
    """Create the volume claim (kept if it exists) and the job; return the namespace used."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    api, current, server = connect()
    namespace = namespace or current
    pvc, job = docs
    kind, name = job["kind"], job["metadata"]["name"]
    try:
        if kind in CUSTOM:
            check_crd(client.CustomObjectsApi(api), kind)
        try:
            client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
                namespace, pvc, field_manager=FIELD_MANAGER, _request_timeout=TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 409:  # already there: the run folders of earlier runs live on it
                raise ConfigError(explain(exc, "PersistentVolumeClaim", pvc["metadata"]["name"], namespace)) \
                    from None
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                group, version, namespace, plural, job, field_manager=FIELD_MANAGER, _request_timeout=TIMEOUT_S)
        else:
            client.BatchV1Api(api).create_namespaced_job(namespace, job, field_manager=FIELD_MANAGER,
                                                         _request_timeout=TIMEOUT_S)
    except ApiException as exc:
        raise ConfigError(explain(exc, kind, name, namespace)) from None
    except (HTTPError, OSError) as exc:
        raise ConfigError(f"cannot reach the Kubernetes API server at {server} ({first_line(exc)}): check the "
                          f"cluster is up and kubectl's current context (kubectl cluster-info)") from None
    return namespace


def check_crd(custom, kind: str) -> None:
    """The operator's resource is served (discovery of its group/version lists it), else one line naming it."""
    from kubernetes.client.rest import ApiException

    group, version, plural = CUSTOM[kind]
    try:
        served = {r.name for r in custom.get_api_resources(group, version, _request_timeout=TIMEOUT_S).resources}
    except ApiException as exc:
        if exc.status != 404:
            raise
        served = set()
    if plural not in served:
        raise ConfigError(f"this cluster does not serve {kind} ({plural}.{group}/{version}): install "
                          f"{OPERATORS[kind]}, or run on one node (--nodes 1: a batch/v1 Job)")


def explain(exc, kind: str, name: str, namespace: str) -> str:
    message = api_message(exc)
    if exc.status == 409:
        return (f"a {kind} named {name!r} already exists in namespace {namespace!r}: delete it (kubectl -n "
                f"{namespace} delete {kind.lower()} {name}; the run folder stays on the volume and the next one "
                f"resumes it) or choose another --run_name")
    if exc.status in (401, 403):
        return (f"forbidden: kubectl's current credentials may not create a {kind} in namespace {namespace!r} "
                f"({message}); choose a namespace you may use with --namespace")
    if exc.status == 404:
        return f"namespace {namespace!r} does not exist ({message}): create it or choose another with --namespace"
    return f"the API server refused the {kind} {name!r} ({exc.status}: {message})"


def follow_commands(kind: str, name: str, namespace: str, output_dir: str) -> list[str]:
    """The kubectl lines to watch, fetch and delete the run."""
    n = f"kubectl -n {namespace}"
    pods = f"{n} get pods -l app.kubernetes.io/instance={name}"
    logs = {"Job": f"{n} logs -f job/{name}",
            "RayJob": f"{n} logs -f job/{name}  # the submitter's pod follows the driver's output",
            "PyTorchJob": f"{n} logs -f {name}-master-0"}[kind]
    return [f"{n} get {kind.lower()} {name}", pods, logs,
            f"{n} cp POD:{output_dir} runs/{name}  # copy the run folder back (POD: a pod above, while it runs)",
            f"{n} delete {kind.lower()} {name}  # the run folder stays on the volume: submitting again resumes it"]
