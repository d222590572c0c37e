"""The page's shared pieces: its state on the app, sign-in checks, CSRF checks, and rendering
with the security headers every page carries (no caching, no framing, scripts and styles only
from the coordinator itself)."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import jinja2
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from hipbot import __version__
from hipbot.db import open_db
from hipbot.errors import Unauthorized
from hipbot.jobs.finetune.api.state import Coordinator
from hipbot.jobs.finetune.web import store
from hipbot.jobs.finetune.web.metrics import Meter
from hipbot.jobs.serve.registry import Registry

HERE = Path(__file__).parent
SESSION_COOKIE = "hipbot_session"
LOGIN_COOKIE = "hipbot_login"
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
}
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, auto_reload=False
)
TEMPLATES.globals["static"] = lambda name: f"/ui/static/{name}?v={__version__}"


@dataclass
class PageState:
    """The page's view of the coordinator, plus the adapter registry on its own connection
    (publishing talks to vLLM servers and must not hold the queue's lock meanwhile)."""

    service: Coordinator
    meter: Meter
    registry_lock: threading.Lock = field(default_factory=threading.Lock)
    _registry: Registry | None = None
    streams: int = 0

    @property
    def db(self) -> Any:
        return self.service.queue.db

    @property
    def admin_token(self) -> str | None:
        return self.service.config.client_token

    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry(open_db(self.service.config.database))
        return self._registry

    def session_of(self, request: Request) -> store.Session | None:
        sid = request.cookies.get(SESSION_COOKIE, "")
        return self.service.locked(store.session, self.db, sid, self.admin_token) if sid else None


def page_state(request: Request) -> PageState:
    return request.app.state.page


Page = Annotated[PageState, Depends(page_state)]


def signed_in(request: Request, page: Page) -> store.Session:
    """The browser's session; without one a page redirects to the sign-in form."""
    current = page.session_of(request)
    if current is None:
        raise HTTPException(status_code=303, headers={"Location": "/ui/login"})
    return current


def signed_in_stream(request: Request, page: Page) -> store.Session:
    """The same for calls a script makes (the live stream): a plain 401."""
    current = page.session_of(request)
    if current is None:
        raise Unauthorized("sign in at /ui/login first")
    return current


Viewer = Annotated[store.Session, Depends(signed_in)]
StreamViewer = Annotated[store.Session, Depends(signed_in_stream)]


def csrf_ok(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode("latin-1", "replace"))


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = TEMPLATES.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)


def refuse(session: store.Session | None, status_code: int, message: str) -> HTMLResponse:
    return render("error.html", status_code, session=session, status=status_code, message=message)
