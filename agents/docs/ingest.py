"""``hipbot ingest``: read the corpus into the database, incrementally and idempotently.

A document whose bytes (and the parser version) did not change is skipped; a changed one is
re-chunked, and only passages whose text is new get embedded. API rows are rebuilt from the
mapping tables whenever a table changed.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import sqlite_utils
from tqdm import tqdm

from hipbot.agents.docs import source as docs_source
from hipbot.agents.docs.parse import Chunk, parse_file, segment_spans
from hipbot.agents.docs.store import open_docs_db, replace_apis, set_meta, vectors_to_blob
from hipbot.agents.hipify.mappings import parse_tables
from hipbot.config import Settings, load_settings
from hipbot.db import utcnow
from hipbot.errors import HipbotError

PARSER_VERSION = "6"  # bump when docs_parse changes what chunks a file yields


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
        return (
            f"ingested {self.documents} documents ({self.changed} changed, {self.removed} removed), "
            f"{self.api_rows} API rows, {self.chunks} chunks, {self.embedded} embedded "
            f"with {self.model} in {self.seconds:.1f} s -> {self.database}"
        )


def passage_text(title: str, section: str, text: str) -> str:
    """The text that is embedded; the same as ``Chunk.embed_text``, rebuilt from stored columns."""
    return f"{title}\n{text}" if section == title else f"{title} > {section}\n{text}"


def segment_hash(title: str, section: str, piece: str) -> str:
    return hashlib.sha256(f"segment\x00{passage_text(title, section, piece)}".encode()).hexdigest()


@contextmanager
def _transaction(db: sqlite_utils.Database) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


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
    files = docs_source.corpus_files(root)
    refs = docs_source.commits(root)
    db = open_docs_db(settings.database)
    try:
        existing = {row[0]: row[1] for row in db.execute("SELECT path, sha256 FROM docs_documents")}
        changed = 0
        tables_changed = False
        seen: set[str] = set()
        for path in tqdm(files, desc="parse", unit="doc", disable=not progress):
            rel = path.relative_to(root).as_posix()
            seen.add(rel)
            raw = path.read_bytes()
            digest = hashlib.sha256(PARSER_VERSION.encode() + b"\0" + raw).hexdigest()
            url = docs_source.upstream_url(rel, refs)
            if existing.get(rel) == digest:
                db.execute("UPDATE docs_documents SET url = ? WHERE path = ?", [url, rel])
                continue
            chunks = parse_file(path, rel)
            _store_document(db, rel, url, digest, len(raw), chunks)
            changed += 1
            tables_changed = tables_changed or "/tables/" in rel
        removed = [rel for rel in existing if rel not in seen]
        with _transaction(db):
            for rel in removed:
                _delete_document(db, rel)
        api_rows = db["docs_apis"].count
        if tables_changed or removed or not api_rows:
            tables = root / "HIPIFY" / "docs" / "tables"
            rows = parse_tables(tables, root)
            with _transaction(db):
                api_rows = replace_apis(db, rows)
        embedded = _embed_missing(db, settings.embedding_model, progress)
        with _transaction(db):
            db.execute(
                "DELETE FROM docs_embeddings WHERE hash NOT IN"
                " (SELECT hash FROM docs_chunks UNION SELECT hash FROM docs_segments)"
            )
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
        return IngestSummary(
            corpus=str(root),
            database=str(settings.database),
            model=settings.embedding_model,
            documents=db["docs_documents"].count,
            changed=changed,
            removed=len(removed),
            chunks=db["docs_chunks"].count,
            api_rows=api_rows,
            embedded=embedded,
            seconds=round(time.perf_counter() - start, 2),
        )
    except sqlite3.Error as exc:
        raise HipbotError(f"database error while ingesting into {settings.database}: {exc}") from exc
    finally:
        db.conn.close()


def _delete_document(db: sqlite_utils.Database, rel: str) -> None:
    row = db.execute("SELECT id FROM docs_documents WHERE path = ?", [rel]).fetchone()
    if row is None:
        return
    db.execute(
        "DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM docs_chunks WHERE document_id = ?)", [row[0]]
    )
    db.execute(
        "DELETE FROM docs_segments WHERE chunk_id IN (SELECT id FROM docs_chunks WHERE document_id = ?)",
        [row[0]],
    )
    db.execute("DELETE FROM docs_chunks WHERE document_id = ?", [row[0]])
    db.execute("DELETE FROM docs_documents WHERE id = ?", [row[0]])


def _store_document(
    db: sqlite_utils.Database, rel: str, url: str, digest: str, size: int, chunks: list[Chunk]
) -> None:
    title = chunks[0].title if chunks else Path(rel).stem
    with _transaction(db):
        _delete_document(db, rel)
        cursor = db.execute(
            "INSERT INTO docs_documents (path, title, url, sha256, bytes, chunks, ingested_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [rel, title, url, digest, size, len(chunks), utcnow()],
        )
        doc_id = cursor.lastrowid
        for ord_, chunk in enumerate(chunks):
            cursor = db.execute(
                "INSERT INTO docs_chunks (document_id, ord, kind, section, text, names, hash)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    doc_id,
                    ord_,
                    chunk.kind,
                    chunk.section,
                    chunk.text,
                    " ".join(chunk.names),
                    chunk.content_hash,
                ],
            )
            chunk_id = cursor.lastrowid
            db.execute(
                "INSERT INTO docs_fts (rowid, section, body, names) VALUES (?, ?, ?, ?)",
                [chunk_id, chunk.section, chunk.embed_text, " ".join(chunk.names)],
            )
            if chunk.kind == "prose":
                db.conn.executemany(
                    "INSERT INTO docs_segments (chunk_id, start, end, hash) VALUES (?, ?, ?, ?)",
                    [
                        (chunk_id, a, b, segment_hash(title, chunk.section, chunk.text[a:b]))
                        for a, b in segment_spans(chunk.text)
                    ],
                )


def _embed_missing(db: sqlite_utils.Database, model: str, progress: bool) -> int:
    """Embed prose passages and their sentence-sized segments that have no vector for ``model``
    yet. API rows are found by name and BM25 instead: a dense vector of one table row adds little
    and would triple the ingest time."""
    pending = [
        (h, passage_text(title, section, text))
        for h, title, section, text in db.execute(
            "SELECT c.hash, d.title, c.section, c.text FROM docs_chunks c"
            " JOIN docs_documents d ON d.id = c.document_id"
            " LEFT JOIN docs_embeddings e ON e.hash = c.hash AND e.model = ?"
            " WHERE c.kind = 'prose' AND e.hash IS NULL GROUP BY c.hash",
            [model],
        )
    ]
    pending += [
        (h, passage_text(title, section, text[start:end]))
        for h, title, section, text, start, end in db.execute(
            "SELECT s.hash, d.title, c.section, c.text, s.start, s.end FROM docs_segments s"
            " JOIN docs_chunks c ON c.id = s.chunk_id JOIN docs_documents d ON d.id = c.document_id"
            " LEFT JOIN docs_embeddings e ON e.hash = s.hash AND e.model = ?"
            " WHERE e.hash IS NULL GROUP BY s.hash",
            [model],
        )
    ]
    if not pending:
        return 0
    from hipbot.agents.docs.embeddings import get_embedder

    embedder = get_embedder(model)
    with tqdm(total=len(pending), desc="embed", unit="text", disable=not progress) as bar:
        vectors = embedder.encode([text for _, text in pending], on_batch=bar.update)
    with _transaction(db):
        db.conn.executemany(
            "INSERT OR REPLACE INTO docs_embeddings (hash, model, dim, vector) VALUES (?, ?, ?, ?)",
            [
                (h, model, embedder.dim, vectors_to_blob(v))
                for (h, _), v in zip(pending, vectors, strict=True)
            ],
        )
    return len(pending)
