"""The API-lookup half of ``hipbot ask``: find the CUDA, HIP and roc*/MIOpen identifiers of a
question in HIPIFY's mapping rows, and say what the rows hold (equivalent, versions, status, or a
plain "no HIP equivalent") in the words a porting user looks for.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass

from hipbot.agents.docs.labels import label
from hipbot.agents.docs.retrieval import IDENT, query_terms, topic_of
from hipbot.agents.hipify.mappings import ApiMapping

MAX_APIS = 8

# The names hipify converts: "hipify leaves it unconverted" says something about these only
_CUDA_PREFIXES = r"__|cuda|cu[A-Z]|CU|cublas|cusparse|cusolver|curand|cufft|cudnn|cub::|nvrtc|NVRTC"
_CUDA_NAME = re.compile(rf"^(?:{_CUDA_PREFIXES})")
# The longest name of HIPIFY's tables has 64 characters: a longer "name" is no API, and
# one without two letters in a row ("________") is punctuation.
MAX_NAME_CHARS = 80
_API_PREFIX = re.compile(rf"^(?:{_CUDA_PREFIXES}|hip|HIP|roc|miopen)")
_CONCEPTUAL = re.compile(
    r"\b(why|how (?:do|does|did|can|could|should|to|is|are)|explain|differen\w*|compare|wrong|incorrect|"
    r"slow\w*|faster|performance|crash\w*|hang\w*|fail\w*|bug|problem|debug\w*|what happens|"
    r"best way|when should|behav\w*|result\w*)\b|为什么|如何|怎么|怎样|区别|性能|原因|结果",
    re.IGNORECASE,
)
# Words of a question that asks for the mapping itself, even when phrased "how do I replace X".
_LOOKUP = re.compile(
    r"\b(equivalent|replace\w*|replacement|map\w*|counterpart|instead|analog\w*|version|supported|"
    r"support|deprecated|removed|experimental|available|hipify\w*|convert\w*|translat\w*)\b|"
    r"对应|替换|替代|等价|支持|弃用|版本|叫什么|改成|改为|换成|用什么",
    re.IGNORECASE,
)
_LOOKUP_FILLER = frozenset(
    [
        "hip",
        "cuda",
        "amd",
        "nvidia",
        "rocm",
        "equivalent",
        "equivalents",
        "replace",
        "replaces",
        "replacement",
        "replaced",
        "map",
        "maps",
        "mapping",
        "counterpart",
        "instead",
        "analog",
        "analogue",
        "version",
        "supported",
        "support",
        "available",
        "function",
        "functions",
        "api",
        "apis",
        "call",
        "type",
        "name",
        "hipify",
        "convert",
        "translate",
        "port",
        "porting",
    ]
)
_ROC_WORDS = re.compile(r"\b(roc\w*|miopen|ROC)\b", re.IGNORECASE)

LIBRARY_LABELS = {
    "CUDA_Runtime_API_functions": ("CUDA Runtime API", "HIP runtime API"),
    "CUDA_Driver_API_functions": ("CUDA Driver API", "HIP driver API"),
    "CUDA_Device_API": ("CUDA device API", "HIP device API"),
    "CUDA_RTC_API": ("NVRTC", "hipRTC"),
    "CUBLAS_API": ("cuBLAS", "hipBLAS"),
    "CUSPARSE_API": ("cuSPARSE", "hipSPARSE"),
    "CUSOLVER_API": ("cuSOLVER", "hipSOLVER"),
    "CURAND_API": ("cuRAND", "hipRAND"),
    "CUFFT_API": ("cuFFT", "hipFFT"),
    "CUDNN_API": ("cuDNN", "hipDNN"),
    "CUB_API": ("CUB", "hipCUB"),
    "cuComplex_API": ("cuComplex", "hipComplex"),
}
# Library names a question may use as words ("hipcub", "rocThrust"): never unknown APIs.
LIBRARY_NAMES = frozenset(
    [
        "cublas",
        "cublaslt",
        "hipblas",
        "hipblaslt",
        "rocblas",
        "cufft",
        "hipfft",
        "rocfft",
        "cusparse",
        "hipsparse",
        "rocsparse",
        "cusolver",
        "hipsolver",
        "rocsolver",
        "curand",
        "hiprand",
        "rocrand",
        "cudnn",
        "hipdnn",
        "miopen",
        "cub",
        "hipcub",
        "rocprim",
        "thrust",
        "rocthrust",
        "nccl",
        "rccl",
        "nvrtc",
        "hiprtc",
        "hipify",
        "hipcc",
        "rocalution",
        "cucomplex",
        "hipcomplex",
    ]
)
ROC_LABELS = {
    "CUBLAS_API": "rocBLAS",
    "CUSPARSE_API": "rocSPARSE",
    "CUSOLVER_API": "rocSOLVER",
    "CURAND_API": "rocRAND",
    "CUDNN_API": "MIOpen",
}


@dataclass
class Found:
    """An identifier of the question resolved against the mapping rows."""

    name: str  # as it appears in the tables
    side: str  # "cuda", "hip" or "roc"
    rows: list[ApiMapping]


# Device-function names that are also everyday words: taken as APIs only when the question
# clearly asks about them ("equivalent of log", "is round supported"), or when written `log` / log().
COMMON_WORDS = frozenset(
    [
        "abs",
        "ceil",
        "clock",
        "cos",
        "curand",
        "exp",
        "floor",
        "hiprand",
        "int",
        "log",
        "max",
        "min",
        "nan",
        "norm",
        "pow",
        "remainder",
        "rocrand",
        "round",
        "saturate",
        "sin",
        "tan",
        "texture",
        "trunc",
    ]
)


def _plain_subject(token: str, question: str) -> bool:
    """Whether a plain lower-case table name (tanh, frexpf, log) is what a lookup question is about."""
    if question.strip().strip("`?!.\uff1f ").lower() == token.lower():
        return True
    if not _LOOKUP.search(question):
        return False
    # "what replaces texture?" is about the API; "should I replace texture fetches?" is not
    subject = re.search(
        rf"(?:^\s*|\b(?:of|for|is|does|replaces?)\s+)`?{re.escape(token)}\b`?"
        r"(?=\s*(?:[?.!,;:\uff1f]|$|\s(?:in|on|for|with|to|under|from|supported|available|deprecated|removed)\b))",
        question,
        re.IGNORECASE,
    )
    return token not in COMMON_WORDS or subject is not None


_CUDA_PREFIX = re.compile(r"^(CUDA|cuda|cu)(?=[A-Z_])")
_HIP_PREFIX = {"CUDA": "HIP", "cuda": "hip", "cu": "hip"}
_NAME_PREFIX = frozenset(["hip", "hiprtc", "cuda", "cu", "amd", "hsa", "gpu"])


def _name_words(name: str) -> frozenset[str]:
    """The words of an identifier (camelCase and snake_case), its API prefix left out:
    ``hipModuleLaunchKernel`` -> {module, launch, kernel}."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+", name)
    lowered = [w.lower() for w in words]
    if lowered and lowered[0] in _NAME_PREFIX:
        lowered = lowered[1:]
    return frozenset(w for w in lowered if len(w) > 1)


def _api_shaped(token: str) -> bool:
    """``cudaMemcpy``, ``__shfl_sync``, ``hipcub``: not an acronym of prose such as CUDA, HIP, SM."""
    if token.isalpha() and token.isupper():
        return False
    return bool("_" in token or re.search(r"\d|[a-z][A-Z]", token) or _API_PREFIX.match(token))


def cuda_named(token: str) -> bool:
    """Whether an unknown name is CUDA's (``cudaFooBar``, ``__nanosleep``), not a word or a package
    that only starts like a HIP or ROCm name (``hipifying``, ``rocr4wsl``, ``HIPManagedSpace``)."""
    return bool(_CUDA_NAME.match(token))


class ApiIndex:
    """The ~9k mapping rows by CUDA, HIP and roc/MIOpen name, with a "did you mean" for near misses."""

    def __init__(self, rows: list[ApiMapping], vocabulary: set[str]) -> None:
        self.by: dict[str, dict[str, list[ApiMapping]]] = {"cuda": {}, "hip": {}, "roc": {}}
        for row in rows:
            self.by["cuda"].setdefault(row.cuda, []).append(row)
            if row.hip:
                self.by["hip"].setdefault(row.hip, []).append(row)
            if row.roc:
                self.by["roc"].setdefault(row.roc, []).append(row)
                if "<" in row.roc:  # rocrand_device::sobol64_engine<false>: also findable without <...>
                    self.by["roc"].setdefault(row.roc.split("<")[0], []).append(row)
        self.names = sorted({n for side in self.by.values() for n in side})
        self.lower: dict[str, list[str]] = {}
        self.buckets: dict[str, list[str]] = {}
        for name in self.names:
            self.lower.setdefault(name.lower(), []).append(name)
            self.buckets.setdefault(name[:3].lower(), []).append(name)
        self.vocabulary = vocabulary
        self.compounds: list[tuple[str, frozenset[str]]] = []
        for name in vocabulary:
            parts = _name_words(name)
            if len(parts) >= 3:
                self.compounds.append((name, parts))

    def resolve(self, name: str) -> Found | None:
        for side in ("cuda", "hip", "roc"):
            rows = self.by[side].get(name)
            if rows:
                return Found(name, side, rows)
        return None

    def counterpart(self, found: Found) -> ApiMapping | None:
        """For a CUDA name with no HIP equivalent, the supported row of its twin in CUDA's other
        API (driver ``cuFuncSetAttribute`` -> runtime ``cudaFuncSetAttribute`` -> HIP
        ``hipFuncSetAttribute``, and back): what to rewrite the call with."""
        if found.side != "cuda" or any(r.hip for r in found.rows):
            return None
        name = found.name
        if name.startswith("cuda"):
            twin = "cu" + name[4:]
        elif name.startswith("cu") and name[2:3].isupper():
            twin = "cuda" + name[2:]
        else:
            return None
        rows = self.by["cuda"].get(twin, [])
        return next((r for r in rows if r.hip and r.status == "supported" and not r.cuda_removed), None)

    def suggest(self, token: str, n: int = 3) -> list[str]:
        """Close names with the same first three letters (fast: a bucket, not all ~14k names)."""
        pool = self.buckets.get(token[:3].lower(), [])
        lowered = {name.lower(): name for name in pool}
        close = difflib.get_close_matches(token.lower(), list(lowered), n=n, cutoff=0.8)
        return [lowered[c] for c in close]

    def doc_identifiers(self, question: str) -> list[str]:
        """API-like names of the question that the prose docs use but the tables do not
        (``__ballot_sync``, ``HIP_ENABLE_WARP_SYNC_BUILTINS``, ``hipLaunchKernelGGL``), the HIP
        twin of a CUDA-only name the docs never write (``CUDA_LAUNCH_BLOCKING`` ->
        ``HIP_LAUNCH_BLOCKING``), and the docs' names spelled out in the question's words
        ("launch a kernel ... module API" -> ``hipModuleLaunchKernel``)."""
        out: dict[str, None] = {}
        for token in IDENT.findall(topic_of(question)):  # "MI250" is where it runs, not what
            if len(token) < 4 or not _api_shaped(token) or self.resolve(token) is not None:
                continue
            if token in self.vocabulary:
                out.setdefault(token, None)
                continue
            twin = _CUDA_PREFIX.sub(lambda m: _HIP_PREFIX[m.group(0)], token, count=1)
            if twin != token and twin in self.vocabulary and self.resolve(twin) is None:
                out.setdefault(twin, None)
        for name in self.spelled_out(question):
            out.setdefault(name, None)
        return list(out)

    def spelled_out(self, question: str) -> list[str]:
        """Prose identifiers of three or more words (after a hip/cuda prefix) whose words all
        occur in the question, most words first."""
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
        if not words:
            return []
        hits = [(len(parts), name) for name, parts in self.compounds if parts <= words]
        return [name for _, name in sorted(hits, key=lambda h: -h[0])[:3]]

    def find(self, question: str) -> tuple[list[Found], list[tuple[str, list[str]]]]:
        """Identifiers of the question (any language), and unknown API-like names with suggestions."""
        found: dict[str, Found] = {}
        unknown: dict[str, list[str]] = {}
        for match in IDENT.finditer(question):
            token = match.group(0)
            before = question[match.start() - 1] if match.start() else ""
            after = question[match.end() :].lstrip()[:1]
            marked = before == "`" or after == "("
            if token in found or token in unknown:
                continue
            hit = self.resolve(token)
            if hit is None and _api_shaped(token) and len(self.lower.get(token.lower(), [])) == 1:
                hit = self.resolve(self.lower[token.lower()][0])  # cudamemcpy -> cudaMemcpy
            if hit is not None and (marked or _api_shaped(token) or _plain_subject(token, question)):
                found.setdefault(hit.name, hit)
                # A name on both sides (textureReference) is also the HIP mapping of other CUDA names.
                others = [r for r in self.by["hip"].get(hit.name, []) if r.cuda != hit.name]
                if hit.side == "cuda" and others:
                    found.setdefault(f"{hit.name} (HIP)", Found(hit.name, "hip", others))
            elif (
                hit is None
                and 6 <= len(token) <= MAX_NAME_CHARS
                and re.search(r"[A-Za-z]{2}", token)
                and _API_PREFIX.match(token)
                and _api_shaped(token)
                and token not in self.vocabulary
                and token.lower() not in LIBRARY_NAMES
                and len(unknown) < MAX_APIS
            ):
                unknown[token] = self.suggest(token)
        return list(found.values())[:MAX_APIS], list(unknown.items())


# --- rendering of mapping rows --------------------------------------------------------------


def _labels(row: ApiMapping) -> tuple[str, str, str]:
    cuda_label, hip_label = LIBRARY_LABELS.get(row.library, (row.library.replace("_", " "), "HIP"))
    roc_label = ROC_LABELS.get(row.library, "MIOpen" if row.roc_kind == "MIOPEN" else "ROC")
    return cuda_label, hip_label, roc_label


_VERSION_WORDS = {
    "en": {
        "added": "added in {product} {value}",
        "deprecated": "deprecated in {product} {value}",
        "changed": "changed in {product} {value}",
        "removed": "removed in {product} {value}",
        "experimental": "experimental in {product} {value}",
        "sep": ", ",
    },
    "zh": {
        "added": "{product} {value} 加入",
        "deprecated": "{product} {value} 弃用",
        "changed": "{product} {value} 变更",
        "removed": "{product} {value} 移除",
        "experimental": "{product} {value} 起为实验性",
        "sep": "，",
    },
}


def _versions(row: ApiMapping, side: str, product: str, lang: str = "en") -> str:
    words = _VERSION_WORDS.get(lang, _VERSION_WORDS["en"])
    parts = []
    for key in ("added", "deprecated", "changed", "removed", "experimental"):
        value = getattr(row, f"{side}_{key}", None)
        if value:
            parts.append(words[key].format(product=product, value=value))
    return words["sep"].join(parts)


_STATUS = {
    "en": {
        "supported": "Supported",
        "deprecated": "Deprecated in HIP",
        "removed": "Removed from HIP",
        "experimental": "Experimental in HIP",
        "head": "HIP status: ",
        "no_roc": "No {roc} equivalent is listed.",
        "roc": "{roc} equivalent: ",
        "reverse": "`{hip}` is the HIP equivalent of CUDA `{cuda}` ({where}).",
        "reverse_roc": "`{roc_name}` is the {roc} equivalent of CUDA `{cuda}`.",
        "section": "{label}, section \u201c{section}\u201d",
    },
    "zh": {
        "supported": "已支持",
        "deprecated": "HIP 中已弃用",
        "removed": "已从 HIP 移除",
        "experimental": "HIP 中为实验性",
        "head": "HIP 状态：",
        "no_roc": "未列出 {roc} 对应项。",
        "roc": "{roc} 对应项：",
        "reverse": "`{hip}` 是 CUDA `{cuda}` 的 HIP 对应项（{where}）。",
        "reverse_roc": "`{roc_name}` 是 CUDA `{cuda}` 的 {roc} 对应项。",
        "section": "{label}，章节\u201c{section}\u201d",
    },
}


def describe(row: ApiMapping, asked: str | None = None, lang: str = "en") -> str:
    """One paragraph of facts about a row, in the words a porting user looks for (the fixed words
    in the asker's language)."""
    words = _STATUS.get(lang, _STATUS["en"])
    cuda_label, hip_label, roc_label = _labels(row)
    where = words["section"].format(label=cuda_label, section=row.section)
    cuda_versions = _versions(row, "cuda", "CUDA", lang)
    lines = []
    if row.hip:
        head = label("equivalent", lang, cuda=row.cuda, hip=row.hip, label=hip_label, where=where)
        if asked and asked == row.hip:
            head = words["reverse"].format(hip=row.hip, cuda=row.cuda, where=where)
        lines.append(head)
        hip_versions = _versions(row, "hip", "HIP", lang)
        status = words[row.status]
        lines.append(words["head"] + status + (f" ({hip_versions})." if hip_versions else "."))
    else:
        lines.append(label("no_equivalent", lang, cuda=row.cuda, table=cuda_label, where=where))
    if cuda_versions:
        lines.append(f"CUDA: {cuda_versions}.")
    if row.roc:
        roc_versions = _versions(row, "roc", roc_label, lang)
        lines.append(
            words["roc"].format(roc=roc_label)
            + f"`{row.roc}`"
            + (f" ({roc_versions})." if roc_versions else ".")
        )
    elif row.library in ROC_LABELS:
        lines.append(words["no_roc"].format(roc=roc_label))
    if asked and asked == row.roc:
        lines.insert(0, words["reverse_roc"].format(roc_name=row.roc, roc=roc_label, cuda=row.cuda))
    return " ".join(lines)


def brief(row: ApiMapping, lang: str = "en") -> str:
    """A row in one short line (equivalent, HIP status and versions, the roc name): for an answer
    that goes on to the docs, where the mapping is the setting and the docs' sentences the answer."""
    cuda_label, _, roc_label = _labels(row)
    if row.hip is None:
        return label("no_equivalent_brief", lang, cuda=row.cuda, table=cuda_label)
    versions = _versions(row, "hip", "HIP", lang)
    sep = _VERSION_WORDS.get(lang, _VERSION_WORDS["en"])["sep"]
    status = _STATUS.get(lang, _STATUS["en"])[row.status] + (f"{sep}{versions}" if versions else "")
    roc = f"; {roc_label} `{row.roc}`" if row.roc else ""
    return label("equivalent_brief", lang, cuda=row.cuda, hip=row.hip, status=status + roc)


def counterpart_line(row: ApiMapping, lang: str = "en") -> str:
    """The line offering ``row`` (``ApiIndex.counterpart``) for a CUDA name without a HIP equivalent."""
    return label("counterpart", lang, api=_labels(row)[0], row=brief(row, lang))


def api_record(row: ApiMapping, asked: str, url_of: dict[str, str]) -> dict:
    record = {"query": asked, "found": True, **asdict(row), "status": row.status}
    record["path"] = record.pop("table")
    record["url"] = url_of.get(row.table, "")
    return record


def roc_pages(row: ApiMapping) -> list[str]:
    base = row.table.removesuffix("_HIP.md")
    kind = "MIOPEN" if row.roc_kind == "MIOPEN" else "ROC"
    return [f"{base}_HIP_and_{kind}.md", f"{base}_{kind}.md"]


def order_rows(found: Found) -> list[ApiMapping]:
    """For a HIP name mapped from several CUDA names, the look-alike (cudaX for hipX) first."""
    rows = list(found.rows)
    if found.side == "hip":
        twin = re.sub(r"^hip", "cuda", found.name)
        rows.sort(key=lambda r: (r.cuda != twin, r.status != "supported", r.cuda_deprecated is not None))
    else:
        rows.sort(key=lambda r: (r.hip is None, r.status != "supported"))
    seen: set[tuple[str, str | None, str]] = set()
    unique = []
    for r in rows:
        if (r.cuda, r.hip, r.library) not in seen:
            seen.add((r.cuda, r.hip, r.library))
            unique.append(r)
    return unique


def extra_terms(question: str, names: list[str]) -> list[str]:
    """The question's words beyond the API names and the words of asking for a mapping."""
    lowered = {n.lower() for n in names}
    return [t for t in query_terms(question) if t not in lowered and t not in _LOOKUP_FILLER]


def content_terms(terms: list[str]) -> list[str]:
    """``terms`` less the words of asking for a mapping ("equivalent", "hip", "replace" ...)."""
    return [t for t in terms if t not in _LOOKUP_FILLER]


MIXED_WORDS = 4  # content words beyond the names that make a lookup question a mixed one ...
MIXED_ASKING_WORDS = 2  # ... or fewer with words that ask how, why or whether something is needed
_ASKS_HOW = re.compile(
    r"\b(?:how|why|what happens|(?:do|does) (?:i|we|you|it) (?:need|have to)|(?:should|must) (?:i|we|you))\b",
    re.IGNORECASE,
)
_PLATFORM_WORDS = frozenset(["nvcc", "hipcc", "clang", "true", "false", "flag", "option", "macro"])
MIXED_CJK = 6  # the same in Chinese characters
_ZH_ASKING = re.compile(
    r"对应|替换|替代|等价|支持|弃用|版本|叫什么|改成|改为|换成|用什么|什么|哪个|在|中|里|的|吗|呢|是|有|没有"
)


def asks_more(question: str, names: list[str]) -> bool:
    """Whether a question that names APIs or options asks more than their mapping ("after hipify
    my hipMemcpyToSymbol on a __constant__ variable does not work: do I wrap the symbol?"): it
    holds several words beyond the names and the words of asking for an equivalent, or a few and
    asks how, why or whether it needs something ("how can I make process 1 use device 0? Is there
    an equivalent of CUDA_VISIBLE_DEVICES?")."""
    inside = " ".join(names).lower()  # "rdc" of nvcc's -rdc=true, named by --fgpu-rdc
    words = [
        t
        for t in extra_terms(question, names)
        if not _api_shaped(t) and not t.isdigit() and t not in inside and t not in _PLATFORM_WORDS
    ]
    if len(words) >= MIXED_WORDS or (len(words) >= MIXED_ASKING_WORDS and _ASKS_HOW.search(question)):
        return True
    chinese = _ZH_ASKING.sub("", "".join(re.findall(r"[\u4e00-\u9fff]", question)))
    return len(chinese) >= MIXED_CJK


def is_conceptual(question: str) -> bool:
    """A why/how/what-goes-wrong question, not one that asks for a mapping: answered from the docs."""
    return bool(_CONCEPTUAL.search(question)) and not _LOOKUP.search(question)


def asks_about_roc(question: str) -> bool:
    """Whether the question names a roc*/MIOpen library: its pages are then cited first."""
    return bool(_ROC_WORDS.search(question))
