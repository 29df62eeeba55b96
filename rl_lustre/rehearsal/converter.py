"""The rehearsal of NeMo-RL's checkpoint converters (``python -m rl_lustre.rehearsal.converter``).

It takes the command line of ``examples/converters/convert_dcp_to_hf.py`` or
``convert_megatron_to_hf.py`` of NeMo-RL v0.4.0 (see :mod:`rl_lustre.nemo_rl.converters`),
checks what they check (the config, the checkpoint's weights, an output directory that
does not exist yet), reads the model's name from the checkpoint's ``config.yaml``, and
writes the files they write: ``config.json``, the weights (``pytorch_model.bin`` for a
DTensor checkpoint; ``model-0000i-of-0000n.safetensors`` and their index for a Megatron one)
and the tokenizer's files, with filler bytes at ``--checkpoint-scale`` of the real size.
It converts nothing, and says so.

Examples:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> step = root / "step_2"
    >>> (step / "policy" / "weights" / "iter_0000000").mkdir(parents=True)
    >>> config = "policy: {model_name: Qwen/Qwen2.5-1.5B, tokenizer: {name: Qwen/Qwen2.5-1.5B}}"
    >>> _ = (step / "config.yaml").write_text(config)
    >>> main(["--backend", "megatron", "--checkpoint-scale", "1e-6", "--config", str(step / "config.yaml"),
    ...       "--megatron-ckpt-path", str(step / "policy/weights/iter_0000000"), "--hf-ckpt-path", str(root / "hf")])
    ... # doctest: +ELLIPSIS
    rehearsal: no model is converted; ...
    Saved HF checkpoint to: .../hf
    0
    >>> sorted(p.name for p in (root / "hf").iterdir())[:3]
    ['config.json', 'model-00001-of-00001.safetensors', 'model.safetensors.index.json']
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .._sizing import parse_param_count
from ..nemo_rl.converters import HF_BYTES_PER_PARAM, hf_layout

__all__ = ["main"]

# Megatron-Bridge shards the safetensors (5 GB a file, as Hugging Face saves by default).
_SHARD_BYTES = 5 * 10**9
_NOTE = "rl_lustre rehearsal: not model weights\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_lustre.rehearsal.converter")
    parser.add_argument("--backend", choices=sorted(HF_BYTES_PER_PARAM), required=True)
    parser.add_argument("--checkpoint-scale", type=float, default=1e-5)
    parser.add_argument("--config", required=True, help="the checkpoint's config.yaml")
    parser.add_argument("--dcp-ckpt-path", default=None)
    parser.add_argument("--megatron-ckpt-path", default=None)
    parser.add_argument("--hf-ckpt-path", required=True)
    args = parser.parse_args(argv)
    import yaml

    weights = args.dcp_ckpt_path if args.backend == "dtensor" else args.megatron_ckpt_path
    flag = "--dcp-ckpt-path" if args.backend == "dtensor" else "--megatron-ckpt-path"
    if not weights or not Path(weights).is_dir():
        parser.error(f"{flag} {weights!r} is not a checkpoint's weights directory")
    out = Path(args.hf_ckpt_path)
    if out.exists():
        # As NeMo-RL's converters: they never overwrite.
        print(f"HF checkpoint already exists at {out}. Delete it to run or set overwrite=True.", file=sys.stderr)
        return 1
    config = yaml.safe_load(Path(args.config).read_text()) or {}
    policy = config.get("policy") or {}
    model = str(policy.get("model_name") or "")
    tokenizer = str((policy.get("tokenizer") or {}).get("name") or model)
    params = parse_param_count(model) or 0
    total = int(params * HF_BYTES_PER_PARAM[args.backend] * args.checkpoint_scale)
    shards = max(1, -(-int(params * HF_BYTES_PER_PARAM[args.backend]) // _SHARD_BYTES))
    out.mkdir(parents=True)
    files = hf_layout(args.backend, shards)
    weight_files = [f for f in files if f.endswith((".bin", ".safetensors"))]
    for name in files:
        path = out / name
        if name in weight_files:
            with open(path, "wb") as f:
                f.write(_NOTE.encode())
                f.truncate(max(len(_NOTE), total // len(weight_files)))
        elif name == "model.safetensors.index.json":
            path.write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": {"rl_lustre.rehearsal": weight_files[0]}})
            )
        elif name == "config.json":
            path.write_text(
                json.dumps({"_name_or_path": model, "rl_lustre_rehearsal": True, "torch_dtype": "bfloat16"})
            )
        else:
            path.write_text(json.dumps({"name_or_path": tokenizer, "rl_lustre_rehearsal": True}))
    print(f"rehearsal: no model is converted; the files of {args.backend}'s converter for {model} at scale "
          f"{args.checkpoint_scale:g}")  # fmt: skip
    print(f"Saved HF checkpoint to: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
