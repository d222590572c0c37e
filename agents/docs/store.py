"""The docs part of the app database: documents, chunks, API rows, embeddings and an FTS5 index.

Embeddings are keyed by (chunk content hash, model), not by chunk id, so a re-ingest that re-parses
a changed document still reuses the vectors of every passage whose text did not change.

All SQL on the ``docs_*`` tables lives here: ingest, retrieval and the answers call these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import sqlite_utils

from hipbot.agents.docs.parse import Chunk
from hipbot.agents.hipify.mappings import COLUMNS, ApiMapping
from hipbot.db import migrate, open_db, utcnow


def _step_initial(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE docs_documents (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            url TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            ingested_at TEXT NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE docs_chunks (
            id INTEGER PRIMARY KEY,
            document_id INTEGER NOT NULL REFERENCES docs_documents(id) ON DELETE CASCADE,
            ord INTEGER NOT NULL,
            kind TEXT NOT NULL,
            section TEXT NOT NULL,
            text TEXT NOT NULL,
            names TEXT NOT NULL,
            hash TEXT NOT NULL)"""
    )
    db.execute("CREATE INDEX docs_chunks_document ON docs_chunks(document_id)")
    db.execute("CREATE INDEX docs_chunks_hash ON docs_chunks(hash)")
    db.execute(
        """CREATE TABLE docs_embeddings (
            hash TEXT NOT NULL,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (hash, model))"""
    )
    columns = ", ".join(f"{c} TEXT" for c in COLUMNS if c not in ("cuda", "library", "section", "table"))
    db.execute(
        f"""CREATE TABLE docs_apis (
            id INTEGER PRIMARY KEY,
            cuda TEXT NOT NULL,
            library TEXT NOT NULL,
            section TEXT NOT NULL,
            table_path TEXT NOT NULL,
            status TEXT NOT NULL,
            {columns})"""
    )
    for column in ("cuda", "hip", "roc"):
        db.execute(f"CREATE INDEX docs_apis_{column} ON docs_apis({column})")
    # BM25 over passages; '_' is part of a token so __shfl_down_sync and HIP_PLATFORM stay whole.
    db.execute(
        "CREATE VIRTUAL TABLE docs_fts USING fts5(section, body, names, tokenize=\"unicode61 tokenchars '_'\")"
    )
    db.execute("CREATE TABLE docs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _step_segments(db: sqlite_utils.Database) -> None:
    """Sentence-sized pieces of prose chunks (offsets into the chunk text), embedded on their own."""
    db.execute(
        """CREATE TABLE docs_segments (
            chunk_id INTEGER NOT NULL REFERENCES docs_chunks(id) ON DELETE CASCADE,
            start INTEGER NOT NULL,
            end INTEGER NOT NULL,
            hash TEXT NOT NULL)"""
    )
    db.execute("CREATE INDEX docs_segments_chunk ON docs_segments(chunk_id)")
    db.execute("CREATE INDEX docs_segments_hash ON docs_segments(hash)")


STEPS = [_step_initial, _step_segments]


def open_docs_db(path: Path | str) -> sqlite_utils.Database:
    db = open_db(path)
    migrate(db, "docs", STEPS)
    return db


def is_ingested(db: sqlite_utils.Database) -> bool:
    return bool(db.execute("SELECT 1 FROM docs_documents LIMIT 1").fetchone())


def get_meta(db: sqlite_utils.Database) -> dict[str, str]:
    return dict(db.execute("SELECT key, value FROM docs_meta").fetchall())


def set_meta(db: sqlite_utils.Database, values: dict[str, str]) -> None:
    db.conn.executemany("INSERT OR REPLACE INTO docs_meta VALUES (?, ?)", list(values.items()))


def replace_apis(db: sqlite_utils.Database, rows: Iterable[ApiMapping]) -> int:
    records = []
    for row in rows:
        record = {c: getattr(row, c) for c in COLUMNS if c != "table"}
        record["table_path"] = row.table
        record["status"] = row.status
        records.append(record)
    db.execute("DELETE FROM docs_apis")
    if records:
        keys = list(records[0])
        db.conn.executemany(
            f"INSERT INTO docs_apis ({', '.join(keys)}) VALUES ({', '.join('?' for _ in keys)})",
            [[r[k] for k in keys] for r in records],
        )
    return len(records)


def load_apis(db: sqlite_utils.Database) -> list[ApiMapping]:
    out = []
    for record in db["docs_apis"].rows:
        values = {c: record[c] for c in COLUMNS if c != "table"}
        out.append(ApiMapping(**values, table=record["table_path"]))
    return out


def vectors_to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def blob_to_vector(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# --- documents and chunks (written by ingest) ---------------------------------------------------


class Segment(NamedTuple):
    """A sentence-sized piece of a prose chunk: offsets into the chunk text and its embedding key."""

    start: int
    end: int
    hash: str


@dataclass(frozen=True)
class DocsCounts:
    documents: int
    chunks: int
    api_rows: int


def document_digests(db: sqlite_utils.Database) -> dict[str, str]:
    """path -> sha256 (of parser version and bytes) of every ingested document."""
    return dict(db.execute("SELECT path, sha256 FROM docs_documents").fetchall())


def document_urls(db: sqlite_utils.Database) -> dict[str, str]:
    return dict(db.execute("SELECT path, url FROM docs_documents").fetchall())


def set_document_url(db: sqlite_utils.Database, path: str, url: str) -> None:
    db.execute("UPDATE docs_documents SET url = ? WHERE path = ?", [url, path])


def delete_document(db: sqlite_utils.Database, path: str) -> None:
    """Remove a document with its chunks, segments and full-text rows (embeddings stay, by hash)."""
    row = db.execute("SELECT id FROM docs_documents WHERE path = ?", [path]).fetchone()
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


def insert_document(
    db: sqlite_utils.Database,
    path: str,
    title: str,
    url: str,
    digest: str,
    size: int,
    chunks: list[tuple[Chunk, list[Segment]]],
) -> None:
    """Store a parsed document: its chunks, their full-text rows and the segments of prose chunks."""
    cursor = db.execute(
        "INSERT INTO docs_documents (path, title, url, sha256, bytes, chunks, ingested_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [path, title, url, digest, size, len(chunks), utcnow()],
    )
    doc_id = cursor.lastrowid
    for ord_, (chunk, segments) in enumerate(chunks):
        cursor = db.execute(
            "INSERT INTO docs_chunks (document_id, ord, kind, section, text, names, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [doc_id, ord_, chunk.kind, chunk.section, chunk.text, " ".join(chunk.names), chunk.content_hash],
        )
        chunk_id = cursor.lastrowid
        db.execute(
            "INSERT INTO docs_fts (rowid, section, body, names) VALUES (?, ?, ?, ?)",
            [chunk_id, chunk.section, chunk.embed_text, " ".join(chunk.names)],
        )
        if segments:
            db.conn.executemany(
                "INSERT INTO docs_segments (chunk_id, start, end, hash) VALUES (?, ?, ?, ?)",
                [(chunk_id, s.start, s.end, s.hash) for s in segments],
            )


def counts(db: sqlite_utils.Database) -> DocsCounts:
    return DocsCounts(db["docs_documents"].count, db["docs_chunks"].count, db["docs_apis"].count)


# --- embeddings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingText:
    """A prose chunk or segment with no vector yet for a model: its hash and the pieces of its text."""

    hash: str
    title: str
    section: str
    text: str
    kind: str = "chunk"  # "chunk" or "segment"


def pending_texts(db: sqlite_utils.Database, model: str) -> list[PendingText]:
    """Prose chunks, then segments (their text cut out of the chunk), not embedded with ``model``."""
    chunks = db.execute(
        "SELECT c.hash, d.title, c.section, c.text FROM docs_chunks c"
        " JOIN docs_documents d ON d.id = c.document_id"
        " LEFT JOIN docs_embeddings e ON e.hash = c.hash AND e.model = ?"
        " WHERE c.kind = 'prose' AND e.hash IS NULL GROUP BY c.hash",
        [model],
    ).fetchall()
    segments = db.execute(
        "SELECT s.hash, d.title, c.section, c.text, s.start, s.end FROM docs_segments s"
        " JOIN docs_chunks c ON c.id = s.chunk_id JOIN docs_documents d ON d.id = c.document_id"
        " LEFT JOIN docs_embeddings e ON e.hash = s.hash AND e.model = ?"
        " WHERE e.hash IS NULL GROUP BY s.hash",
        [model],
    ).fetchall()
    return [PendingText(*row) for row in chunks] + [
        PendingText(h, title, section, text[start:end], "segment")
        for h, title, section, text, start, end in segments
    ]


def save_embeddings(
    db: sqlite_utils.Database, model: str, dim: int, vectors: Iterable[tuple[str, np.ndarray]]
) -> None:
    db.conn.executemany(
        "INSERT OR REPLACE INTO docs_embeddings (hash, model, dim, vector) VALUES (?, ?, ?, ?)",
        [(h, model, dim, vectors_to_blob(v)) for h, v in vectors],
    )


def drop_unused_embeddings(db: sqlite_utils.Database) -> None:
    """Vectors no chunk or segment refers to any more (after a re-ingest changed their text)."""
    db.execute(
        "DELETE FROM docs_embeddings WHERE hash NOT IN"
        " (SELECT hash FROM docs_chunks UNION SELECT hash FROM docs_segments)"
    )


# --- reading for retrieval and answers ------------------------------------------------------------


@dataclass(frozen=True)
class StoredChunk:
    """A chunk with the document it belongs to, as retrieval shows it."""

    id: int
    path: str
    title: str
    section: str
    url: str
    text: str
    kind: str
    names: tuple[str, ...]


def prose_chunks(db: sqlite_utils.Database) -> Iterator[tuple[int, str, str, str, str, str]]:
    """(id, path, title, section, url, text) of every prose chunk, in document order."""
    yield from db.execute(
        "SELECT c.id, d.path, d.title, c.section, d.url, c.text FROM docs_chunks c"
        " JOIN docs_documents d ON d.id = c.document_id WHERE c.kind = 'prose' ORDER BY c.id"
    )


def prose_texts(db: sqlite_utils.Database) -> Iterator[tuple[str, str]]:
    """(section, text) of every prose chunk."""
    yield from db.execute("SELECT section, text FROM docs_chunks WHERE kind = 'prose'")


def chunk_ids_under(db: sqlite_utils.Database, prefix: str, first_only: bool = False) -> set[int]:
    """The ids of the chunks (or only the first chunk) of every document whose path starts with
    ``prefix``."""
    rows = db.execute(
        "SELECT c.id FROM docs_chunks c JOIN docs_documents d ON d.id = c.document_id"
        " WHERE substr(d.path, 1, ?) = ?" + (" AND c.ord = 0" if first_only else ""),
        [len(prefix), prefix],
    )
    return {row[0] for row in rows}


def chunk_vectors(db: sqlite_utils.Database, model: str) -> list[tuple[int, bytes]]:
    """(chunk id, vector blob) of the prose chunks embedded with ``model``, by chunk id."""
    return db.execute(
        "SELECT c.id, e.vector FROM docs_chunks c JOIN docs_embeddings e"
        " ON e.hash = c.hash AND e.model = ? WHERE c.kind = 'prose' ORDER BY c.id",
        [model],
    ).fetchall()


def segment_vectors(db: sqlite_utils.Database, model: str) -> list[tuple[int, int, int, bytes]]:
    """(chunk id, start, end, vector blob) of the segments embedded with ``model``, in text order."""
    return db.execute(
        "SELECT s.chunk_id, s.start, s.end, e.vector FROM docs_segments s JOIN docs_embeddings e"
        " ON e.hash = s.hash AND e.model = ? ORDER BY s.chunk_id, s.start",
        [model],
    ).fetchall()


def _fts_query(terms: list[str]) -> str:
    return " OR ".join('"' + t.replace('"', "") + '"' for t in terms)


def search_text(db: sqlite_utils.Database, terms: list[str], kind: str, limit: int) -> list[int]:
    """BM25 over section, body and names (names weigh most): ids of chunks of ``kind``, best first."""
    rows = db.execute(
        "SELECT f.rowid FROM docs_fts f JOIN docs_chunks c ON c.id = f.rowid"
        " WHERE docs_fts MATCH ? AND c.kind = ? ORDER BY bm25(docs_fts, 2.0, 1.0, 5.0) LIMIT ?",
        [_fts_query(terms), kind, limit],
    ).fetchall()
    return [r[0] for r in rows]


def search_api_rows(db: sqlite_utils.Database, names: list[str], limit: int) -> list[int]:
    """Ids of the mapping-table row chunks that name any of ``names``."""
    rows = db.execute(
        "SELECT f.rowid FROM docs_fts f JOIN docs_chunks c ON c.id = f.rowid"
        " WHERE docs_fts MATCH ? AND c.kind = 'api_row' ORDER BY bm25(docs_fts, 0.0, 0.0, 1.0) LIMIT ?",
        [f"names : ({_fts_query(names)})", limit],
    ).fetchall()
    return [r[0] for r in rows]


def load_chunks(db: sqlite_utils.Database, ids: list[int]) -> dict[int, StoredChunk]:
    marks = ",".join("?" for _ in ids)
    rows = db.execute(
        "SELECT c.id, d.path, d.title, c.section, d.url, c.text, c.kind, c.names"
        f" FROM docs_chunks c JOIN docs_documents d ON d.id = c.document_id WHERE c.id IN ({marks})",
        ids,
    ).fetchall()
    return {r[0]: StoredChunk(*r[:7], names=tuple(r[7].split())) for r in rows}
