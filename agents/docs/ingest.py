"""``hipbot ingest``: read the corpus into the database, incrementally and idempotently.

A document whose bytes (and the parser version) did not change is skipped; a changed one is
re-chunked, and only passages whose text is new get embedded. API rows are rebuilt from the
mapping tables whenever a table changed. The porting notes (``notes.py``: hipbot's own, then the
folder ``HIPBOT_NOTES`` names) are documents too, under ``notes/``, cited with their source thread.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import sqlite_utils
from tqdm import tqdm

from hipbot.agents.docs import source as docs_source
from hipbot.agents.docs.notes import note_files, read_note
from hipbot.agents.docs.parse import Chunk, parse_file, parse_text, segment_spans
from hipbot.agents.docs.store import (
    Segment,
    counts,
    delete_document,
    document_digests,
    drop_unused_embeddings,
    insert_document,
    open_docs_db,
    pending_texts,
    replace_apis,
    save_embeddings,
    set_document_url,
    set_meta,
    transaction,
)
from hipbot.agents.hipify.mappings import parse_tables
from hipbot.config import Settings, load_settings
from hipbot.db import utcnow
from hipbot.errors import HipbotError
from hipbot.i18n import _

PARSER_VERSION = "8"  # bump when docs_parse changes what chunks a file yields (or segment texts)
PASSAGE_TOKENS = 128  # a passage vector reads its first 128 word pieces; its sentences are embedded too


@dataclass
class IngestSummary:
    corpus: str
    database: str
    model: str
    documents: int  # documents in the database after ingest
    changed: int  # documents (re)parsed this time
    removed: int
    chunks: int  # all chunks in the database
    api_rows: int
    embedded: int  # passages embedded this time (0 on an unchanged re-ingest)
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        """The summary for people, in the current language (``to_dict`` is never translated)."""
        return _(
            "ingested {documents} documents ({changed} changed, {removed} removed), {api_rows} API rows, "
            "{chunks} chunks, {embedded} embedded with {model} in {seconds:.1f} s -> {database}"
        ).format(**self.to_dict())


def passage_text(title: str, section: str, text: str) -> str:
    """The text that is embedded; the same as ``Chunk.embed_text``, rebuilt from stored columns."""
    return f"{title}\n{text}" if section == title else f"{title} > {section}\n{text}"


def segment_text(title: str, section: str, piece: str) -> str:
    """What is embedded for a sentence-sized segment: the piece under its nearest heading (the
    whole heading path would double the words to embed: 8,500 segments once ROCm's docs joined)."""
    return f"{section.rsplit(' > ', 1)[-1] if section else title}\n{piece}"


def segment_hash(title: str, section: str, piece: str) -> str:
    return hashlib.sha256(f"segment\x00{segment_text(title, section, piece)}".encode()).hexdigest()


def ingest(
    settings: Settings | None = None,
    docs: Path | None = None,
    download: bool = False,
    ref: str | None = None,
    progress: bool = True,
) -> IngestSummary:
    settings = settings or load_settings()
    start = time.perf_counter()
    root = docs_source.resolve_corpus(settings, docs, download, ref, progress)
    # Notes are read (and checked) before anything is written: a bad note stops the ingest whole.
    documents = [(path.relative_to(root).as_posix(), path, None) for path in docs_source.corpus_files(root)]
    documents += [(rel, path, read_note(path, rel)) for rel, path in note_files(settings.notes_dir)]
    refs = docs_source.commits(root)
    db = open_docs_db(settings.database)
    try:
        existing = document_digests(db)
        changed = 0
        tables_changed = False
        seen: set[str] = set()
        for rel, path, note in tqdm(documents, desc="parse", unit="doc", disable=not progress):
            seen.add(rel)
            raw = path.read_bytes()
            digest = hashlib.sha256(PARSER_VERSION.encode() + b"\0" + raw).hexdigest()
            url = note.url if note else docs_source.upstream_url(rel, refs)
            if existing.get(rel) == digest:
                set_document_url(db, rel, url)
                continue
            chunks = parse_text(note.body, rel) if note else parse_file(path, rel)
            _store_document(db, rel, url, digest, len(raw), chunks)
            changed += 1
            tables_changed = tables_changed or "/tables/" in rel
        removed = [rel for rel in existing if rel not in seen]
        with transaction(db):
            for rel in removed:
                delete_document(db, rel)
        api_rows = counts(db).api_rows
        if tables_changed or removed or not api_rows:
            tables = root / "HIPIFY" / "docs" / "tables"
            rows = parse_tables(tables, root)
            with transaction(db):
                api_rows = replace_apis(db, rows)
        embedded = _embed_missing(db, settings.embedding_model, progress)
        with transaction(db):
            drop_unused_embeddings(db)
            set_meta(
                db,
                {
                    "corpus": str(root),
                    "embedding_model": settings.embedding_model,
                    "ingested_at": utcnow(),
                    "ingest_id": uuid.uuid4().hex,  # lets a running engine notice a re-ingest
                    **{f"commit:{top}": commit for top, commit in refs.items()},
                },
            )
        total = counts(db)
        return IngestSummary(
            corpus=str(root),
            database=str(settings.database),
            model=settings.embedding_model,
            documents=total.documents,
            changed=changed,
            removed=len(removed),
            chunks=total.chunks,
            api_rows=api_rows,
            embedded=embedded,
            seconds=round(time.perf_counter() - start, 2),
        )
    except sqlite3.Error as exc:
        raise HipbotError(f"database error while ingesting into {settings.database}: {exc}") from exc
    finally:
        db.conn.close()


def _store_document(
    db: sqlite_utils.Database, rel: str, url: str, digest: str, size: int, chunks: list[Chunk]
) -> None:
    title = chunks[0].title if chunks else Path(rel).stem
    parts = [
        (
            chunk,
            [
                Segment(a, b, segment_hash(title, chunk.section, chunk.text[a:b]))
                for a, b in segment_spans(chunk.text)
            ]
            if chunk.kind == "prose"
            else [],
        )
        for chunk in chunks
    ]
    with transaction(db):
        delete_document(db, rel)
        insert_document(db, rel, title, url, digest, size, parts)


def _embed_missing(db: sqlite_utils.Database, model: str, progress: bool) -> int:
    """Embed prose passages and their sentence-sized segments that have no vector for ``model``
    yet. API rows are found by name and BM25 instead: a dense vector of one table row adds little
    and would triple the ingest time. Passages are cut at ``PASSAGE_TOKENS`` (their later
    sentences have their own vectors): embedding is the cost of a first start."""
    pending = pending_texts(db, model)
    if not pending:
        return 0
    from hipbot.agents.docs.embeddings import get_embedder

    embedder = get_embedder(model)
    done = 0
    with tqdm(total=len(pending), desc="embed", unit="text", disable=not progress) as bar:
        for kind, tokens in (("chunk", PASSAGE_TOKENS), ("segment", None)):
            group = [p for p in pending if p.kind == kind]
            if not group:
                continue
            texts = [
                passage_text(p.title, p.section, p.text)
                if kind == "chunk"
                else segment_text(p.title, p.section, p.text)
                for p in group
            ]
            vectors = embedder.encode(texts, on_batch=bar.update, max_tokens=tokens)
            with transaction(db):
                save_embeddings(
                    db, model, embedder.dim, ((p.hash, v) for p, v in zip(group, vectors, strict=True))
                )
            done += len(group)
    return done
