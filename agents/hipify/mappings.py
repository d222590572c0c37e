"""CUDA -> HIP (and roc*/MIOpen) API mappings, parsed from HIPIFY's ``docs/tables/*.md``.

The tables are the source of truth; ``generate()`` turns them into the compact data file shipped
in ``agents/data/`` so translation and lookups work offline, and ``load()`` reads it back.

The public surface, shared by the translator (``renames``), the docs store and ingest, and the CLI:
``ApiMapping`` (one row) and its ``COLUMNS``, ``load()`` (the bundled table) and ``lookup(name)``
(the rows of a CUDA, HIP or roc*/MIOpen name), ``parse_tables()`` (rows from a docs checkout), and
``generate`` / ``download`` / ``write_data_file`` / ``read_data_file`` for the data file.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path

from hipbot.errors import HipbotError
from hipbot.i18n import N_

__all__ = [
    "COLUMNS",
    "DATA_FILE",
    "ApiMapping",
    "MappingTable",
    "download",
    "generate",
    "load",
    "lookup",
    "parse_table_file",
    "parse_tables",
    "read_data_file",
    "write_data_file",
]

DATA_FILE = Path(__file__).parent / "data" / "cuda2hip.json.gz"
UPSTREAM_REPO = "ROCm/HIPIFY"
TABLES_SUBDIR = "docs/tables"

_VERSION_KEYS = ("added", "deprecated", "changed", "removed")


@dataclass(frozen=True)
class ApiMapping:
    """One row of a HIPIFY table: a CUDA name and what HIP / roc* / MIOpen offer for it."""

    cuda: str
    hip: str | None
    library: str  # e.g. "CUDA_Runtime_API_functions", "CUBLAS_API", "CUDNN_API"
    section: str  # heading the row sits under, e.g. "1. Device Management"
    table: str  # path of the HIP table relative to the corpus root
    cuda_added: str | None = None
    cuda_deprecated: str | None = None
    cuda_changed: str | None = None
    cuda_removed: str | None = None
    hip_added: str | None = None
    hip_deprecated: str | None = None
    hip_changed: str | None = None
    hip_removed: str | None = None
    hip_experimental: str | None = None
    roc: str | None = None  # rocBLAS / rocSPARSE / rocRAND / rocSOLVER name, or MIOpen's for cuDNN
    roc_kind: str | None = None  # "ROC" or "MIOPEN"
    roc_added: str | None = None
    roc_deprecated: str | None = None
    roc_changed: str | None = None
    roc_removed: str | None = None
    roc_experimental: str | None = None

    @property
    def supported(self) -> bool:
        return self.hip is not None

    @property
    def status(self) -> str:
        """'unsupported', 'removed', 'experimental', 'deprecated' or 'supported' (of the HIP side)."""
        if self.hip is None:
            return "unsupported"
        if self.hip_removed:
            return "removed"
        if self.hip_experimental:
            return "experimental"
        if self.hip_deprecated:
            return "deprecated"
        return "supported"


COLUMNS = tuple(f.name for f in fields(ApiMapping))

_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
_CODE = re.compile(r"^`(.+)`$")


def _cell_name(cell: str) -> str | None:
    cell = cell.strip()
    if not cell:
        return None
    match = _CODE.match(cell)
    return match.group(1).strip() if match else cell


def _cell_version(cell: str) -> str | None:
    cell = cell.strip()
    return cell or None


def _heading_text(raw: str) -> str:
    return raw.replace("**", "").replace("\\", "").strip()


def library_of(table_name: str) -> str:
    """``CUBLAS_API_supported_by_HIP_and_ROC.md`` -> ``CUBLAS_API``."""
    return re.sub(r"_supported_by_.*$", "", Path(table_name).stem)


def parse_table_file(path: Path, corpus_root: Path | None = None) -> list[ApiMapping]:
    """Parse one table file. Column groups are read from the header row, so HIP-only, HIP+ROC,
    HIP+MIOpen and ROC-only layouts all parse; the caller merges ROC-only files."""
    text = path.read_text(encoding="utf-8")
    rel = str(path.relative_to(corpus_root)) if corpus_root else path.name
    library = library_of(path.name)
    section = ""
    groups: list[tuple[str, int]] = []  # (kind, first column index)
    rows: list[ApiMapping] = []
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = _heading_text(heading.group(1))
            continue
        if not line.startswith("|"):
            continue
        cells = line.strip().strip("|").split("|")
        if cells and cells[0].strip() == "**CUDA**":
            groups = [
                (cell.strip().strip("*"), i)
                for i, cell in enumerate(cells)
                if cell.strip().strip("*") in ("CUDA", "HIP", "ROC", "MIOPEN")
            ]
            continue
        if not groups or not cells[0].strip().startswith("`"):
            continue
        values: dict[str, str | None] = {}
        for kind, start in groups:
            name = _cell_name(cells[start]) if start < len(cells) else None
            versions = [
                _cell_version(cells[start + 1 + j]) if start + 1 + j < len(cells) else None
                for j in range(5 if kind != "CUDA" else 4)
            ]
            prefix = {"CUDA": "cuda", "HIP": "hip", "ROC": "roc", "MIOPEN": "roc"}[kind]
            values[prefix] = name
            for key, version in zip((*_VERSION_KEYS, "experimental"), versions, strict=False):
                values[f"{prefix}_{key}"] = version
            if kind in ("ROC", "MIOPEN"):
                values["roc_kind"] = kind
        cuda = values.pop("cuda")
        if not cuda:
            continue
        values.pop("cuda_experimental", None)
        rows.append(
            ApiMapping(
                cuda=cuda,
                hip=values.pop("hip", None),
                library=library,
                section=section,
                table=rel,
                **{k: v for k, v in values.items() if k in COLUMNS},
            )
        )
    return rows


def parse_tables(tables_dir: Path, corpus_root: Path | None = None) -> list[ApiMapping]:
    """All rows of a ``docs/tables`` folder, one per (library, CUDA name, section).

    For libraries with a ``*_and_ROC`` / ``*_and_MIOPEN`` table that file is used (it holds the
    HIP columns too); the row's ``table`` still names the plain ``*_supported_by_HIP.md`` file,
    which is the page users read.
    """
    tables_dir = Path(tables_dir)
    if not tables_dir.is_dir():
        raise HipbotError(
            N_("no mapping tables at {tables_dir}", tables_dir=tables_dir),
            hint=N_("pass the HIPIFY docs/tables folder"),
        )
    files = sorted(tables_dir.glob("*.md"))
    combined = {library_of(f.name) for f in files if re.search(r"_and_(ROC|MIOPEN)\.md$", f.name)}
    out: list[ApiMapping] = []
    for f in files:
        lib = library_of(f.name)
        is_combined = bool(re.search(r"_and_(ROC|MIOPEN)\.md$", f.name))
        is_hip_only = f.name.endswith("_supported_by_HIP.md")
        if (lib in combined and not is_combined) or not (is_combined or is_hip_only):
            continue
        rows = parse_table_file(f, corpus_root)
        if is_combined:
            hip_page = f.with_name(re.sub(r"_and_(ROC|MIOPEN)\.md$", ".md", f.name))
            rel = str(hip_page.relative_to(corpus_root)) if corpus_root else hip_page.name
            rows = [ApiMapping(**{**asdict(r), "table": rel}) for r in rows]
        out.extend(rows)
    if not out:
        raise HipbotError(N_("no mapping rows found in {tables_dir}", tables_dir=tables_dir))
    return out


def generate(docs_root: Path, commit: str | None = None, ref: str | None = None) -> dict:
    """Build the shipped data structure from a corpus root holding ``HIPIFY/docs/tables``
    (or from a HIPIFY checkout root, or from the tables folder itself)."""
    docs_root = Path(docs_root)
    candidates = (
        (docs_root / "HIPIFY" / TABLES_SUBDIR, docs_root),
        (docs_root / TABLES_SUBDIR, docs_root.parent),
        (docs_root, docs_root.parent.parent.parent),
    )
    found = next(((t, r) for t, r in candidates if t.is_dir() and any(t.glob("*.md"))), None)
    if found is None:
        raise HipbotError(
            N_("no HIPIFY mapping tables under {docs_root}", docs_root=docs_root),
            hint=N_("expected HIPIFY/docs/tables/*.md (the corpus root) or docs/tables/*.md"),
        )
    tables, root = found
    rows = parse_tables(tables, root)
    license_file = next((p for p in (tables.parent.parent / "LICENSE.txt",) if p.is_file()), None)
    meta = {
        "source": f"https://github.com/{UPSTREAM_REPO}",
        "commit": commit or _manifest_commit(root),
        "ref": ref,
        "license": "MIT",
        "license_text": license_file.read_text(encoding="utf-8") if license_file else None,
        "rows": len(rows),
    }
    return {"meta": meta, "columns": list(COLUMNS), "rows": [[getattr(r, c) for c in COLUMNS] for r in rows]}


def _manifest_commit(root: Path) -> str | None:
    manifest = root / "MANIFEST.md"
    if manifest.is_file():
        for line in manifest.read_text(encoding="utf-8").splitlines():
            if line.startswith("| HIPIFY/"):
                parts = [p.strip() for p in line.strip("|").split("|")]
                if len(parts) >= 3:
                    return parts[2]
    return None


def write_data_file(data: dict, path: Path = DATA_FILE) -> Path:
    """Deterministic gzip (no timestamp) so a regenerated file is byte-identical."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")
    path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    return path


def read_data_file(path: Path = DATA_FILE) -> dict:
    try:
        return json.loads(gzip.decompress(Path(path).read_bytes()))
    except FileNotFoundError as exc:
        raise HipbotError(
            N_("mapping data file missing: {path}", path=path),
            hint=N_("run: hipbot mappings update --docs PATH"),
        ) from exc


class MappingTable:
    """Rows indexed by CUDA name (several rows can share one name across libraries) and by HIP name."""

    def __init__(self, rows: list[ApiMapping], meta: dict | None = None) -> None:
        self.rows = rows
        self.meta = meta or {}
        self.by_cuda: dict[str, list[ApiMapping]] = {}
        self.by_hip: dict[str, list[ApiMapping]] = {}
        self.by_roc: dict[str, list[ApiMapping]] = {}
        for row in rows:
            self.by_cuda.setdefault(row.cuda, []).append(row)
            if row.hip:
                self.by_hip.setdefault(row.hip, []).append(row)
            if row.roc:
                self.by_roc.setdefault(row.roc, []).append(row)

    def get(self, cuda_name: str) -> ApiMapping | None:
        """The first row for a CUDA name (a supported one is preferred)."""
        rows = self.by_cuda.get(cuda_name)
        if not rows:
            return None
        return next((r for r in rows if r.hip), rows[0])

    def lookup(self, name: str) -> list[ApiMapping]:
        """The rows of a CUDA name, else of a HIP name, else of a roc*/MIOpen name."""
        return self.by_cuda.get(name) or self.by_hip.get(name) or self.by_roc.get(name) or []

    def __contains__(self, cuda_name: str) -> bool:
        return cuda_name in self.by_cuda

    def __len__(self) -> int:
        return len(self.rows)


def table_from_data(data: dict) -> MappingTable:
    cols = data["columns"]
    rows = [ApiMapping(**dict(zip(cols, values, strict=True))) for values in data["rows"]]
    return MappingTable(rows, data.get("meta"))


@cache
def load(path: Path = DATA_FILE) -> MappingTable:
    """The bundled mappings (cached: the table is immutable once loaded)."""
    return table_from_data(read_data_file(path))


def lookup(name: str) -> list[ApiMapping]:
    """The bundled rows of a CUDA, HIP or roc*/MIOpen name (empty when no table lists it)."""
    return load().lookup(name)


RAW_BASE_URL = "https://raw.githubusercontent.com"
API_BASE_URL = "https://api.github.com"
# The tables a HIPIFY release ships (newer refs may add more: they are found through the API listing).
KNOWN_TABLES = (
    "CUBLAS_API_supported_by_HIP.md",
    "CUBLAS_API_supported_by_HIP_and_ROC.md",
    "CUBLAS_API_supported_by_ROC.md",
    "CUB_API_supported_by_HIP.md",
    "CUDA_Device_API_supported_by_HIP.md",
    "CUDA_Driver_API_functions_supported_by_HIP.md",
    "CUDA_RTC_API_supported_by_HIP.md",
    "CUDA_Runtime_API_functions_supported_by_HIP.md",
    "CUDNN_API_supported_by_HIP.md",
    "CUDNN_API_supported_by_HIP_and_MIOPEN.md",
    "CUDNN_API_supported_by_MIOPEN.md",
    "CUFFT_API_supported_by_HIP.md",
    "CURAND_API_supported_by_HIP.md",
    "CURAND_API_supported_by_HIP_and_ROC.md",
    "CURAND_API_supported_by_ROC.md",
    "CUSOLVER_API_supported_by_HIP.md",
    "CUSOLVER_API_supported_by_HIP_and_ROC.md",
    "CUSOLVER_API_supported_by_ROC.md",
    "CUSPARSE_API_supported_by_HIP.md",
    "CUSPARSE_API_supported_by_HIP_and_ROC.md",
    "CUSPARSE_API_supported_by_ROC.md",
    "cuComplex_API_supported_by_HIP.md",
)


def download(
    ref: str,
    *,
    raw_base: str = RAW_BASE_URL,
    api_base: str = API_BASE_URL,
    timeout: float = 30.0,
) -> dict:
    """Fetch ``docs/tables/*.md`` and the license of ``ROCm/HIPIFY`` at ``ref`` and ``generate()``
    from them. Network problems become a HipbotError that says what failed."""
    import tempfile

    import httpx

    if not re.fullmatch(r"[A-Za-z0-9._/-]{1,100}", ref) or ".." in ref:
        raise HipbotError(N_("not a git ref: {ref!r}", ref=ref), hint=N_("e.g. --ref rocm-6.3.0"))
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            names = list(KNOWN_TABLES)
            commit = None
            try:
                listing = client.get(
                    f"{api_base}/repos/{UPSTREAM_REPO}/contents/{TABLES_SUBDIR}", params={"ref": ref}
                )
                if listing.status_code == 200:
                    names = sorted({item["name"] for item in listing.json() if item["name"].endswith(".md")})
                sha = client.get(
                    f"{api_base}/repos/{UPSTREAM_REPO}/commits/{ref}",
                    headers={"Accept": "application/vnd.github.sha"},
                )
                if sha.status_code == 200 and re.fullmatch(r"[0-9a-f]{40}", sha.text.strip()):
                    commit = sha.text.strip()
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass  # the listing and commit are optional; the raw files are not
            with tempfile.TemporaryDirectory(prefix="hipify-tables-") as tmp:
                root = Path(tmp)
                tables = root / "HIPIFY" / TABLES_SUBDIR
                tables.mkdir(parents=True)
                fetched = 0
                for name in names:
                    resp = client.get(f"{raw_base}/{UPSTREAM_REPO}/{ref}/{TABLES_SUBDIR}/{name}")
                    if resp.status_code == 404:
                        continue
                    resp.raise_for_status()
                    (tables / name).write_text(resp.text, encoding="utf-8")
                    fetched += 1
                if fetched == 0:
                    raise HipbotError(
                        N_("no mapping tables found for ref {ref!r} in {repo}", ref=ref, repo=UPSTREAM_REPO),
                        hint=N_("check the ref name, e.g. rocm-6.3.0"),
                    )
                lic = client.get(f"{raw_base}/{UPSTREAM_REPO}/{ref}/LICENSE.txt")
                if lic.status_code == 200:
                    (root / "HIPIFY" / "LICENSE.txt").write_text(lic.text, encoding="utf-8")
                return generate(root, commit=commit, ref=ref)
    except httpx.HTTPError as exc:
        raise HipbotError(
            N_("cannot download the HIPIFY tables for {ref!r}: {error}", ref=ref, error=exc),
            hint=N_("check the network, or use --docs PATH with a local HIPIFY checkout"),
        ) from exc
