"""The one exception type that front ends show to users as a plain message."""


class HipbotError(Exception):
    """An error whose message is written for the user: front ends print it, never a traceback."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message
