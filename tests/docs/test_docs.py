"""Docs ingest on the real corpus: parsing, the stored schema, incremental re-ingest, download."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_docs import IngestedDocs, docs_settings_for

from hipbot.agents.docs import source as docs_source
from hipbot.agents.docs.ingest import ingest
from hipbot.agents.docs.notes import note_files
from hipbot.agents.docs.parse import parse_text, segment_spans
from hipbot.agents.docs.store import open_docs_db
from hipbot.agents.hipify.mappings import parse_tables
from hipbot.errors import HipbotError

MD = """# CUDA Runtime API supported by HIP

## **1. Device Management**

|**CUDA**|**A**|**D**|**C**|**R**|**HIP**|**A**|**D**|**C**|**R**|**E**|
|:--|:-:|:-:|:-:|:-:|:--|:-:|:-:|:-:|:-:|:-:|
|`cudaChooseDevice`| | | | |`hipChooseDevice`|1.6.0| | | | |
|`cudaInitDevice`|12.0| | | | | | | | | |

## Notes

Some *prose* with a [link](https://example.com) and ``code``.

```cpp
# not a heading inside a fence
```
"""

RST = """.. meta::
  :description: hidden

*****************
Performance Guide
*****************

Intro text.

.. _label:

Parallel execution
==================

Use streams.

Device level
------------

.. note::
  Keep all multiprocessors busy with :ref:`streams <stream-ref>`.

.. code-block:: cpp

  hipStreamCreate(&s);
"""


def test_markdown_table_rows_are_one_chunk_each_with_their_section() -> None:
    chunks = parse_text(MD, "HIPIFY/docs/tables/x.md")
    rows = [c for c in chunks if c.kind == "api_row"]
    assert [r.names for r in rows] == [("cudaChooseDevice", "hipChooseDevice"), ("cudaInitDevice",)]
    assert rows[0].section == "1. Device Management"
    assert rows[0].text == "CUDA: cudaChooseDevice; HIP: hipChooseDevice (added 1.6.0)"
    assert rows[1].text == "CUDA: cudaInitDevice (added 12.0); HIP: not supported"
    assert rows[0].title == "CUDA Runtime API supported by HIP"
    prose = [c for c in chunks if c.kind == "prose"]
    assert len(prose) == 1 and prose[0].section == "Notes"
    assert "[link]" not in prose[0].text and "link" in prose[0].text and "`code`" in prose[0].text
    assert "# not a heading inside a fence" in prose[0].text


def test_rst_sections_follow_the_adornment_hierarchy() -> None:
    chunks = parse_text(RST, "HIP/docs/how-to/perf.rst")
    by_section = {c.section: c.text for c in chunks}
    assert chunks[0].title == "Performance Guide"
    assert set(by_section) == {"Performance Guide", "Parallel execution", "Parallel execution > Device level"}
    device = by_section["Parallel execution > Device level"]
    assert "Note:" in device and "streams" in device and "<stream-ref>" not in device
    assert "hipStreamCreate(&s);" in device
    assert all("hidden" not in text and ".. _label" not in text for text in by_section.values())


def test_ingest_stores_documents_rows_chunks_and_embeddings(
    ingested_docs: IngestedDocs, docs_root: Path
) -> None:
    summary = ingested_docs.first
    files = docs_source.corpus_files(docs_root)
    assert summary.documents == len(files) + len(note_files()) and len(files) >= 40
    expected_rows = parse_tables(docs_root / "HIPIFY" / "docs" / "tables", docs_root)
    assert summary.api_rows == len(expected_rows)
    db = open_docs_db(ingested_docs.settings.database)
    doc = db.execute(
        "SELECT url, title FROM docs_documents WHERE path = ?",
        ["HIPIFY/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md"],
    ).fetchone()
    commit = docs_source.commits(docs_root)["HIPIFY"]
    assert doc == (
        f"https://github.com/ROCm/HIPIFY/blob/{commit}/docs/tables/CUDA_Runtime_API_functions_supported_by_HIP.md",
        "CUDA Runtime API supported by HIP",
    )
    row = db.execute(
        "SELECT c.section, c.text FROM docs_chunks c JOIN docs_documents d ON d.id = c.document_id"
        " WHERE d.path LIKE '%Runtime_API_functions_supported_by_HIP.md' AND c.names LIKE 'cudaMemcpyToSymbolAsync %'"
    ).fetchone()
    assert row == (
        "11. Memory Management",
        "CUDA: cudaMemcpyToSymbolAsync; HIP: hipMemcpyToSymbolAsync (added 1.6.0)",
    )
    api = db.execute("SELECT hip, status, hip_added FROM docs_apis WHERE cuda = 'cudaMallocAsync'").fetchone()
    assert api == ("hipMallocAsync", "supported", "5.2.0")
    prose = db.execute("SELECT count(*) FROM docs_chunks WHERE kind = 'prose'").fetchone()[0]
    vectors = db.execute("SELECT count(*), min(dim), max(dim) FROM docs_embeddings").fetchone()
    assert vectors[0] >= prose * 0.95 and vectors[1:] == (384, 384)
    hits = db.execute(
        "SELECT count(*) FROM docs_fts WHERE docs_fts MATCH '\"HIP_ENABLE_WARP_SYNC_BUILTINS\"'"
    ).fetchone()
    assert hits[0] >= 1


def test_second_ingest_embeds_nothing_and_changes_nothing(ingested_docs: IngestedDocs) -> None:
    db = open_docs_db(ingested_docs.settings.database)
    before = db.execute("SELECT count(*) FROM docs_chunks").fetchone()[0]
    again = ingest(ingested_docs.settings, progress=False)
    assert (again.changed, again.removed, again.embedded) == (0, 0, 0)
    assert again.chunks == before and again.documents == ingested_docs.first.documents


def test_incremental_reingest_of_an_edited_and_a_removed_document(docs_root: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(docs_root / "HIPIFY" / "docs" / "tables", corpus / "HIPIFY" / "docs" / "tables")
    guide = corpus / "HIP" / "docs" / "reference" / "terms.md"
    guide.parent.mkdir(parents=True)
    shutil.copy(docs_root / "HIP" / "docs" / "reference" / "terms.md", guide)
    extra = corpus / "HIP" / "docs" / "how-to" / "note.md"
    extra.parent.mkdir(parents=True)
    extra.write_text("# Note\n\n## Wavefronts\n\nAMD CDNA GPUs run 64 lanes per wavefront.\n")
    settings = docs_settings_for(tmp_path / "home", corpus)
    first = ingest(settings, progress=False)
    assert first.documents == len(list(corpus.rglob("*.md"))) + len(note_files()) and first.embedded >= 2

    extra.write_text(
        "# Note\n\n## Wavefronts\n\nAMD CDNA GPUs run 64 lanes per wavefront.\n\n"
        "## New\n\nRDNA GPUs run 32 lanes per wavefront by default.\n"
    )
    second = ingest(settings, progress=False)
    # only the new passage and its one sentence-sized segment are embedded
    assert (second.changed, second.embedded) == (1, 2)

    guide.unlink()
    third = ingest(settings, progress=False)
    assert (third.removed, third.changed, third.embedded) == (1, 0, 0)
    db = open_docs_db(settings.database)
    assert not db.execute("SELECT 1 FROM docs_documents WHERE path LIKE '%terms.md'").fetchone()
    orphans = db.execute(
        "SELECT count(*) FROM docs_embeddings WHERE hash NOT IN"
        " (SELECT hash FROM docs_chunks UNION SELECT hash FROM docs_segments)"
    )
    assert orphans.fetchone()[0] == 0


def test_ingest_rejects_a_folder_that_is_not_a_corpus(tmp_path: Path) -> None:
    settings = docs_settings_for(tmp_path / "home", tmp_path)
    with pytest.raises(HipbotError, match="not a HIP docs corpus"):
        ingest(settings, progress=False)
    with pytest.raises(HipbotError, match="docs folder not found"):
        ingest(settings, docs=tmp_path / "missing", progress=False)


@pytest.fixture
def mirror(docs_root: Path, tmp_path: Path) -> Iterator[str]:
    """A local HTTP server laid out like raw.githubusercontent.com: /<owner>/<repo>/<ref>/<path>."""
    root = tmp_path / "mirror"
    for top, repo in docs_source.REPOS.items():
        target = root / repo / docs_source.PINNED[top]
        target.mkdir(parents=True)
        (target / "docs").symlink_to(docs_root / top / "docs")
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_download_fetches_the_pinned_files_and_caches_them(
    mirror: str, docs_root: Path, tmp_path: Path
) -> None:
    settings = docs_settings_for(tmp_path / "home", docs_root)
    cache = docs_source.download(settings, progress=False, base_url=mirror)
    assert cache == tmp_path / "home" / "docs-cache" / "pinned"
    for rel in docs_source.FILES:
        assert (cache / rel).read_bytes() == (docs_root / rel).read_bytes(), rel
    assert docs_source.commits(cache) == docs_source.PINNED
    # A complete cache is reused without touching the network.
    assert docs_source.download(settings, progress=False, base_url="http://127.0.0.1:9") == cache
    with pytest.raises(HipbotError, match="not at ref rocm-0.0.0"):
        docs_source.download(settings, ref="rocm-0.0.0", progress=False, base_url=mirror)


def test_segments_are_the_prose_sentences_of_a_passage_without_its_code() -> None:
    text = (
        "Short.\nYou must install CUDA and, with several installations, name one with --cuda-path.\n"
        "```cpp\nhipPointerAttribute_t attr;\nhipPointerGetAttributes(&attr, ptr); /* device */\n```\n"
        "* PTX assembly (CUDA 4.0). HIP-Clang supports inline GCN assembly.\n* Dynamic parallelism (CUDA 5.0)"
    )
    pieces = [text[a:b] for a, b in segment_spans(text)]
    assert pieces == [
        "Short.\nYou must install CUDA and, with several installations, name one with --cuda-path.",
        "* PTX assembly (CUDA 4.0). HIP-Clang supports inline GCN assembly.",
        "* Dynamic parallelism (CUDA 5.0)",
    ]


def test_rst_comments_and_substitution_definitions_are_not_text() -> None:
    rst = """Title
=====

.. <!-- spellcheck-disable -->

.. # COMMENT: a break for the table below.
.. |break| raw:: html

    <br />

.. |patch| replace::
  :download:`patch <./p.zip>`

Set AMD_LOG_LEVEL |break| to 3 and apply the |patch|.
"""
    (chunk,) = parse_text(rst, "HIP/docs/x.rst")
    assert chunk.text == "Set AMD_LOG_LEVEL   to 3 and apply the patch."


def test_a_code_block_right_under_its_sentence_is_a_block_of_its_own() -> None:
    from hipbot.agents.docs.sentences import units

    text = (
        "# Build\n\nConfigure the build for your GPU:\n```bash\ncmake -S . -B build -DGPU_TARGETS=gfx90a\n```\n"
        "- Then build it.\n"
    )
    [chunk] = parse_text(text, "HIP/docs/how-to/build.md")
    assert "GPU:\n\n```bash" in chunk.text and "```\n\n- Then" in chunk.text
    kinds = {u.text.strip()[:9]: u.kind for u in units(chunk.text)}
    assert kinds["Configure"] == "sentence" and kinds["```bash\nc"] == "code", kinds


def test_a_full_stop_inside_inline_code_does_not_end_the_sentence() -> None:
    from hipbot.agents.docs.sentences import units

    text = "Use the HIP language (`project(... LANGUAGES HIP)`) rather than hipcc. Then build it."
    assert [u.text for u in units(text)] == [
        "Use the HIP language (`project(... LANGUAGES HIP)`) rather than hipcc.",
        "Then build it.",
    ]


def test_loading_the_embedding_model_draws_no_progress_bar(capfd: pytest.CaptureFixture[str]) -> None:
    """`hipbot ask` prints its answer only: transformers' "Loading weights" bar stays off stderr,
    and is left on for what else draws it (a training run's own bars)."""
    from transformers.utils import logging as hf_logging

    from hipbot.agents.docs.embeddings import Embedder

    Embedder()
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()
