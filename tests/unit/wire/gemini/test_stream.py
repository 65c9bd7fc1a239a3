"""Assembling Gemini's ``alt=sse`` chunks into the reply, and cutting a chunk by channel."""

from __future__ import annotations

from proxy.exchange import Channel
from proxy.wire.gemini.stream import GeminiAssembler, joined, split_chunk


def _chunk(*parts, finish=None, usage=None):
    candidate = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk = {"candidates": [candidate], "modelVersion": "gemini-x"}
    if usage:
        chunk["usageMetadata"] = usage
    return chunk


def test_text_pieces_join_and_the_finish_completes_the_stream():
    assembler = GeminiAssembler()

    first = assembler.add(_chunk({"text": "Sun"}))
    last = assembler.add(
        _chunk({"text": "ny."}, finish="STOP", usage={"promptTokenCount": 4, "candidatesTokenCount": 2})
    )

    assert first == Channel.TEXT
    assert last == Channel.TEXT | Channel.FINISH
    assert assembler.complete
    reply = assembler.reply()
    assert (reply.content, reply.finish_reason, reply.usage.total) == ("Sunny.", "stop", 6)
    assert assembler.completion()["candidates"][0]["content"]["parts"] == [{"text": "Sunny."}]


def test_a_thought_signature_stays_on_its_part():
    assembler = GeminiAssembler()
    assembler.add(_chunk({"text": "Think", "thought": True}))
    assembler.add(_chunk({"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "sig"}, finish="STOP"))

    parts = assembler.completion()["candidates"][0]["content"]["parts"]

    assert parts == [
        {"text": "Think", "thought": True},
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "sig"},
    ]
    assert assembler.reply().reasoning == "Think"


def test_a_chunk_is_cut_by_channel_and_keeps_its_finish_on_both_halves():
    chunk = _chunk({"text": "Hi"}, {"functionCall": {"name": "f", "args": {}}}, finish="STOP")

    out, kept = split_chunk(chunk, Channel.TEXT)

    assert out is not None
    assert kept is not None
    assert out["candidates"][0]["content"]["parts"] == [{"text": "Hi"}]
    assert kept["candidates"][0]["content"]["parts"] == [{"functionCall": {"name": "f", "args": {}}}]
    assert kept["candidates"][0]["finishReason"] == "STOP"


def test_a_whole_stream_reads_as_one_reply():
    body = b'data: {"candidates":[{"content":{"parts":[{"text":"A"}]}}]}\r\n\r\n' + (
        b'data: {"candidates":[{"content":{"parts":[{"text":"B"}]},"finishReason":"STOP"}]}\r\n\r\n'
    )

    reply = joined(body)

    assert reply is not None
    assert reply.content == "AB"


def test_a_stream_without_its_finish_is_no_reply():
    assert joined(b'data: {"candidates":[{"content":{"parts":[{"text":"A"}]}}]}\n\n') is None
