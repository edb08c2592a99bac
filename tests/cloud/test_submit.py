"""`--sys k8s` against a loopback HTTP server that answers as the Kubernetes API server does: the client's requests
(method, path, query, body, credentials) and the one-line errors for each answer a real server gives (created,
already exists, forbidden, CRD not installed, unreachable, no kubeconfig).

What this proves: the requests the `kubernetes` client sends for our manifests, and our handling of each status. What
only a real cluster proves: that the server, its admission and the operators accept and run them (k8s/README.md).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeAPIServer:
    """Records every request; answers from `routes` ((METHOD, path) -> (status, body)), creating what is posted
    (201, the body echoed) unless a route says otherwise. Discovery of an operator's group answers only for the
    groups in `crds`."""

    def __init__(self):
        self.requests: list[dict] = []
        self.routes: dict[tuple[str, str], tuple[int, dict]] = {}
        self.crds = {"ray.io/v1": "rayjobs", "kubeflow.org/v1": "pytorchjobs"}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                                        "body": body, "auth": self.headers.get("Authorization")})
                code, answer = server.answer(self.command, url.path, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str, body):
        if (method, path) in self.routes:
            return self.routes[(method, path)]
        if method == "GET" and path.startswith("/apis/"):
            group_version = path[len("/apis/"):]
            if group_version in self.crds:
                plural = self.crds[group_version]
                return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                             "resources": [{"name": plural, "singularName": plural[:-1], "namespaced": True,
                                            "kind": plural[:-1], "verbs": ["create", "get", "list"]}]}
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        if method == "POST":
            return 201, body
        return 404, status(404, "NotFound", "not found")

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api(tmp_path, monkeypatch):
    server = FakeAPIServer()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "loop",
        "clusters": [{"name": "loop", "cluster": {"server": server.url}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "me", "namespace": "team-a"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield server
    server.close()


def train(*argv: str) -> int:
    import train as train_py

    return train_py.main(list(argv))


def posts(server) -> list[dict]:
    return [r for r in server.requests if r["method"] == "POST"]


APPO = ("--sys", "k8s", "--hparams", "appo_atari", "--output_dir", "runs/my pong",
        "--hparam_override", 'lr=1e-4,ray_worker_resources="cpu_node:1"', "--accelerator", "nvidia-l4:1",
        "--image", "ghcr.io/lab/rl:cuda", "--seed", "3")


def test_a_job_is_created_with_the_command_as_typed(api, capsys):
    assert train(*APPO) == 0
    pvc, job = posts(api)
    assert pvc["path"] == "/api/v1/namespaces/team-a/persistentvolumeclaims"  # the context's namespace
    assert pvc["body"]["metadata"]["name"] == "rl-runs"
    assert job["path"] == "/apis/batch/v1/namespaces/team-a/jobs"
    assert job["query"] == {"fieldManager": ["rl-train"]}
    assert job["auth"] == "Bearer t0ken"  # the kubeconfig's credentials, as kubectl sends them
    body = job["body"]
    assert body["kind"] == "Job" and body["metadata"]["name"] == "my-pong"
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/lab/rl:cuda"
    assert container["args"] == ["--hparams", "appo_atari", "--output_dir", "/runs/my-pong", "--hparam_override",
                                 'lr=1e-4,ray_worker_resources="cpu_node:1"', "--seed", "3"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    out = capsys.readouterr().out
    assert "submitted Job my-pong to namespace team-a" in out
    assert train(*APPO, "--dry_run", "True") == 0  # what was sent is what --dry_run prints, field for field
    assert [r["body"] for r in posts(api)] == [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert "kubectl -n team-a logs -f job/my-pong" in out


def test_an_existing_volume_claim_is_kept(api):
    api.routes[("POST", "/api/v1/namespaces/team-a/persistentvolumeclaims")] = (
        409, status(409, "AlreadyExists", 'persistentvolumeclaims "rl-runs" already exists'))
    assert train(*APPO) == 0
    assert [r["path"] for r in posts(api)][-1] == "/apis/batch/v1/namespaces/team-a/jobs"


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_job_of_that_name_already_exists(api, capsys):
    api.routes[("POST", "/apis/batch/v1/namespaces/team-a/jobs")] = (
        409, status(409, "AlreadyExists", 'jobs.batch "my-pong" already exists'))
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert "already exists in namespace 'team-a'" in err and "kubectl -n team-a delete job my-pong" in err


def test_a_forbidden_namespace(api, capsys):
    message = ('jobs.batch is forbidden: User "me" cannot create resource "jobs" in API group "batch" in the '
               'namespace "prod"')
    api.routes[("POST", "/apis/batch/v1/namespaces/prod/jobs")] = (403, status(403, "Forbidden", message))
    assert train(*APPO, "--namespace", "prod") == 2
    err = one_error(capsys)
    assert err.startswith("error: forbidden") and "namespace 'prod'" in err and message in err


def test_a_missing_namespace(api, capsys):
    api.routes[("POST", "/api/v1/namespaces/nope/persistentvolumeclaims")] = (
        404, status(404, "NotFound", 'namespaces "nope" not found'))
    assert train(*APPO, "--namespace", "nope") == 2
    assert "namespace 'nope' does not exist" in one_error(capsys)


@pytest.mark.parametrize("argv, kind, crd", [
    (("--nodes", "3"), "RayJob", "ray.io/v1"),
    (("--hparams", "ppo_atari", "--nodes", "2"), "PyTorchJob", "kubeflow.org/v1")])
def test_an_operator_whose_crd_is_not_installed(api, capsys, argv, kind, crd):
    api.crds.pop(crd)
    assert train(*APPO, *argv) == 2
    err = one_error(capsys)
    assert f"does not serve {kind}" in err and "install" in err
    assert posts(api) == []  # nothing half-created


@pytest.mark.parametrize("argv, path", [
    (("--nodes", "3"), "/apis/ray.io/v1/namespaces/team-a/rayjobs"),
    (("--hparams", "ppo_atari", "--nodes", "2"), "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs")])
def test_operators_resources_are_created_after_discovery(api, argv, path):
    assert train(*APPO, *argv) == 0
    gets = [r["path"] for r in api.requests if r["method"] == "GET"]
    assert gets == ["/apis/" + "/".join(path.split("/")[2:4])]  # discovery of the group/version, once
    assert posts(api)[-1]["path"] == path


def test_an_unreachable_api_server(api, capsys):
    api.close()  # nothing listens there now
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert f"cannot reach the Kubernetes API server at {api.url}" in err


def test_no_kubeconfig(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert err.startswith("error: no kubeconfig") and "--dry_run True" in err


@pytest.mark.parametrize("argv, needle", [
    (("--accelerator", "nvidia-k80:1"), "unknown accelerator"),
    (("--accelerator", "nvidia-l4:3"), "unknown count"),
    (("--run_name", "My_Run"), "a name Kubernetes would refuse"),
    (("--run_name", "a" * 64), "a name Kubernetes would refuse"),
    (("--hparam_override", "lr=fast"), "could not parse"),
    (("--hparams", "nope"), "nope")])
def test_bad_input_fails_on_the_laptop_in_one_line(api, capsys, argv, needle):
    assert train(*APPO, *argv) == 2
    assert needle in one_error(capsys)
    assert api.requests == []


def test_cluster_flags_need_sys_k8s(capsys):
    assert train("--hparams", "dqn_cartpole", "--output_dir", "runs/x", "--accelerator", "nvidia-l4:1") == 2
    assert "--accelerator apply to --sys k8s only" in one_error(capsys)


@pytest.mark.parametrize("text", [
    "apiVersion: v1\nclusters: {not: [closed\n",  # not YAML
    "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
    "clusters: [{name: c, cluster: {server: 5}}]\nusers: [{name: u, user: 7}]\n",  # YAML, but not a kubeconfig
], ids=["yaml", "fields"])
def test_a_malformed_kubeconfig_is_one_line(tmp_path, monkeypatch, capsys, text):
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(bad))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert err.startswith(f"error: the kubeconfig {bad} cannot be read (") and "fix it" in err, err


def test_a_missing_exec_auth_plugin_is_named_in_one_line(api, tmp_path, monkeypatch, capsys):
    """GKE's gke-gcloud-auth-plugin, EKS's aws, AKS's kubelogin: not installed here."""
    kubeconfig = tmp_path / "exec-kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gke",
        "clusters": [{"name": "gke", "cluster": {"server": api.url}}],
        "users": [{"name": "me", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "no-such-auth-plugin",
            "installHint": "Install no-such-auth-plugin from your cloud's SDK", "provideClusterInfo": True}}}],
        "contexts": [{"name": "gke", "context": {"cluster": "gke", "user": "me"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert "exec plugin 'no-such-auth-plugin'" in err and "not installed" in err and "SDK" in err
    assert api.requests == []


def test_a_forbidden_volume_claim_names_the_claim_not_the_job(api, capsys):
    message = ('persistentvolumeclaims is forbidden: User "me" cannot create resource "persistentvolumeclaims" in '
               'API group "" in the namespace "team-a"')
    api.routes[("POST", "/api/v1/namespaces/team-a/persistentvolumeclaims")] = (403, status(403, "Forbidden", message))
    assert train(*APPO) == 2
    err = one_error(capsys)
    assert "may not create a PersistentVolumeClaim" in err and "Job" not in err.split("(")[0]


@pytest.mark.parametrize("argv", [(), ("--nodes", "3"), ("--hparams", "ppo_atari", "--nodes", "2")],
                         ids=["Job", "RayJob", "PyTorchJob"])
def test_the_submitter_role_allows_every_request_a_submission_makes(api, argv):
    (role,) = [d for d in yaml.safe_load_all((ROOT / "k8s" / "rbac" / "submitter-role.yaml").read_text()) if d]
    from tests.cloud import k8s_checks

    k8s_checks.validate(role)
    allowed = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert train(*APPO, *argv) == 0
    for request in api.requests:
        parts = request["path"].strip("/").split("/")
        if "namespaces" not in parts:  # discovery (/apis/GROUP/VERSION): system:discovery allows it to everyone
            continue
        group = "" if parts[0] == "api" else parts[1]
        resource = parts[parts.index("namespaces") + 2]
        verb = {"POST": "create", "GET": "get"}[request["method"]]
        assert (group, resource, verb) in allowed, request["path"]
