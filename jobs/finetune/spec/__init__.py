"""The fine-tune job spec: a LLaMA-Factory-compatible YAML file read into a validated ``JobSpec``.

Users paste the YAML they already use with ``llamafactory-cli train``; the same key names mean the
same thing and take the same defaults. Everything wrong with a file is reported at once (unknown
keys with a "did you mean", bad values, settings that cannot work together, adapters vLLM could not
serve), so a user fixes a config in one round trip instead of one error per submit.

- ``models``: the spec as LLaMA-Factory's argument groups (model, LoRA, data, training), help text
  on every field; DeepSpeed presets.
- ``keys`` (+ ``keys.yaml``): one table of every key, honoured, ignored or refused, with the reason.
- ``checks``: combinations that cannot work, adapters vLLM could not serve.
- ``overrides``: ``key=value`` / ``--key value`` overrides, as LLaMA-Factory's command line takes them.
- ``safe_yaml``: YAML from strangers within bounds (size, aliases, expanded size).
- ``parse``: YAML (text, mapping or file, with overrides) to ``JobSpec``, every problem at once.
"""

from hipbot.jobs.finetune.spec.keys import IGNORED_KEYS, KEYS, REFUSED_KEYS, KeyInfo
from hipbot.jobs.finetune.spec.models import (
    DEEPSPEED_PRESETS,
    VLLM_MAX_LORA_RANK,
    JobSpec,
    deepspeed_config,
    deepspeed_config_path,
)
from hipbot.jobs.finetune.spec.overrides import Overrides, RawConfig, apply_overrides, parse_overrides
from hipbot.jobs.finetune.spec.parse import (
    JobConfig,
    SpecError,
    Validation,
    attach_deepspeed,
    load_job,
    load_spec,
    parse_spec,
    validate_job,
)
from hipbot.jobs.finetune.spec.safe_yaml import MAX_SPEC_BYTES, YamlBomb

__all__ = [
    "DEEPSPEED_PRESETS",
    "IGNORED_KEYS",
    "MAX_SPEC_BYTES",
    "KEYS",
    "REFUSED_KEYS",
    "VLLM_MAX_LORA_RANK",
    "JobConfig",
    "JobSpec",
    "KeyInfo",
    "Overrides",
    "RawConfig",
    "SpecError",
    "Validation",
    "YamlBomb",
    "apply_overrides",
    "attach_deepspeed",
    "deepspeed_config",
    "deepspeed_config_path",
    "load_job",
    "load_spec",
    "parse_overrides",
    "parse_spec",
    "validate_job",
]
