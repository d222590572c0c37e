"""The 👍/👎 votes people gave the bot's answers, worst first: what maintainers should fix.

The votes live in the bot's tables (``bot_answers``, ``bot_votes``) of the app database; this
module reads them through the bot's own state API and ranks them: the lowest net score first,
then the most down votes, then the newest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from hipbot.errors import HipbotError


@dataclass(frozen=True)
class Feedback:
    """One voted answer: net ``score`` (up minus down) over ``votes`` votes."""

    answer_id: int
    question: str
    answer: str
    mode: str
    sources: list[str]
    score: int
    votes: int

    @property
    def down(self) -> int:
        return (self.votes - self.score) // 2

    def to_dict(self) -> dict:
        return {**asdict(self), "down": self.down}


def voted(database: Path | str, limit: int | None = None, only_negative: bool = False) -> list[Feedback]:
    """The voted answers of ``database``, worst first."""
    from hipbot.bot.state import BotState

    path = Path(database)
    if not path.is_file():
        raise HipbotError(
            f"no database at {path}", hint="the bot stores answers and votes there once it runs"
        )
    rows = []
    for item in BotState.open(path).voted_answers():
        stored = item["answer"] if isinstance(item["answer"], dict) else {}
        rows.append(
            Feedback(
                answer_id=int(item["id"]),
                question=item["question"],
                answer=str(stored.get("answer", "")),
                mode=str(stored.get("mode", "")),
                sources=[s.get("path", "") for s in stored.get("sources", []) if isinstance(s, dict)],
                score=int(item["score"] or 0),
                votes=int(item["votes"] or 0),
            )
        )
    rows.sort(key=lambda f: (f.score, -f.down, -f.answer_id))
    if only_negative:
        rows = [f for f in rows if f.score < 0]
    return rows[:limit] if limit else rows
