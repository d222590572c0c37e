"""``hipbot ask``: answer a porting question from the ingested docs, always with sources.

Questions that name CUDA, HIP or roc*/MIOpen identifiers are answered from the structured
mapping rows first (``lookup.py``: exact equivalent, versions, status, or a plain "no HIP
equivalent"). Other questions go through hybrid retrieval (``retrieval.py``), then either an LLM
that may only use the retrieved passages (when ``HIPBOT_LLM_URL`` is set) or an extractive answer:
the best passages, trimmed around the question's words (``compose.py``).

This module is the public entry: ``ask``, ``get_answerer``, ``check_question``, ``Answer``.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hipbot.agents.docs.compose import dedupe_sources, extractive, generated, trim
from hipbot.agents.docs.lookup import (
    LIBRARY_LABELS,
    ROC_LABELS,
    ApiIndex,
    Found,
    api_record,
    asks_about_roc,
    describe,
    extra_terms,
    is_conceptual,
    order_rows,
    roc_pages,
)
from hipbot.agents.docs.retrieval import IDENT, Passage, Retriever, expand_query, query_terms
from hipbot.agents.docs.store import (
    document_urls,
    get_meta,
    is_ingested,
    load_apis,
    open_docs_db,
    prose_texts,
)
from hipbot.agents.hipify.mappings import ApiMapping
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000
MAX_K = 20


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
        for _, text in prose_texts(self.db):
            vocabulary.update(IDENT.findall(text))
        self.index = ApiIndex(load_apis(self.db), vocabulary)
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
            raise HipbotError(f"k must be between 1 and {MAX_K}, got {k!r}")
        with self._lock:
            self.refresh()
            found, unknown = self.index.find(question)
            conceptual = is_conceptual(question)
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
            roc = roc_pages(row)
            pages = [*roc, row.table] if roc_first and row.roc else [row.table, *roc]
        return [
            {"path": p, "section": row.section or cuda_label, "url": self.urls.get(p, "")}
            for p in pages
            if p in self.urls
        ]

    def api_facts(self, found: list[Found], question: str) -> tuple[list[str], list[dict], list[dict]]:
        """Answer lines, ``apis`` records and sources for the identifiers of a question."""
        roc_first = asks_about_roc(question)
        lines: list[str] = []
        records: list[dict] = []
        sources: list[dict[str, str]] = []
        for hit in found:
            rows = order_rows(hit)
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
                    row = order_rows(best)[0]
                    lines.append("Closest match: " + describe(row, best.name))
                    sources.extend(self.table_sources(row, False))
        note = self._docs_note(question, found)
        if note is not None:
            names = [f.name for f in found]
            focus = list(dict.fromkeys(extra_terms(question, names) + [n.lower() for n in names]))
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
                text = generated(self.settings, question, passages, fact_lines, terms)
                return Answer(text, sources, "generated", records)
            except HipbotError as exc:
                fact_lines.insert(0, f"(LLM endpoint unavailable, extractive answer instead: {exc.message})")
        return Answer(extractive(passages, fact_lines, terms), sources, "extractive", records)


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
