"""The operator's page, served by the coordinator at ``/ui``, and its ``/metrics``.

Server-rendered (Jinja2) pages over the coordinator's own database: the queue, the workers, one
job with its live loss curve (server-sent events carry the progress workers report) and the
adapters with the vLLM servers they are live on. Admins cancel jobs, revoke workers, mint
registration tokens and publish adapters from it; viewers only read. Sign-in is a page token
(``hipbot finetune token --page NAME [--admin]``) or the coordinator token; the session is an
HttpOnly SameSite=Strict cookie and every form carries a CSRF token. The chart is uPlot, vendored
into ``static/vendor`` by ``deploy/install.sh`` from the npm registry (no CDN, no build step).
"""

from __future__ import annotations

import socket
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from hipbot.jobs.finetune.api.state import Coordinator

__all__ = ["mount", "page_url"]


def mount(app: FastAPI, service: Coordinator) -> None:
    """Serve the page, its static files and ``/metrics`` from the coordinator's ``app``."""
    from hipbot.jobs.finetune.web import actions, routes, store
    from hipbot.jobs.finetune.web.metrics import Meter
    from hipbot.jobs.finetune.web.page import HERE, PageState

    service.locked(store.prepare, service.queue.db)
    meter = Meter(service.queue, service.locked, service.config.lease_s)
    app.state.page = PageState(service, meter)
    app.add_middleware(meter.middleware)
    app.include_router(routes.router)
    app.include_router(actions.router)
    app.mount("/ui/static", _Static(directory=HERE / "static", check_dir=False), name="ui-static")


class _Static(StaticFiles):
    """The page's CSS, scripts and chart library, cached by browsers for an hour (their URLs
    carry hipbot's version, so an upgrade is fetched anew)."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response


def page_url(host: str, port: int) -> str:
    """Where an operator opens the page (a wildcard bind address is reached by this host's name)."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}/ui"
