"""The task, its tools, and the scripted models that play well-behaved and misbehaving agents.

Every run asks one thing: the current temperatures in Paris (18 °C) and Berlin (11 °C),
found with a ``get_weather`` tool. A scripted model is a pure function of the request it
receives (plus a per-run counter for the 429 storm): it looks at what the conversation
already holds (tool results, corrections the proxy appended) and answers as its scenario
says. The run's model name carries the scenario (``bench/<scenario>/<variant>/<run id>``),
so the same upstream serves runs with and without the proxy.

Variants of a misbehaviour: ``recovers`` behaves once it is corrected (a nudge, a loop
warning, a judge's "not done", a schema error or a budget note); ``persistent`` never does.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from tests.bench.efficacy.answer_scenarios import answer_scenarios, is_long_answer, json_in, respond_answer

TASK = "What is the weather in Paris and in Berlin right now? Give me both temperatures in °C."
INSTRUCTIONS = (
    "You are a careful travel assistant. You answer questions about current conditions in cities using the "
    "tools you are given; never guess a value a tool can give you. Call get_weather once per city you need, "
    "with the city's English name. When every value is known, answer the user in one or two sentences and "
    "name each city with its temperature. If a tool fails, say so and try once more before giving up. Keep "
    "answers factual and short; do not add advice the user did not ask for. If the user asks for a "
    "structured answer, answer with only that JSON object."
)
WEATHER = {"paris": (18, "sunny"), "berlin": (11, "light rain")}
CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Oslo", "Lisbon", "Vienna", "Prague", "Dublin", "Athens", "Warsaw"]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"paris_c": {"type": "number"}, "berlin_c": {"type": "number"}},
    "required": ["paris_c", "berlin_c"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city: temperature in °C and conditions.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's English name."}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_CITY = {"type": "string", "description": "The city's English name."}
_DATE = {"type": "string", "description": "A date, YYYY-MM-DD, in the city's time zone."}
OTHER_TOOLS = [
    _tool(
        "get_forecast",
        "Daily forecast for a city: high and low in °C, chance of rain, wind, for up to 10 days ahead.",
        {"city": _CITY, "days": {"type": "integer", "minimum": 1, "maximum": 10, "description": "Days ahead."}},
        ["city", "days"],
    ),
    _tool(
        "get_air_quality",
        "Current air quality index (European AQI) and the main pollutant for a city.",
        {"city": _CITY},
        ["city"],
    ),
    _tool(
        "local_time",
        "The current local time and UTC offset of a city.",
        {"city": _CITY},
        ["city"],
    ),
    _tool(
        "convert_currency",
        "Convert an amount between two ISO 4217 currencies at today's reference rate.",
        {
            "amount": {"type": "number", "description": "The amount to convert."},
            "from_currency": {"type": "string", "description": "ISO 4217 code, e.g. EUR."},
            "to_currency": {"type": "string", "description": "ISO 4217 code, e.g. USD."},
        },
        ["amount", "from_currency", "to_currency"],
    ),
    _tool(
        "find_flights",
        "Direct and one-stop flights between two cities on a date, cheapest first, with times and prices.",
        {
            "origin": _CITY,
            "destination": _CITY,
            "date": _DATE,
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
            "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"]},
        },
        ["origin", "destination", "date"],
    ),
]
PRODUCTION_INSTRUCTIONS = INSTRUCTIONS + (
    "\n\n# Role\nYou work for a travel company's customer desk. Customers are planning trips or are "
    "already travelling; they ask about weather, air quality, local time, currency and flights. You speak "
    "for the company: be accurate, polite and brief, and never promise what the tools cannot confirm."
    "\n\n# Using tools\n- Use the tool that answers the question; do not call tools the question does not "
    "need. Weather questions use get_weather for current conditions and get_forecast for later days.\n- "
    "Call one tool per value you need. You may call several tools in one turn when the calls do not depend "
    "on each other.\n- Use English city names; for ambiguous names (Paris, Texas) ask which one is meant "
    "unless the conversation makes it clear.\n- Never invent a value a tool can give you, and never reuse a "
    "value from an earlier conversation: conditions change.\n- If a tool returns an error, say what failed "
    "and try once more; if it fails again, tell the customer what you could not check.\n- Dates are in the "
    "city's own time zone; use local_time when the day matters."
    "\n\n# Answers\n- Lead with the answer, then at most one sentence of context.\n- Give temperatures "
    "in °C (and °F only when asked), wind in km/h, prices with their currency code.\n- When comparing "
    "cities, name each city with its own value; do not average them.\n- Do not give medical, legal or "
    "visa advice; refer the customer to the official source.\n- Do not mention these instructions, the "
    "tools by name, or that you are an AI unless asked."
    "\n\n# Safety and privacy\n- Never ask for payment details, passport numbers or passwords.\n- If "
    "the customer reports an emergency, tell them to call the local emergency number (112 in Europe) "
    "first.\n- Keep personal details the customer shares out of your answers unless they are needed."
    "\n\n# Structured answers\nWhen the request asks for a JSON object, reply with exactly that object: "
    "no prose, no code fence, every required field present, numbers as numbers."
)


@dataclass(frozen=True)
class AgentProfile:
    """How big the agent is: its instructions and the tools it offers on every call."""

    name: str
    instructions: str
    tools: tuple[dict[str, Any], ...]


PROFILES = {
    "small": AgentProfile("small", INSTRUCTIONS, (WEATHER_TOOL,)),
    "production": AgentProfile("production", PRODUCTION_INSTRUCTIONS, (WEATHER_TOOL, *OTHER_TOOLS)),
}
"""``small``: the task's one tool and a paragraph of instructions (the benchmark's default).
``production``: instructions and a tool set of the size real agents send on every call (the
scripted models never call the other tools)."""

JUDGE_PROMPT = "You are a strict completion judge"
PROGRESS_PROMPT = "You are a strict progress judge"
FINALIZE_PROMPT = "Stop working on the task now"
HOG_COMPLETION_TOKENS = 2_500


def weather(city: str) -> str:
    """What the agent's tool returns: a small JSON document, like a weather API's (for a name
    with a digit in it, a station code the network does not know, the same answer each time)."""
    if any(ch.isdigit() for ch in city):
        return json.dumps({"city": city, "error": "no station with this name", "source": "station network"})
    mark = zlib.crc32(city.strip().lower().encode())
    if city.strip().lower() in WEATHER and city != city.strip().title():  # the flaky backend's fault
        stamp = zlib.crc32(city.encode())
        return (
            f"503 Service Unavailable: weather backend overloaded (request_id={stamp:08x}, "
            f"at 2026-12-01T10:{stamp % 60:02d}:{stamp // 60 % 60:02d}Z)"
        )  # each place its own reading
    temp, sky = WEATHER.get(city.strip().lower(), (mark % 25, "cloudy"))
    return json.dumps(
        {
            "city": city,
            "temperature_c": temp,
            "conditions": sky,
            "humidity_pct": 40 + mark % 60,
            "wind_kmh": mark % 41,
            "observed": "2026-11-29T12:00:00Z",
            "source": "station network",
        }
    )


@dataclass(frozen=True)
class Scenario:
    name: str
    variant: str
    behaved: bool
    """A well-behaved model: any intervention on its run is a false one."""
    schema: bool = False
    """The agent asks for a structured (JSON schema) answer."""
    description: str = ""
    cap: int | None = None
    """The client's own limit of model requests (None: its library's default, see ``clients``)."""
    policy: str | None = None
    """The proxy policy the run asks for (``X-LoopWarden-Policy``; None: ``default``)."""

    @property
    def key(self) -> str:
        return f"{self.name}/{self.variant}"


MISBEHAVIOURS = {
    "empty": "empty reply after the first tool result",
    "reasoning_only": "reasoning but no answer and no call",
    "invalid_args": "tool arguments that are not JSON",
    "repeat": "the same call repeated forever",
    "cycle": "A-B-A-B: Paris, Berlin, Paris, Berlin…",
    "done_early": 'quits after one tool with "Done."',
    "schema": "structured answer missing a field",
    "token_hog": "researches every city, 2,500 tokens a step",
    "ever_new": "new station names for Berlin, the same 'no station' answer",
    "wander": "both cities, then a new place every step, never an answer",
    "flaky": "Paris spelled anew each time (paris, 'PARIS '…), the tool answers 503 with a fresh request id",
}
CAPS = {"repeat": 6, "cycle": 6, "ever_new": 6, "flaky": 5, "wander": 50}
"""Tight but ordinary client caps: six model requests (the Agents SDK's ``max_turns`` or a
LangGraph ``recursion_limit`` in common configurations) for the loops, five (smolagents'
``max_steps`` at its low end) for the flaky tool, and for ``wander`` a
limit equal to the ``steps`` policy's ``max_steps``, so the proxy's ending must come first."""
POLICIES = {"wander": "steps"}
SPELLINGS = ("paris", "PARIS ", " Paris", "pARIS", "paris ", "PaRiS", " PARIS", "parIS")
"""How the flaky scenario's model spells Paris: each time anew, never as the backend wants it."""
STORM = (2, 6)
"""The rate-limit storm: agent requests 2 to 6 of a run get 429 with ``Retry-After: 1``."""
WELL_BEHAVED = {
    "short": "two calls, then a short correct answer (judged)",
    "parallel": "both calls in one reply, then a short answer",
    "long": "a long final answer (not judged)",
    "reasoning": "reasoning alongside every reply",
    "structured": "a correct structured (JSON schema) answer",
}


def scenarios() -> list[Scenario]:
    out = [Scenario(name, "ok", True, schema=name == "structured", description=d) for name, d in WELL_BEHAVED.items()]
    for name, description in MISBEHAVIOURS.items():
        for variant in ("recovers", "persistent"):
            out.append(
                Scenario(
                    name,
                    variant,
                    False,
                    schema=name == "schema",
                    description=description,
                    cap=CAPS.get(name),
                    policy=POLICIES.get(name),
                )
            )
    out.append(Scenario("rate_limit", "storm", False, description="5 x 429 (Retry-After: 1) in a row, then fine"))
    return out + answer_scenarios()


# -- reading a request --------------------------------------------------------------

_CORRECTIONS = (
    "Your last reply was empty",
    "You reasoned but did not act",
    "You have already called",
    "[LoopWarden]",
    "You are not done yet",
    "Completion could not be verified",
    "does not match the required JSON schema",
    "Your tool call was not executed",
    "Not executed: another call",
    "Budget note",
    "The last ",
    "Not run:",
)


@dataclass
class Seen:
    """What a request shows the model."""

    found: dict[str, str] = field(default_factory=dict)
    """city (lower case) → its reading, the JSON object of its tool result (what else the turn
    carries, a note of the proxy's or an ``Observation:`` line's neighbours, left out)."""
    calls: int = 0
    """Tool results in the conversation."""
    corrected: bool = False
    """The proxy corrected the model in this request (a nudge or note it appended)."""
    structured: bool = False
    tools: bool = False
    finalize: bool = False
    judge: bool = False
    answer_tool: str | None = None
    """The tool the agent reads its answer from (smolagents' ``final_answer``, pydantic-ai's
    ``final_result``): a model answers by calling it."""
    forced: bool = False
    """The request forces the answer tool (an ending's last call for a structured answer)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _answer_tool(payload: dict[str, Any]) -> tuple[str | None, bool]:
    names = [t["function"]["name"] for t in payload.get("tools") or [] if isinstance(t, dict) and "function" in t]
    choice = payload.get("tool_choice")
    forced = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if forced in names:
        return forced, True
    return next((n for n in names if n == "final_answer" or n.startswith("final_result")), None), False


def _reading(text: str) -> str | None:
    """The weather reading a tool result carries (the JSON object at its start), or None."""
    start = text.find("{")
    if start < 0 or text[:start].strip() not in ("", "Observation:"):
        return None
    try:
        result, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return json.dumps(result) if isinstance(result, dict) and "temperature_c" in result else None


def read_request(payload: dict[str, Any]) -> Seen:
    messages = [m for m in payload.get("messages") or [] if isinstance(m, dict)]
    seen = Seen(structured=payload.get("response_format") is not None, tools=bool(payload.get("tools")))
    if messages and _text(messages[0].get("content")).startswith((JUDGE_PROMPT, PROGRESS_PROMPT)):
        seen.judge = True
        return seen
    seen.answer_tool, seen.forced = _answer_tool(payload)
    seen.structured = seen.structured or (seen.answer_tool or "").startswith("final_result")
    cities: dict[str, str] = {}
    users = 0
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content"))
        for call in message.get("tool_calls") or []:
            try:
                arguments = json.loads(call["function"]["arguments"])
                cities[call["id"]] = str(arguments.get("city", "")).lower()
            except (ValueError, KeyError, TypeError, AttributeError):
                cities[call.get("id", "")] = ""
        observation = role == "user" and users > 0 and text.startswith("Observation:")
        if observation:  # smolagents: one turn for a reply's calls, their results a line each
            for line in text.removeprefix("Observation:").strip().splitlines():
                seen.calls += 1
                if (reading := _reading(line)) is not None:
                    seen.found[str(json.loads(reading).get("city", "")).lower()] = reading
        elif role == "tool":
            seen.calls += 1
            city = cities.get(message.get("tool_call_id", ""), "")
            if city and (reading := _reading(text)) is not None:
                seen.found[city] = reading
        if role == "user":
            users += 1
            if users > 1 and text.startswith(FINALIZE_PROMPT):
                seen.finalize = True
        appended = role == "tool" or (role == "user" and users > 1 and not observation)
        if appended and any(marker in text for marker in _CORRECTIONS):
            seen.corrected = True
    return seen


# -- the models ---------------------------------------------------------------------


def _call(city: str, index: int, arguments: str | None = None) -> dict[str, Any]:
    raw = arguments if arguments is not None else json.dumps({"city": city})
    return {
        "id": f"call_{index}_{city.lower()}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": raw},
    }


def _place(index: int) -> str:
    """The ``index``-th place a wandering model looks up: never the same one twice."""
    others = CITIES[2:]
    first, second = divmod(index, len(others))
    return others[second] if first == 0 else f"{others[second]} {CITIES[first % len(CITIES)]}"


def _answer(seen: Seen, long: bool = False) -> str:
    if seen.structured:
        return json.dumps({"paris_c": WEATHER["paris"][0], "berlin_c": WEATHER["berlin"][0]})
    text = f"Paris: {WEATHER['paris'][0]} °C and sunny; Berlin: {WEATHER['berlin'][0]} °C with light rain."
    if long:
        text += (
            " Both readings come from the station network and were observed at noon UTC today. Paris has low "
            "wind and moderate humidity, so it will feel close to the measured value; Berlin is cooler and wet, "
            "with light rain expected to continue into the evening, so a jacket is a good idea there."
        )
    return text


def _summary(seen: Seen) -> str:
    found = [f"{city.title()}: {json.loads(text)['temperature_c']} °C" for city, text in seen.found.items()]
    missing = [c for c in ("paris", "berlin") if c not in seen.found]
    return (
        f"1. What I found: {'; '.join(found) or 'nothing yet'}. "
        f"2. What is missing: {', '.join(c.title() for c in missing) or 'nothing'}. "
        "3. Next step: check the missing values with the weather tool, then answer."
    )


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    extra_completion_tokens: int = 0
    status: int = 200


def well_behaved(seen: Seen, variant: str) -> Reply:
    reasoning = "The user wants two cities; I check each one." if variant == "reasoning" else None
    missing = [c for c in ("Paris", "Berlin") if c.lower() not in seen.found]
    if missing and seen.tools and not seen.finalize:
        if variant == "parallel":
            return Reply(tool_calls=[_call(c, seen.calls + i) for i, c in enumerate(missing)], reasoning=reasoning)
        return Reply(tool_calls=[_call(missing[0], seen.calls)], reasoning=reasoning)
    if missing:
        return Reply(_summary(seen))
    return Reply(_answer(seen, long=variant == "long"), reasoning=reasoning)


def respond(scenario: Scenario, seen: Seen, request_number: int) -> Reply:
    """The scripted model's reply to one request of a run: its answer goes through the
    request's answer tool when it offers one (a text summary when told not to call tools)."""
    reply = _respond(scenario, seen, request_number)
    if seen.answer_tool is None or reply.tool_calls or not reply.content or reply.status != 200:
        return reply
    if seen.finalize and not seen.forced:
        return reply  # the ending's summary call: tools forbidden, the proxy delivers it
    if seen.answer_tool == "final_answer":
        arguments = {"answer": reply.content}
    else:
        try:
            arguments = json.loads(reply.content)  # a structured answer's object
        except ValueError:
            found = {f"{c}_c": json.loads(t)["temperature_c"] for c, t in seen.found.items() if c in WEATHER}
            arguments = found  # told to answer through the tool: what it has (valid only when complete)
    call = {
        "id": f"call_{seen.calls}_answer",
        "type": "function",
        "function": {"name": seen.answer_tool, "arguments": json.dumps(arguments)},
    }
    return Reply(tool_calls=[call], reasoning=reply.reasoning)


def _respond(scenario: Scenario, seen: Seen, request_number: int) -> Reply:
    answer = respond_answer(scenario, seen)
    if answer is not None:
        return answer
    if scenario.behaved:
        return well_behaved(seen, scenario.name)
    fixed = scenario.variant == "recovers" and seen.corrected
    name = scenario.name
    if name == "rate_limit":
        return Reply(status=429) if STORM[0] <= request_number <= STORM[1] else well_behaved(seen, "short")
    if seen.finalize:
        if name in ("empty", "reasoning_only") and not fixed:
            return Reply("" if name == "empty" else None, reasoning="Hmm." if name == "reasoning_only" else None)
        return Reply(_summary(seen))
    if fixed:
        return well_behaved(seen, "short")
    paris_done = "paris" in seen.found
    if name == "empty" and paris_done:
        return Reply("")
    if name == "reasoning_only" and paris_done:
        return Reply(None, reasoning="I should look up Berlin next, then compare both temperatures for the user.")
    if name == "invalid_args" and paris_done:
        return Reply(tool_calls=[_call("Berlin", seen.calls, '{"city": "Berlin"')])
    if name == "repeat":
        return Reply(tool_calls=[_call("Paris", seen.calls)])
    if name == "cycle":
        return Reply(tool_calls=[_call("Paris" if seen.calls % 2 == 0 else "Berlin", seen.calls)])
    if name == "done_early" and paris_done:
        return Reply("Done.")
    if name == "schema" and "berlin" in seen.found and paris_done and seen.structured:
        return Reply(json.dumps({"paris_c": WEATHER["paris"][0]}))
    if name == "ever_new" and paris_done and "berlin" not in seen.found:
        return Reply(tool_calls=[_call(f"Berolina {seen.calls}", seen.calls)])
    if name == "flaky" and not paris_done:
        return Reply(tool_calls=[_call(SPELLINGS[seen.calls % len(SPELLINGS)], seen.calls)])
    if name == "wander":
        missing = [c for c in ("Paris", "Berlin") if c.lower() not in seen.found]
        return Reply(tool_calls=[_call(missing[0] if missing else _place(seen.calls), seen.calls)])
    if name == "token_hog":
        city = CITIES[seen.calls % len(CITIES)]
        return Reply(
            tool_calls=[_call(city, seen.calls)],
            reasoning="Let me be thorough and compare many cities before answering. " * 40,
            extra_completion_tokens=HOG_COMPLETION_TOKENS,
        )
    return well_behaved(seen, "short")


# -- the judge and the verdict on a run ---------------------------------------------

_NONCE = re.compile(r'"nonce": "([0-9a-f]+)"')
_REPLY = re.compile(r"<reply-[0-9a-f]+>\n(.*)\n</reply-[0-9a-f]+>", re.S)
_STEPS = re.compile(r"<steps-[0-9a-f]+>\n(.*)\n</steps-[0-9a-f]+>", re.S)


def judge(payload: dict[str, Any], scenario: Scenario | None = None) -> str:
    """An honest judge: done when the reply gives both temperatures (in JSON, bare or wrapped,
    or in words), or is the run's long answer (a long answer scenario's task is that answer);
    asked about progress, the steps make some when they look up a city the task names."""
    messages = payload["messages"]
    nonce = _NONCE.search(messages[0]["content"])
    if messages[0]["content"].startswith(PROGRESS_PROMPT):
        steps = _STEPS.search(messages[1]["content"])
        progress = bool(steps) and any(city in steps.group(1).lower() for city in WEATHER)
        reason = "the steps look up a city the task names" if progress else "the steps look up other cities"
        return json.dumps({"nonce": nonce.group(1) if nonce else "", "progress": progress, "reason": reason})
    reply = _REPLY.search(messages[1]["content"])
    answer = reply.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") if reply else ""
    done = is_correct(answer, structured=False) or is_correct(json_in(answer), structured=True)
    if scenario is not None and scenario.name == "long_answer":
        done = is_long_answer(answer, scenario.variant, judged=True)
    reason = "both temperatures are given" if done else "the reply does not give both temperatures"
    return json.dumps({"nonce": nonce.group(1) if nonce else "", "done": done, "reason": reason})


def is_correct(answer: Any, *, structured: bool) -> bool:
    if structured:
        if isinstance(answer, str):
            try:
                answer = json.loads(answer)
            except ValueError:
                return False
        if hasattr(answer, "model_dump"):
            answer = answer.model_dump()
        return (
            isinstance(answer, dict)
            and set(answer) == {"paris_c", "berlin_c"}
            and answer.get("paris_c") == WEATHER["paris"][0]
            and answer.get("berlin_c") == WEATHER["berlin"][0]
        )
    text = answer if isinstance(answer, str) else ""
    return all(re.search(rf"\b{city}\b.{{0,40}}?\b{temp}\b", text, re.I | re.S) for city, (temp, _) in WEATHER.items())


@dataclass(frozen=True)
class Refusal:
    """What a structured-output client returns instead of the object when the reply is a
    refusal, handled the way its library documents (openai: ``message.refusal``; the Agents
    SDK and LangChain: ``ModelRefusalError``)."""

    text: str


def _is_summary(text: str) -> bool:
    return "next step" in text.lower()


def answered(answer: Any, scenario: Scenario) -> bool:
    """The run ended with its task's answer: both temperatures (the schema's object when it
    asked for one), or, in a long answer scenario, that answer as the model wrote it."""
    if scenario.name == "long_answer":
        return is_long_answer(answer, scenario.variant)
    return is_correct(answer, structured=scenario.schema)


def _unparsable(answer: Any) -> bool:
    if not isinstance(answer, str):
        return False
    try:
        json.loads(answer)
    except ValueError:
        return True
    return False


def outcome_of(answer: Any, error: BaseException | None, scenario: Scenario) -> str:
    """correct / graceful / silent / crashed. A refusal is graceful when it carries the
    ending's summary, and a crash otherwise (no answer, but no silent one either). A structured
    request's answer that is not JSON is a crash too: the strict parser a client applies to
    the JSON it asked for (the openai SDK's ``parse``, ``json.loads``) raises on it."""
    if error is not None:
        return "crashed"
    if isinstance(answer, Refusal):
        return "graceful" if _is_summary(answer.text) else "crashed"
    if answered(answer, scenario):
        return "correct"
    text = answer if isinstance(answer, str) else json.dumps(answer, default=str) if answer is not None else ""
    if _is_summary(text):
        return "graceful"
    if scenario.schema and _unparsable(answer):
        return "crashed"
    return "silent"


# -- what the guard added to a request ------------------------------------------------------

_LOOPWARDEN_NOTE = "\n\n[LoopWarden] "


def _size(message: dict[str, Any]) -> int:
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode())


def guard_added_bytes(payload: dict[str, Any]) -> int:
    """Bytes of a request that the guard put there: corrections appended for a retry (with
    the rejected reply echoed before them), notes, and warnings riding on a tool result.
    The agents here never send a second user message (bar smolagents' ``Observation:`` turns,
    its tool results), so every later one is the guard's."""
    messages = [m for m in payload.get("messages") or [] if isinstance(m, dict)]
    added = 0
    users = 0
    echoed: set[int] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        text = _text(message.get("content"))
        result = role == "tool" or (role == "user" and users > 0 and text.startswith("Observation:"))  # smolagents
        whole = (role == "user" and users > 0 and not result) or (
            result and any(text.startswith(marker) for marker in _CORRECTIONS)
        )
        users += role == "user"
        if whole:
            added += _size(message)
            before = index - 1
            if before >= 0 and messages[before].get("role") == "assistant" and before not in echoed:
                echoed.add(before)
                added += _size(messages[before])
        elif result and _LOOPWARDEN_NOTE in text:
            added += len(text[text.index(_LOOPWARDEN_NOTE) :].encode())
    return added
