"""The docs part of the app database: documents, chunks, API rows, embeddings and an FTS5 index.

Embeddings are keyed by (chunk content hash, model), not by chunk id, so a re-ingest that re-parses
a changed document still reuses the vectors of every passage whose text did not change.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import sqlite_utils

from hipbot.agents.hipify.mappings import COLUMNS, ApiMapping
from hipbot.db import migrate, open_db


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
