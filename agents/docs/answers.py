"""``hipbot ask``: answer a porting question from the ingested docs, always with sources.

Questions that name CUDA, HIP or roc*/MIOpen identifiers are answered from the structured
mapping rows first (exact: equivalent, versions, status, or a plain "no HIP equivalent").
Other questions go through hybrid retrieval, then either an LLM that may only use the
retrieved passages (when ``HIPBOT_LLM_URL`` is set) or an extractive answer: the best passages,
trimmed around the question's words.
"""

from __future__ import annotations

import difflib
import re
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hipbot.agents.docs.parse import sentence_spans
from hipbot.agents.docs.retrieval import IDENT, Passage, Retriever, expand_query, query_terms
from hipbot.agents.docs.store import get_meta, is_ingested, load_apis, open_docs_db
from hipbot.agents.hipify.mappings import ApiMapping
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError

MAX_QUESTION_CHARS = 2000
MAX_K = 20
MAX_APIS = 8
EXTRACT_LIMITS = (1400, 900, 700, 500, 400)  # characters quoted from the 1st..5th passage
FOCUS_WEIGHT = 1  # as much as one word of the question
GENERATION_PASSAGES = 4  # x 600 characters: fits a 2048-token context with the answer

_API_PREFIX = re.compile(
    r"^(__|cuda|cu[A-Z]|CU|cublas|cusparse|cusolver|curand|cufft|cudnn|cub::|nvrtc|NVRTC|hip|HIP|roc|miopen)"
)
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
class Answer:
    answer: str
    sources: list[dict[str, str]]
    mode: str  # "lookup" | "extractive" | "generated"
    apis: list[dict] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.answer

    def __str__(self) -> str:
        return self.answer

    def to_dict(self) -> dict:
        return {"answer": self.answer, "sources": self.sources, "mode": self.mode, "apis": self.apis}


@dataclass
class Found:
    """An identifier of the question resolved against the mapping rows."""

    name: str  # as it appears in the tables
    side: str  # "cuda", "hip" or "roc"
    rows: list[ApiMapping]


def check_question(
    question: object, example: str = 'hipbot ask "what replaces cudaMemcpyToSymbolAsync?"'
) -> str:
    """The stripped question, or a HipbotError; ``example`` is how the asking front end is used."""
    if not isinstance(question, str):
        raise HipbotError("the question must be a string")
    question = question.strip()
    if not question:
        raise HipbotError("the question is empty", hint=f"e.g. {example}")
    if len(question) > MAX_QUESTION_CHARS:
        raise HipbotError(
            f"the question is too long ({len(question)} characters; the limit is {MAX_QUESTION_CHARS})",
            hint="ask about one thing at a time and quote only the relevant lines (translate whole files with hipbot hipify)",
        )
    return question


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
        for token in IDENT.findall(question):
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
                and len(token) >= 6
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


def _versions(row: ApiMapping, side: str, product: str) -> str:
    parts = []
    for key, word in (
        ("added", "added in"),
        ("deprecated", "deprecated in"),
        ("changed", "changed in"),
        ("removed", "removed in"),
        ("experimental", "experimental in"),
    ):
        value = getattr(row, f"{side}_{key}", None)
        if value:
            parts.append(f"{word} {product} {value}")
    return ", ".join(parts)


def describe(row: ApiMapping, asked: str | None = None) -> str:
    """One paragraph of facts about a row, in the words a porting user looks for."""
    cuda_label, hip_label, roc_label = _labels(row)
    where = f"{cuda_label}, section \u201c{row.section}\u201d"
    cuda_versions = _versions(row, "cuda", "CUDA")
    lines = []
    if row.hip:
        head = f"`{row.cuda}` \u2192 `{row.hip}` ({hip_label}; {where})."
        if asked and asked == row.hip:
            head = f"`{row.hip}` is the HIP equivalent of CUDA `{row.cuda}` ({where})."
        lines.append(head)
        hip_versions = _versions(row, "hip", "HIP")
        status = {
            "supported": "Supported",
            "deprecated": "Deprecated in HIP",
            "removed": "Removed from HIP",
            "experimental": "Experimental in HIP",
        }[row.status]
        lines.append(f"HIP status: {status}" + (f" ({hip_versions})." if hip_versions else "."))
    else:
        lines.append(
            f"`{row.cuda}` has no HIP equivalent: HIPIFY's {cuda_label} table lists it as not supported "
            f"by HIP ({where}), so hipify leaves it unconverted."
        )
    if cuda_versions:
        lines.append(f"CUDA: {cuda_versions}.")
    if row.roc:
        roc_versions = _versions(row, "roc", roc_label)
        lines.append(
            f"{roc_label} equivalent: `{row.roc}`" + (f" ({roc_versions})." if roc_versions else ".")
        )
    elif row.library in ROC_LABELS:
        lines.append(f"No {roc_label} equivalent is listed.")
    if asked and asked == row.roc:
        lines.insert(0, f"`{row.roc}` is the {roc_label} equivalent of CUDA `{row.cuda}`.")
    return " ".join(lines)


def api_record(row: ApiMapping, asked: str, url_of: dict[str, str]) -> dict:
    record = {"query": asked, "found": True, **asdict(row), "status": row.status}
    record["path"] = record.pop("table")
    record["url"] = url_of.get(row.table, "")
    return record


def _roc_pages(row: ApiMapping) -> list[str]:
    base = row.table.removesuffix("_HIP.md")
    kind = "MIOPEN" if row.roc_kind == "MIOPEN" else "ROC"
    return [f"{base}_HIP_and_{kind}.md", f"{base}_{kind}.md"]


def _order_rows(found: Found) -> list[ApiMapping]:
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


# --- extractive answers ---------------------------------------------------------------------

_IDENT_TERM = re.compile(r"^(?=\w*_|(?:hip|cuda|cu[a-z]|roc|miopen|nvrtc)\w{3})\w{6,}$")


def trim(
    text: str,
    terms: list[str],
    limit: int = 600,
    name_weight: int = 2,
    focus: tuple[int, int] | None = None,
) -> str:
    """The window of ``text`` (at most ``limit`` chars, original layout) around the sentence or
    line holding most question terms (an API name counts ``name_weight`` words); the sentences of
    ``focus`` (the piece the dense search matched best) get ``FOCUS_WEIGHT`` more."""
    text = text.strip()
    if len(text) <= limit:
        return text
    spans = sentence_spans(text)
    # Words match by a 5-letter stem (inflections), API names only whole: "__shf" would find
    # every shuffle signature, not the __shfl_xor_sync asked about.
    keys = [(t, name_weight) if _IDENT_TERM.match(t) else (t[:5], 1) for t in terms]
    words = [sum(w for key, w in keys if key in text[a:b].lower()) for a, b in spans]
    near = [FOCUS_WEIGHT if focus and a < focus[1] and b > focus[0] else 0 for a, b in spans]
    # on a tie the sentence with the question's own words wins over the dense match
    best = max(range(len(spans)), key=lambda i: (words[i] + near[i], words[i], -i))
    lo = hi = best
    while True:
        grown = False
        if hi + 1 < len(spans) and spans[hi + 1][1] - spans[lo][0] <= limit:
            hi += 1
            grown = True
        if lo > 0 and spans[hi][1] - spans[lo - 1][0] <= limit:
            lo -= 1
            grown = True
        if not grown:
            break
    body = text[spans[lo][0] : spans[hi][1]]
    if len(body) > limit:
        body = body[:limit].rsplit(" ", 1)[0]
    return ("\u2026 " if lo > 0 else "") + body + (" \u2026" if hi < len(spans) - 1 else "")


def _extra_terms(question: str, names: list[str]) -> list[str]:
    """The question's words beyond the API names and the words of asking for a mapping."""
    lowered = {n.lower() for n in names}
    return [t for t in query_terms(question) if t not in lowered and t not in _LOOKUP_FILLER]


def dedupe_sources(sources: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for s in sources:
        key = (s["path"], s["section"])
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


class Answerer:
    """A loaded engine: database, API index, dense matrix and (lazily) the embedding model.
    Build it once per process; ``ask`` then takes milliseconds."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        path = Path(self.settings.database)
        if not path.is_file():
            raise _not_ingested(path)
        self.db = open_docs_db(path)
        if not is_ingested(self.db):
            raise _not_ingested(path)
        self.meta = get_meta(self.db)
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        vocabulary: set[str] = set()
        for (text,) in self.db.execute("SELECT text FROM docs_chunks WHERE kind = 'prose'"):
            vocabulary.update(IDENT.findall(text))
        self.index = ApiIndex(load_apis(self.db), vocabulary)
        self.urls = dict(self.db.execute("SELECT path, url FROM docs_documents").fetchall())
        self.titles = dict(self.db.execute("SELECT path, title FROM docs_documents").fetchall())
        self.retriever = Retriever(self.db, self.settings.embedding_model)
        if not self.retriever.dense_available:
            print(
                f"warning: no embeddings for {self.settings.embedding_model} in the database; "
                "answering with BM25 only (run `hipbot ingest` to embed)",
                file=sys.stderr,
            )

    def refresh(self) -> None:
        """Reload if another process re-ingested since we loaded (cheap check)."""
        meta = get_meta(self.db)
        if meta.get("ingest_id") != self.meta.get("ingest_id"):
            self.meta = meta
            self._load()

    def warm_up(self) -> None:
        self.retriever.warm_up()

    def ask(self, question: str, k: int = 5) -> Answer:
        question = check_question(question)
        if not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise HipbotError(f"k must be between 1 and {MAX_K}, got {k!r}")
        with self._lock:
            self.refresh()
            found, unknown = self.index.find(question)
            conceptual = bool(_CONCEPTUAL.search(question)) and not _LOOKUP.search(question)
            # A name known nowhere, with no near miss, is answered from the docs around it.
            if (found or any(s for _, s in unknown)) and not conceptual:
                return self._lookup(question, found, unknown)
            return self._retrieve_and_answer(question, found, unknown, k)

    # -- lookups --

    def table_sources(self, row: ApiMapping, roc_first: bool) -> list[dict[str, str]]:
        cuda_label = LIBRARY_LABELS.get(row.library, (row.library,))[0]
        pages = [row.table]
        # The roc/MIOpen page also answers "no rocX equivalent" to a question that asks about it.
        if row.roc or (roc_first and row.library in ROC_LABELS):
            roc = _roc_pages(row)
            pages = [*roc, row.table] if roc_first and row.roc else [row.table, *roc]
        return [
            {"path": p, "section": row.section or cuda_label, "url": self.urls.get(p, "")}
            for p in pages
            if p in self.urls
        ]

    def api_facts(self, found: list[Found], question: str) -> tuple[list[str], list[dict], list[dict]]:
        """Answer lines, ``apis`` records and sources for the identifiers of a question."""
        roc_first = bool(_ROC_WORDS.search(question))
        lines: list[str] = []
        records: list[dict] = []
        sources: list[dict[str, str]] = []
        for hit in found:
            rows = _order_rows(hit)
            shown = rows[:3]
            lines.extend(describe(row, hit.name) for row in shown)
            if len(rows) > len(shown):
                others = ", ".join(f"`{r.cuda}`" for r in rows[len(shown) :][:10])
                lines.append(f"`{hit.name}` is also the mapping of: {others}.")
            for row in shown:
                records.append(api_record(row, hit.name, self.urls))
                sources.extend(self.table_sources(row, roc_first or hit.side == "roc"))
            declared = self._declared_in_hip_docs(hit.name) if all(r.hip is None for r in rows) else None
            if declared is not None:
                lines.append(
                    f"But the HIP docs declare `{hit.name}` in HIP itself, under the same name "
                    f"({declared.title} \u203a {declared.section}, {declared.path}): code using it needs no "
                    "rename, so the table has nothing to map it to; check that section for how HIP's version "
                    "differs (for instance its mask or return types)."
                )
                sources.append(declared.source())
        return lines, records, sources

    def _declared_in_hip_docs(self, name: str) -> Passage | None:
        """A HIP docs passage that declares ``name`` as a HIP function (``name (`` in a code line
        that does not call it unsupported). HIPIFY's tables list such CUDA names as unsupported
        because there is nothing to rename, e.g. the ``__shfl_*_sync`` functions since HIP 6.2."""
        ids, _ = self.retriever.mentions([name], limit=10)
        declaration = re.compile(rf"^[^\n]*\b{re.escape(name)}\s*\([^\n]*$", re.MULTILINE)
        for passage in self.retriever.passages(ids, dict.fromkeys(ids, 0.0), 10):
            if not passage.path.startswith("HIP/docs/"):
                continue
            for match in declaration.finditer(passage.text):
                line = match.group(0).lower()
                if "not supported" not in line and "unsupported" not in line:
                    return passage
        return None

    def _did_you_mean(self, unknown: list[tuple[str, list[str]]]) -> tuple[list[str], list[dict]]:
        lines, records = [], []
        for token, suggestions in unknown:
            if not suggestions:
                lines.append(
                    f"`{token}` is in neither HIPIFY's mapping tables nor the HIP docs, so hipify "
                    "leaves it unconverted; check the spelling, or see the passages below."
                )
                records.append({"query": token, "found": False, "suggestions": []})
                continue
            options = " or ".join(f"`{s}`" for s in suggestions)
            lines.append(f"`{token}` is not in HIPIFY's mapping tables. Did you mean {options}?")
            records.append({"query": token, "found": False, "suggestions": suggestions})
        return lines, records

    def _lookup(self, question: str, found: list[Found], unknown: list) -> Answer:
        lines, records, sources = self.api_facts(found, question)
        if unknown:
            extra_lines, extra_records = self._did_you_mean(unknown)
            lines.extend(extra_lines)
            records.extend(extra_records)
            for _, suggestions in unknown:
                best = self.index.resolve(suggestions[0]) if suggestions else None
                if best is not None:
                    row = _order_rows(best)[0]
                    lines.append("Closest match: " + describe(row, best.name))
                    sources.extend(self.table_sources(row, False))
        note = self._docs_note(question, found)
        if note is not None:
            names = [f.name for f in found]
            focus = list(dict.fromkeys(_extra_terms(question, names) + [n.lower() for n in names]))
            lines.append(
                f"\nIn the docs ({note.title} \u203a {note.section}):\n{trim(note.text, focus, 400, name_weight=1)}"
            )
            sources.append(note.source())
        return Answer("\n".join(lines).strip(), dedupe_sources(sources), "lookup", records)

    def _docs_note(self, question: str, found: list[Found]) -> Passage | None:
        """A prose passage naming the API that adds to the table row: one that also matches the
        question's other words (e.g. "deprecated"), is titled after the API, or explains an API
        the table marks unsupported / deprecated / removed / experimental."""
        names = [f.name for f in found] + [r.hip for f in found for r in f.rows if r.hip and r.hip != f.name]
        if not names:
            return None
        ids, _ = self.retriever.mentions(names[:6], limit=8)
        extra = _extra_terms(question, names)
        flagged = any(r.status != "supported" for f in found for r in f.rows)
        best, best_score = None, 0
        for p in self.retriever.passages(ids, dict.fromkeys(ids, 0.0), 8):
            text = f"{p.title} {p.section} {p.text}".lower()
            score = sum(t[:5] in text for t in extra) + 2 * any(n in p.section for n in names)
            if best is None or score > best_score:
                best, best_score = p, score
        # A question that only asks for the mapping gets a note when the row needs explaining.
        if best is not None and (best_score or flagged or extra):
            return best
        return None

    # -- retrieval --

    def _retrieve_and_answer(self, question: str, found: list[Found], unknown: list, k: int) -> Answer:
        names = [f.name for f in found] + self.index.doc_identifiers(question)
        passages = self.retriever.search(question, k=k, identifiers=names)
        fact_lines, records, table_sources = self.api_facts(found, question) if found else ([], [], [])
        if unknown:
            extra_lines, extra_records = self._did_you_mean(unknown)
            fact_lines.extend(extra_lines)
            records.extend(extra_records)
        sources = dedupe_sources([p.source() for p in passages] + table_sources)
        # Trim around the names searched and the question's rarer words ("thrust" over "hip").
        words = self.retriever.selective(query_terms(expand_query(question)))
        terms = list(dict.fromkeys([n.lower() for n in names] + words))
        if self.settings.llm_url and passages:
            try:
                text = self._generate(question, passages, fact_lines, terms)
                return Answer(text, sources, "generated", records)
            except HipbotError as exc:
                fact_lines.insert(0, f"(LLM endpoint unavailable, extractive answer instead: {exc.message})")
        return Answer(self._extractive(passages, fact_lines, terms), sources, "extractive", records)

    def _extractive(self, passages: list[Passage], fact_lines: list[str], terms: list[str]) -> str:
        if not passages and not fact_lines:
            return "The HIP docs have nothing on this. Try naming the CUDA API or the HIP feature."
        parts = list(fact_lines)
        prose = [p for p in passages if p.kind == "prose"] or passages
        if prose:
            parts.append("From the HIP docs:" if not fact_lines else "\nFrom the HIP docs:")
        for n, p in enumerate(prose[:5], 1):
            limit = EXTRACT_LIMITS[n - 1]
            parts.append(
                f"[{n}] {p.title} \u203a {p.section} ({p.path})\n{trim(p.text, terms, limit, focus=p.focus)}\n"
            )
        return "\n".join(parts).strip()

    def _generate(
        self, question: str, passages: list[Passage], fact_lines: list[str], terms: list[str]
    ) -> str:
        from hipbot.agents.chat.llm import chat_model, generate

        context = [
            f"[{n}] {p.title} > {p.section} ({p.path})\n{trim(p.text, terms, 600, focus=p.focus)}"
            for n, p in enumerate(passages[:GENERATION_PASSAGES], 1)
        ]
        if fact_lines:
            context.insert(0, "[API] HIPIFY mapping tables\n" + "\n".join(fact_lines))
        text = generate(chat_model(self.settings), question, "\n\n".join(context))
        cited = "\n".join(
            f"[{n}] {p.path} \u203a {p.section}" for n, p in enumerate(passages[:GENERATION_PASSAGES], 1)
        )
        return f"{text.strip()}\n\nSources:\n{cited}"


def _not_ingested(path: Path) -> HipbotError:
    return HipbotError(
        f"the HIP docs are not ingested yet (database {path})",
        hint="run: hipbot ingest   (or hipbot ingest --docs PATH / --download)",
    )


_ANSWERERS: dict[tuple, Answerer] = {}
_ANSWERERS_LOCK = threading.Lock()


def get_answerer(settings: Settings | None = None) -> Answerer:
    """One engine per (database, model, endpoint) per process, reused across questions."""
    settings = settings or load_settings()
    key = (str(settings.database), settings.embedding_model, settings.llm_url, settings.llm_model)
    with _ANSWERERS_LOCK:
        if key not in _ANSWERERS:
            _ANSWERERS[key] = Answerer(settings)
        return _ANSWERERS[key]


def ask(question: str, settings: Settings | None = None, k: int = 5) -> Answer:
    """Answer one question (raises HipbotError for bad input or a database not yet ingested)."""
    check_question(question)
    return get_answerer(settings).ask(question, k=k)
