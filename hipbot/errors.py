"""The error types that front ends show to users as a plain message.

Each type carries, once and only here, the HTTP status the coordinator answers it with and the
exit status the CLI ends with. Raise the most precise type; a plain ``HipbotError`` is a request
the user can fix (HTTP 400).
"""

from typing import ClassVar


class HipbotError(Exception):
    """An error whose message is written for the user: front ends print it, never a traceback."""

    http_status: ClassVar[int] = 400
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class NotFound(HipbotError):
    """The thing asked for does not exist (or the caller may not know it does)."""

    http_status = 404


class JobNotFound(NotFound):
    """No fine-tune job has this id."""


class WorkerNotFound(NotFound):
    """No registered worker has this id."""


class Unauthorized(HipbotError):
    """Credentials are missing, wrong, unknown or already used."""

    http_status = 401


class Forbidden(HipbotError):
    """The caller is known but may not do this (a worker touching a job it does not hold)."""

    http_status = 403


class Conflict(HipbotError):
    """The request does not fit the object's current state (success reported before the upload)."""

    http_status = 409


class TooLarge(HipbotError):
    """An upload is over its size limit."""

    http_status = 413


class TooManyRequests(HipbotError):
    """The caller already has as many requests of this kind in flight as it may (idle long-polls)."""

    http_status = 429


class DatabaseDamaged(HipbotError):
    """The SQLite file is not a database, or its pages are damaged (the server's fault, not the request's)."""

    http_status = 503


class InvalidInput(HipbotError):
    """The request is well formed but its content is refused (a job config that does not validate)."""

    http_status = 422
