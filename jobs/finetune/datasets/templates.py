"""Chat templates by name: a few as Jinja here, LLaMA-Factory's other names as the tokenizer's own."""

from __future__ import annotations

import re

# Named templates as Jinja chat templates, so every path goes through ``apply_chat_template``.
TEMPLATES: dict[str, str] = {
    "default": (
        "{% for m in messages %}{% if m.role == 'system' %}System: {{ m.content }}\n"
        "{% elif m.role == 'user' %}Human: {{ m.content }}\n"
        "{% else %}Assistant: {{ m.content }}{{ eos_token }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}Assistant: {% endif %}"
    ),
    "alpaca": (
        "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n"
        "{% elif m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n"
        "{% else %}### Response:\n{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}### Response:\n{% endif %}"
    ),
    "chatml": (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "qwen": (
        "{% if messages[0].role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "llama3": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{{ m.content }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    "llama2": (
        "{% for m in messages %}{% if m.role == 'system' %}<<SYS>>\n{{ m.content }}\n<</SYS>>\n\n"
        "{% elif m.role == 'user' %}{{ bos_token }}[INST] {{ m.content }} [/INST]"
        "{% else %} {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }}[/INST]"
        "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    "empty": "{% for m in messages %}{{ m.content }}{% endfor %}",
}
# LLaMA-Factory's template names that have no Jinja copy here: each reproduces its model family's
# own chat format, which the model's tokenizer carries, so they select the tokenizer's template.
LLAMAFACTORY_TEMPLATES = frozenset(
    [
        "aquila",
        "atom",
        "baichuan",
        "baichuan2",
        "bailing",
        "belle",
        "bluelm",
        "breeze",
        "chatglm2",
        "chatglm3",
        "chatml_de",
        "codegeex2",
        "codegeex4",
        "cohere",
        "cpm",
        "cpm3",
        "dbrx",
        "deepseek",
        "deepseek3",
        "deepseekcoder",
        "deepseekr1",
        "exaone",
        "falcon",
        "fewshot",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "glm4",
        "glm4_moe",
        "gpt",
        "granite3",
        "granite4",
        "hunyuan",
        "index",
        "intern",
        "intern2",
        "intern_vl",
        "kimi_vl",
        "llama2_zh",
        "llama4",
        "llava",
        "mllama",
        "ministral",
        "mistral_small",
        "olmo",
        "openchat",
        "openchat-3.6",
        "opencoder",
        "orion",
        "paligemma",
        "phi",
        "phi_small",
        "phi4",
        "phi4_mini",
        "pixtral",
        "qwen2_audio",
        "qwen2_omni",
        "qwen2_vl",
        "qwen3",
        "qwen3_nothink",
        "qwen3_vl",
        "sailor",
        "seed_coder",
        "skywork",
        "skywork_o1",
        "solar",
        "starchat",
        "telechat",
        "telechat2",
        "vicuna",
        "video_llava",
        "xuanyuan",
        "xverse",
        "yayi",
        "yi",
        "yi_vl",
        "yuan",
        "zephyr",
        "ziya",
        # newer LLaMA-Factory names
        "apertus",
        "bailing_v2",
        "cpm4",
        "dots_ocr",
        "ernie",
        "ernie_nothink",
        "ernie_vl",
        "falcon_h1",
        "glm4_5v",
        "glm4v",
        "glmz1",
        "gpt_oss",
        "granite3_vision",
        "hunyuan_small",
        "intern_s1",
        "keye_vl",
        "lfm2",
        "lfm2_vl",
        "ling",
        "llava_next",
        "llava_next_llama3",
        "llava_next_mistral",
        "llava_next_qwen",
        "llava_next_video",
        "llava_next_video_mistral",
        "llava_next_video_yi",
        "llava_next_yi",
        "mimo",
        "mimo_vl",
        "minicpm_o",
        "minicpm_v",
        "moonlight",
        "qwen3_5",
        "qwen3_5_nothink",
        "qwen3_omni",
        "qwen3_omni_nothink",
        "qwen3_vl_nothink",
        "seed_oss",
    ]
)


def known_template(name: str) -> bool:
    """A template named here or by LLaMA-Factory, or a newer name of a model family it knows
    (``qwen3_6``): those select the tokenizer's own chat template, as the family's own names do."""
    names = set(TEMPLATES) | LLAMAFACTORY_TEMPLATES
    families = {m.group() for n in names if (m := re.match(r"[a-z]+", n))}
    family = re.match(r"[a-z]+", name)
    return name in names or (family is not None and family.group() in families)


TEMPLATES["smollm"] = TEMPLATES["chatml"]
TEMPLATES["smollm2"] = TEMPLATES["chatml"]
