"""Signing in and out, and the admin's actions: cancel a job, revoke a worker, mint a worker
registration token, publish or unpublish an adapter. Every form carries the session's CSRF
token (the sign-in form a token of its own, also in a cookie); every action is written to the
coordinator's audit log; a viewer's session gets 403."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hipbot.db import open_db
from hipbot.errors import HipbotError
from hipbot.i18n import N_
from hipbot.jobs.finetune.api.state import JobId
from hipbot.jobs.finetune.web import store
from hipbot.jobs.finetune.web.page import (
    HEADERS,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Page,
    PageState,
    csrf_ok,
    refuse,
    render,
)
from hipbot.jobs.serve import publish as publishing
from hipbot.jobs.serve.registry import Registry

router = APIRouter(include_in_schema=False)
Csrf = Annotated[str, Form(alias="csrf", max_length=200)]


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int | None) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.get("/ui/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    response = render("login.html", csrf=nonce)
    _cookie(response, request, LOGIN_COOKIE, nonce, 3600)
    return response


@router.post("/ui/login", response_class=HTMLResponse)
def login(
    request: Request, page: Page, csrf: Csrf, token: Annotated[str, Form(max_length=500)] = ""
) -> Response:
    if not csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), csrf):
        return refuse(None, 403, "the sign-in form expired; open /ui/login again")
    sid = page.service.locked(store.open_session, page.db, token.strip(), page.admin_token)
    if sid is None:
        nonce = secrets.token_urlsafe(24)
        response = render("login.html", 401, csrf=nonce, error="unknown or revoked token")
        _cookie(response, request, LOGIN_COOKIE, nonce, 3600)
        return response
    response = RedirectResponse("/ui", status_code=303, headers=HEADERS)
    _cookie(response, request, SESSION_COOKIE, sid, int(store.SESSION_S))
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


@router.post("/ui/logout")
def logout(request: Request, page: Page, csrf: Csrf) -> Response:
    session = page.session_of(request)
    if session is not None and csrf_ok(session.csrf, csrf):
        page.service.locked(store.close_session, page.db, request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def _act(
    request: Request,
    page: PageState,
    csrf: str,
    action: str,
    target: str,
    do: Callable[[store.Session], Response],
) -> Response:
    """Run an admin action for this browser: signed in, the form's CSRF token, the admin role;
    then audited. Returns what ``do`` returned, or the refusal page."""
    session = page.session_of(request)
    if session is None:
        return RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
    if not csrf_ok(session.csrf, csrf):
        return refuse(session, 403, "the form's CSRF token is missing or wrong; reload the page")
    if not session.admin:
        return refuse(session, 403, f"{session.name} signed in read-only: only an admin can {action}")
    try:
        result = do(session)
    except HipbotError as exc:
        page.service.locked(store.audit, page.db, session.actor, action, target, refused=exc.message)
        return refuse(session, exc.http_status, str(exc))
    page.service.locked(store.audit, page.db, session.actor, action, target)
    return result


@router.post("/ui/jobs/{job_id}/cancel")
def cancel(request: Request, page: Page, job_id: JobId, csrf: Csrf) -> Response:
    def do(session: store.Session) -> Response:
        page.service.locked(page.service.queue.cancel, job_id, by=store.OPERATOR)
        line = f"cancelled from the operator page by {session.actor}"
        page.service.locked(page.service.queue.log, job_id, "coordinator", line)
        return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303, headers=HEADERS)

    return _act(request, page, csrf, "cancel job", f"job #{job_id}", do)


@router.post("/ui/workers/{worker_id}/revoke")
def revoke(request: Request, page: Page, worker_id: str, csrf: Csrf) -> Response:
    def do(session: store.Session) -> Response:
        if not page.service.locked(store.revoke_worker, page.db, worker_id):
            raise HipbotError(
                N_("no worker {worker_id} to revoke (unknown or already revoked)", worker_id=worker_id)
            )
        return RedirectResponse("/ui#workers", status_code=303, headers=HEADERS)

    return _act(request, page, csrf, "revoke worker", worker_id, do)


@router.post("/ui/tokens", response_class=HTMLResponse)
def mint(request: Request, page: Page, csrf: Csrf) -> Response:
    """A one-time worker registration token, shown once on the reply page (only its hash is kept)."""

    def do(session: store.Session) -> Response:
        token = page.service.locked(page.service.queue.create_registration_token)
        return render("minted.html", session=session, token=token, url=str(request.base_url).rstrip("/"))

    return _act(request, page, csrf, "mint registration token", "worker registration", do)


def _on_registry(page: PageState, fn: Callable[[Registry], list[publishing.PublishResult]]) -> str:
    """Run a publish call on a registry connection of its own (it waits on vLLM servers)."""
    registry = Registry(open_db(page.service.config.database))
    try:
        results = fn(registry)
    finally:
        registry.db.conn.close()
    return "; ".join(f"{r.server}: {r.action}" + (f" ({r.detail})" if r.detail else "") for r in results)


@router.post("/ui/adapters/{name}/publish")
def publish(request: Request, page: Page, name: str, csrf: Csrf) -> Response:
    def do(session: store.Session) -> Response:
        done = _on_registry(page, lambda reg: publishing.publish(reg, name))
        return render("done.html", session=session, title=f"Published {name}", message=done)

    return _act(request, page, csrf, "publish adapter", name, do)


@router.post("/ui/adapters/{name}/unpublish")
def unpublish(request: Request, page: Page, name: str, csrf: Csrf) -> Response:
    def do(session: store.Session) -> Response:
        done = _on_registry(page, lambda reg: publishing.unpublish(reg, name))
        return render("done.html", session=session, title=f"Unpublished {name}", message=done)

    return _act(request, page, csrf, "unpublish adapter", name, do)
