"""Where NeMo-RL v0.4.0 and the libraries it runs keep what they compute once: all on the volume.

Every node of a run, every later submit of the same job and every restart after a Spot
preemption then finds the model download, the HF → Megatron conversion and the compile
caches where the first attempt left them, instead of redoing them on a fresh pod.

The variables, and where they are read (paths in NVIDIA-NeMo/RL at tag ``v0.4.0`` unless
said otherwise):

=============================  ====================================================================
``HF_HOME``                    Hugging Face hub downloads (``huggingface_hub``; NeMo-RL loads every
                               model and tokenizer through ``transformers``). Also the fallback root
                               of the Megatron checkpoint dir, ``nemo_rl/models/policy/utils.py``
                               (``get_megatron_checkpoint_dir``).
``HF_DATASETS_CACHE``          Hugging Face ``datasets`` (DeepScaler, ...) loaded by
                               ``nemo_rl/data/datasets/response_datasets/``; ``datasets`` defaults it to
                               ``$HF_HOME/datasets``: set explicitly so a user's ``HF_HOME``
                               elsewhere cannot move it off the volume.
``NRL_MEGATRON_CHECKPOINT_DIR``  The HF → Megatron-Core conversion a Megatron policy makes before
                               step 1 (``nemo_rl/models/policy/utils.py``, ``get_megatron_checkpoint_dir``:
                               ``$NRL_MEGATRON_CHECKPOINT_DIR``, else ``$HF_HOME/nemo_rl``, else
                               ``~/.cache/huggingface/nemo_rl``). Converting a 72B model takes
                               minutes and tens of GB; ``nemo_rl/models/policy/megatron_policy_worker.py``
                               skips the import when ``<dir>/<model>/iter_0000000`` exists.
``TORCHINDUCTOR_CACHE_DIR``    ``torch.compile`` (Inductor) artefacts; PyTorch's default is
                               ``/tmp/torchinductor_<user>``, inside the pod.
``TRITON_CACHE_DIR``           compiled Triton kernels; Triton's default is ``~/.triton/cache``.
``VLLM_CACHE_ROOT``            vLLM's ``torch.compile`` cache (vLLM points Inductor and Triton into
                               it for its own graphs). NeMo-RL v0.4.0 replaces it for every vLLM
                               data-parallel group with ``~/.cache/vllm_<seed>``, where
                               ``seed = node_idx * 1024 + k`` and ``k < gpus_per_node``
                               (``nemo_rl/models/generation/vllm/vllm_worker.py``,
                               ``configure_worker``). So each GPU worker pod links
                               ``~/.cache/vllm_<seed>`` for every seed this cluster can give to
                               ``<VLLM_CACHE_ROOT>/vllm_<seed>`` on the volume when it starts
                               (:func:`vllm_seed_links`, a ``postStart`` hook): the pod's home,
                               which holds the image's own files, is left as it is.
=============================  ====================================================================

Not caches to move: NeMo-RL's per-actor virtualenvs are built into the image
(``NEMO_RL_VENV_DIR=/opt/ray_venvs``, ``docker/Dockerfile`` runs
``nemo_rl/utils/prefetch_venvs.py``), and its uv environment is the image's
``/opt/nemo_rl_venv`` (``UV_PROJECT_ENVIRONMENT``), so ``uv run`` installs nothing at start.
"""

from __future__ import annotations

import posixpath
import shlex

from ..catalog import HF_HOME_DIR

__all__ = ["CACHE_DIR", "HF_HOME_DIR", "nemo_rl_cache_env", "vllm_seed_links", "vllm_seeds"]

# Under the mount path.
CACHE_DIR = "cache"


def nemo_rl_cache_env(mount_path: str, hf_home: str | None = None) -> dict[str, str]:
    """The environment that puts every cache NeMo-RL v0.4.0 keeps on the volume.

    One function owns these variables: the job's runtime env and the model-prefetch
    Job both take them from here, so the prefetch fills exactly the cache the job reads.

    Examples:
        >>> env = nemo_rl_cache_env("/lustre")
        >>> env["HF_HOME"], env["NRL_MEGATRON_CHECKPOINT_DIR"]
        ('/lustre/huggingface_cache', '/lustre/huggingface_cache/nemo_rl')
        >>> env["TORCHINDUCTOR_CACHE_DIR"]
        '/lustre/cache/torchinductor'

    Args:
        mount_path: where the volume is mounted in the pods.
        hf_home: ``HF_HOME``; by default ``<mount_path>/huggingface_cache``.
    """
    hf = hf_home if hf_home is not None else posixpath.join(mount_path, HF_HOME_DIR)
    compiled = posixpath.join(mount_path, CACHE_DIR)
    return {
        "HF_HOME": hf,
        "HF_DATASETS_CACHE": posixpath.join(hf, "datasets"),
        # Where NeMo-RL's own fallback would put it ($HF_HOME/nemo_rl), stated so that it holds
        # whatever HF_HOME a user's environment carries.
        "NRL_MEGATRON_CHECKPOINT_DIR": posixpath.join(hf, "nemo_rl"),
        "TORCHINDUCTOR_CACHE_DIR": posixpath.join(compiled, "torchinductor"),
        "TRITON_CACHE_DIR": posixpath.join(compiled, "triton"),
        "VLLM_CACHE_ROOT": posixpath.join(compiled, "vllm"),
    }


# nemo_rl/models/generation/vllm/vllm_worker.py (v0.4.0), configure_worker: the seed of a
# vLLM worker group is node_idx * 1024 + (its first local bundle index // its size).
_SEED_NODE_STRIDE = 1024


def vllm_seeds(num_nodes: int, gpus_per_node: int) -> list[int]:
    """Every seed NeMo-RL v0.4.0 can give a vLLM worker group on ``num_nodes`` x ``gpus_per_node``.

    Examples:
        >>> vllm_seeds(2, 2)
        [0, 1, 1024, 1025]
    """
    return [n * _SEED_NODE_STRIDE + k for n in range(num_nodes) for k in range(gpus_per_node)]


def vllm_seed_links(mount_path: str, num_nodes: int, gpus_per_node: int) -> str:
    """A POSIX shell script that links ``~/.cache/vllm_<seed>`` to the volume, for every seed.

    Run in each GPU worker container as it starts: NeMo-RL then sets
    ``VLLM_CACHE_ROOT=~/.cache/vllm_<seed>`` for its vLLM workers, and their compile cache
    lands in ``<VLLM_CACHE_ROOT of nemo_rl_cache_env>/vllm_<seed>`` on the volume, where
    the next run and a restarted node find it. An existing entry is left alone, and the
    script always succeeds (a cache that cannot be linked is only recomputed).

    Examples:
        >>> print(vllm_seed_links("/lustre", 1, 2))  # doctest: +NORMALIZE_WHITESPACE
        base=/lustre/cache/vllm; mkdir -p "$HOME/.cache" 2>/dev/null; for s in 0 1; do
        mkdir -p "$base/vllm_$s" 2>/dev/null && { [ -e "$HOME/.cache/vllm_$s" ] ||
        ln -s "$base/vllm_$s" "$HOME/.cache/vllm_$s"; } 2>/dev/null; done; exit 0
    """
    base = nemo_rl_cache_env(mount_path)["VLLM_CACHE_ROOT"]
    seeds = " ".join(str(s) for s in vllm_seeds(num_nodes, gpus_per_node))
    return (
        f'base={shlex.quote(base)}; mkdir -p "$HOME/.cache" 2>/dev/null; for s in {seeds}; do\n'
        'mkdir -p "$base/vllm_$s" 2>/dev/null && { [ -e "$HOME/.cache/vllm_$s" ] ||\n'
        'ln -s "$base/vllm_$s" "$HOME/.cache/vllm_$s"; } 2>/dev/null; done; exit 0'
    )
