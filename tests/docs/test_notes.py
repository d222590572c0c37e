"""Porting notes: the packaged ones are well formed, a maintainer's own are ingested beside the docs
and cited with their source thread, and a bad note stops the ingest before anything is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures_docs import RUNTIME, docs_settings_for, paths

from hipbot.agents.docs.answers import Answerer, get_answerer
from hipbot.agents.docs.ingest import ingest
from hipbot.agents.docs.notes import MAX_NOTE_BYTES, note_files, read_note
from hipbot.agents.docs.parse import MAX_CHARS, parse_text
from hipbot.agents.docs.retrieval import expand_query, query_terms
from hipbot.agents.docs.store import open_docs_db
from hipbot.config import Settings, load_settings
from hipbot.errors import HipbotError

NOTE = """# Running on a board the support list does not name

Set `FROBNICATE_GFX_LEVEL=7.1.0` before starting the program: the runtime then loads the code
objects built for the nearest listed board.

Source: https://github.com/example/project/issues/4242
"""


def test_every_packaged_note_is_well_formed() -> None:
    found = note_files()
    assert len(found) >= 40 and all(rel == f"notes/{path.name}" for rel, path in found)
    titles = set()
    for rel, path in found:
        note = read_note(path, rel)
        assert note.url.startswith("https://") and note.title not in titles, rel
        titles.add(note.title)
        assert "Source:" not in note.body and len(note.body.split()) >= 12, rel
        # one passage: a longer note is split, and the search may find its bullets without its answer
        chunks = parse_text(note.body, rel)
        assert len(chunks) == 1, f"{rel}: {len(chunks)} passages; shorten it below {MAX_CHARS} characters"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Set X=1.\n\nSource: https://example.com/1\n", "does not start with a '# title'"),
        ("# Title\n\nSet X=1.\n", "needs a 'Source: https://...' line"),
        ("# Title\n\nSet X=1.\n\nSource: see the forum\n", "not a URL: see"),
        ("# Title\n\n" + "word " * MAX_NOTE_BYTES + "\nSource: https://example.com/1\n", "at most 8000"),
    ],
)
def test_read_note_rejects_a_malformed_note(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "bad.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(HipbotError) as err:
        read_note(path, "notes/local/bad.md")
    assert error in str(err.value) and "bad.md" in str(err.value)


def test_notes_folder_comes_from_hipbot_notes(tmp_path: Path) -> None:
    settings = load_settings(env={"HIPBOT_HOME": str(tmp_path), "HIPBOT_NOTES": str(tmp_path / "notes")})
    assert settings.notes_dir == tmp_path / "notes"
    with pytest.raises(HipbotError, match="notes folder not found"):
        note_files(settings.notes_dir)


def _small_corpus(root: Path, docs_root: Path) -> Path:
    tables = root / "HIPIFY" / "docs" / "tables"
    tables.mkdir(parents=True)
    shutil.copy(docs_root / RUNTIME, tables)
    guide = root / "HIP" / "docs" / "how-to" / "streams.md"
    guide.parent.mkdir(parents=True)
    guide.write_text(
        "# Streams\n\n## Ordering\n\nWork queued on one stream runs in the order it was queued.\n",
        encoding="utf-8",
    )
    return root


def _with_notes(tmp_path: Path, docs_root: Path, notes: dict[str, str]) -> Settings:
    """Settings over a two-document corpus and a folder of a maintainer's own notes."""
    folder = tmp_path / "my-notes"
    folder.mkdir()
    for name, text in notes.items():
        (folder / name).write_text(text, encoding="utf-8")
    return docs_settings_for(
        tmp_path / "home", _small_corpus(tmp_path / "corpus", docs_root), notes_dir=folder
    )


def _note(title: str, answer: str) -> str:
    return f"# {title}\n\n{answer}\n\nSource: https://github.com/example/project/issues/77\n"


def _ingested(tmp_path: Path, docs_root: Path, notes: dict[str, str]) -> Answerer:
    """An engine over the small corpus and these notes, ingested."""
    settings = _with_notes(tmp_path, docs_root, notes)
    ingest(settings, progress=False)
    return get_answerer(settings)


def test_a_maintainers_note_is_ingested_and_cited_with_its_thread(tmp_path: Path, docs_root: Path) -> None:
    settings = _with_notes(tmp_path, docs_root, {"frobnicate.md": NOTE})
    summary = ingest(settings, progress=False)
    assert summary.documents == 2 + len(note_files(settings.notes_dir))  # the table, the guide, the notes
    db = open_docs_db(settings.database)
    stored = db.execute(
        "SELECT url, title FROM docs_documents WHERE path = 'notes/local/frobnicate.md'"
    ).fetchone()
    assert stored == (
        "https://github.com/example/project/issues/4242",
        "Running on a board the support list does not name",
    )
    answer = get_answerer(settings).ask("my board is not on the support list, how can I run on it anyway?")
    assert "FROBNICATE_GFX_LEVEL=7.1.0" in answer.answer
    assert "notes/local/frobnicate.md" in paths(answer)
    cited = next(s for s in answer.sources if s["path"] == "notes/local/frobnicate.md")
    assert cited["url"] == "https://github.com/example/project/issues/4242"


def test_a_bad_note_stops_the_ingest_and_loses_nothing(tmp_path: Path, docs_root: Path) -> None:
    settings = _with_notes(tmp_path, docs_root, {"frobnicate.md": NOTE})
    notes = settings.notes_dir
    first = ingest(settings, progress=False)
    (notes / "frobnicate.md").write_text(NOTE.replace("FROBNICATE", "FROB"), encoding="utf-8")
    (notes / "unsourced.md").write_text("# Unsourced\n\nTrust me.\n", encoding="utf-8")
    with pytest.raises(HipbotError, match="unsourced.md needs a 'Source"):
        ingest(settings, progress=False)
    db = open_docs_db(settings.database)
    count = db.execute("SELECT count(*) FROM docs_documents").fetchone()[0]
    text = db.execute(
        "SELECT group_concat(c.text) FROM docs_chunks c JOIN docs_documents d ON d.id = c.document_id"
        " WHERE d.path = 'notes/local/frobnicate.md'"
    ).fetchone()[0]
    assert count == first.documents and "FROBNICATE_GFX_LEVEL" in text


def test_one_porting_note_among_the_passages_the_rest_are_the_docs(tmp_path: Path, docs_root: Path) -> None:
    notes = {f"frobnicate-{n}.md": NOTE.replace("7.1.0", f"7.{n}.0") for n in range(3)}
    engine = _ingested(tmp_path, docs_root, notes)
    passages = engine.retriever.search("how do I run on a board the support list does not name?", k=8)
    noted = [p.path for p in passages if p.path.startswith("notes/")]
    assert len(noted) == 1 and noted[0].startswith("notes/local/frobnicate-"), noted


def test_a_note_naming_an_api_in_passing_is_not_its_see_also(tmp_path: Path, docs_root: Path) -> None:
    title = "Sharing buffers between processes"
    offset = (
        "A handle of a buffer from a larger `hipMalloc` block points at its start: send the offset along."
    )
    engine = _ingested(tmp_path, docs_root, {"ipc.md": _note(title, offset)})
    answer = engine.ask("What do I replace cudaMalloc with?")
    assert "`hipMalloc`" in answer.answer and "offset" not in answer.answer
    assert "notes/local/ipc.md" not in paths(answer)


def test_the_best_note_within_reach_joins_the_docs_passages(tmp_path: Path, docs_root: Path) -> None:
    # the docs' passage ranks first; the note on the same question ranks below it yet is offered
    order = _note(
        "Do kernels on one stream run in order on AMD GPUs?",
        "Yes: kernels and copies queued on one `hipStream_t` run in the order they were queued, as in "
        "CUDA; use several streams to overlap them.",
    )
    engine = _ingested(tmp_path, docs_root, {"stream-order.md": order})
    passages = engine.retriever.search("Ordering: in what order does work queued on one stream run?", k=1)
    assert [p.path for p in passages] == ["HIP/docs/how-to/streams.md", "notes/local/stream-order.md"]


def test_the_note_holding_more_of_the_question_is_chosen_among_close_ones(
    tmp_path: Path, docs_root: Path
) -> None:
    scripts = _note(
        "Converting a whole project with the hipify scripts",
        "Run `hipconvertinplace-perl.sh DIR` on the project: it hipifies every source file in place.",
    )
    policy = _note(
        "How to migrate Thrust algorithms that run on a stream",
        "With rocThrust, code that passes `thrust::cuda::par.on(stream)` uses `thrust::hip::par.on(stream)`.",
    )
    engine = _ingested(tmp_path, docs_root, {"scripts.md": scripts, "policy.md": policy})
    db = open_docs_db(engine.settings.database)
    ids = dict(
        db.execute("SELECT d.path, c.id FROM docs_chunks c JOIN docs_documents d ON d.id = c.document_id")
    )
    first, other = ids["notes/local/scripts.md"], ids["notes/local/policy.md"]
    question = (
        "I ran hipconvertinplace-perl.sh on code with Thrust algorithms on a stream. How do I migrate them?"
    )
    retriever = engine.retriever
    terms = retriever.selective(query_terms(expand_query(question)))
    # fused alike: the note holding the question's Thrust words goes first
    assert retriever.rank_notes([first, other], {first: 0.030, other: 0.030}, terms, []) == [other, first]
    # fused far apart: the words it holds beyond the first's do not make up for it
    assert retriever.rank_notes([first, other], {first: 0.030, other: 0.010}, terms, []) == [first, other]


KERNEL_NOTE = _note(
    "Can I run the frobnicator runtime on my distribution's own kernel instead of the vendor module?",
    "Yes: the frobnicator runtime works with the driver in the stock Linux kernel from kernel 4.18 on.\n"
    "- The vendor module still gets new frobnicator features first, and it is tested against the LTS "
    "kernels of each distribution.\n"
    "- Install the runtime without the vendor module with `frobctl install --no-module`.",
)


def test_a_note_titled_with_the_question_asked_answers_with_its_first_paragraph(
    tmp_path: Path, docs_root: Path
) -> None:
    engine = _ingested(tmp_path, docs_root, {"kernel.md": KERNEL_NOTE})
    asked = (
        "Can I use the frobnicator runtime with the kernel my distribution ships instead of the vendor "
        "module, e.g. on openSUSE Tumbleweed?"
    )
    passages = engine.retriever.search(asked, k=5)
    (note,) = [p for p in passages if p.path == "notes/local/kernel.md"]
    assert engine.retriever.answering_notes(passages, asked) == {note.chunk_id}
    # the install bullet holds more of the question's words; the first paragraph answers its title
    answer = engine.ask(asked).answer
    assert answer.index("Yes: the frobnicator runtime works") < answer.index("Install the runtime without")
    other = "Which frobctl command installs the vendor module?"
    assert not engine.retriever.answering_notes(engine.retriever.search(other, k=5), other)
