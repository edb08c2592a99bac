"""elite_buffer_vtrace's V-trace agent: every rollout of T steps goes, one
env's sequence at a time, into every buffer of `replay_parameters` (rl/memory/sequence_buffers.py), and each batch of
`batch_rollouts` sequences is composed from them by sample ratio, in the listed order: with elite_buffer_vtrace's
`queue 1 @0.5 + standard 1000 @0.5`, half the freshest sequences, half replayed ones. Every sequence of a batch is
scored by the current model and learned from with V-trace (`grad_comp=vtrace`), with CLEAR's cloning terms and
LASER's trust-region mask as settings.

Acting is the on-policy agent's, plus what the buffers keep of the acting policy: per-step feature vectors (the
model's feature head, for elite and attentive sampling) and logits (CLEAR, LASER). With workers (`--num_workers`),
each shipment is one worker's rollout, handed to `update()` as it arrives; with one process, the agent's own
rollout. A batch is learned as soon as every buffer can give its share, so the queue's share of fresh sequences
sets the pace: 5 fresh sequences (50 agent steps) per batch in elite_buffer_vtrace's first command.

The buffers, their sampling counters, the annealed lambda and the batch generator are checkpointed: a resumed run
composes the batches the uninterrupted one would.

Volatility (defined before any run; `_volatility`): with `probe_size` > 0, the KL between the policies
before and after an update on a fixed probe set of observations (spread over the first batch, checkpointed); the KL of
the target policy to the behaviour one over the replayed and the fresh steps of each batch (with stored logits: CLEAR
or LASER on); lambda; and a ranked buffer's mean distance of the chosen sequences against its pool's. They are
diagnostics of every update, so TensorBoard scalars and progress.csv columns (the last update's at each log row).
"""

from __future__ import annotations

import copy
import threading

import numpy as np
import torch

from rl.agents.common import fp32_params
from rl.agents.on_policy import OnPolicyAgent
from rl.agents.scheme import worker_envs
from rl.errors import ConfigError
from rl.grad_comp.vtrace import categorical_kl, laser_mask, vtrace_targets
from rl.memory.replay_parameters import parse_replay_parameters, shares
from rl.memory.rollout import RolloutBatch, RolloutMemory
from rl.memory.sequence_buffers import build_buffers, ready
from rl.memory.sequences import SequenceBatch, Sequences, concat, from_rollout, next_values
from rl.registry import agents, grad_comp


def ranks_sequences(specs) -> bool:
    """Whether a buffer ranks sequences by the current model's features (elite/attentive sampling, elite insertion)."""
    return any(getattr(s, "sample_strategy", None) or getattr(s, "insert_strategy", None) for s in specs)


@agents.register("impala")
class ImpalaAgent(OnPolicyAgent):
    """V-trace on batches composed from sequence buffers (elite_buffer_vtrace); learns from each rollout as it
    arrives."""

    LIVE_SETTINGS = ("lr", "ent_coef", "vf_coef", "max_grad_norm")
    LOSS_KINDS = ("vtrace",)  # the loss's call (rl/grad_comp/contracts.py: VTraceLoss)

    @classmethod
    def learner_envs(cls, hp) -> int:
        """One worker's env columns: the learner takes every worker rollout as it arrives (rl/parallel/learner.py),
        not a batch of `batch_rollouts` columns (those are the sequences of a replay batch here)."""
        return worker_envs(hp)

    @classmethod
    def check_workers(cls, hp, learner_envs: int) -> None:
        """Each rollout is learned from alone, so any col_communication fits (sync: one of every worker, in turn)."""

    def __init__(self, hp, obs_space, action_space, num_envs: int, seed: int = 0):
        if grad_comp.kind_of(hp.grad_comp) != "vtrace":
            raise ConfigError(f"agent 'impala' learns with V-trace: use grad_comp=vtrace (got {hp.grad_comp!r})")
        if hp.recurrent:
            raise ConfigError("agent 'impala' replays sequences without stored hidden states: use recurrent=False")
        if not hasattr(action_space, "n"):
            raise ConfigError(f"agent 'impala' acts in discrete action spaces (as elite_buffer_vtrace on Atari), got "
                              f"{action_space}")
        self.specs = parse_replay_parameters(hp.replay_parameters)
        counts = shares(self.specs, hp.batch_rollouts)  # every buffer's share is a whole number, at least one
        # which columns of a batch were replayed (every buffer but the queues), in the composed order
        self.replayed = torch.from_numpy(np.repeat([s.type != "queue" for s in self.specs], counts))
        self.ranked = ranks_sequences(self.specs)
        if self.ranked and not hp.feature_head:
            raise ConfigError("elite/attentive sampling and elite insertion rank sequences by the model's feature "
                              "vectors: set feature_head=True")
        super().__init__(hp, obs_space, action_space, num_envs, seed)
        behaviour = {}
        if self.ranked:
            behaviour["features"] = self.model.feature_dim
        if hp.clear_policy_coef or hp.laser_kl_threshold > 0:
            behaviour["logits"] = int(action_space.n)
        self.memory = RolloutMemory(hp.num_steps, num_envs, obs_space.shape, obs_space.dtype, action_space.shape,
                                    action_space.dtype, device=hp.device, behaviour=behaviour)
        self.buffers = None  # built on the first update: workers act and never allocate them
        self.replay_rng = np.random.default_rng([seed, 77])  # the batches' draws
        self._stored_buffers: list | None = None  # a checkpoint's buffers, loaded when the buffers are built
        # replay_caching: the replayed shares of the next batch, drawn by a thread while the learner steps, ranked by
        # a snapshot of the weights taken before the step (the live weights change under it)
        self.prepared: dict[int, SequenceBatch] = {}
        self._snapshot = None
        # volatility: the fixed probe set, taken from the first batch, and its logits after the last step
        self.probe: torch.Tensor | None = None
        self._probe_logits: torch.Tensor | None = None

    # ------------------------------------------------------------------ acting
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        if deterministic or not self.memory.behaviour:
            return super().act(obs, deterministic)
        x = self._input(obs, update_stats=True)
        with torch.inference_mode():
            with self.autocast():
                if "features" in self.memory.behaviour:
                    params, values, hidden, features = self.model(x, self.hidden, with_features=True)
                else:
                    (params, values, hidden), features = self.model(x, self.hidden), None
            params, values = fp32_params(params), values.float()
            step = self.policy(params)
        self._cache = (x, step.actions, step.log_probs, values, self.hidden, hidden)
        self._behaviour = {"features": features, "logits": params}  # the base observe stores those the memory keeps
        return step.env_actions

    # ------------------------------------------------------------------ the buffers
    def _features_for(self, obs: torch.Tensor, model=None) -> torch.Tensor:
        """The current model's features [t, n, F] of time-major observations [t, n, ...], one batched pass."""
        model = self.model if model is None else model
        with torch.inference_mode():
            x = obs.to(self.device).flatten(0, 1)
            if self.obs_norm is not None:
                x = self.to_tensor(self.obs_norm(x.cpu().numpy(), update=False))
            with self.autocast():
                return model.features(x).float().view(*obs.shape[:2], -1).cpu()

    def _build_buffers(self):
        hp = self.hp
        feature_dim = self.memory.behaviour_widths.get("features", 0)
        logits_dim = self.memory.behaviour_widths.get("logits")
        self.buffers = build_buffers(self.specs, self.obs_space, hp.num_steps, hp.batch_rollouts, self.action_space,
                                     feature_dim=feature_dim, seed=self.seed, lr_scheduler_steps=hp.lr_scheduler_steps,
                                     logits_dim=logits_dim)
        if self._stored_buffers is not None:
            for buf, state in zip(self.buffers, self._stored_buffers):
                buf.load_state_dict(state)
            self._stored_buffers = None
        return self.buffers

    def _sequences(self, column: int) -> Sequences:
        """Env column `column` of the full rollout, as one sequence with its behaviour vectors."""
        mem, cols = self.memory, slice(column, column + 1)
        T = mem.pos
        features = mem.features[:T, cols] if "features" in mem.behaviour else torch.zeros(T, 1, 0)
        logits = mem.logits[:T, cols] if "logits" in mem.behaviour else None
        return from_rollout(mem, features, logits, columns=cols)

    def _compose(self) -> SequenceBatch | None:
        """The next batch, each buffer's share in the listed order (prepared shares first used); None until every
        buffer holds its fill-in amount."""
        hp = self.hp
        if not ready(self.buffers, hp.batch_rollouts, hp.training_fill_in_factor):
            return None
        counts = shares(self.specs, hp.batch_rollouts)
        features_for = self._features_for if self.ranked else None
        return concat([self.prepared.pop(i) if i in self.prepared else
                       buf.gather(buf.sample(k, self.replay_rng, features_for=features_for))
                       for i, (buf, k) in enumerate(zip(self.buffers, counts))])

    def _prepare(self) -> threading.Thread | None:
        """replay_caching: draw the replayed shares (every buffer but the queues) of the next batch in a thread."""
        if not self.hp.replay_caching:
            return None
        if self.ranked:
            if self._snapshot is None:
                self._snapshot = copy.deepcopy(self.model)
            self._snapshot.load_state_dict(self.model.state_dict())
        counts = shares(self.specs, self.hp.batch_rollouts)

        def features_for(obs):
            return self._features_for(obs, self._snapshot)

        def work():
            for i, (buf, k) in enumerate(zip(self.buffers, counts)):
                if buf.spec.type != "queue" and i not in self.prepared:
                    self.prepared[i] = buf.gather(buf.sample(k, self.replay_rng,
                                                             features_for=features_for if self.ranked else None))

        thread = threading.Thread(target=work, name="replay-caching", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------ learning
    def update(self) -> dict:
        """A full rollout goes into every buffer, sequence by sequence; after each, as many batches as the buffers
        can give are learned from (one per queue share of fresh sequences)."""
        if not self.memory.full:
            return {}
        buffers = self.buffers if self.buffers is not None else self._build_buffers()
        info: dict = {}
        for column in range(self.memory.num_envs):
            item = self._sequences(column)
            for buf in buffers:
                buf.add(item, features_for=self._features_for if self.ranked else None)
            while (batch := self._compose()) is not None:
                preparing = self._prepare()  # overlaps the learner's step
                info = self.learn(batch)
                if preparing is not None:
                    preparing.join()  # before the next sequence is stored: no buffer changes under the thread
        self.memory.reset()
        return info

    def settings_changed(self, values: dict) -> None:
        if "lr" in values:  # its own schedule (below), in effect from now
            self.optimizer.lr = self._lr()

    def loss_elements(self) -> int:
        """T x the batch's sequences: the elements the V-trace loss is the mean over (summed_eps, summed_clip)."""
        return self.hp.num_steps * sum(shares(self.specs, self.hp.batch_rollouts))

    def _lr(self) -> float:
        """elite_buffer_vtrace's polynomial decay (`PolynomialLRDecay`, power 2 there: lr_decay_power) from lr to
        lr_end_value over lr_scheduler_steps batches, then lr_end_value."""
        hp = self.hp
        if not hp.lr_decay:
            return hp.lr
        remaining = max(0.0, 1.0 - self.updates / max(1, hp.lr_scheduler_steps))
        return hp.lr_end_value + (hp.lr - hp.lr_end_value) * remaining ** hp.lr_decay_power

    def learn(self, batch: SequenceBatch) -> dict:
        """One gradient step of V-trace on `batch`: the current model scores all T+1 observations of every sequence
        in one pass; the targets bootstrap from the last one (or from a truncated step's final observation)."""
        hp, dev = self.hp, self.device
        T, k = batch.rewards.shape
        obs = batch.obs.to(dev)
        self.optimizer.lr = self._lr()
        with self.autocast():
            params, values, _ = self.model(obs.flatten(0, 1))
        logits, values = fp32_params(params).view(T + 1, k, -1), values.float().view(T + 1, k)
        actions = batch.actions.to(dev)
        log_probs = self.policy.log_prob(logits[:T], actions)
        entropy = self.policy.entropy(logits[:T])
        final_values = torch.zeros(0, device=dev)
        if len(batch.final_at):
            with torch.no_grad(), self.autocast():
                final_values = self.model(batch.final_obs.to(dev))[1].float()
        behaviour_log_probs = batch.log_probs.to(dev)
        kl = categorical_kl(logits[:T], batch.logits.to(dev)) if batch.logits is not None else None
        mask = laser_mask(kl, hp.laser_kl_threshold) if kl is not None else None
        vs, advantages = vtrace_targets(log_probs.detach() - behaviour_log_probs, values[:T].detach(),
                                        next_values(values.detach(), final_values, batch.final_at.to(dev)),
                                        batch.rewards.to(dev), batch.terminated.to(dev), batch.dones.to(dev),
                                        hp.gamma, hp.vtrace_rho, hp.vtrace_c, hp.vtrace_pg_rho, mask=mask)
        flat = RolloutBatch(None, actions.flatten(0, 1), behaviour_log_probs.flatten(), batch.values.to(dev).flatten(),
                            advantages.flatten(), vs.flatten())
        loss, info = self.loss_fn(log_probs.flatten(), entropy.flatten(), values[:T].flatten(), flat,
                                  diagnostics=True, ent_coef=hp.ent_coef, vf_coef=hp.vf_coef,
                                  mask=None if mask is None else mask.flatten(),
                                  policy_kl=None if kl is None else kl.flatten(),
                                  clear_policy_coef=hp.clear_policy_coef, clear_value_coef=hp.clear_value_coef)
        before = self._probe_before(obs[:T])
        self.optimizer.zero_grad()
        loss.backward()
        self._apply(self.optimizer.grad)
        self.updates += 1
        info.update({"charts/learning_rate": self.optimizer.lr, "replay/lambda": self._lambda()})
        info.update(self._volatility(before, kl))
        return info

    # ------------------------------------------------------------------ volatility
    def _probe_pass(self) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            return fp32_params(self.model(self.probe)[0])

    def _probe_before(self, acted: torch.Tensor) -> torch.Tensor | None:
        """The probe set's logits before this update's step, on the updates that measure (None on the others). The
        probe set is fixed at the first batch: probe_size of its acted observations, evenly spread."""
        hp = self.hp
        if hp.probe_size <= 0:
            return None
        if self.probe is None:
            flat = acted.flatten(0, 1)
            self.probe = flat[np.unique(np.linspace(0, len(flat) - 1, hp.probe_size).round().astype(np.int64))]
        if self.updates % hp.probe_interval != 0:
            return None
        return self._probe_logits if self._probe_logits is not None else self._probe_pass()

    def _volatility(self, before: torch.Tensor | None, kl: torch.Tensor | None) -> dict:
        """The measures of how fast the policy moves and how far the replayed data is from it, defined before any
        run: `volatility/policy_kl`, the mean KL(pi_after || pi_before) of this update over the probe set;
        `volatility/replay_kl` and `volatility/fresh_kl`, the mean KL(pi || mu) of the target policy to the behaviour
        one over the replayed and the fresh (queue) steps of the batch; `replay/selected_distance` and
        `replay/pool_distance`, a ranked buffer's mean distance of the sequences it chose and of its whole pool."""
        out = {}
        self._probe_logits = None
        if before is not None:
            after = self._probe_pass()
            out["volatility/policy_kl"] = float(categorical_kl(after, before).mean())
            if self.hp.probe_interval == 1:
                self._probe_logits = after  # the next update's "before": the weights have not moved since
        if kl is not None:
            kl, replayed = kl.detach(), self.replayed.to(kl.device)
            if replayed.any():
                out["volatility/replay_kl"] = float(kl[:, replayed].mean())
            if not replayed.all():
                out["volatility/fresh_kl"] = float(kl[:, ~replayed].mean())
        for buf in self.buffers or ():
            for key, value in getattr(buf, "diagnostics", {}).items():
                out[f"replay/{key}"] = value
        return out

    def _lambda(self) -> float:
        samplers = [b.sampler for b in self.buffers or () if getattr(b, "sampler", None) is not None]
        return float(samplers[0].lam) if samplers else 1.0

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self, include_memory: bool = True) -> dict:
        """As every agent's; `include_memory=False` (best.pt, what evaluation reads) leaves the replayed sequences out:
        at elite_buffer_vtrace's capacity of 10,000 Atari sequences they are gigabytes."""
        state = super().state_dict(include_memory)
        if not include_memory:
            state["sequence_replay"] = {**state["sequence_replay"], "buffers": None}
        return state

    def extra_state(self) -> dict:
        state = super().extra_state()
        buffers = self._stored_buffers if self._stored_buffers is not None else (
            [b.state_dict() for b in self.buffers] if self.buffers is not None else None)
        state["sequence_replay"] = {"rng": self.replay_rng.bit_generator.state, "buffers": buffers,
                                    "prepared": {i: b._asdict() for i, b in self.prepared.items()}}
        if self.probe is not None:
            state["probe"] = {"obs": self.probe.cpu(),
                              "logits": None if self._probe_logits is None else self._probe_logits.cpu()}
        return state

    def load_extra_state(self, state: dict) -> None:
        super().load_extra_state(state)
        if state.get("probe") is not None:
            self.probe = state["probe"]["obs"].to(self.device)
            logits = state["probe"]["logits"]
            self._probe_logits = None if logits is None else logits.to(self.device)
        replay = state.get("sequence_replay")
        if replay is None:
            return
        self.replay_rng.bit_generator.state = replay["rng"]
        self.prepared = {int(i): SequenceBatch(**b) for i, b in replay.get("prepared", {}).items()}
        if replay["buffers"] is not None:
            self._stored_buffers = replay["buffers"]
            if self.buffers is not None:
                self._build_buffers()

