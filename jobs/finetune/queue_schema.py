"""The job queue's tables in SQLite (jobs, their logs, workers, registration and client tokens) and
their migrations, applied in order by ``hipbot.db.migrate``."""

from __future__ import annotations

import sqlite_utils


def _v1(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE jobs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            owner TEXT,
            guild TEXT,
            state TEXT NOT NULL DEFAULT 'queued',
            priority INTEGER NOT NULL DEFAULT 0,
            spec_yaml TEXT NOT NULL,
            spec_json TEXT NOT NULL,
            base_model TEXT NOT NULL,
            attachment_name TEXT,
            attachment_path TEXT,
            model_config_json TEXT,
            memory_gib REAL,
            memory_json TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL DEFAULT 3,
            worker_id TEXT,
            lease_until REAL,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            progress_step INTEGER,
            progress_total INTEGER,
            progress_loss REAL,
            progress_json TEXT,
            checkpoint_path TEXT,
            checkpoint_step INTEGER,
            adapter_dir TEXT,
            artifacts_json TEXT,
            metrics_json TEXT,
            error TEXT,
            created_at TEXT NOT NULL,
            assigned_at TEXT,
            started_at TEXT,
            finished_at TEXT,
            updated_at TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX jobs_state ON jobs (state, priority, id)")
    db.execute("CREATE INDEX jobs_owner ON jobs (owner, id)")
    db.execute(
        """CREATE TABLE job_logs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            ts TEXT NOT NULL,
            source TEXT NOT NULL,
            line TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX job_logs_job ON job_logs (job_id, id)")
    db.execute(
        """CREATE TABLE workers (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            secret_hash TEXT NOT NULL,
            gpus_json TEXT NOT NULL,
            gpu_count INTEGER NOT NULL,
            memory_gib REAL NOT NULL,
            backend TEXT NOT NULL,
            registered_at TEXT NOT NULL,
            last_seen TEXT,
            revoked INTEGER NOT NULL DEFAULT 0
        )"""
    )
    db.execute(
        """CREATE TABLE registration_tokens (
            token_hash TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            used_at TEXT,
            used_by TEXT
        )"""
    )


def _v2(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE client_tokens (
            token_hash TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            trusted INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            revoked INTEGER NOT NULL DEFAULT 0
        )"""
    )


STEPS = [_v1, _v2]
