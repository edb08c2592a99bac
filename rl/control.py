"""Changing a running job from outside: `train.py --output_dir runs/x --control "lr=1e-4,ent_coef=0.005"` (or
`--control checkpoint`, `--control evaluate`), PyTorchRL's `update_algo_parameter` without editing a script.

The channel is the run folder, so it works wherever the folder is shared (this machine, a pod's volume through
`kubectl exec`): the job keeps `control/job.json` (its pid, host and a heartbeat) while it runs; `send` drops a
request file into `control/` and waits for the job's answer beside it. The training loop (rl/run.py) polls between
steps, which is between updates, in one process or as the Scheme's learner, applies the request, prints and logs it
(`control/<setting>` scalars and a line in `control/control.log`), and records the change in `hparams.json` and in
the next checkpoint, so that a resumed run continues with it.

Only settings read afresh at every update can change: each agent lists them (`LIVE_SETTINGS`), the loop adds its own
intervals (`RUN_SETTINGS`). Where workers compute something themselves, the settings they read stay fixed: acting
settings (epsilon) with collection workers, loss settings with gradient workers, and every agent setting inside a
synchronous gradient group (its ranks would step with different settings and drift apart).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from rl.checkpoint import write_json
from rl.errors import ConfigError
from rl.hparams import split_top_level

CONTROL_DIR = "control"
JOB_FILE = "job.json"
RUN_SETTINGS = ("eval_interval", "eval_episodes", "checkpoint_interval", "checkpoint_minutes", "log_interval")
STEP_SETTINGS = ("lr", "max_grad_norm")  # applied where the optimizer steps: the learner, in every mode
ACTING_SETTINGS = ("exploration_final_eps",)  # read where actions are chosen: collection workers keep their own
COMMANDS = ("checkpoint", "evaluate")
HEARTBEAT_S = 10.0  # the job refreshes job.json this often; another host trusts a heartbeat up to STALE_S old
STALE_S = 600.0


def changeable(hp) -> tuple[str, ...]:
    """The settings `--control` may change in a run of `hp`, given where its workers compute what."""
    from rl.registry import agents

    live = tuple(getattr(agents[hp.agent], "LIVE_SETTINGS", ()))
    if "summed_clip" in hp and hp.summed_clip > 0:  # the clip is summed_clip / (T x batch): max_grad_norm unused
        live = tuple(s for s in live if s != "max_grad_norm")
    if hp.num_grad_workers > 1 and hp.grad_communication == "sync":
        live = ()
    elif hp.num_grad_workers > 1:  # asynchronous gradient workers compute the loss; the learner steps
        live = tuple(s for s in live if s in STEP_SETTINGS)
    elif hp.num_workers > 0:  # collection workers act with their own settings
        live = tuple(s for s in live if s not in ACTING_SETTINGS)
    return RUN_SETTINGS + live


def parse_request(hp, text: str) -> dict:
    """`checkpoint`, `evaluate` or "key=value,..." for `hp`'s run, typed like the settings; one ConfigError line for
    anything else."""
    text = text.strip()
    if text in COMMANDS:
        return {"command": text}
    if "=" not in text:
        raise ConfigError(f"--control {text!r}: expected checkpoint, evaluate or settings key=value[,key=value]")
    allowed = changeable(hp)
    typed = hp.copy()
    settings = {}
    for part in split_top_level(text):
        key = part.split("=", 1)[0].strip()
        if key not in hp:
            raise ConfigError(f"--control: unknown setting {key!r}; settings that can change in this run: "
                              f"{', '.join(allowed)}")
        if key not in allowed:
            raise ConfigError(f"--control: {key} cannot change while this run goes on; settings that can: "
                              f"{', '.join(allowed)}")
        try:
            typed.parse(part)  # typed and bounded as the setting's definition says (rl/hparams.py)
        except ConfigError as exc:
            raise ConfigError(f"--control: {exc}") from None
        settings[key] = getattr(typed, key)
    return {"command": "set", "settings": settings}


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host exists (one we may not signal exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_job(output_dir: Path) -> dict | None:
    """The job.json of the job running in `output_dir`, or None: on this host its pid must be alive, on another its
    heartbeat fresh."""
    path = output_dir / CONTROL_DIR / JOB_FILE
    try:
        job = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if job.get("host") == socket.gethostname():
        return job if pid_alive(int(job.get("pid", -1))) else None
    return job if time.time() - float(job.get("heartbeat", 0)) < STALE_S else None


def send(output_dir: Path, text: str, timeout_s: float = 60.0) -> None:
    """Hand a request to the job running in `output_dir` and print its answer (or that it is queued)."""
    record_path = output_dir / "hparams.json"
    if not record_path.exists():
        raise ConfigError(f"--control: {output_dir} holds no run (no hparams.json)")
    job = running_job(output_dir)
    if job is None:
        raise ConfigError(f"--control: no job is running in {output_dir}; resume it with train.py --hparams SET "
                          f"--output_dir {output_dir} (a --hparam_override then sets what you wanted to change)")
    from rl.registry import hparams as sets

    record = json.loads(record_path.read_text())
    hp = sets[record["hparams_set"]]().update(record["hparams"])
    request = parse_request(hp, text)
    name = f"{time.time_ns()}-{os.getpid()}"
    folder = output_dir / CONTROL_DIR
    write_json(folder / f"{name}.request.json", request, indent=2)
    answer_path = folder / f"{name}.answer.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answer_path.exists():
            answer = json.loads(answer_path.read_text())
            answer_path.unlink(missing_ok=True)
            if "error" in answer:
                raise ConfigError(f"--control: the job refused it: {answer['error']}")
            print(answer["message"], flush=True)
            return
        if running_job(output_dir) is None:
            raise ConfigError(f"--control: the job in {output_dir} ended before it took the request")
        time.sleep(0.2)
    print(f"queued in {folder}: the job (pid {job.get('pid')} on {job.get('host')}) takes it at its next update; "
          f"see {folder / 'control.log'}", flush=True)


def recorded_changes(record: dict) -> dict:
    """The settings changed by --control in a run record (hparams.json) and still in effect, latest value of each."""
    changes: dict = {}
    for entry in record.get("control", []):
        overridden = entry.get("overridden", ())
        changes.update({k: v for k, v in entry.get("settings", {}).items() if k not in overridden})
    return changes


def carry_changes(output_dir: Path, old_record: dict, now: dict) -> list[dict]:
    """The `control` list for the record of a resumed run whose settings are now `now`: every change ever made, kept
    in order; a setting whose latest change no longer holds (a --hparam_override typed at resume replaced it) is
    named in that entry's `overridden`, which resuming skips, and the replacement is noted in control.log."""
    entries = [dict(e) for e in old_record.get("control", []) if isinstance(e, dict)]
    latest = {key: i for i, e in enumerate(entries) for key in e.get("settings", {})}
    for key, i in latest.items():
        entry = entries[i]
        if key not in entry.get("overridden", ()) and now.get(key) != entry["settings"][key]:
            entry["overridden"] = [*entry.get("overridden", ()), key]
            folder = Path(output_dir) / CONTROL_DIR
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / "control.log", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} resumed with {key} {now.get(key)}: it replaces the "
                        f"change to {entry['settings'][key]} made at step {entry.get('step')}\n")
    return entries


class Channel:
    """The job's side: job.json while it runs, the requests it finds in control/, the answers it leaves."""

    def __init__(self, output_dir: Path):
        self.dir = Path(output_dir) / CONTROL_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        self._beat = 0.0
        self._polled = 0.0
        self.heartbeat()

    def heartbeat(self) -> None:
        self._beat = time.monotonic()
        write_json(self.dir / JOB_FILE, {**self.job, "heartbeat": time.time()}, indent=2)

    def poll(self, every_s: float = 0.5) -> list[tuple[Path, dict]]:
        """Requests waiting, oldest first (at most one look every `every_s` seconds: the loop calls this each
        step)."""
        now = time.monotonic()
        if now - self._polled < every_s:
            return []
        self._polled = now
        if now - self._beat > HEARTBEAT_S:
            self.heartbeat()
        found = []
        for path in sorted(self.dir.glob("*.request.json")):
            try:
                found.append((path, json.loads(path.read_text())))
            except (OSError, ValueError) as exc:
                found.append((path, {"command": "invalid", "error": f"unreadable request ({exc})"}))
        return found

    def answer(self, request_path: Path, answer: dict) -> None:
        name = request_path.name.removesuffix(".request.json")
        write_json(self.dir / f"{name}.answer.json", answer, indent=2)
        request_path.unlink(missing_ok=True)

    def note(self, line: str) -> None:
        with open(self.dir / "control.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def close(self) -> None:
        (self.dir / JOB_FILE).unlink(missing_ok=True)


def record_change(output_dir: Path, step: int, settings: dict) -> None:
    """Keep a change in hparams.json: the settings in effect, and the list of changes (which resuming applies after
    the command line's --hparam_override, rl/hparams.py)."""
    path = Path(output_dir) / "hparams.json"
    if not path.exists():  # a run started without train.py's record (a script calling rl.run.train)
        return
    record = json.loads(path.read_text())
    record["hparams"].update(settings)
    record.setdefault("control", []).append({"step": step, "settings": settings})
    write_json(path, record, indent=2)


def _change_text(key: str, before, after, was, now) -> str:
    """`lr 0.001 -> 0.0001`, and where a schedule makes the value in use differ from the setting, that value before
    and after: `lr 0.001 -> 0.0001 (in effect 0.000219 -> 2.19e-05)`."""
    text = f"{key} {before} -> {after}"
    if (was, now) != (before, after):
        text += f" (in effect {was:.6g} -> {now:.6g})"
    return text


class Controller:
    """Applies the requests a `Channel` finds, between updates of the training loop in rl/run.py. `evaluate` and
    `checkpoint` are the loop's own functions; `hp` is the loop's settings, the agent holds its own copy (the
    Scheme's learner has one sized for its workers), both are changed."""

    def __init__(self, output_dir: Path, hp, agent, log, evaluate, checkpoint):
        self.output_dir, self.hp, self.agent = Path(output_dir), hp, agent
        self.log, self.evaluate, self.checkpoint = log, evaluate, checkpoint
        self.channel = Channel(output_dir)
        record = self.output_dir / "hparams.json"
        self.changes: dict = recorded_changes(json.loads(record.read_text())) if record.exists() else {}

    def poll(self) -> None:
        for path, request in self.channel.poll():
            try:
                message = self._apply(request)
            except ConfigError as exc:
                self.channel.note(f"step {self.agent.env_steps}: refused {request}: {exc}")
                self.channel.answer(path, {"error": str(exc)})
                continue
            print(f"\n{message}", flush=True)
            self.channel.note(message)
            self.channel.answer(path, {"message": message, "step": self.agent.env_steps})

    def _apply(self, request: dict) -> str:
        step = self.agent.env_steps
        command = request.get("command")
        if command == "checkpoint":
            self.checkpoint()
            return f"control: checkpoint saved at step {step}"
        if command == "evaluate":
            mean = self.evaluate()
            if mean is None:
                return f"control: the evaluation at step {step} was stopped by a stop signal"
            return f"control: evaluation at step {step}: {mean:.2f}"
        if command != "set":
            raise ConfigError(request.get("error", f"unknown request {request!r}"))
        allowed = changeable(self.hp)
        settings = request.get("settings", {})
        refused = [k for k in settings if k not in allowed]
        if refused:
            raise ConfigError(f"{', '.join(refused)} cannot change in this run; settings that can: "
                              f"{', '.join(allowed)}")
        self.hp.copy().update(settings)  # typed and bounded by HParams: a bad value is refused before any change
        before = {k: getattr(self.hp, k) for k in settings}
        agent_part = {k: v for k, v in settings.items() if k not in RUN_SETTINGS}
        was = self.agent.in_effect(list(agent_part))
        self.hp.update(settings)
        if agent_part:
            self.agent.change_settings(agent_part)
        now = self.agent.in_effect(list(agent_part))
        self.changes.update(settings)
        record_change(self.output_dir, step, settings)
        self.log(step, {f"control/{k}": float(v) for k, v in settings.items()})
        return f"control: at step {step}: " + ", ".join(
            _change_text(k, before[k], v, was.get(k, before[k]), now.get(k, v)) for k, v in settings.items())

    def close(self) -> None:
        self.channel.close()
