"""How a Gemini client speaks, for the format fixture (``tests/support/formats.py``): the
google-genai SDK sends the request (``contents``, function declarations, ``toolConfig``), the
answer reads from its response or its stream, and the request the fake received reads from
its ``contents`` (``functionCall`` and ``functionResponse`` parts)."""

from __future__ import annotations

from typing import Any, ClassVar

from google import genai
from google.genai import types

from tests.support.fake_gemini import signature
from tests.support.fake_upstream import Recorded
from tests.support.format_base import TASK, Answer, Format, Sent, Tool, text_of
from tests.support.proxy_server import RunningProxy
from tests.support.turns import Call

__all__ = ["Gemini", "GeminiSent"]

_ROLES = {"model": "assistant", "user": "user"}


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))


class GeminiSent(Sent):
    """A request the fake Gemini API received, read from its ``contents``."""

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self.payload.get("contents") or [])

    def calls(self, index: int) -> list[Call]:
        parts = self.history[index].get("parts") or []
        return [
            Call(p["functionCall"]["name"], p["functionCall"].get("args", {}), p["functionCall"].get("id", ""))
            for p in parts
            if "functionCall" in p
        ]

    def said(self, index: int) -> tuple[str, str]:
        content = self.history[index]
        return _ROLES.get(content.get("role", ""), ""), _text(content.get("parts") or [])


class Gemini(Format):
    name = "gemini"
    wire_name = "gemini"
    own_id = "lw-"
    calls_stop = "STOP"
    text_stop = "STOP"
    history_key: ClassVar[str] = "contents"
    key: ClassVar[dict[str, str]] = {"x-goog-api-key": "gk-p"}
    none_choice: ClassVar[dict[str, Any]] = {"functionCallingConfig": {"mode": "NONE"}}
    request: ClassVar[dict[str, Any]] = {"model": "gemini-fake"}

    def task(self, text: str = TASK, *, system: str | None = None) -> list[dict[str, Any]]:
        assert system is None, "a Gemini request carries its system instruction apart"
        return [{"role": "user", "parts": [{"text": text}]}]

    def exchanged(self, said: str, then: str) -> list[dict[str, Any]]:
        return [{"role": "model", "parts": [{"text": said}]}, {"role": "user", "parts": [{"text": then}]}]

    @staticmethod
    def streamed(sent: Recorded) -> bool:
        return sent.path.endswith(":streamGenerateContent")

    def forced(self, name: str) -> dict[str, Any]:
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}

    def asking_json(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema}}

    def _tool(self, tool: Tool) -> dict[str, Any]:
        return {"functionDeclarations": [{"name": tool.name, "parametersJsonSchema": tool.parameters}]}

    def _send(self, proxy: RunningProxy, request: dict[str, Any], *, stream: bool, headers: dict[str, str]) -> Answer:
        client = genai.Client(api_key=self.key["x-goog-api-key"], http_options=types.HttpOptions(base_url=proxy.url))
        config = types.GenerateContentConfig(
            tools=request.get("tools"),
            tool_config=request.get("tool_choice"),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            http_options=types.HttpOptions(headers=headers, extra_body=request.get("extra_body")),
        )
        model, contents = request["model"], request["contents"]
        if stream:
            pieces = list(client.models.generate_content_stream(model=model, contents=contents, config=config))
        else:
            pieces = [client.models.generate_content(model=model, contents=contents, config=config)]
        parts: list[dict[str, Any]] = []
        for piece in pieces:
            for candidate in piece.candidates or []:
                if candidate.content is not None:
                    parts += [
                        p.model_dump(mode="json", exclude_none=True, by_alias=True)
                        for p in candidate.content.parts or []
                    ]
        last = pieces[-1]
        reason = last.candidates[0].finish_reason if last.candidates else None
        response = pieces[0].sdk_http_response
        found = [
            Call(p["functionCall"]["name"], p["functionCall"].get("args", {}), p["functionCall"].get("id", ""))
            for p in parts
            if "functionCall" in p
        ]
        native = [{"role": "model", "parts": parts}]
        return Answer(
            dict(response.headers or {}) if response else {},
            _text(parts),
            found,
            last.response_id or "",
            reason.value if reason is not None else "",
            native,
        )

    def _calling(self, call: Call) -> list[dict[str, Any]]:
        assert isinstance(call.arguments, dict), "a Gemini functionCall carries its args as an object"
        function = {"name": call.name, "args": call.arguments, "id": call.id}
        return [
            {
                "role": "model",
                "parts": [{"functionCall": function, "thoughtSignature": signature(call.name, call.arguments)}],
            }
        ]

    def _returned(self, results: list[tuple[Call, str]]) -> list[dict[str, Any]]:
        parts = [
            {"functionResponse": {"name": call.name, "id": call.id, "response": {"output": result}}}
            for call, result in results
        ]
        return [{"role": "user", "parts": parts}]

    def sent(self, index: int) -> Sent:
        payload = self.fake.requests[index].json()
        return GeminiSent(
            payload, self._tools(payload), self._results(payload), self._last(payload), payload.get("toolConfig")
        )

    def rejected(self) -> list[str]:
        return list(getattr(self.fake, "rejected", []))

    def _tools(self, payload: dict[str, Any]) -> list[str]:
        return [d["name"] for tool in payload.get("tools") or [] for d in tool.get("functionDeclarations") or []]

    def _results(self, payload: dict[str, Any]) -> list[tuple[str, str]]:
        parts = payload["contents"][-1].get("parts") or []
        return [
            (p["functionResponse"].get("id", ""), _output(p["functionResponse"].get("response")))
            for p in parts
            if "functionResponse" in p
        ]

    def _last(self, payload: dict[str, Any]) -> str:
        last = (payload["contents"][-1].get("parts") or [{}])[-1]
        if "functionResponse" in last:
            return _output(last["functionResponse"].get("response"))
        return text_of([last])


def _output(response: Any) -> str:
    if isinstance(response, dict) and isinstance(response.get("output"), str):
        return response["output"]
    return str(response)
