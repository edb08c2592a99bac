"""What the Ray transport and its gradient ranks ask of a cluster before and around their actors: joining it
(`check_reachable` fails at once where ray.init would retry for minutes), the resources an actor declares
(`parse_resources`, `resources_text`, `node_can_hold`), placing an actor on the learner's own node (`pinned_here`), and
a Ray error in one line (`one_line`). Ray is imported inside the functions only."""

from __future__ import annotations

from rl.errors import ConfigError


def parse_resources(text: str) -> dict[str, float]:
    """"NAME:AMOUNT;NAME:AMOUNT" -> {NAME: AMOUNT}; "" -> {}. A malformed entry is a one-line ConfigError."""
    resources: dict[str, float] = {}
    for entry in filter(None, (e.strip() for e in (text or "").split(";"))):
        name, sep, amount = entry.rpartition(":")
        name = name.strip()
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not sep or not name or value <= 0 or name in resources:
            raise ConfigError(f"bad ray_worker_resources entry {entry!r} in {text!r}: expected "
                              f"NAME:AMOUNT[;NAME:AMOUNT] with distinct names and positive amounts (e.g. cpu_node:1)")
        resources[name] = value
    return resources


def one_line(exc: BaseException) -> str:
    """A Ray error in one line: the worker's own exception where Ray carries it (a task's cause, or the last line of
    the traceback in an actor's creation error), else Ray's first line."""
    import re

    import ray.exceptions

    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if isinstance(exc, ConfigError) and text.strip():  # one line already (an env that raised: rl/collector.py)
        return text.strip().splitlines()[0][:300]
    if not isinstance(exc, ray.exceptions.RayError):
        line = f"{type(exc).__name__}: {text}".splitlines()[0] if text else type(exc).__name__
        return line[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    raised = [ln for ln in lines if _names_exception(ln.split(":", 1)[0]) and ":" in ln]
    line = raised[-1] if raised else (lines[0] if lines else type(exc).__name__)
    return line[:300]


def _names_exception(prefix: str) -> bool:
    """"ValueError", "rl.errors.ConfigError": a traceback's last line starts with an exception's (dotted) name."""
    parts = prefix.split(".")
    return all(p.isidentifier() for p in parts) and parts[-1][:1].isupper()


def check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that accepts no connection fails at once (ray.init would retry for
    minutes)."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" (ray.init says so itself) or a form Ray understands better than this check
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start one with "
                          f"`ray start --head` or check --ray_address") from None


def resources_text(options: dict) -> str:
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), **options.get("resources", {})}
    return ", ".join(f"{k}:{v:g}" for k, v in wanted.items() if v > 0) or "nothing"


def node_can_hold(options: dict) -> bool:
    """Whether some live node of the cluster has (in total) the resources of one actor with these options."""
    import ray

    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), **options.get("resources", {})}
    wanted = {k: v for k, v in wanted.items() if v > 0}
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    return any(all(r.get(k, 0) >= v for k, v in wanted.items()) for r in nodes)


def pinned_here() -> dict:
    """Actor options that place it on this driver's node, and nowhere else."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}
