"""The coordinator probed as a hostile user or worker would (issue 15): identity from tokens,
YAML and archive bombs, poisoned checkpoints, unsafe archive members, inputs that used to end in
HTTP 500, bad progress reports and idle long-polls. Real app, real SQLite, real uploads."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from test_coordinator import DATA, YAML, put, register, submit, tar_bytes
from test_worker import free_port

from hipbot.errors import HipbotError
from hipbot.jobs.finetune.archive import ArchiveLimits
from hipbot.jobs.finetune.coordinator import CoordinatorConfig, create_app
from hipbot.jobs.finetune.intake import accept_job
from hipbot.jobs.finetune.portable import export_checkpoint, import_checkpoint
from hipbot.jobs.finetune.queue import job_line
from hipbot.jobs.finetune.spec import parse_spec

LIMITS = ArchiveLimits(member_bytes=1_000_000, total_bytes=2_000_000, members=50)


def config(tmp_path: Path, **extra) -> CoordinatorConfig:
    values = {
        "database": tmp_path / "db.sqlite",
        "data_dir": tmp_path / "coord",
        "adapters_dir": tmp_path / "adapters",
        "client_token": "client-secret",
        "lease_s": 30,
        "max_artifact_bytes": 200_000,
        "max_attachment_bytes": 10_000,
        "archive_limits": LIMITS,
        **extra,
    }
    return CoordinatorConfig(**values)


@pytest.fixture()
def env(tmp_path: Path):
    app = create_app(config(tmp_path))
    http = TestClient(app, raise_server_exceptions=False)
    http.headers["Authorization"] = "Bearer client-secret"
    return http, app


@pytest.fixture()
def live(tmp_path: Path):
    """The coordinator served by uvicorn on loopback, as in production."""
    import uvicorn

    app = create_app(config(tmp_path, max_wait_s=30))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    thread.join(timeout=30)


def as_user(app, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.state.queue.create_client_token(name)}"}


def member(name: str, data: bytes = b"", **attrs) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def claimed_job(http, app) -> tuple[dict, dict[str, str]]:
    job = submit(http)["job"]
    worker = register(http, app, "uploader")
    assert http.post("/workers/claim", json={}, headers=worker).json()["job"]["id"] == job["id"]
    return job, worker


# ------------------------------------------------------------------ identity (item 4)
def test_identity_comes_from_the_token_not_the_body(env) -> None:
    http, app = env
    alice, bob = as_user(app, "alice"), as_user(app, "bob")
    theirs = http.post("/jobs", data={"config": YAML}, headers=bob).json()["job"]
    assert theirs["owner"] == "bob"  # a user's token submits as that user
    forged = http.post("/jobs", data={"config": YAML, "owner": "bob"}, headers=alice)
    assert forged.status_code == 403 and "belongs to 'alice'" in forged.json()["detail"]
    # cancelling someone else's job: with no body, or naming its owner, from another user's token
    assert http.post(f"/jobs/{theirs['id']}/cancel", headers=alice).status_code == 403
    assert http.post(f"/jobs/{theirs['id']}/cancel", json={"by": "bob"}, headers=alice).status_code == 403
    assert http.get(f"/jobs/{theirs['id']}").json()["state"] == "queued"
    assert http.post(f"/jobs/{theirs['id']}/cancel", headers=bob).json()["state"] == "cancelled"
    # a trusted front end (the bot) vouches for its users: it names the owner and who cancels
    bot = {"Authorization": f"Bearer {app.state.queue.create_client_token('discord', trusted=True)}"}
    job = http.post("/jobs", data={"config": YAML, "owner": "discord:5"}, headers=bot).json()["job"]
    assert job["owner"] == "discord:5"
    assert http.post(f"/jobs/{job['id']}/cancel", json={"by": "discord:6"}, headers=bot).status_code == 403
    assert http.post(f"/jobs/{job['id']}/cancel", json={"by": "discord:5"}, headers=bot).json()[
        "cancel_requested"
    ]
    # the operator's token acts as the operator when it names nobody
    other = http.post("/jobs", data={"config": YAML}, headers=bob).json()["job"]
    assert http.post(f"/jobs/{other['id']}/cancel").json()["state"] == "cancelled"
    assert http.get("/jobs", headers={"Authorization": "Bearer cli-guessed"}).status_code == 401


# ------------------------------------------------------------------ HTTP 500s (item 10, 13)
def test_inputs_that_were_http_500s_are_clear_4xx(env, tmp_path: Path) -> None:
    http, app = env
    for header in ("Bearer clé".encode(), "Bearer ключ".encode(), b"Bearer \xff\xfe"):
        assert http.get("/jobs", headers={"Authorization": header}).status_code == 401
        assert http.post("/workers/claim", json={}, headers={"Authorization": header}).status_code == 401
    token = app.state.queue.create_registration_token()
    bad_gpus = http.post("/workers/register", json={"token": token, "name": "x", "gpus": {"gpus": [{}]}})
    assert bad_gpus.status_code == 422 and "memory_gib" in bad_gpus.text
    job, worker = claimed_job(http, app)
    beat = http.post(f"/jobs/{job['id']}/heartbeat", json={"progress": {"step": {"a": 1}}}, headers=worker)
    assert beat.status_code == 422 and "step" in beat.text
    body = tar_bytes({"trainer_state.json": b"{}"})
    for digest in ("é" * 64, "g" * 64, "0" * 63):
        reply = http.put(
            f"/jobs/{job['id']}/artifacts/checkpoint?step=1",
            content=body,
            headers={**worker, "X-Content-SHA256": digest.encode()},
        )
        assert reply.status_code == 400 and "64 hex digits" in reply.json()["detail"]
    huge = "99999999999999999999999"
    assert http.get(f"/jobs/{huge}").status_code == 404
    assert http.post(f"/jobs/{huge}/cancel").status_code == 404
    assert http.get(f"/jobs/{huge}/logs").status_code == 404
    assert http.post(f"/jobs/{huge}/heartbeat", json={}, headers=worker).status_code == 404
    for query in (f"limit={huge}", "limit=-1"):
        assert http.get(f"/jobs?{query}").status_code == 422
    assert http.get(f"/jobs/{job['id']}/logs?after={huge}").status_code == 422
    attachments = app.state.config.data_dir / "attachments"
    before = sorted(attachments.iterdir())
    for priority in (huge, f"-{huge}"):
        reply = http.post(
            "/jobs", data={"config": YAML, "priority": priority}, files={"dataset": ("mine.json", DATA)}
        )
        assert reply.status_code == 422 and "priority" in reply.text
    assert sorted(attachments.iterdir()) == before  # a refused submit leaves no file behind
    nameless = http.post("/jobs", data={"config": YAML}, files={"dataset": ("", DATA)})
    assert nameless.status_code == 422 and "has no file name" in nameless.json()["detail"]


def test_a_failed_submit_leaves_no_attachment(tmp_path: Path) -> None:
    app = create_app(config(tmp_path))
    folder = tmp_path / "attachments"
    with pytest.raises(OverflowError):  # SQLite cannot store the priority: the job is not queued
        accept_job(
            app.state.queue, parse_spec(YAML), YAML, attachments_dir=folder, dataset=DATA, priority=2**70
        )
    assert not any(folder.iterdir())


def test_concurrent_adapter_uploads_for_one_job(live) -> None:
    url, app = live
    http = httpx.Client(base_url=url, headers={"Authorization": "Bearer client-secret"}, timeout=60)
    job, worker = claimed_job(http, app)
    body = tar_bytes({"adapter_model.safetensors": b"w", "adapter_config.json": b"{}"})
    headers = {**worker, "X-Content-SHA256": hashlib.sha256(body).hexdigest()}
    statuses: list[int] = []

    def upload() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            statuses.append(
                c.put(f"/jobs/{job['id']}/artifacts/adapter", content=body, headers=headers).status_code
            )

    threads = [threading.Thread(target=upload) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 30
    adapter = Path(http.get(f"/jobs/{job['id']}").json()["adapter_dir"])
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert [p.name for p in adapter.parent.iterdir()] == [adapter.name]  # no staging folders left


# ------------------------------------------------------------------ YAML (items 3, 5, 12)
def billion_laughs(levels: int) -> str:
    lines = [
        "model_name_or_path: org/m",
        "dataset: d",
        'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_bombs_are_refused_quickly(env) -> None:
    http, _ = env
    long = "x" * 20_000
    wide = f"model_name_or_path: org/m\ndataset: d\nlora_target: &t {long}\nlr_scheduler_kwargs: {{{', '.join(f'k{i}: *t' for i in range(30))}}}\n"
    cases = {
        billion_laughs(9): "more than 64 aliases",
        wide: "expand it to more than 256 KiB",
        "model_name_or_path: &a [*a]\ndataset: d\n": "contains it",
        "model_name_or_path: m\ndataset: d\n" + "# padding\n" * 7000: "the limit is 64 KiB",
    }
    for text, why in cases.items():
        started = time.monotonic()
        reply = http.post("/validate", data={"config": text})
        assert time.monotonic() - started < 5
        if reply.status_code == 200:
            assert reply.json()["ok"] is False and why in reply.json()["error"], why
        else:  # the form field's own cap
            assert reply.status_code == 422 and len(text.encode()) > 65536
    reply = http.post("/jobs", data={"config": billion_laughs(9)})
    assert reply.status_code == 422 and "aliases" in reply.json()["detail"]
    assert http.get("/jobs").json() == []


def test_numbers_and_deepspeed_paths_in_submitted_configs(env, tmp_path: Path) -> None:
    http, _ = env
    errors = {}
    for extra in (
        "learning_rate: nan",
        "learning_rate: .inf",
        "num_train_epochs: 1e12",
        "adam_epsilon: -.inf",
    ):
        reply = http.post("/validate", data={"config": f"{YAML}{extra}\n"}).json()
        assert reply["ok"] is False
        errors[extra] = reply["error"]
    assert (
        "finite number" in errors["learning_rate: nan"] and "finite number" in errors["learning_rate: .inf"]
    )
    assert "num_train_epochs must be at most 10000" in errors["num_train_epochs: 1e12"]
    # whether a file exists on the coordinator changes nothing in the answer
    real = tmp_path / "ds.json"
    real.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    answers = {
        path: http.post("/validate", data={"config": f"{YAML}deepspeed: {path}\n"})
        .json()["error"]
        .replace(path, "P")
        for path in ("/etc/shadow", "/etc/hostname", "/no/such/file.json", str(real))
    }
    assert (
        len(set(answers.values())) == 1 and "carries its own DeepSpeed JSON inline" in answers["/etc/shadow"]
    )
    inline = http.post(
        "/validate", data={"config": f"{YAML}deepspeed: {{zero_optimization: {{stage: 3}}}}\n"}
    )
    assert inline.json()["ok"] is True
    named = http.post(
        "/validate", data={"config": f"{YAML}deepspeed: examples/deepspeed/ds_z3_offload_config.json\n"}
    )
    assert named.json()["ok"] is True


# ------------------------------------------------------------------ archives (item 6, members)
def test_decompression_bomb_is_refused_while_streaming(env) -> None:
    http, app = env
    job, worker = claimed_job(http, app)
    one_big = tar_of(
        member("adapter_model.safetensors", b"\0" * 50_000_000), member("adapter_config.json", b"{}")
    )
    many = tar_of(*[member(f"part{i}.json", json.dumps([0] * 300_000).encode()) for i in range(40)])
    too_many = tar_of(*[member(f"f{i}.json", b"{}") for i in range(60)])
    assert max(len(one_big), len(many)) < 200_000  # under the upload limit: only unpacking is big
    for body, why in (
        (one_big, "the limit for one file is 1000000"),
        (many, "unpacks to more than 2000000"),
        (too_many, "more than 50 members"),
    ):
        for kind in ("adapter", "checkpoint"):
            reply = put(http, worker, job["id"], kind, body, step=1)
            assert reply.status_code == 400 and why in reply.json()["detail"], (kind, reply.text)
    leftovers = [p for p in app.state.config.adapters_dir.rglob("*")]
    leftovers += list((app.state.config.data_dir / "uploads").iterdir())
    assert leftovers == [] and http.get(f"/jobs/{job['id']}").json()["adapter_dir"] is None


def test_unpacked_size_is_bounded_by_the_upload_size(tmp_path: Path) -> None:
    """The issue's bomb: a small upload that unpacks to a thousand times its size, each member and
    the total within their absolute limits."""
    limits = ArchiveLimits(member_bytes=10**9, total_bytes=10**10, ratio=4.0, ratio_floor=1_000_000)
    app = create_app(config(tmp_path, archive_limits=limits))
    http = TestClient(app, raise_server_exceptions=False)
    http.headers["Authorization"] = "Bearer client-secret"
    job, worker = claimed_job(http, app)
    bomb = tar_of(
        member("adapter_model.safetensors", b"\0" * 5_000_000), member("adapter_config.json", b"{}")
    )
    assert len(bomb) < 10_000
    reply = put(http, worker, job["id"], "adapter", bomb)
    assert reply.status_code == 400 and "unpacks to more than 1000000 bytes" in reply.json()["detail"]
    honest = tar_of(
        member("adapter_model.safetensors", os.urandom(150_000)), member("adapter_config.json", b"{}")
    )
    assert put(http, worker, job["id"], "adapter", honest).status_code == 200


def test_links_devices_and_escaping_members_are_refused(env) -> None:
    http, app = env
    job, worker = claimed_job(http, app)
    adapter = [member("adapter_model.safetensors", b"w"), member("adapter_config.json", b"{}")]
    unsafe = {
        "symlink": member("adapter_config.json.lnk", type=tarfile.SYMTYPE, linkname="/etc/passwd"),
        "hardlink": member("weights", type=tarfile.LNKTYPE, linkname="/etc/shadow"),
        "absolute": member("/tmp/hipbot-evil.json", b"{}"),
        "parent": member("../../evil.json", b"{}"),
        "device": member("dev.json", type=tarfile.CHRTYPE),
        "fifo": member("pipe.json", type=tarfile.FIFOTYPE),
    }
    for what, bad in unsafe.items():
        for kind in ("adapter", "checkpoint"):
            reply = put(http, worker, job["id"], kind, tar_of(bad, *adapter), step=1)
            assert reply.status_code == 400 and "unsafe archive member" in reply.json()["detail"], (
                what,
                kind,
            )
    assert not Path("/tmp/hipbot-evil.json").exists()
    assert list(app.state.config.adapters_dir.glob("*")) == []


# ------------------------------------------------------------------ checkpoints (item 2)
def real_checkpoint(folder: Path) -> Path:
    """A Trainer-style checkpoint of a tiny model after two AdamW steps (pickled states, as HF saves)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        sched.step()
    folder.mkdir(parents=True)
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    torch.save(sched.state_dict(), folder / "scheduler.pt")
    torch.save(
        {"python": (3, tuple(range(625)), None), "cpu": torch.random.get_rng_state()},
        folder / "rng_state.pth",
    )
    torch.save({"anything": 1}, folder / "training_args.bin")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (folder / "README.md").write_text("model card")
    return folder


def pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def test_poisoned_checkpoints_are_refused_and_the_uploader_named(env, tmp_path: Path) -> None:
    http, app = env
    job, worker = claimed_job(http, app)
    worker_id = worker["Authorization"].split()[1].split(":")[0]
    evil_pickle = b"\x80\x04cposix\nsystem\n\x94X\x02\x00\x00\x00id\x94\x85R."
    portable = tmp_path / "portable"
    export_checkpoint(real_checkpoint(tmp_path / "ckpt"), portable)
    good_files = {
        p.relative_to(portable).as_posix(): p.read_bytes() for p in portable.rglob("*") if p.is_file()
    }
    header = json.dumps({"t0": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}).encode()
    poisoned = {
        "optimizer.pt": {**good_files, "optimizer.pt": evil_pickle},
        "a pickle renamed": {**good_files, "rng_state.pth.tensors.safetensors": evil_pickle},
        "untagged object": {
            **good_files,
            "optimizer.pt.state.json": b'{"format": "hipbot-state/1", "value": {"__reduce__": 1}}',
        },
        "short tensor data": {
            **good_files,
            "optimizer.pt.tensors.safetensors": len(header).to_bytes(8, "little") + header + b"\0" * 8,
        },
        "not JSON": {**good_files, "trainer_state.json": b"\x80\x04K\x01."},
    }
    for what, files in poisoned.items():
        reply = put(http, worker, job["id"], "checkpoint", tar_bytes(files), step=4)
        assert reply.status_code == 400 and "checkpoint member" in reply.json()["detail"], what
    assert http.get(f"/jobs/{job['id']}").json()["checkpoint_step"] is None
    audit = [(r["source"], r["line"]) for r in http.get(f"/jobs/{job['id']}/logs").json()]
    refusals = [
        line for source, line in audit if source == worker_id and line.startswith("refused the checkpoint")
    ]
    assert len(refusals) == len(poisoned) and all(worker_id in line for line in refusals)
    # the honest format goes through, and the next worker rebuilds the Trainer's files from it
    assert put(http, worker, job["id"], "checkpoint", tar_bytes(good_files), step=4).json()["step"] == 4
    assert (
        all(n.endswith((".json", ".safetensors")) for n in good_files)
        and "optimizer.pt.state.json" in good_files
    )
    received = tmp_path / "received"
    with tarfile.open(
        fileobj=io.BytesIO(http.get(f"/jobs/{job['id']}/checkpoint", headers=worker).content)
    ) as tar:
        tar.extractall(received, filter="data")
    rebuilt = tmp_path / "rebuilt"
    import_checkpoint(received, rebuilt)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        original = torch.load(tmp_path / "ckpt" / name, weights_only=True)
        assert repr(torch.load(rebuilt / name, weights_only=True)) == repr(original), name
    assert not (rebuilt / "training_args.bin").exists()


# ------------------------------------------------------------------ progress (item 11)
def test_progress_is_checked_and_listing_survives_old_rows(env) -> None:
    http, app = env
    job, worker = claimed_job(http, app)
    for bad in ({"loss": "abc"}, {"step": -3}, {"max_steps": 10**30}):
        reply = http.post(f"/jobs/{job['id']}/heartbeat", json={"progress": bad}, headers=worker)
        assert reply.status_code == 422, bad
    ok = http.post(
        f"/jobs/{job['id']}/heartbeat",
        json={"progress": {"step": 2, "max_steps": 5, "loss": 1.25}},
        headers=worker,
    )
    assert ok.status_code == 200 and http.get(f"/jobs/{job['id']}").json()["progress_loss"] == 1.25
    # a row written before progress was checked: listing and rendering still work
    queue = app.state.queue
    queue.db.execute(
        "UPDATE jobs SET progress_loss = 'abc', progress_step = 'x', progress_total = 2.5, memory_gib = 'big',"
        ' progress_json = \'{"loss": "abc", "eta_seconds": [1], "tokens_per_second": 12.5}\' WHERE id = ?',
        [job["id"]],
    )
    listed = http.get("/jobs")
    assert listed.status_code == 200
    row = listed.json()[0]
    assert row["progress_loss"] is None and row["progress_step"] is None and row["memory_gib"] is None
    assert row["progress"] == {"tokens_per_second": 12.5}
    assert job_line(queue.get(job["id"]).info()).startswith(f"#{job['id']} ")


# ------------------------------------------------------------------ long-polls (item 7)
def test_idle_long_polls_hold_no_request_threads(live) -> None:
    url, app = live
    http = httpx.Client(base_url=url, headers={"Authorization": "Bearer client-secret"}, timeout=60)
    workers = [register(http, app, f"idle{i}") for i in range(23)]
    returned: list[tuple[float, int]] = []

    def idle_claim(headers: dict[str, str]) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            reply = c.post("/workers/claim", json={"wait_s": 8}, headers=headers)
            returned.append((time.monotonic(), reply.status_code))

    threads = [threading.Thread(target=idle_claim, args=(w,)) for w in workers for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    # a third claim from one worker is refused at once; every other request is served meanwhile
    extra = http.post("/workers/claim", json={"wait_s": 8}, headers=workers[0])
    assert extra.status_code == 429 and "claims waiting" in extra.json()["detail"]
    served = []
    for _ in range(5):
        assert http.get("/jobs").status_code == 200
        assert http.get("/workers").status_code == 200
        served.append(time.monotonic())
    # a job queued now goes to one of the waiting claims without waiting out the long-poll
    queued = time.monotonic()
    job = submit(http)["job"]
    for t in threads:
        t.join()
    assert sorted(code for _, code in returned) == [200] + [204] * 45
    got_job = next(at for at, code in returned if code == 200)
    first_idle_end = min(at for at, code in returned if code == 204)
    assert max(served) < first_idle_end and got_job - queued < 2
    assert http.get(f"/jobs/{job['id']}").json()["state"] == "assigned"
    assert app.state.coordinator.polls.total() == 0


# ------------------------------------------------------------------ databases (item 13)
def damaged_copy(tmp_path: Path) -> Path:
    """A docs database whose table pages were overwritten (the header and schema survive)."""
    from hipbot.agents.docs.store import open_docs_db

    path = tmp_path / "real.db"
    db = open_docs_db(path)
    rows = [(f"doc{i}" + "x" * 300, "t", "u", "s", 1, 1, "now") for i in range(3000)]
    db.conn.executemany(
        "INSERT INTO docs_documents (path, title, url, sha256, bytes, chunks, ingested_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    data = bytearray(path.read_bytes())
    for offset in range(8 * 4096, len(data), 4096):
        data[offset : offset + 4096] = b"\x0d" * 4096
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(bytes(data))
    return damaged


def test_ask_says_what_is_wrong_with_the_database(tmp_path: Path, monkeypatch, capsys) -> None:
    from hipbot.cli import main

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database " * 500)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    cases = {
        damaged_copy(tmp_path): "is damaged (database disk image is malformed)",
        garbage: "is damaged (file is not a database)",
        folder: "is a folder, not a SQLite file",
    }
    for path, message in cases.items():
        monkeypatch.setenv("HIPBOT_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("HIPBOT_DB", str(path))
        assert main(["ask", "what replaces cudaMalloc?"]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and "hint:" in err, err


# ------------------------------------------------------------------ serve publish --path (item 14)
def test_a_refused_publish_registers_nothing(lora_rank8: Path, tmp_path: Path, capsys) -> None:
    from hipbot.cli import main
    from hipbot.config import load_settings
    from hipbot.jobs.serve.registry import Registry, Server

    settings = load_settings()
    assert main(["serve", "publish", "hip-r8", "--path", str(lora_rank8)]) == 1
    assert "no vLLM server is registered" in capsys.readouterr().err
    small = Server(
        name="small",
        url="http://127.0.0.1:9",
        adapter_dir=tmp_path / "vllm-adapters",
        vllm_adapter_dir="/adapters",
        max_lora_rank=4,
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        served_model="smollm2",
    )
    Registry.open(settings).add_server(small)
    assert main(["serve", "publish", "hip-r8", "--path", str(lora_rank8)]) == 1
    assert "rank 8 is above the server's --max-lora-rank 4" in capsys.readouterr().err
    assert Registry.open(settings).list() == [] and list(settings.adapters.glob("*")) == []
    assert main(["serve", "list"]) == 0 and "hip-r8" not in capsys.readouterr().out


def test_finetune_list_survives_a_bad_progress_row(capsys) -> None:
    from hipbot.cli import main
    from hipbot.config import load_settings
    from hipbot.jobs.finetune.queue import JobQueue

    queue = JobQueue.open(load_settings().database)
    job = queue.submit(parse_spec(YAML), YAML, owner="ana")
    queue.db.execute(
        "UPDATE jobs SET progress_step = 3, progress_total = 'abc', progress_loss = 'abc',"
        ' progress_json = \'{"loss": "abc"}\' WHERE id = ?',
        [job.id],
    )
    assert main(["finetune", "list", "--all"]) == 0
    assert capsys.readouterr().out.startswith(f"#{job.id} {job.name} [queued]")


# ------------------------------------------------------------------ the console (item 9)
def test_one_bad_console_line_is_an_error_not_an_exit(tmp_path: Path) -> None:
    from hipbot.bot.console import Console
    from hipbot.bot.state import BotState
    from hipbot.config import load_settings

    settings = load_settings(env={}, home=tmp_path / "home")
    lines = iter(
        [
            "/job 99999999999999999999999",
            "/config max_daily_per_user=abc",
            "/config max_daily_per_user=5000",
            "/hipify 'unterminated",
            "/finetune model=x lora_rank=abc",
            "/finetune model=x epochs=nan",
            "/help",
        ]
    )
    out: list[str] = []

    def read(prompt: str) -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    Console(settings=settings, state=BotState.open(settings.database), read=read, write=out.append).loop()
    errors = [line for line in out if line.startswith("error:")]
    assert errors == [
        "error: no job #99999999999999999999999",
        "error: max_daily_per_user must be a whole number, got 'abc'",
        "error: max_daily_per_user must be between 0 and 1000, got 5000",
        "error: cannot read the line: No closing quotation\nhint: close the quote, or escape it with a backslash",
        "error: lora_rank must be a whole number, got 'abc'",
        "error: epochs must be between 0.01 and 100, got nan",
    ]
    assert any("/hipify" in line for line in out[-3:])  # the session went on to /help


def test_a_local_deepspeed_file_travels_inside_the_submitted_config(tmp_path: Path) -> None:
    from hipbot.jobs.finetune.spec import attach_deepspeed, load_job

    (tmp_path / "ds.json").write_text(
        json.dumps({"zero_optimization": {"stage": 3}, "train_batch_size": "auto"})
    )
    job = tmp_path / "job.yaml"
    job.write_text("# my run\nmodel_name_or_path: org/m\ndataset: d\ndeepspeed: ds.json\n")
    loaded = load_job(job)
    with pytest.raises(HipbotError, match="carries its own DeepSpeed JSON inline"):
        parse_spec(loaded.text)  # the file's own text names a path: refused on other machines
    sent = attach_deepspeed(loaded)
    spec = parse_spec(sent)  # as the coordinator and the worker read it: no file involved
    assert (
        spec.deepspeed == {"zero_optimization": {"stage": 3}, "train_batch_size": "auto"}
        and spec.zero_stage == 3
    )
    preset = tmp_path / "preset.yaml"
    preset.write_text("model_name_or_path: org/m\ndataset: d\ndeepspeed: z3\n")
    assert attach_deepspeed(load_job(preset)) == preset.read_text()
