"""The fixed words of an answer (headings, "no HIP equivalent", "see also" ...) in the asker's
language: a question written in Chinese gets them in Chinese, everything else in English.

Only the words hipbot writes itself are translated; quoted doc sentences, API names and versions
stay as the docs and tables have them.
"""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u9fff]")

LANGUAGES = ("en", "zh")

_LABELS: dict[str, dict[str, str]] = {
    "from_docs": {"en": "From the docs:", "zh": "文档中的说明："},
    "see_also": {"en": "See also", "zh": "另见"},
    "sources": {"en": "Sources:", "zh": "来源："},
    "more": {"en": "More from the docs", "zh": "文档原文（更多）"},
    "nothing": {
        "en": "The docs I have do not cover this. Try naming the CUDA API, the option or the HIP feature.",
        "zh": "现有文档没有涉及这个问题。可以试着写出具体的 CUDA API、编译选项或 HIP 功能名称。",
    },
    "no_equivalent": {
        "en": "`{cuda}` has no HIP equivalent: HIPIFY's {table} table lists it as not supported by HIP "
        "({where}), so hipify leaves it unconverted.",
        "zh": "`{cuda}` 没有 HIP 对应项：HIPIFY 的 {table} 映射表将其列为 HIP 不支持（{where}），"
        "hipify 不会转换它。",
    },
    "no_equivalent_brief": {
        "en": "`{cuda}` has no HIP equivalent (HIPIFY's {table} table lists it as not supported).",
        "zh": "`{cuda}` 没有 HIP 对应项（HIPIFY 的 {table} 映射表列为不支持）。",
    },
    "equivalent_brief": {
        "en": "`{cuda}` \u2192 `{hip}` ({status}).",
        "zh": "`{cuda}` \u2192 `{hip}`（{status}）。",
    },
    "equivalent": {
        "en": "`{cuda}` \u2192 `{hip}` ({label}; {where}).",
        "zh": "`{cuda}` \u2192 `{hip}`（{label}；{where}）。",
    },
    "disagree": {
        "en": "The docs say more than the table: {table_says}, but {doc_title} \u203a {doc_section} says: \u201c{doc}\u201d",
        "zh": "文档与映射表不一致：{table_says}，但 {doc_title} \u203a {doc_section} 写道：\u201c{doc}\u201d",
    },
    "table_no_equivalent": {
        "en": "HIPIFY's table (HIP {version}) lists {names} as not supported",
        "zh": "HIPIFY 映射表（HIP {version}）把 {names} 列为不支持",
    },
    "did_you_mean": {
        "en": "`{token}` is not in HIPIFY's mapping tables. Did you mean {options}?",
        "zh": "`{token}` 不在 HIPIFY 映射表中。你是不是要找 {options}？",
    },
    "unknown_name": {
        "en": "`{token}` is in neither HIPIFY's mapping tables nor the docs, so hipify leaves it "
        "unconverted; check the spelling, or see the passages below.",
        "zh": "`{token}` 既不在 HIPIFY 映射表中也不在文档中，hipify 不会转换它；请检查拼写，或参考下面的文档段落。",
    },
    "closest": {"en": "Closest match: ", "zh": "最接近的匹配："},
    "counterpart": {
        "en": "Its twin in the {api} has one: {row}",
        "zh": "{api} 中的对应函数有 HIP 对应项：{row}",
    },
    "or": {"en": " or ", "zh": "或"},
    "option_row": {"en": "`{name}` ({kind}): {text}", "zh": "`{name}`（{kind}）：{text}"},
    "kind_env": {"en": "environment variable", "zh": "环境变量"},
    "kind_option": {"en": "compiler/tool option", "zh": "编译器/工具选项"},
    "kind_macro": {"en": "macro", "zh": "宏"},
    "nvcc_flag": {
        "en": "nvcc's `{flag}` corresponds to `{name}`",
        "zh": "nvcc 的 `{flag}` 对应 `{name}`",
    },
    "llm_down": {
        "en": "(LLM endpoint unavailable, composed answer instead: {error})",
        "zh": "（LLM 服务不可用，以下为从文档摘取的回答：{error}）",
    },
}


def language_of(question: str) -> str:
    """``zh`` for a question with Chinese characters, ``en`` otherwise."""
    return "zh" if _CJK.search(question) else "en"


def label(key: str, lang: str = "en", **values: str) -> str:
    """The fixed text ``key`` in ``lang`` (English when that language lacks it), filled in."""
    entry = _LABELS[key]
    return entry.get(lang, entry["en"]).format(**values)
