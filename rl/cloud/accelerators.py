"""`--accelerator NAME:COUNT`: what a pod asks Kubernetes for, in GKE's names (the node labels GKE sets on its GPU and
TPU nodes). On another cloud the same resource requests hold (`nvidia.com/gpu`, `google.com/tpu`); only the node
selector names differ (k8s/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rl.errors import ConfigError

GPU_LABEL = "cloud.google.com/gke-accelerator"
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"

# GPU name -> the counts one GKE node offers (its machine shapes)
GPUS = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-l4": (1, 2, 4, 8),
    "nvidia-tesla-a100": (1, 2, 4, 8, 16),
    "nvidia-a100-80gb": (1, 2, 4, 8),
    "nvidia-h100-80gb": (1, 2, 4, 8),
    "nvidia-h100-mega-80gb": (8,),
    "nvidia-h200-141gb": (8,),
    "nvidia-b200": (8,),
}
# TPU name -> (GKE's accelerator label, {chips on one host: topology}); single-host slices only: a multi-host slice
# is several pods that must start together, which rl does not use (it has no TPU backend: k8s/README.md)
TPUS = {
    "tpu-v5e": ("tpu-v5-lite-podslice", {1: "1x1", 4: "2x2", 8: "2x4"}),
    "tpu-v5p": ("tpu-v5p-slice", {4: "2x2x1"}),
    "tpu-v6e": ("tpu-v6e-slice", {1: "1x1", 4: "2x2", 8: "2x4"}),
}


@dataclass(frozen=True)
class Accelerator:
    """What one pod (one node's share) requests: `count` of `resource`, on nodes matching `node_selector`."""

    name: str = "cpu"
    count: int = 0
    resource: str = ""  # nvidia.com/gpu, google.com/tpu; "" for CPU only
    node_selector: dict = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        return self.resource == "nvidia.com/gpu"

    @property
    def is_tpu(self) -> bool:
        return self.resource == "google.com/tpu"

    @property
    def toleration(self) -> dict | None:
        """GKE taints accelerator nodes with their resource name so only pods asking for it land there."""
        if not self.resource:
            return None
        return {"key": self.resource, "operator": "Exists", "effect": "NoSchedule"}


def valid_names() -> str:
    gpus = ", ".join(f"{n}:{'|'.join(map(str, c))}" for n, c in GPUS.items())
    tpus = ", ".join(f"{n}:{'|'.join(map(str, t[1]))}" for n, t in TPUS.items())
    return f"cpu, {gpus}, {tpus}"


def parse_accelerator(text: str | None) -> Accelerator:
    """"nvidia-l4:1", "nvidia-h100-80gb:8", "tpu-v6e:4", "cpu" (or None) -> Accelerator; else a one-line error."""
    if text in (None, "", "cpu"):
        return Accelerator()
    name, sep, count_text = text.partition(":")
    try:
        count = int(count_text) if sep else 1
    except ValueError:
        count = -1
    if name in GPUS and count in GPUS[name]:
        return Accelerator(name, count, "nvidia.com/gpu", {GPU_LABEL: name})
    if name in TPUS and count in TPUS[name][1]:
        label, topologies = TPUS[name]
        return Accelerator(name, count, "google.com/tpu", {TPU_LABEL: label, TPU_TOPOLOGY_LABEL: topologies[count]})
    what = "count" if name in GPUS or name in TPUS else "accelerator"
    raise ConfigError(f"unknown {what} in --accelerator {text!r}: valid: {valid_names()} (NAME:COUNT per node)")
