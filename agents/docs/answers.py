"""``hipbot ask``: answer a porting question from the ingested docs, always with sources.

Questions that name CUDA, HIP or roc*/MIOpen identifiers are answered from the structured
mapping rows first (``lookup.py``: exact equivalent, versions, status, or a plain "no HIP
equivalent"); options, flags, macros and environment variables the docs define are rows too
(``options.py``). A question that asks more than the equivalent gets the row and the docs, and a
row the docs contradict (a newer HIP has it) is said to disagree, with both versions. Other
questions go through hybrid retrieval (``retrieval.py``), then either an LLM that may only use and
cite the retrieved passages (when ``HIPBOT_LLM_URL`` is set, ``generate.py``) or a composed answer:
a direct sentence or 2-4 bullets from the best-scoring sentences (``scoring.py``), with citations
(``compose.py``). The full passages stay behind "More" (``Answer.more``). Fixed words follow the
asker's language. A message off the field ("hello", "write me a poem", an injection attempt), one
that names nothing of it and has no retrieved sentence near it, is declined rather than answered
with the nearest noise; invisible and control characters are dropped before anything else.

This module is the public entry: ``ask``, ``get_answerer``, ``check_question``, ``Answer``.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.docs.compose import compose, dedupe_sources, full_passages
from hipbot.agents.docs.generate import generated
from hipbot.agents.docs.labels import label, language_of
from hipbot.agents.docs.lookup import (
    LIBRARY_LABELS,
    ROC_LABELS,
    ApiIndex,
    Found,
    api_record,
    asks_about_roc,
    asks_more,
    brief,
    content_terms,
    counterpart_line,
    cuda_named,
    describe,
    extra_terms,
    is_conceptual,
    order_rows,
    roc_pages,
)
from hipbot.agents.docs.notes import PACKAGED
from hipbot.agents.docs.options import OptionIndex, OptionRow, ProseChunk, extract, option_lines
from hipbot.agents.docs.retrieval import (
    IDENT,
    Passage,
    Retriever,
    asked_part,
    expand_query,
    query_terms,
    translated_names,
)
from hipbot.agents.docs.sentences import units
from hipbot.agents.docs.store import (
    document_urls,
    get_meta,
    is_ingested,
    load_apis,
    open_docs_db,
    prose_chunks,
)
from hipbot.agents.hipify.mappings import ApiMapping
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError
from hipbot.i18n import N_

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000
MAX_K = 20
NOTE_CHARS = 360  # the docs' words added under a mapping row
COMPOSE_EXTRA = 3  # passages beyond k whose sentences an answer may quote (cited, never listed uncited)
NEIGHBOURS = 3  # the best passages whose neighbouring chunks (same section) may be quoted too
# A question none of whose retrieved sentences comes this close (cosine) is not about what the docs
# cover ("hello", "write me a poem", "' OR 1=1;--", "$(rm -rf /)", "what is 17 times 23?"): its best
# sentences would be noise. Of the bench's on-topic questions that name no API and no word of the
# field, the closest sentence is 0.45 at the lowest ("LDS?"), mostly 0.5 and up; of chit-chat,
# arithmetic, games, shell and SQL payloads 0.17-0.41. The embedding model reads English: a Chinese
# question's sentences come less close, and it keeps the lower bar.
OFF_TOPIC = {"en": 0.42, "zh": 0.33}  # by ``language_of``
# ... unless it names the field: a long question that tells its setting (the distribution, the
# kernel update, the laptop's GPU) can have no sentence that close and still be a real question.
_FIELD = re.compile(
    r"\b(?:gpus?|cuda|hip\w*|rocm|roc\w+|amd\w*|nvidia|radeon|instinct|ryzen|mi\d{2,3}\w*|gfx\w+|[rc]dna\d?|"
    r"rx\s?\d{3,4}\w*|kernels?|drivers?|compil\w+|nvcc|clang|hipify\w*|(?:py)?torch|vllm|llama\w*|ollama|triton|"
    r"tensors?|wavefronts?|warps?|ubuntu|linux|docker|wsl2?|miopen|rccl|nccl|hsa\w*|lds|xnack|"
    r"offload\w*|simd|vram|hbm|gemm|bf16|fp(?:8|16|32|64)|shared\s+memory|atomics?|"
    r"bank\s+conflicts?|reductions?|occupancy|coalesc\w*|device\s+code|host\s+code)\b|"
    r"显卡|显存|驱动|编译|内核|算子|共享内存|寄存器|线程|核函数|移植|并行|张量|训练|推理|微调|量化",
    re.IGNORECASE,
)
# A message that tells the assistant to drop its instructions or show its prompt is an injection
# attempt, not a question: declined like one off the field, before any endpoint sees it.
_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:(?:of\s+)?(?:your|the|my)\s+)?"
    r"(?:(?:previous|prior|above|earlier|preceding|system|original)\s+(?:instructions|prompts?|rules|directions)"
    r"|(?:instructions|prompts?|rules)\s+(?:above|before|so\s+far|you\s+were\s+given))\b"
    r"|\b(?:reveal|print|show|repeat|output|tell\s+me|give\s+me|what\s+is|what's)\s+(?:me\s+)?your\s+"
    r"(?:system\s+prompt|initial\s+prompt|hidden\s+prompt|instructions)\b"
    r"|\b(?:repeat|print|output)\s+(?:all\s+)?(?:the\s+)?(?:text|words|everything)\s+above\b"
    r"|\byou\s+are\s+now\s+(?:DAN|in\s+developer\s+mode|jailbroken|unrestricted)\b"
    r"|\bignor(?:e|ez)\s+(?:toutes\s+)?les\s+instructions\s+pr[ée]c[ée]dentes"
    r"|\bignora\s+(?:todas\s+)?las\s+instrucciones\s+anteriores"
    r"|\bignoriere\s+(?:alle\s+)?(?:vorherigen|bisherigen)\s+anweisungen"
    r"|(?:以前|前)の指示を無視"
    r"|(?:忽略|无视|忘记|忘掉).{0,10}(?:指令|指示|提示词|规则|设定)|你的(?:系统)?(?:提示词|系统提示)",
    re.IGNORECASE,
)
_VERSION = re.compile(r"\b(?:ROCm|HIP)\s+\d+\.\d+|\bmacro\b|\bv?\d+\.\d+(?:\.\d+)?\b", re.IGNORECASE)


@dataclass
class Answer:
    answer: str
    sources: list[dict[str, str]]
    mode: str  # "lookup" | "extractive" | "generated"
    apis: list[dict] = field(default_factory=list)
    more: str = ""  # the full passages, for "More" (--full, the bot's button)

    @property
    def text(self) -> str:
        return self.answer

    def __str__(self) -> str:
        return self.answer

    def to_dict(self) -> dict:
        return {
            "answer": self.answer,
            "sources": self.sources,
            "mode": self.mode,
            "apis": self.apis,
            "more": self.more,
        }


def check_question(
    question: object, example: str = 'hipbot ask "what replaces cudaMemcpyToSymbolAsync?"'
) -> str:
    """The stripped question, or a HipbotError; ``example`` is how the asking front end is used."""
    if not isinstance(question, str):
        raise HipbotError(N_("the question must be a string"))
    question = _visible(question).strip()
    if not question:
        raise HipbotError(N_("the question is empty"), hint=N_("e.g. {example}", example=example))
    if len(question) > MAX_QUESTION_CHARS:
        raise HipbotError(
            N_(
                "the question is too long ({length} characters; the limit is {limit})",
                length=len(question),
                limit=MAX_QUESTION_CHARS,
            ),
            hint=N_(
                "ask about one thing at a time and quote only the relevant lines (translate whole files with hipbot hipify)"
            ),
        )
    return question


def _visible(text: str) -> str:
    """``text`` without control and format characters (NUL, escape sequences, zero-width spaces,
    bidirectional overrides) that print as nothing or reorder what is shown; newlines and tabs stay."""
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf"))


class Answerer:
    """A loaded engine: database, API index, dense matrix and (lazily) the embedding model.
    Build it once per process; ``ask`` then takes milliseconds."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        path = Path(self.settings.database)
        if not path.exists():  # a folder goes on to open_db, which says what it is
            raise _not_ingested(path)
        self.db = open_docs_db(path)
        if not is_ingested(self.db):
            raise _not_ingested(path)
        self.meta = get_meta(self.db)
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        vocabulary: set[str] = set()
        chunks = [ProseChunk(*row) for row in prose_chunks(self.db)]
        for chunk in chunks:
            vocabulary.update(IDENT.findall(chunk.text))
        rows = load_apis(self.db)
        self.index = ApiIndex(rows, vocabulary)
        self.options = OptionIndex(extract(chunks))
        self.tables_version = _latest_version(rows)
        self.urls = document_urls(self.db)
        self.retriever = Retriever(self.db, self.settings.embedding_model)
        if not self.retriever.dense_available:
            log.warning(
                "no embeddings for %s in the database; answering with BM25 only (run `hipbot ingest` to embed)",
                self.settings.embedding_model,
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
            raise HipbotError(N_("k must be between 1 and {max_k}, got {k!r}", max_k=MAX_K, k=k))
        if _INJECTION.search(question):
            log.info("an instruction to the assistant, not a question: not answered")
            return Answer(label("nothing", language_of(question)), [], "extractive", [])
        with self._lock:
            self.refresh()
            found, unknown = self.index.find(question)
            options = self.options.find(question)
            names = [f.name for f in found] + [rows[0].name for _, rows in options]
            # A question that asks more than the mapping gets the row and the docs.
            conceptual = is_conceptual(question) or (bool(names) and asks_more(question, names))
            lang = language_of(question)
            # A name known nowhere, with no near miss, is answered from the docs around it.
            if (found or options or any(s for _, s in unknown)) and not conceptual:
                return self._lookup(question, found, unknown, options, lang)
            return self._retrieve_and_answer(question, found, unknown, options, k, lang)

    # -- lookups --

    def table_sources(self, row: ApiMapping, roc_first: bool) -> list[dict[str, str]]:
        cuda_label = LIBRARY_LABELS.get(row.library, (row.library,))[0]
        pages = [row.table]
        # The roc/MIOpen page also answers "no rocX equivalent" to a question that asks about it.
        if row.roc or (roc_first and row.library in ROC_LABELS):
            roc = roc_pages(row)
            pages = [*roc, row.table] if roc_first and row.roc else [row.table, *roc]
        return [
            {"path": p, "section": row.section or cuda_label, "url": self.urls.get(p, "")}
            for p in pages
            if p in self.urls
        ]

    def api_facts(
        self, found: list[Found], question: str, lang: str = "en", rows_each: int = 3, short: bool = False
    ) -> tuple[list[str], list[dict], list[dict]]:
        """Answer lines, ``apis`` records and sources for the identifiers of a question (at most
        ``rows_each`` mapping rows per name; ``short``: one line per row, for an answer that goes
        on to the docs)."""
        roc_first = asks_about_roc(question)
        lines: list[str] = []
        records: list[dict] = []
        sources: list[dict[str, str]] = []
        # names the docs declare though the tables do not: one line per passage that says so
        disagreeing: dict[int, tuple[int, Passage, list[str]]] = {}
        given: set[tuple[str, str, str | None]] = set()  # rows described, by _row_key
        for hit in found:
            rows = order_rows(hit)
            shown = rows[:rows_each]
            # a question naming both sides of a row (cudaMalloc ... hipMalloc) finds it twice: it
            # is described once, from the side named first
            lines.extend(
                brief(row, lang) if short else describe(row, hit.name, lang)
                for row in shown
                if _row_key(row) not in given
            )
            given.update(_row_key(row) for row in shown)
            if len(rows) > len(shown) and rows_each > 1:
                others = ", ".join(f"`{r.cuda}`" for r in rows[len(shown) :][:10])
                lines.append(f"`{hit.name}` is also the mapping of: {others}.")
            for row in shown:
                records.append(api_record(row, hit.name, self.urls))
                sources.extend(self.table_sources(row, roc_first or hit.side == "roc"))
            twin = self.index.counterpart(hit)
            if twin is not None and _row_key(twin) not in given:
                lines.append(counterpart_line(twin, lang))
                given.add(_row_key(twin))
                sources.extend(self.table_sources(twin, False))
            declared = self._declared_in_hip_docs(hit.name) if all(r.hip is None for r in rows) else None
            if declared is None:
                continue
            if declared.chunk_id in disagreeing:
                at, _, names = disagreeing[declared.chunk_id]
                names.append(hit.name)
                lines[at] = self._disagreement(names, declared, lang)
                continue
            disagreeing[declared.chunk_id] = (len(lines), declared, [hit.name])
            lines.append(self._disagreement([hit.name], declared, lang))
            sources.append(declared.source())
        return lines, records, sources

    def _disagreement(self, names: list[str], passage: Passage, lang: str) -> str:
        """The table says "not supported" but the docs declare the APIs: both, with versions (the
        docs' sentence that names a ROCm/HIP version or the macro that enables them)."""
        family = re.sub(r"_sync$", "", names[0]).strip("_").split("_")[0]
        parts = [u for u in units(passage.text) if u.kind == "sentence"]
        scored = sorted(
            parts,
            key=lambda u: (
                -(2 * bool(_VERSION.search(u.text)) + (family in u.text.lower()) + ("sync" in u.text))
            ),
        )
        said = " ".join(u.text for u in sorted(scored[:2], key=lambda u: u.start)) if scored else ""
        if len(said) > 360:
            said = said[:359].rsplit(" ", 1)[0] + "\u2026"
        listed = ", ".join(f"`{n}`" for n in names)
        table = label("table_no_equivalent", lang, version=self.tables_version or "?", names=listed)
        return label(
            "disagree", lang, table_says=table, doc_title=passage.title, doc_section=passage.section, doc=said
        )

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
                    return self._version_passage(name, passage)
        return None

    def _version_passage(self, name: str, declared: Passage) -> Passage:
        """The passage of the same page that says since when (and how) ``name``'s family is
        available, when the declaring passage itself does not."""
        if _VERSION.search(declared.text) and "enable" in declared.text.lower():
            return declared
        ids = self.retriever.bm25(["sync", "variants", "rocm", "macro"], "prose", 20)
        for passage in self.retriever.passages(ids, dict.fromkeys(ids, 0.0), 20):
            if passage.path == declared.path and _VERSION.search(passage.text) and "macro" in passage.text:
                return passage
        return declared

    def _did_you_mean(self, unknown: list[tuple[str, list[str]]], lang: str) -> tuple[list[str], list[dict]]:
        """A "did you mean" line for each unknown name with near misses; one saying hipify leaves it
        as it is for an unknown CUDA name without any. Another unknown name with none (a word such
        as "hipifying", a package such as ``rocr4wsl``) is only searched for."""
        lines, records = [], []
        for token, suggestions in unknown:
            if not suggestions and not cuda_named(token):
                continue
            if not suggestions:
                lines.append(label("unknown_name", lang, token=token))
                records.append({"query": token, "found": False, "suggestions": []})
                continue
            options = label("or", lang).join(f"`{s}`" for s in suggestions)
            lines.append(label("did_you_mean", lang, token=token, options=options))
            records.append({"query": token, "found": False, "suggestions": suggestions})
        return lines, records

    def _lookup(
        self,
        question: str,
        found: list[Found],
        unknown: list,
        options: list[tuple[str | None, list[OptionRow]]],
        lang: str,
    ) -> Answer:
        lines, records, sources = self.api_facts(found, question, lang)
        option_text, option_sources = option_lines(options, lang)
        lines.extend(option_text)
        sources.extend(option_sources)
        if unknown:
            extra_lines, extra_records = self._did_you_mean(unknown, lang)
            lines.extend(extra_lines)
            records.extend(extra_records)
            for _, suggestions in unknown:
                best = self.index.resolve(suggestions[0]) if suggestions else None
                if best is not None:
                    row = order_rows(best)[0]
                    lines.append(label("closest", lang) + describe(row, best.name, lang))
                    sources.extend(self.table_sources(row, False))
        note = self._docs_note(question, found)
        more = ""
        if note is not None:
            more = full_passages([note], [f.name.lower() for f in found], lang)
        if note is not None and not any("\u201c" in line and note.title in line for line in lines):
            names = [f.name for f in found]
            terms = list(dict.fromkeys(extra_terms(question, names) + [n.lower() for n in names]))
            weights = self.retriever.term_weights(terms, names)
            dense = self.retriever.segment_scores([note], question)
            said = compose(question, [note], weights, dense, lang=lang, budget=NOTE_CHARS)
            if said.cited:
                body = re.sub(r" \[\d+\]", "", said.text)
                lines.append(f"{label('see_also', lang)} {note.title} \u203a {note.section}: {body}")
            sources.append(note.source())
        return Answer("\n".join(lines).strip(), dedupe_sources(sources), "lookup", records, more)

    def _docs_note(self, question: str, found: list[Found]) -> Passage | None:
        """A prose passage naming the API that adds to the table row: one that also matches the
        question's other words (e.g. "deprecated"), is titled after the API, or explains an API
        the table marks unsupported / deprecated / removed / experimental."""
        names = [f.name for f in found] + [r.hip for f in found for r in f.rows if r.hip and r.hip != f.name]
        if not names:
            return None
        ids, _ = self.retriever.mentions(names[:6], limit=8)
        extra = extra_terms(question, names)
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

    def _asked_options(
        self, question: str, asked: str, options: list[tuple[str | None, list[OptionRow]]]
    ) -> list[tuple[str | None, list[OptionRow]]]:
        """The options a question asks about: of a question whose other sentences tell its setting
        ("After compiling with -fgpu-rdc, linking fails ... Which library should I link?"), those
        its asking sentence names and the nvcc flags it asks to replace. An option named only as
        the setting keeps its line when a porting note defines it (the note's first sentence
        answers the problem people have with it: "hipcc --hip-link a.o b.o fails" gets
        "compile every object with -fgpu-rdc and pass -fgpu-rdc --hip-link"), not when the docs'
        option table does: the user already uses the option the table describes. ``asked`` is
        the question's asking part (``asked_part``)."""
        if asked == question:
            return options
        named = {rows[0].name for _, rows in self.options.find(asked)}
        return [
            (flag, rows)
            for flag, rows in options
            if flag or rows[0].name in named or rows[0].path.startswith(f"{PACKAGED}/")
        ]

    def _retrieve_and_answer(
        self,
        question: str,
        found: list[Found],
        unknown: list,
        options: list[tuple[str | None, list[OptionRow]]],
        k: int,
        lang: str,
    ) -> Answer:
        option_names = [rows[0].name for _, rows in options]
        names = [f.name for f in found] + option_names + self.index.doc_identifiers(question)
        # the HIP names its CUDA terms stand for ("maxrregcount" -> ``__launch_bounds__``)
        names += [n for n in translated_names(question) if n not in names]
        # The answer's sentences may come from a few more passages than are listed and shown.
        passages = self.retriever.search(question, k=k + COMPOSE_EXTRA, identifiers=names)
        # ... and from the chunks beside the best ones, in the same section.
        passages += self.retriever.neighbours(passages, NEIGHBOURS)
        shown = _asked_names(question, found)
        fact_lines, records, table_sources = (
            self.api_facts(shown, question, lang, rows_each=1, short=True) if shown else ([], [], [])
        )
        asked = asked_part(question)
        option_text, option_sources = option_lines(self._asked_options(question, asked, options), lang)
        fact_lines.extend(option_text)
        # An unknown name only in the setting is a file or symbol of the user's error output
        # (`__clang_hip_runtime_wrapper` of "'cmath' file not found"): no line of its own.
        unknown = [(token, near) for token, near in unknown if asked == question or token in asked]
        if unknown:
            extra_lines, extra_records = self._did_you_mean(unknown, lang)
            fact_lines.extend(extra_lines)
            records.extend(extra_records)
        # Score sentences on the names searched and the question's rarer words ("thrust" over "hip").
        words = content_terms(self.retriever.selective(query_terms(expand_query(question))))
        terms = list(dict.fromkeys([n.lower() for n in names] + words))
        weights = self.retriever.term_weights(terms, names)
        dense = self.retriever.segment_scores(passages, question)
        closest = max((s for spans in dense.values() for *_, s in spans), default=None)
        if (
            closest is not None
            and closest < OFF_TOPIC[lang]
            and not (fact_lines or names or _FIELD.search(question))
        ):
            log.info("no retrieved sentence is near the question (cosine %.2f): not answered", closest)
            return Answer(label("nothing", lang), [], "extractive", records)
        lead = dedupe_sources(table_sources + option_sources)
        answering = self.retriever.answering_notes(passages, question)
        composed = compose(
            question, passages, weights, dense, fact_lines, lang, lead=lead, listed=k, answering=answering
        )
        if self.settings.llm_url and passages:
            try:
                answer = generated(self.settings, question, passages, fact_lines, terms, lang)
            except HipbotError as exc:
                log.warning("LLM endpoint failed, composed answer instead: %s", exc.message)
                composed.text = label("llm_down", lang, error=exc.message) + "\n" + composed.text
            else:
                if answer is not None:
                    sources = dedupe_sources(answer.sources + table_sources + option_sources)
                    return Answer(answer.text, sources, "generated", records, composed.more)
                log.info("the generated answer cited no retrieved passage; composed answer instead")
        return Answer(composed.text, composed.sources, "extractive", records, composed.more)


def _asked_names(question: str, found: list[Found]) -> list[Found]:
    """The names whose mapping row a composed answer leads with: a HIP name in a question about
    HIP code ("hipMallocAsync fails with hipErrorOutOfMemory") gets no "cudaMallocAsync ->
    hipMallocAsync" line unless the question speaks of CUDA; its passages answer it."""
    if "cuda" in question.lower():
        return found
    return [f for f in found if f.side != "hip"]


def _row_key(row: ApiMapping) -> tuple[str, str, str | None]:
    """A mapping row as described once, whichever table page (HIP, HIP and ROC) it was found on."""
    return row.library, row.cuda, row.hip


def _latest_version(rows: list[ApiMapping]) -> str:
    """The newest HIP version the mapping tables mention: the release they describe."""
    versions = {v for r in rows for v in (r.hip_added, r.hip_deprecated, r.hip_changed) if v}
    parsed = [
        (tuple(int(x) for x in v.split(".") if x.isdigit()), v)
        for v in versions
        if re.fullmatch(r"[\d.]+", v)
    ]
    return max(parsed)[1].rsplit(".", 1)[0] if parsed else ""


def _not_ingested(path: Path) -> HipbotError:
    return HipbotError(
        N_("the HIP docs are not ingested yet (database {path})", path=path),
        hint=N_("run: hipbot ingest   (or hipbot ingest --docs PATH / --download)"),
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
