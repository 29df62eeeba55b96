"""Model-family facts NeMo-RL's Megatron path needs (``policy.megatron_cfg.converter_type``)."""

from __future__ import annotations

import re

# Hugging Face architecture names by model family, most specific first. The pattern is
# searched in the lower-cased model id or path ("Qwen/Qwen2.5-72B-Instruct").
_CONVERTERS: tuple[tuple[str, str], ...] = (
    (r"qwen3[^/]*-a\d+(\.\d+)?b", "Qwen3MoeForCausalLM"),
    (r"qwen3", "Qwen3ForCausalLM"),
    (r"qwen2|qwq", "Qwen2ForCausalLM"),
    (r"llama", "LlamaForCausalLM"),
    (r"mixtral", "MixtralForCausalLM"),
    (r"mistral", "MistralForCausalLM"),
    (r"gemma-?3", "Gemma3ForCausalLM"),
    (r"gemma-?2", "Gemma2ForCausalLM"),
    (r"deepseek-v3|deepseek-r1", "DeepseekV3ForCausalLM"),
)


def converter_for(model: str) -> str | None:
    """The Megatron converter (HF architecture) for a model id or path, if the family is known.

    Examples:
        >>> converter_for("Qwen/Qwen2.5-72B-Instruct"), converter_for("meta-llama/Llama-3.3-70B-Instruct")
        ('Qwen2ForCausalLM', 'LlamaForCausalLM')
        >>> converter_for("acme/secret-sauce-7b") is None
        True
    """
    name = model.lower()
    for pattern, converter in _CONVERTERS:
        if re.search(pattern, name):
            return converter
    return None
