"""Composition: a name the question asks about is quoted when the passages have it (made-up docs)."""

from __future__ import annotations

from hipbot.agents.docs.compose import compose
from hipbot.agents.docs.retrieval import Passage

POOL = """The stream-ordered allocator keeps freed memory in a pool for later allocations.
The pool grows with each allocation and releases memory to the driver only at synchronization.
Allocations from the pool are faster than fresh allocations from the driver.
A pool belongs to one device and serves every stream of that device.

```shell
# on a machine shared with other jobs
export GPU_POOL_TRIM=1
./train --epochs 4
```
"""

LOG = """The stream-ordered allocator keeps freed memory in a pool for later allocations.
The pool grows with each allocation and releases memory to the driver only at synchronization.

```console
$ GPU_POOL_TRIM=1 ./train
[pool] trim: released 512 MiB
```
"""


def passage(text: str) -> Passage:
    path = "docs/allocator.rst"
    return Passage(
        1, path, "Allocator", "Memory pools", f"https://example.org/{path}", text, "prose", (), 1.0
    )


QUESTION = "Does the allocator need GPU_POOL_TRIM to give pool memory back?"
TERMS = [("gpu_pool_trim", 1.5), ("allocator", 1.0), ("pool", 1.0), ("memory", 0.5)]


def test_a_name_the_question_asks_about_is_quoted_from_its_line_in_a_code_block() -> None:
    out = compose(QUESTION, [passage(POOL)], TERMS, {})
    assert "`export GPU_POOL_TRIM=1` [1]" in out.text
    assert "./train" not in out.text and "# on a machine" not in out.text
    assert len(out.text) <= 600


def test_console_output_naming_it_is_not_quoted_nor_a_name_the_answer_already_has() -> None:
    out = compose(QUESTION, [passage(LOG)], TERMS, {})
    assert "GPU_POOL_TRIM" not in out.text and "[pool]" not in out.text
    said = "`GPU_POOL_TRIM` (environment variable): returns pooled memory to the driver."
    out = compose(QUESTION, [passage(POOL)], TERMS, {}, [said])
    assert out.text.count("GPU_POOL_TRIM") == 1


SNIPPET = """The frobnicator runs on any accelerator of the cluster.
import frob print("Is the accelerator visible to the frobnicator? ", frob.is_visible()) print("How many accelerators does the frobnicator see? ", frob.count())
A frobnicator built for another target does not see the accelerator.
Rebuild the frobnicator for the target of your accelerator.
"""


def test_a_fragment_of_code_run_into_prose_ranks_below_the_prose() -> None:
    """A code example flattened into prose splits into "sentences" that start inside a call
    (`", frob.is_visible()) print(...`): they score as code does, below the prose."""
    out = compose(
        "Why is the accelerator not visible to the frobnicator?",
        [passage(SNIPPET)],
        [("accelerator", 1.0), ("visible", 1.0), ("frobnicator", 1.0)],
        {},
    )
    bullets = [line for line in out.text.splitlines() if line.startswith("- ")]
    assert bullets[0].startswith("- Rebuild the frobnicator")


ARCH = """The device properties hold the architecture of each GPU.
Read the gcnArchName field of the device properties to get the architecture name at run time.
The name carries the target features after the architecture, separated by colons.
Compare the architecture name before choosing a kernel built for that target.
Virtual functions are not supported between objects built for gfx906 and gfx1030.
"""


def test_a_product_or_target_the_question_names_does_not_displace_the_answer() -> None:
    question = "How can I get the architecture name, such as gfx1030, at run time?"
    terms = [("gfx1030", 1.5), ("architecture", 1.0), ("name", 1.0), ("run", 0.5), ("time", 0.5)]
    out = compose(question, [passage(ARCH)], terms, {}, budget=330)
    assert "gcnArchName" in out.text and "Virtual functions" not in out.text, out.text
