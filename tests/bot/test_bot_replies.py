"""The reply model and its split to Discord's limits."""

from __future__ import annotations

from hipbot.bot.replies import (
    EMBED_TOTAL_LIMIT,
    INLINE_CODE_LIMIT,
    MESSAGE_LIMIT,
    Attachment,
    Button,
    Embed,
    Field,
    Link,
    Reply,
    code_reply_parts,
    fit,
    split_text,
)


def test_short_text_is_one_message() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("") == []


def test_long_text_splits_on_lines_within_limit() -> None:
    text = "\n".join(f"line {i} " + "x" * 50 for i in range(200))
    chunks = split_text(text)
    assert len(chunks) > 1
    assert all(len(c) <= MESSAGE_LIMIT for c in chunks)
    assert "\n".join(chunks) == text


def test_split_keeps_code_fences_balanced() -> None:
    body = "\n".join(f"hipMalloc(&p{i}, n);" for i in range(300))
    text = "Result:\n```cpp\n" + body + "\n```\ndone"
    chunks = split_text(text)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= MESSAGE_LIMIT
        assert chunk.count("```") % 2 == 0, chunk[:80]
    assert chunks[1].startswith("```cpp\n")
    assert chunks[-1].endswith("done")
    joined = "".join(chunks)
    for i in (0, 150, 299):
        assert f"hipMalloc(&p{i}, n);" in joined


def test_a_line_longer_than_a_message_is_wrapped() -> None:
    chunks = split_text("y" * 5000)
    assert all(len(c) <= MESSAGE_LIMIT for c in chunks)
    assert "".join(chunks) == "y" * 5000


def test_code_inline_or_attachment() -> None:
    text, files = code_reply_parts("int main() {}\n", "out.hip")
    assert text.startswith("```cpp\n") and text.endswith("```") and files == []
    long = "x\n" * (INLINE_CODE_LIMIT)
    text, files = code_reply_parts(long, "out.hip")
    assert text == "" and files[0].name == "out.hip" and files[0].data == long.encode()


def test_code_block_neutralises_inner_fences() -> None:
    text, _ = code_reply_parts('const char* s = "```";', "a.hip")
    assert text.count("```") == 2


def test_embed_limits_fields_and_description() -> None:
    embed = Embed(
        title="t" * 300,
        description="d" * 5000,
        fields=[Field(f"f{i}", "v" * 2000) for i in range(30)],
        links=[Link("doc", "https://example.org/a")],
    )
    messages = fit(Reply(embeds=[embed], buttons=[Button("hipbot:x", "X")]))
    embeds = [e for m in messages for e in m.embeds]
    assert len(embeds[0].title) <= 256
    assert len(embeds[0].description) <= 4096
    assert sum(len(e.fields) for e in embeds) == 30
    for m in messages:
        assert sum(e.size() for e in m.embeds) <= EMBED_TOTAL_LIMIT
        for e in m.embeds:
            assert len(e.fields) <= 25
            assert all(len(f.value) <= 1024 for f in e.fields)
    # Buttons ride on the last message only.
    assert messages[-1].buttons and not any(m.buttons for m in messages[:-1])


def test_links_render_into_the_description() -> None:
    [message] = fit(
        Reply(embeds=[Embed(title="A", description="answer", links=[Link("HIP", "https://x/y")])])
    )
    assert "[HIP](https://x/y)" in message.embeds[0].description


def test_oversized_attachment_becomes_a_note() -> None:
    reply = Reply(text="here", attachments=[Attachment("big.hip", b"a" * 2000), Attachment("ok.txt", b"b")])
    [message] = fit(reply, file_limit=1000)
    assert [a.name for a in message.attachments] == ["ok.txt"]
    assert "big.hip" in message.text and "upload limit" in message.text


def test_ephemeral_propagates_and_to_text_keeps_everything() -> None:
    reply = Reply(
        text="hi",
        embeds=[Embed(title="T", description="D", fields=[Field("n", "v")], links=[Link("L", "https://u")])],
        attachments=[Attachment("a.hip", b"abc")],
        buttons=[Button("hipbot:vote:up:1", "👍")],
        ephemeral=True,
    )
    assert all(m.ephemeral for m in fit(reply))
    text = reply.to_text()
    for piece in ("hi", "## T", "D", "- n: v", "https://u", "a.hip", "[👍]"):
        assert piece in text
    assert reply.to_dict()["attachments"] == [{"name": "a.hip", "size": 3}]
