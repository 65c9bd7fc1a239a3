"""The wire boundary: small role contracts, one frozen :class:`WireFormat` per format composing them.

The route picks the format; the pipeline, the guards and the ledger see only what it parses
(:class:`~proxy.exchange.Conversation`, :class:`~proxy.exchange.Reply`, a
:class:`~proxy.exchange.PartialReply` while a reply streams) and hand it neutral turns and
endings to render. Payloads stay the client's own decoded JSON: a format changes only what
it must, so fields the proxy does not understand survive.

Each caller names the role it uses:

- :class:`Codec` reads request and reply bodies and writes requests, replies, endings and
  error bodies (routes, the loop, goal mode, replay);
- :class:`StreamCodec` renders the streamed request, assembles the upstream's events
  (:class:`StreamAssembler`), keeps the client's view of a stream across attempts
  (:class:`StreamRelay`), frames what the proxy cuts or makes, and says what keeps a held
  stream alive and what ends it in error (the attempts, the streaming client);
- :class:`Chains`: server-side chains, Responses' ``previous_response_id`` (continuity);
- :class:`Transcript`: signed transcripts, Messages' thinking bound to its exact prefix
  (continuity);
- :class:`JudgeDialect`: the judge's call and how its answer reads (the judge).

A role a format does not have is ``None`` on its :class:`WireFormat` (chat completions has
neither chains nor a transcript): callers test for it, so "no chains" is never mistaken for
"empty chains". Implementations are siblings: one subpackage per format (:mod:`proxy.wire.chat`,
:mod:`proxy.wire.responses`, :mod:`proxy.wire.messages`) with ``parse``, ``render``,
``stream``, what only it has (``relay``, ``chains``, ``transcript``) and ``format``, the one
object :mod:`proxy.wire.registry` lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.errors import ProxyError
from proxy.exchange import Conversation, PartialReply, Reply, Tool, Turn, Usage

__all__ = [
    "Address",
    "Addressing",
    "Chains",
    "Codec",
    "JudgeDialect",
    "Links",
    "StreamAssembler",
    "StreamCodec",
    "StreamRelay",
    "Transcript",
    "WireFormat",
]

Links = list[tuple[str, str | None, str | None]]
"""(id, upstream id to continue from instead or None, the body as JSON when the proxy made it)
per reply id a later request may continue from: see :meth:`Chains.links`."""


class Codec(Protocol):
    """Reading and writing one format's bodies: requests, replies, endings, errors."""

    # -- reading ----------------------------------------------------------------------

    def parse_request(self, payload: Mapping[str, Any]) -> Conversation:
        """The request body (decoded) as the guards see it."""
        ...

    def parse_reply(self, body: bytes) -> Reply | None:
        """A complete reply body; None when it is not one."""
        ...

    def session_hint(self, payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
        """A session id the client already sends in this format (Claude Code's
        ``metadata.user_id``, Codex's session header): used when ``X-Session-Id`` is
        absent, before the derived hash of the opening. ``header`` reads one request header."""
        ...

    def declared_schemas(self, payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
        """Every offered tool's parameters schema as (param naming it in an error, tool name, schema)."""
        ...

    def wants_structured_output(self, payload: Mapping[str, Any]) -> bool:
        """The client asked for a JSON answer (its ending is then a refusal)."""
        ...

    def decode(self, raw: str | bytes) -> dict[str, Any]:
        """A complete body this codec wrote (a stored ending) or :meth:`parse_reply` accepted
        (an upstream reply to rewrite), as JSON to change."""
        ...

    # -- the request upstream -----------------------------------------------------------

    def render_request(self, payload: Mapping[str, Any], turns: Sequence[Turn]) -> bytes:
        """The request with the proxy's turns appended."""
        ...

    def render_summary_request(
        self,
        payload: Mapping[str, Any],
        turns: Sequence[Turn],
        instruction: str,
        max_tokens: int | None,
        force_cap: bool,
        answer_tool: str | None = None,
    ) -> bytes:
        """The last call of an ending: turns and instruction appended, tools forbidden, output
        unconstrained and not streamed, its length capped at ``max_tokens`` (always, if ``force_cap``).

        Given ``answer_tool`` (a structured answer tool the request offers), tools are kept and
        the model is forced to call that one (chat's ``tool_choice: {"type": "function", …}``)
        instead: the ending is then that call, rendered with :meth:`render_reply`."""
        ...

    def amended(
        self, payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str]
    ) -> Mapping[str, Any]:
        """Notes appended to tool results (by call id), hidden tools removed."""
        ...

    def with_tool(self, payload: Mapping[str, Any], tool: Tool) -> Mapping[str, Any]:
        """The request offering one more tool (goal mode's)."""
        ...

    def rendered_turns(self, turns: Sequence[Turn]) -> list[dict[str, Any]]:
        """The proxy's turns as the format's messages (for step records)."""
        ...

    # -- what goes back to the client -----------------------------------------------------

    def ending(self, text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
        """A complete reply carrying ``text`` (an ending)."""
        ...

    def render_reply(self, reply: Reply) -> dict[str, Any]:
        """A neutral reply as the complete body an upstream of this format sends (``loopwarden
        replay`` serves recorded replies, and its judge's verdicts, with it)."""
        ...

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        """An ending as this request takes it: a refusal when it asked for a JSON answer,
        unless text already streamed to the client."""
        ...

    def without_calls(self, body: Mapping[str, Any], name: str) -> dict[str, Any]:
        """A complete reply with the calls of tool ``name`` taken out."""
        ...

    def encode(self, body: Mapping[str, Any]) -> bytes: ...

    def error_body(self, error: ProxyError) -> bytes:
        """An error answer's body in the format's error shape (OpenAI's: ``{"error": {…}}``)."""
        ...


class StreamAssembler(PartialReply, Protocol):
    """Feed it the decoded events of one streamed reply; read the reply so far at any time."""

    model: str | None
    usage: Usage | None
    """What the upstream reported (None: nothing yet, so the cost is estimated)."""
    produced_chars: int
    """Characters of every kind of output, for estimating the tokens of a stream cut short."""
    complete: bool
    """An event it took completed the stream (a format whose terminal event carries data, like
    Messages' ``message_stop``); chat completions ends with the :meth:`ends` sentinel instead."""
    end_name: str
    """What ends a complete stream, as errors name it (``[DONE]``, ``message_stop``)."""

    def ends(self, data: bytes) -> bool:
        """This event's data is the stream's end sentinel (chat completions' ``[DONE]``): it
        carries nothing to take, and nothing follows."""
        ...

    def add(self, event: Mapping[str, Any]) -> int:
        """Take one event; return the :class:`~proxy.exchange.Channel` flags it carries."""
        ...

    def reply(self) -> Reply: ...

    def completion(self) -> dict[str, Any]:
        """The reply as the complete, non-streamed body the format would have returned."""
        ...


class StreamRelay(Protocol):
    """What the client has of one stream, for a format whose events must read as one
    consistent sequence across the proxy's attempts (Responses: one response id, sequence
    numbers rising by one, output indexes in order; Messages: one ``message_start``, block
    indexes contiguous). Every event going out passes through it."""

    in_order: bool
    """Events go out strictly in the upstream's order: one that follows a held event waits
    with it (Messages addresses blocks by position)."""

    passing: frozenset[bytes]
    """Names of events that carry nothing the guards read, which :meth:`passes` may let through."""

    def new_attempt(self) -> None:
        """The held part of the current attempt is dropped; the next attempt streams on."""
        ...

    def passes(self, raw: bytes, event: Mapping[str, Any], released: int) -> tuple[bytes, int] | None:
        """An event named in ``passing`` (read and checked by the reader), let through as the
        upstream framed it (``raw``) when nothing about it changes and its channel is
        ``released``: its bytes and channel. None: it goes the long way (assembled, pushed)."""
        ...

    def event(self, raw: bytes | None, event: Mapping[str, Any]) -> bytes:
        """What carries ``event`` to the client (``raw``: as the upstream framed it, None when cut)."""
        ...

    def ending(self, body: Mapping[str, Any]) -> bytes:
        """``body`` (an ending, a rewrite) streamed after whatever the client already has."""
        ...

    def error(self, error: ProxyError) -> bytes:
        """The event that ends the stream in error."""
        ...


class StreamCodec(Protocol):
    """One format's streams: the streamed request, assembling the upstream's events, framing
    what the proxy cuts or makes, and what the client's stream ends with."""

    trailer: bytes
    """What a stream the proxy completes ends with (chat completions' ``data: [DONE]``)."""
    keepalive: bytes
    """What a held-back stream sends while nothing may flow (an SSE comment; Messages' ``ping``)."""

    def render_request(self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool) -> bytes:
        """The request streamed and asking for usage; ``body`` itself (or spliced) when ``untouched``."""
        ...

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        """A streaming client asked for the usage event."""
        ...

    def assembler(self) -> StreamAssembler:
        """A fresh assembler for one streamed reply."""
        ...

    def relay(self) -> StreamRelay | None:
        """A fresh relay for one client stream; None when events go out as they came (chat)."""
        ...

    def split_event(
        self, event: Mapping[str, Any], released: int
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A streamed event cut in two: what of ``released`` channels it carries, and the rest."""
        ...

    def framed(self, event: Mapping[str, Any]) -> bytes:
        """An event the proxy cut (see :meth:`split_event`) framed for the client's stream."""
        ...

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        """A complete reply as the events of a stream, trailer included."""
        ...

    def appended(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """An ending set apart from text the client already received."""
        ...

    def error_event(self, error: ProxyError) -> bytes:
        """The event that ends a stream in error, in the format's error shape."""
        ...


class Chains(Protocol):
    """Server-side chains (Responses): a request may continue a response the upstream
    stored, so every response id the proxy returns is remembered with its session."""

    def continues(self, payload: Mapping[str, Any]) -> str | None:
        """The stored response this request continues (``previous_response_id``): its session
        is the one that returned it."""
        ...

    def links(
        self, payload: Mapping[str, Any], replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None
    ) -> Links:
        """(id, upstream id to continue from instead or None, the body as JSON when the proxy
        made it) for every reply id of this request a later request may continue from or refer
        to, ``answer`` being what the client got (the upstream's reply, or the proxy's own body)."""
        ...

    def references(self, payload: Mapping[str, Any]) -> list[str]:
        """The recorded ids (see :meth:`links`) of the proxy's own items this request refers
        to by id (``item_reference``): resolved by the proxy, never upstream."""
        ...

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The request continuing ``continue_from`` instead (when given), the proxy's own items
        it refers to taken from ``bodies`` (by :meth:`references` id; dropped when unknown)."""
        ...


class Transcript(Protocol):
    """Signed transcripts (Messages): the upstream binds a reply to its exact prefix, so what
    the proxy changed or added is recorded in the session and spliced into later requests."""

    def spliced(self, payload: Mapping[str, Any], values: Mapping[str, str]) -> Mapping[str, Any]:
        """The request with what the session recorded (its state ``values``, see :meth:`recorded`)
        put back; ``payload`` itself when nothing applies."""
        ...

    def recorded(
        self,
        client: Mapping[str, Any],
        amended: Mapping[str, Any],
        turns: Sequence[Turn],
        reply: Reply,
        answered: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Session fields to write for a reply that reached the client: what the proxy changed
        in the ``client``'s messages (``amended``), the ``turns`` it added before ``reply``, and
        the calls of ``reply`` it ``answered`` itself (id: result) and took out of the client's
        copy, which the client never sends back."""
        ...


class JudgeDialect(Protocol):
    """How the judge asks its question in one format, and reads the answer."""

    def url(self, base_url: str) -> str:
        """Where a judge's own endpoint (``judge.base_url``) takes this format's requests."""
        ...

    def headers(self, key: str) -> list[tuple[str, str]]:
        """The headers of a judge call made with the judge's own key (``judge.api_key_env``), as
        this format's API takes a key (a bearer token; Anthropic's ``x-api-key`` and version)."""
        ...

    def request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        """The judge's call: a system prompt, one user turn, deterministic, its answer capped
        at ``max_tokens`` and, given ``schema``, constrained to that JSON Schema."""
        ...

    def answer(self, body: bytes) -> Reply | None:
        """The judge's reply body read (None: not a complete reply); its text holds the verdict."""
        ...


class Address(Protocol):
    """A guarded call as its path names it (see :class:`Addressing`)."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool: ...

    def upstream_path(self) -> str:
        """What follows the tenant's upstream base URL for it."""
        ...


class Addressing(Protocol):
    """A format whose path names the model and the method (Gemini's
    ``/v1beta/models/{model}:streamGenerateContent``): its route is a mount, the path says what
    the body does not, and some of its calls come below the OpenAI mount (``/v1/models/…``)."""

    def guarded(self, raw_path: bytes) -> Address | None:
        """The guarded call the path makes; None: a call passed through."""
        ...

    def claims(self, path: str, header: Callable[[bytes], str | None]) -> bool:
        """A call below ``/v1`` that is this format's, not OpenAI's (``header`` reads one request header)."""
        ...

    def passthrough_path(self, raw_path: bytes) -> bytes:
        """The path of a call passed through as the ``/v1`` pass-through takes it."""
        ...

    def upstream_query(self, query: bytes, stream: bool) -> bytes:
        """The client's query string as the upstream gets it."""
        ...


@dataclass(frozen=True, slots=True)
class WireFormat:
    """One wire format: where it is served and sent, and the roles it has."""

    name: str
    """The format's name in logs, metrics and records (``chat.completions``)."""
    route: str
    """The path clients call (``/v1/chat/completions``): the route the proxy guards for it."""
    upstream_path: str
    """What follows the tenant's upstream base URL for it (``/chat/completions``)."""
    key_header: str
    """Where the upstream takes a provider key the proxy holds (``authorization``; Anthropic's
    ``x-api-key``)."""
    codec: Codec
    stream: StreamCodec
    judge: JudgeDialect
    chains: Chains | None
    """None: every request carries its whole history (nothing stored upstream to continue)."""
    transcript: Transcript | None
    """None: the upstream binds no reply to its exact prefix (nothing to record or splice)."""
    addressing: Addressing | None = None
    """None: one fixed route, the model and streaming named in the body (every format but Gemini)."""
