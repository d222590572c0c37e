"""A database with the real HIP docs corpus ingested, shared by the docs/ask test modules.

Registered in conftest.py (pytest_plugins): one session fixture, so the corpus is ingested
(a minute or two on 2 cores) once per test run into the session's temp folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hipbot.agents.docs.answers import Answer, Answerer, get_answerer
from hipbot.agents.docs.ingest import IngestSummary, ingest
from hipbot.config import Settings, load_settings

RUNTIME = "HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md"


def paths(answer: Answer) -> list[str]:
    """The cited paths of an answer, in order."""
    return [s["path"] for s in answer.sources]


@dataclass
class IngestedDocs:
    settings: Settings
    first: IngestSummary  # the summary of the ingest that built the database (this module's view)


def docs_settings_for(home: Path, docs_root: Path, **overrides: object) -> Settings:
    """Settings that ignore the per-test HIPBOT_HOME and any config file."""
    return load_settings(env={"HIPBOT_HOME": str(home)}, home=home, docs_path=docs_root, **overrides)


@pytest.fixture(scope="session")
def ingested_docs(docs_root: Path, tmp_path_factory: pytest.TempPathFactory) -> IngestedDocs:
    home = tmp_path_factory.getbasetemp() / "docs-home"
    settings = docs_settings_for(home, docs_root)
    return IngestedDocs(settings, ingest(settings, progress=False))


@pytest.fixture(scope="session")
def engine(ingested_docs: IngestedDocs) -> Answerer:
    """The answer engine over the ingested corpus, loaded once (its embedding model is slow to load)."""
    return get_answerer(ingested_docs.settings)
