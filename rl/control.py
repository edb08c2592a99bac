"""Changing a running job from outside: `train.py --output_dir runs/x --control "lr=1e-4,ent_coef=0.005"` (or
`--control checkpoint`, `--control evaluate`), PyTorchRL's `update_algo_parameter` without editing a script.

The channel is the run folder, so it works wherever the folder is shared (this machine, a pod's volume through
`kubectl exec`): the job keeps `control/job.json` (who it is, `rl.folder.identity`, and a heartbeat) while it runs;
`send` drops a request file into `control/` and waits for the job's answer beside it. The training loop (rl/run.py)
polls between steps, which is between updates, in one process or as the Scheme's learner, applies the request, prints
and logs it (`control/<setting>` scalars and a line in `control/control.log`), and records the change in
`hparams.json` and in the next checkpoint, so that a resumed run continues with it.

Whether a job runs, and the files of the channel, are rl/job.py's; a request is only written for a job that runs.

Only settings read afresh at every update can change: each agent lists them (`LIVE_SETTINGS`), the loop adds its own
intervals (`RUN_SETTINGS`). Where workers compute something themselves, the settings they read stay fixed: acting
settings (epsilon) with collection workers, loss settings with gradient workers, and every agent setting inside a
synchronous gradient group (its ranks would step with different settings and drift apart).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rl.checkpoint import write_json
from rl.errors import ConfigError
from rl.folder import holder
from rl.hparams import flat
from rl.job import (
    CONTROL_DIR,
    JOB_FILE,
    Channel,
    describe_job,
    job_state,
    judged_here,
    read_job,
    read_object,
    running_job,
)
from rl.overrides import split_top_level

RUN_SETTINGS = ("eval_interval", "eval_episodes", "checkpoint_interval", "checkpoint_minutes", "log_interval")
STEP_SETTINGS = ("lr", "max_grad_norm")  # applied where the optimizer steps: the learner, in every mode
ACTING_SETTINGS = ("exploration_final_eps",)  # read where actions are chosen: collection workers keep their own
COMMANDS = ("checkpoint", "evaluate")
SEND_TIMEOUT_S = 60.0  # how long `send` waits for the answer before it says the request is queued


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


# ------------------------------------------------------------------------------------------------ reading the folder
def read_run_record(output_dir: Path) -> dict | None:
    """The run's hparams.json (None where there is none), its shape and its --control changes checked."""
    path = Path(output_dir) / "hparams.json"
    record = read_object(path, "fix or delete it, or use another --output_dir")
    if record is not None:
        if not isinstance(record.get("hparams"), dict) or not isinstance(record.get("hparams_set"), str):
            raise ConfigError(f"{path} lacks the \"hparams_set\" name and \"hparams\" object train.py writes: fix or "
                              f"delete it, or use another --output_dir")
        control_entries(record, path)
    return record


def control_entries(record: dict, path) -> list[dict]:
    """The record's `control` list, checked to be what `record_change` writes: objects with a `settings` object and
    perhaps an `overridden` list. Another shape (hand-edited) is one ConfigError line naming `path`."""
    entries = record.get("control", [])
    shaped = isinstance(entries, list) and all(
        isinstance(e, dict) and isinstance(e.get("settings", {}), dict) and isinstance(e.get("overridden", []), list)
        for e in entries)
    if not shaped:
        raise ConfigError(f"{path}: 'control' must be a list of {{\"step\": N, \"settings\": {{...}}}} objects as "
                          f"--control writes them, found {json.dumps(entries)[:80]}: fix or delete it")
    return entries


def _no_job(output_dir: Path, record: dict) -> str:
    """Why `send` writes no request into `output_dir`: who holds the folder, or that no job runs. A job.json left
    by a job of this host that is gone is removed (it would make the next --control wait for nobody)."""
    owner = holder(output_dir)
    if owner is not None:
        return (f"{output_dir} is in use by {describe_job(owner) if owner else 'another process'}, which takes no "
                f"requests (it is starting, or evaluating): try again once it trains")
    job, running, stale = job_state(output_dir)
    if running:
        return f"a job has just started in {output_dir}: try again"
    note = ""
    if job is not None and judged_here(job):
        path = output_dir / CONTROL_DIR / JOB_FILE
        if read_job(output_dir) == job:  # not rewritten meanwhile by a job that just started
            path.unlink(missing_ok=True)
        note = f" (removed a stale {CONTROL_DIR}/{JOB_FILE} of {stale})"
    elif job is not None:
        note = f" (its {CONTROL_DIR}/{JOB_FILE} is stale: {stale})"
    return (f"no job is running in {output_dir}{note}; resume it with train.py --hparams {record['hparams_set']} "
            f"--output_dir {output_dir} (a --hparam_override then sets what you wanted to change)")


def send(output_dir: Path, text: str, timeout_s: float = SEND_TIMEOUT_S) -> None:
    """Hand a request to the job running in `output_dir` and print its answer (or that it is queued: the job takes
    it at its next update)."""
    output_dir = Path(output_dir)
    record = read_run_record(output_dir)
    if record is None:
        raise ConfigError(f"--control: {output_dir} holds no run (no hparams.json)")
    job = running_job(output_dir)
    if job is None:
        raise ConfigError(f"--control: {_no_job(output_dir, record)}")
    from rl.registry import hparams as sets

    try:
        hp = sets[record["hparams_set"]]().update(record["hparams"])
    except ConfigError as exc:
        raise ConfigError(f"--control: {output_dir / 'hparams.json'}: {exc}") from None
    request = parse_request(hp, text)
    name = f"{time.time_ns()}-{os.getpid()}"
    folder = output_dir / CONTROL_DIR
    request_path = folder / f"{name}.request.json"
    write_json(request_path, request, indent=2)
    answer_path = folder / f"{name}.answer.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answer_path.exists() or running_job(output_dir) is None:
            if not answer_path.exists():  # the job ended without an answer: a later one would take it by surprise
                request_path.unlink(missing_ok=True)
                raise ConfigError(f"--control: the job in {output_dir} ended before it took the request (withdrawn)")
            answer = read_object(answer_path, "the job writes it whole, so it is damaged: send the request again")
            answer_path.unlink(missing_ok=True)
            if "error" in answer:
                raise ConfigError(f"--control: the job refused it: {answer['error']}")
            print(answer.get("message", answer), flush=True)
            return
        time.sleep(0.2)
    print(f"queued in {folder}: the job ({describe_job(job)}) takes it at its next update; see "
          f"{folder / 'control.log'}", flush=True)


# ------------------------------------------------------------------------------------------- changes kept in the run
def recorded_changes(record: dict, source="hparams.json") -> dict:
    """The settings changed by --control in a run record (hparams.json, read from `source`) and still in effect,
    latest value of each."""
    changes: dict = {}
    for entry in control_entries(record, source):
        overridden = entry.get("overridden", ())
        changes.update({k: v for k, v in entry.get("settings", {}).items() if k not in overridden})
    return changes


def carry_changes(output_dir: Path, old_record: dict, now: dict) -> list[dict]:
    """The `control` list for the record of a resumed run whose settings are now `now`: every change ever made, kept
    in order; a setting whose latest change no longer holds (a --hparam_override typed at resume replaced it) is
    named in that entry's `overridden`, which resuming skips, and the replacement is noted in control.log."""
    entries = [dict(e) for e in control_entries(old_record, Path(output_dir) / "hparams.json")]
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


def record_change(output_dir: Path, step: int, settings: dict, record: dict | None = None, hp=None) -> None:
    """Keep a change in hparams.json: the settings in effect, and the list of changes (which resuming applies after
    the command line's --hparam_override, rl/resolve.py). `record`: hparams.json as read (and checked) before the
    change was applied; read here when not given. `hp`: the run's settings with the change applied, written grouped
    by section as the run wrote them (without it: flat)."""
    record = read_run_record(output_dir) if record is None else record
    if record is None:  # a run started without train.py's record (a script calling the loop itself)
        return
    record["hparams"] = hp.record() if hp is not None else {**flat(record["hparams"]), **settings}
    record.setdefault("control", []).append({"step": step, "settings": settings})
    write_json(Path(output_dir) / "hparams.json", record, indent=2)


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
        record = read_run_record(self.output_dir)  # checked before the channel opens: a damaged one stops here
        self.changes: dict = recorded_changes(record, self.output_dir / "hparams.json") if record else {}
        self.channel = Channel(output_dir)

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
        if not isinstance(settings, dict) or not settings:
            raise ConfigError(f"a set request names its settings as an object of key: value, got {settings!r}")
        refused = [k for k in settings if k not in allowed]
        if refused:
            raise ConfigError(f"{', '.join(refused)} cannot change in this run; settings that can: "
                              f"{', '.join(allowed)}")
        self.hp.copy().update(settings)  # typed and bounded by HParams: a bad value is refused before any change
        record = read_run_record(self.output_dir)  # and a damaged hparams.json (hand-edited meanwhile) too
        before = {k: getattr(self.hp, k) for k in settings}
        agent_part = {k: v for k, v in settings.items() if k not in RUN_SETTINGS}
        was = self.agent.in_effect(list(agent_part))
        self.hp.update(settings)
        if agent_part:
            self.agent.change_settings(agent_part)
        now = self.agent.in_effect(list(agent_part))
        self.changes.update(settings)
        record_change(self.output_dir, step, settings, record, self.hp)
        self.log(step, {f"control/{k}": float(v) for k, v in settings.items()})
        return f"control: at step {step}: " + ", ".join(
            _change_text(k, before[k], v, was.get(k, before[k]), now.get(k, v)) for k, v in settings.items())

    def close(self) -> None:
        self.channel.close()
