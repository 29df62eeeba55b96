"""NeMo-RL's own checkpoint converters to Hugging Face format, and what running one takes.

Facts of NeMo-RL v0.4.0 (``examples/converters/`` and ``docs/design-docs/checkpointing.md``
of that release):

- a DTensor policy's checkpoint converts with ``examples/converters/convert_dcp_to_hf.py
  --config <step>/config.yaml --dcp-ckpt-path <step>/policy/weights --hf-ckpt-path <out>``,
  run as ``uv run python ...``. It loads the whole torch distributed checkpoint into memory,
  saves it as one ``pytorch_model.bin``, then writes ``config.json`` (from
  ``policy.model_name``) and the tokenizer's files;
- a Megatron policy's with ``examples/converters/convert_megatron_to_hf.py --config
  <step>/config.yaml --megatron-ckpt-path <step>/policy/weights/iter_0000000 --hf-ckpt-path
  <out>``, run as ``uv run --extra mcore python ...`` (it needs Megatron-Core). It loads the
  model on the CPU (a gloo process group) and saves it with Megatron-Bridge:
  ``config.json``, ``model-0000i-of-0000n.safetensors`` shards with their
  ``model.safetensors.index.json``, and the tokenizer's files (``policy.tokenizer.name``);
- both refuse an output directory that exists, and read the model's config and tokenizer
  by name from the Hugging Face Hub (so ``HF_HOME`` on the volume serves them).

Either way the whole model is in the converter's memory: :func:`conversion` asks Ray for a
node with that much (``entrypoint_memory``): the weights as loaded, 1.25 times, plus 16 GiB
for the interpreter and its libraries; a 72B model's bf16 weights alone are ~145 GB.
"""

from __future__ import annotations

import posixpath
import shlex
import sys
from typing import TYPE_CHECKING, Any

import attrs

from .._command import number
from .._sizing import parse_param_count
from ..oncluster.records import METRIC, NEMO_RL_DIR, POLICY_BACKEND

if TYPE_CHECKING:
    from ..spec import ClusterSpec, JobSpec
    from .resolved import ResolvedJob

__all__ = [
    "BACKENDS",
    "HF_BYTES_PER_PARAM",
    "Conversion",
    "conversion",
    "export_metadata",
    "hf_layout",
]

BACKENDS = ("dtensor", "megatron")
_SCRIPT = {
    "dtensor": "examples/converters/convert_dcp_to_hf.py",
    "megatron": "examples/converters/convert_megatron_to_hf.py",
}
_FLAG = {"dtensor": "--dcp-ckpt-path", "megatron": "--megatron-ckpt-path"}
_WEIGHTS = {"dtensor": "policy/weights", "megatron": "policy/weights/iter_0000000"}
_UV_EXTRA = {"dtensor": "", "megatron": "--extra mcore "}
# Bytes per parameter of the converted copy: the DCP converter saves the checkpoint's own
# weights (the DTensor policy's fp32 master weights); Megatron-Bridge writes the Hugging Face
# model's dtype (bf16).
HF_BYTES_PER_PARAM = {"dtensor": 4, "megatron": 2}
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_MEMORY_HEADROOM = 1.25
_MEMORY_FIXED = 16 * 1024**3


def hf_layout(backend: str, shards: int = 1) -> list[str]:
    """The files a converter writes, by name (``shards``: Megatron-Bridge's safetensors files).

    Examples:
        >>> hf_layout("dtensor")
        ['config.json', 'pytorch_model.bin', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json']
        >>> hf_layout("megatron", 2)[1:4]
        ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json']
    """
    if backend == "dtensor":
        weights = ["pytorch_model.bin"]
    else:
        weights = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        weights.append("model.safetensors.index.json")
    return ["config.json", *weights, *_TOKENIZER]


@attrs.frozen
class Conversion:
    """One conversion of a checkpoint to Hugging Face format, as a command to run.

    Attributes:
        backend: ``"dtensor"`` or ``"megatron"``.
        checkpoint: the ``step_N`` directory converted.
        output: the directory the converter writes (it must not exist).
        command: the shell command (NeMo-RL's converter, or the rehearsal's).
        memory_bytes: the memory the node running it needs.
        hf_bytes: the size of the converted copy, estimated (None: the model's size is unknown).
    """

    backend: str
    checkpoint: str
    output: str
    command: str
    memory_bytes: int
    hf_bytes: int | None


def conversion(
    cluster: ClusterSpec, nemo_rl_dir: str, backend: str, checkpoint: str, output: str, model: str | None
) -> Conversion:
    """The conversion of ``checkpoint`` (a ``step_N`` directory) into ``output``.

    On GKE (and locally with a NeMo-RL checkout) NeMo-RL's converter runs from the image;
    locally without one, the rehearsal's (``python -m rl_lustre.rehearsal.converter``),
    which takes the same arguments and writes the same files at the rehearsal's scale.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="d", project="my-project", region="us-east1", zone="us-east1-b")
        >>> conv = conversion(c, "/opt/nemo-rl", "megatron", "/lustre/c/step_20", "/lustre/m/step_20-hf",
        ...                   "Qwen/Qwen2.5-72B-Instruct")
        >>> print(conv.command)  # doctest: +NORMALIZE_WHITESPACE
        cd /opt/nemo-rl && uv run --extra mcore python examples/converters/convert_megatron_to_hf.py
        --config /lustre/c/step_20/config.yaml --megatron-ckpt-path /lustre/c/step_20/policy/weights/iter_0000000
        --hf-ckpt-path /lustre/m/step_20-hf
        >>> conv.hf_bytes, round(conv.memory_bytes / 1e9)
        (144000000000, 197)
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {BACKENDS}")
    args = [
        "--config",
        posixpath.join(checkpoint, "config.yaml"),
        _FLAG[backend],
        posixpath.join(checkpoint, _WEIGHTS[backend]),
        "--hf-ckpt-path",
        output,
    ]
    quoted = " ".join(shlex.quote(a) for a in args)
    params = parse_param_count(model) if model else None
    hf_bytes = None if params is None else params * HF_BYTES_PER_PARAM[backend]
    memory = int((hf_bytes or 0) * _MEMORY_HEADROOM) + _MEMORY_FIXED
    if cluster.backend == "local" and cluster.nemo_rl_path is None:
        scale = cluster.rehearsal_scale
        command = (
            f"{shlex.quote(sys.executable)} -m rl_lustre.rehearsal.converter --backend {backend}"
            f" --checkpoint-scale {number(scale)} {quoted}"
        )
        memory = int((hf_bytes or 0) * scale * _MEMORY_HEADROOM) + 64 * 1024**2
    else:
        root = cluster.nemo_rl_path if cluster.backend == "local" and cluster.nemo_rl_path else nemo_rl_dir
        command = f"cd {shlex.quote(root)} && uv run {_UV_EXTRA[backend]}python {_SCRIPT[backend]} {quoted}"
    return Conversion(backend, checkpoint, output, command, memory, hf_bytes)


def export_metadata(job: JobSpec, resolved: ResolvedJob) -> dict[str, str]:
    """What ``run.export_model()`` needs of a job, as its metadata: where NeMo-RL is in the
    image, the policy's backend, and the metric ``keep_top_k`` ranks checkpoints by."""
    out = {
        NEMO_RL_DIR: job.nemo_rl_dir,
        POLICY_BACKEND: "megatron" if resolved.value("policy.megatron_cfg.enabled") else "dtensor",
    }
    metric: Any = resolved.value("checkpointing.metric_name")
    if isinstance(metric, str) and metric:
        out[METRIC] = metric if resolved.value("checkpointing.higher_is_better", True) else f"-{metric}"
    return out
