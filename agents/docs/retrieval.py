"""Hybrid retrieval over the ingested docs: BM25 (FTS5) + dense cosine (numpy) + identifier boosts,
fused with reciprocal rank fusion.

BM25 finds exact words and API names, the dense index finds paraphrases, and passages that
mention an identifier of the question are boosted: a question naming ``__shfl_down_sync`` should
land on the warp-shuffle section even when its other words are vague. Questions in other
languages (the seed users write Chinese) keep their identifiers, and common porting terms are
translated by a small glossary so BM25 and the English embedding model still have words to match.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import sqlite_utils

from hipbot.agents.docs.notes import PACKAGED
from hipbot.agents.docs.store import (
    StoredChunk,
    blob_to_vector,
    chunk_ids_under,
    chunk_vectors,
    load_chunks,
    prose_texts,
    search_api_rows,
    search_text,
    segment_vectors,
)
from hipbot.agents.docs.vocabulary import STOPWORDS, glossary_terms

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")
RRF_K = 60
COMMON_DF = 0.1
MAX_NOTES = 1  # porting notes among a question's passages (notes.py); the rest are the docs'
NOTE_REACH = 3  # ... and one is added when it ranks within this many times the passages asked for
NOTE_POOL = 5  # the best-fused notes among which that one is chosen by the question's words it holds
NOTE_FUSED_SHARE = 0.5  # weight of a note's fused score (relative to the first's) beside those words
NOTE_MARGIN = 0.1  # how much more another note must score to be chosen over the best-fused one
ASK_WEIGHT = 0.3  # share of the asking sentence in the question vector (search and sentence scoring)
TITLE_MATCH = 0.65  # a note whose title (the question it answers) is this close to the question asked ...


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk with where it came from."""

    chunk_id: int
    path: str
    title: str
    section: str
    url: str
    text: str
    kind: str
    names: tuple[str, ...]
    score: float
    focus: tuple[int, int] | None = None  # the sentence-sized piece closest to the question
    beside: bool = False  # not retrieved itself: the chunk next to a retrieved one (same section)
    reach: bool = False  # a note offered from beyond the passages asked for (``NOTE_REACH``)

    def source(self) -> dict[str, str]:
        return {"path": self.path, "section": self.section, "url": self.url}

    @classmethod
    def of(
        cls, row: StoredChunk, score: float, focus: tuple[int, int] | None = None, beside: bool = False
    ) -> Passage:
        """A passage of a loaded chunk row (``store.load_chunks``)."""
        return cls(
            row.id,
            row.path,
            row.title,
            row.section,
            row.url,
            row.text,
            row.kind,
            row.names,
            score,
            focus,
            beside,
        )


def _stack(blobs: Iterable[bytes]) -> np.ndarray:
    vectors = [blob_to_vector(b) for b in blobs]
    return np.vstack(vectors) if vectors else np.zeros((0, 1), dtype=np.float32)


def cosines(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query`` without BLAS threads: for a few thousand rows a plain loop is several
    times faster than waking a thread pool, and much faster on a busy machine."""
    return np.einsum("ij,j->i", matrix, query)


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def _compiled(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern, re.IGNORECASE), value) for pattern, value in pairs)


# NVIDIA's words -> the words the HIP docs use for the same thing: users ask in CUDA terms.
CUDA_TERMS = _compiled(
    (
        (r"\btensor ?cores?\b|\bwmma\b|\bmma\b", "warp matrix functions"),
        (r"\bSMs?\b|streaming multiprocessors?", "compute unit CU"),
        (r"\bwarps?\b", "wavefront"),
        (r"\bPTX\b", "inline assembly GCN ISA"),
        (r"\bnvcc\b", "hipcc"),
        (r"\bcuda-gdb\b", "rocgdb debugger"),
        (r"\bnvprof\b|\bnsight\w*|\bncu\b", "profiling profiler"),
        (r"\bcubin\b|\bfatbin\b|\bptx files?\b", "code object hsaco"),
        (r"\bcompute capabilit(?:y|ies)\b", "architecture feature properties gfx"),
        (r"\bzero[- ]copy\b", "mapped pinned host memory"),
        (r"\bunified memory\b", "managed memory"),
        (r"\btrace\b|\bverbose\b", "logging log level"),
        (r"\bregister (?:usage|pressure|spill\w*|count)\b", "registers VGPR occupancy"),
        (r"maxrregcount|register limit|max(?:imum)? (?:number of )?registers", "__launch_bounds__ registers"),
        (r"(?<![\w-])-rdc\b|relocatable|separate compilation", "-fgpu-rdc relocatable device code"),
        # "build for MI100 and MI250" is what nvcc's -arch / -gencode did: hipcc's --offload-arch
        (
            r"\b(?:build|compil|target)\w*\b[^.?!]{0,40}?\bfor\b[^.?!]{0,20}?"
            r"\b(?:MI\d{2,3}\w*|gfx\d+\w*|RX\s?\d{3,4}\w*|Radeon|Instinct|RDNA\s?\d?|CDNA\s?\d?)",
            "-offload-arch GPU target",
        ),
        (
            r"\b(?:AMD|NVIDIA)\b(?: and not | or | vs\.? | versus | from )(?:an? )?\b(?:AMD|NVIDIA)\b",
            "__HIP_PLATFORM_AMD__ __HIP_PLATFORM_NVIDIA__ platform macro",
        ),
    )
)


_NAME_WORD = re.compile(r"(?<!\S)(?:-[a-z][\w-]*|\w*_\w*|[a-z]+[A-Z]\w*)(?!\S)")


def translated_names(question: str) -> list[str]:
    """The HIP names (``__launch_bounds__``, ``-fgpu-rdc``) that the question's CUDA terms stand
    for: a question asking about ``maxrregcount`` asks about the name the HIP docs use instead."""
    out: dict[str, None] = {}
    for pattern, words in CUDA_TERMS:
        if pattern.search(question):
            for name in _NAME_WORD.findall(words):
                out.setdefault(name, None)
    return list(out)


# GPU product names -> the gfx target the docs, the notes and the error messages use ("RX 6600"
# is gfx1032: the HSA_OVERRIDE_GFX_VERSION answers name it, not the family's gfx1030).
_RX = r"\b(?:RX\s?)?"
GPU_TARGETS = _compiled(
    (
        (r"\bMI(?:50|60)\b|\bRadeon\s+(?:Pro\s+)?VII\b", "gfx906"),
        (r"\bMI25\b|\bVega\s?(?:56|64)\b", "gfx900"),
        (r"\bMI100\b", "gfx908"),
        (r"\bMI2\d0X?\b", "gfx90a"),
        (r"\bMI3[0-2]\dX?\b|\bMI300A\b", "gfx942"),
        (r"\bMI35\dX?\b", "gfx950"),
        (_RX + r"(?:4[78]0|5[789]0)\b", "gfx803"),
        (_RX + r"5[67]00(?:\s?XT)?\b", "gfx1010"),
        (_RX + r"5[35]00(?:\s?XT)?\b", "gfx1012"),
        (_RX + r"6[89][05]0(?:\s?XT)?\b|\bRDNA\s?2\b", "gfx1030"),
        (_RX + r"67[05]0(?:\s?XT)?\b", "gfx1031"),
        (_RX + r"6[56][05]0(?:\s?XT)?\b", "gfx1032"),
        (_RX + r"6[45]00(?:\s?XT)?\b", "gfx1034"),
        (_RX + r"79[05]0(?:\s?(?:XTX?|GRE))?\b|\bRDNA\s?3\b", "gfx1100"),
        (_RX + r"7[78]00(?:\s?XT)?\b", "gfx1101"),
        (_RX + r"76[05]0(?:\s?XT)?\b", "gfx1102"),
        (r"\b7[48]0M\b", "gfx1103"),
        (r"\b890M\b|\b8060S\b|\bStrix\s+Halo\b", "gfx1151"),
        (_RX + r"90[67]0(?:\s?XT)?\b|\bRDNA\s?4\b", "gfx1201"),
    )
)
# Wave size of the GPU families, added only to questions about warps, lanes or masks: "wrong sums
# on MI250" is about wave64, "build for MI250" is about --offload-arch.
WAVE64 = re.compile(r"\b(MI\d{2,3}\w*|gfx9\w*|CDNA\d?|Instinct)\b", re.IGNORECASE)
WAVE32 = re.compile(r"\b(RDNA\d?|gfx1[0-2]\w*|Radeon)\b", re.IGNORECASE)
WAVE_TOPIC = re.compile(
    r"warp|wave|lane|shfl|shuffle|ballot|vote|\breductions?\b|\bsums?\b|mask|\b(?:32|64)\b", re.IGNORECASE
)


# A GPU's product name is the setting of most questions ("wrong sums on MI250", "build for MI100
# and MI250"), not their topic: searched for, it finds that GPU's architecture and tuning pages.
# It stays in the query only when the question is about the hardware itself.
PRODUCT = re.compile(
    r"\b(?:AMD\s+)?(?:Instinct\s*)?MI\d{2,3}[A-Z]?\b|\b(?:AMD\s+)?Radeon(?:\s+(?:Pro|RX))?(?:\s+[A-Z]?\d{3,4}\w*)?|"
    r"\bRX\s?\d{3,4}(?:\s?XTX?)?\b|\b[RC]DNA\s?\d?\b",
    re.IGNORECASE,
)
HARDWARE_TOPIC = re.compile(
    r"architect\w*|\bspec\w*|hardware|compute units?|\bCUs?\b|cache|bandwidth|\bpeak\b|\bTFLOPS\b|\bHBM\b|"
    r"\bBIOS\b|system settings|\bsupport\w*|\bavailable\b|\brun\w* on\b|\bwork\w* on\b|\btun(?:e|ing)\b|"
    r"架构|规格|硬件|支持",
    re.IGNORECASE,
)


def topic_of(question: str) -> str:
    """The question without the GPU product names that only say where it runs."""
    if HARDWARE_TOPIC.search(question):
        return question
    stripped = PRODUCT.sub(" ", question)
    return stripped if query_terms(stripped) or has_cjk(stripped) else question


def expand_query(question: str) -> str:
    """The question (less the GPU product names that are only its setting) plus English glossary
    terms for its non-English words, the HIP docs' words for its CUDA terms, the gfx targets of
    the GPUs it names and, when it is about warps, their wave size."""
    glossary = [" ".join(words) for words in glossary_terms(question)] if has_cjk(question) else []
    extra = [target for pattern, target in GPU_TARGETS if pattern.search(question)]
    if extra or WAVE64.search(question) or WAVE32.search(question):
        extra.insert(0, "AMD GPU")
    extra += [words for pattern, words in CUDA_TERMS if pattern.search(question)]
    if WAVE_TOPIC.search(" ".join([question, *glossary])):
        if WAVE64.search(question):
            extra.append("wavefront warpSize 64")
        if WAVE32.search(question):
            extra.append("wavefront warpSize 32")
    return " ".join([topic_of(question), *extra, *glossary]).strip()


_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")


_CJK_CLAUSE_END = re.compile(r"(?<=[。！？；，?!;,])")
_CJK_ASKS = re.compile(r"[？?]$|吗|什么|怎么|怎样|如何|哪|能不能|是否|有没有|要不要")


def asked_part(question: str) -> str:
    """The sentence of a question that asks (the last one ending in "?", else the last one), when
    it has other sentences that tell the setting; else the question itself. A Chinese question
    tells its setting in clauses ("……编译成 .o，链接时报 ……，需要链接哪个库？"): its asking clause
    is the last one with a question word or mark."""
    if has_cjk(question):
        clauses = [p for p in _CJK_CLAUSE_END.split(question.strip()) if len(p.strip()) >= 4]
        asking = [p for p in clauses if _CJK_ASKS.search(p.strip())]
        return asking[-1].strip() if len(clauses) >= 2 and asking else question
    parts = [p for p in _SENTENCE_END.split(question.strip()) if len(p.split()) >= 3]
    if len(parts) < 2:
        return question
    asking = [p for p in parts if p.endswith("?")]
    return (asking or parts)[-1]


def query_terms(text: str) -> list[str]:
    """Lower-cased search words (ASCII words of any question, stop words dropped), in order, unique."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text):
        low = word.lower()
        if len(low) > 1 and low not in STOPWORDS:
            seen.setdefault(low, None)
    return list(seen)


class Retriever:
    """Holds the dense matrix in memory; one instance serves many questions."""

    def __init__(self, db: sqlite_utils.Database, model: str) -> None:
        self.db = db
        self.model = model
        rows = chunk_vectors(db, model)
        self.ids = np.array([r[0] for r in rows], dtype=np.int64)
        self.matrix = _stack(r[1] for r in rows)
        segments = segment_vectors(db, model)
        self.segment_chunks = np.array([r[0] for r in segments], dtype=np.int64)
        self.segment_spans = [(r[1], r[2]) for r in segments]
        self.segment_matrix = _stack(r[3] for r in segments)
        self.segment_rows: dict[int, list[int]] = {}
        for i, chunk_id in enumerate(self.segment_chunks):
            self.segment_rows.setdefault(int(chunk_id), []).append(i)
        self.group_chunks = list(self.segment_rows)
        self.group_starts = np.array([rows[0] for rows in self.segment_rows.values()], dtype=np.int64)
        self._embedder = None
        self._last_query: tuple[str, np.ndarray] | None = None
        # Document frequency over prose only: the 18k API rows would make "amd" or "hip" look rare.
        self.df: Counter[str] = Counter()
        self.prose_count = 0
        self.note_chunks = chunk_ids_under(db, f"{PACKAGED}/")
        self.note_leads = chunk_ids_under(db, f"{PACKAGED}/", first_only=True)
        self._titles: dict[int, np.ndarray] = {}
        self.note_words = {
            chunk_id: frozenset(w.lower() for w in _WORD.findall(f"{row.section} {row.text}"))
            for chunk_id, row in load_chunks(db, list(self.note_chunks)).items()
        }
        for section, text in prose_texts(db):
            self.df.update({w.lower() for w in _WORD.findall(f"{section} {text}")})
            self.prose_count += 1

    @property
    def dense_available(self) -> bool:
        return len(self.ids) > 0

    def _embed(self, *texts: str) -> np.ndarray:
        """One row per text, encoded in one call (two short texts cost little more than one)."""
        if self._embedder is None:
            from hipbot.agents.docs.embeddings import get_embedder

            self._embedder = get_embedder(self.model)
        return self._embedder.encode(list(texts))

    def warm_up(self) -> None:
        """Load the embedding model now rather than on the first question."""
        if self.dense_available:
            self._embed("warm up")

    @staticmethod
    def dense_text(question: str) -> str:
        """What is embedded for a question: a question written mostly in another language embeds
        badly, so its English part (identifiers and glossary words) stands for it."""
        expanded = expand_query(question)
        return " ".join(query_terms(expanded)) if has_cjk(question) else expanded

    def question_vector(self, question: str) -> np.ndarray | None:
        """The question's embedding, for the search and for scoring an answer's sentences: a
        question that tells its setting before it asks weighs its asking sentence in
        (``ASK_WEIGHT``): the passage and the sentence that answer match what is asked more than
        the setting (a long error log, the user's GPU and distribution). Made in one call and kept
        for the last question (search and composition share it)."""
        text = self.dense_text(question)
        if not text.strip() or not self.dense_available:
            return None
        if self._last_query is None or self._last_query[0] != text:
            ask = asked_part(question)
            ask_text = self.dense_text(ask) if ask != question else ""
            if ask_text.strip():
                whole, part = self._embed(text, ask_text)
                self._last_query = (text, (1 - ASK_WEIGHT) * whole + ASK_WEIGHT * part)
            else:
                (whole,) = self._embed(text)
                self._last_query = (text, whole)
        return self._last_query[1]

    def segment_scores(
        self, passages: list[Passage], question: str
    ) -> dict[int, list[tuple[int, int, float]]]:
        """(start, end, cosine with the question, its asking sentence weighed in) of the stored
        sentence embeddings of each passage."""
        vector = self.question_vector(question)
        if vector is None:
            return {}
        out: dict[int, list[tuple[int, int, float]]] = {}
        for passage in passages:
            rows = self.segment_rows.get(passage.chunk_id)
            if not rows:
                continue
            scores = cosines(self.segment_matrix[rows], vector)
            out[passage.chunk_id] = [
                (*self.segment_spans[i], float(score)) for i, score in zip(rows, scores, strict=True)
            ]
        return out

    def answering_notes(self, passages: list[Passage], question: str) -> frozenset[int]:
        """The first chunks among ``passages`` of the notes whose title, the question the note's
        first paragraph answers, is within ``TITLE_MATCH`` (cosine) of the question asked: that
        paragraph is the answer to it ("Can I run ROCm on the distribution's own kernel?" and the
        note "Do I need the amdgpu-dkms driver for ROCm, or is the kernel's built-in amdgpu
        enough?"). Title vectors are made once per note, when first needed."""
        vector = self.question_vector(question)
        firsts = [p for p in passages if p.chunk_id in self.note_leads]
        if vector is None or not firsts:
            return frozenset()
        new = [p for p in firsts if p.chunk_id not in self._titles]
        if new:
            self._titles.update(
                zip((p.chunk_id for p in new), self._embed(*(p.title for p in new)), strict=True)
            )
        scores = cosines(np.stack([self._titles[p.chunk_id] for p in firsts]), vector)
        return frozenset(p.chunk_id for p, score in zip(firsts, scores, strict=True) if score >= TITLE_MATCH)

    def term_weights(self, terms: list[str], identifiers: list[str]) -> list[tuple[str, float]]:
        """Each search word with an inverse-document-frequency weight in (0.2, 1]; the question's
        identifiers (API names, options, variables) weigh 1.5."""
        names = dict.fromkeys(n.lower() for n in identifiers)  # in order: sums stay the same run to run
        top = math.log(self.prose_count + 1) or 1.0
        out: dict[str, float] = {}
        for term in [*names, *terms]:
            if term in names:
                out[term] = 1.5
            else:
                idf = math.log((self.prose_count + 1) / (self.df.get(term, 0) + 1)) / top
                out.setdefault(term, max(0.2, min(idf, 1.0)))
        return list(out.items())

    def selective(self, terms: list[str]) -> list[str]:
        """Drop the corpus' own stop words (in over COMMON_DF of the passages: hip, amd, cuda, gpu)
        when rarer words remain, so BM25 ranks on what the question is about."""
        limit = COMMON_DF * max(self.prose_count, 1)
        rare = [t for t in terms if self.df.get(t, 0) <= limit]
        return rare or terms

    def bm25(self, terms: list[str], kind: str = "prose", limit: int = 50) -> list[int]:
        if not terms:
            return []
        return search_text(self.db, terms, kind, limit)

    def dense(self, query: np.ndarray, limit: int = 50) -> tuple[list[int], dict[int, tuple[int, int]]]:
        """Chunks ranked by the better of their own cosine and their best segment's, and the span of
        that best segment in each chunk: one list, so BM25 keeps an equal say in the fusion."""
        scores = cosines(self.matrix, query)
        best = dict(zip(self.ids.tolist(), scores.tolist(), strict=True))
        if len(self.group_starts):
            # segments are stored grouped by chunk: one vectorised max per group
            group_best = np.maximum.reduceat(cosines(self.segment_matrix, query), self.group_starts)
            for chunk_id, value in zip(self.group_chunks, group_best.tolist(), strict=True):
                if value > best.get(chunk_id, -1.0):
                    best[chunk_id] = value
        ranked = sorted(best, key=lambda c: -best[c])[:limit]
        focus: dict[int, tuple[int, int]] = {}
        for chunk_id in ranked:
            rows = self.segment_rows.get(chunk_id)
            if rows:
                top = rows[int(np.argmax(cosines(self.segment_matrix[rows], query)))]
                focus[chunk_id] = self.segment_spans[top]
        return ranked, focus

    def mentions(self, names: list[str], limit: int = 30) -> tuple[list[int], list[int]]:
        """Prose chunks of the docs that mention any of ``names``, and the mapping-table rows of those
        names."""
        if not names:
            return [], []
        # The docs' own passages: a porting note names many APIs in passing (it is found by the
        # other lists when it is about the question), and would stand under a table row (the
        # answer's see-also) it is not about: the IPC note names hipMalloc.
        prose = self.bm25([n.lower() for n in names], "prose", 2 * limit)
        prose = [i for i in prose if i not in self.note_chunks][:limit]
        return prose, search_api_rows(self.db, names, limit)

    def search(self, question: str, k: int = 5, identifiers: list[str] | None = None) -> list[Passage]:
        """The ``k`` best passages for a question, fused from BM25, dense and identifier lists."""
        expanded = expand_query(question)
        terms = query_terms(expanded)
        identifiers = identifiers or []
        rare = self.selective(terms)
        lists: list[tuple[float, list[int]]] = [(1.0, self.bm25(rare))]
        focus: dict[int, tuple[int, int]] = {}
        vector = self.question_vector(question)
        if vector is not None:
            ranked_dense, focus = self.dense(vector)
            lists.append((1.0, ranked_dense))
        if identifiers:
            prose, rows = self.mentions(identifiers)
            lists.append((1.5, prose))
            lists.append((1.2, rows))
        fused: dict[int, float] = {}
        for weight, ids in lists:
            for rank, chunk_id in enumerate(ids):
                fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (RRF_K + rank + 1)
        ranked = sorted(fused, key=lambda i: -fused[i])
        # Porting notes are short and dense with names: past the first one they crowd the docs out.
        notes = self.rank_notes([i for i in ranked if i in self.note_chunks], fused, rare, identifiers)
        left_out = set(notes[MAX_NOTES:])
        ranked = [i for i in ranked if i not in left_out]
        out = self.passages(ranked, fused, k, focus)
        # ... yet the best note within reach is offered too: the docs' passages outrank a note that
        # answers a question people ask in their words (a note is one short chunk, BM25 and the
        # dense list each find it once), so it joins as one passage more.
        if notes and notes[0] in ranked[: NOTE_REACH * k] and all(p.chunk_id != notes[0] for p in out):
            out += [replace(p, reach=True) for p in self.passages(notes[:1], fused, 1, focus)]
        return out

    def rank_notes(
        self, notes: list[int], fused: dict[int, float], rare: list[str], identifiers: list[str]
    ) -> list[int]:
        """The fused notes, the one chosen among the first ``NOTE_POOL`` first (``rare``: the
        question's search words less the corpus' own stop words, ``selective``). Notes that neighbour
        the answer fuse as high as the one that answers, through the names they share (the note on
        the hipify scripts, for "I ran hipconvertinplace-perl.sh on code that uses
        thrust::cuda::par.on(stream); how should this be migrated?"); the one that answers holds
        more of the question's rarer words (the rocThrust execution-policy note). A note's score
        is the weighted share of those words it holds plus ``NOTE_FUSED_SHARE`` of its fused score
        relative to the first's; another note is chosen over the best-fused one only when it scores
        ``NOTE_MARGIN`` more."""
        pool = notes[:NOTE_POOL]
        if len(pool) < 2:
            return notes
        weights = [(_WORD.findall(term) or [term], w) for term, w in self.term_weights(rare, identifiers)]
        total = sum(w for _, w in weights) or 1.0
        top = fused[pool[0]]
        score = {
            chunk_id: sum(w for words, w in weights if self.note_words[chunk_id].issuperset(words)) / total
            + NOTE_FUSED_SHARE * fused[chunk_id] / top
            for chunk_id in pool
        }
        best = max(pool, key=score.__getitem__)
        if score[best] < score[pool[0]] + NOTE_MARGIN:
            return notes
        return [best, *(i for i in notes if i != best)]

    def neighbours(self, passages: list[Passage], top: int = 3) -> list[Passage]:
        """The chunks right before and after each of the ``top`` best passages, in the same section
        of the same page, that are not among ``passages``: a section split into chunks often holds
        its answer in the chunk beside the one that matched."""
        have = {p.chunk_id for p in passages}
        wanted: dict[int, Passage] = {}
        for p in passages[:top]:
            if p.kind != "prose":
                continue
            for chunk_id in (p.chunk_id - 1, p.chunk_id + 1):
                if chunk_id not in have:
                    wanted.setdefault(chunk_id, p)
        if not wanted:
            return []
        rows = load_chunks(self.db, list(wanted))
        out = []
        for chunk_id, beside in wanted.items():
            row = rows.get(chunk_id)
            if (
                row is not None
                and row.kind == "prose"
                and (row.path, row.section) == (beside.path, beside.section)
            ):
                out.append(Passage.of(row, 0.0, beside=True))
        return out

    def passages(
        self,
        ranked: list[int],
        scores: dict[int, float],
        k: int,
        focus: dict[int, tuple[int, int]] | None = None,
    ) -> list[Passage]:
        """Load the best chunks, skipping API rows repeated on the HIP / ROC / HIP+ROC pages."""
        out: list[Passage] = []
        seen_rows: set[tuple[str, ...]] = set()
        for start in range(0, len(ranked), 4 * k):
            batch = ranked[start : start + 4 * k]
            if not batch:
                break
            rows = load_chunks(self.db, batch)
            for chunk_id in batch:
                row = rows.get(chunk_id)
                if row is None:
                    continue
                if row.kind == "api_row":
                    key = (row.section, row.names[0] if row.names else "")
                    if key in seen_rows:
                        continue
                    seen_rows.add(key)
                out.append(Passage.of(row, scores[chunk_id], focus=(focus or {}).get(chunk_id)))
                if len(out) >= k:
                    return out
        return out
