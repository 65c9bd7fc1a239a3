"""``loopwarden`` command line: ``serve``, ``check-policies``, ``policy-schema``, ``policy-reference``, ``hash-key``,
``replay``.

Flags are derived from :class:`proxy.settings.Settings`, one per field, so every setting
has a flag and a ``LOOPWARDEN_*`` variable with the same meaning. Flags win over variables.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from redis.exceptions import RedisError

from proxy.edge.listening import ListenError
from proxy.edge.tenants import TenantsFileError, hash_key
from proxy.observe.logs import configure_logging, log_event
from proxy.policy.loader import BUNDLED_POLICIES, PolicyError, load_policies, load_policy_file, policy_files
from proxy.policy.models import Policy
from proxy.policy.reference import policy_reference_markdown
from proxy.settings import Settings
from proxy.version import VERSION

__all__ = ["build_parser", "main", "policy_schema_json", "settings_from_args"]


def policy_schema_json() -> str:
    """The JSON Schema of a policy file (``name`` comes from the file name, so it is left out)."""
    schema = Policy.model_json_schema()
    schema["properties"].pop("name", None)
    schema["title"] = "LoopWarden policy"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _check_policies(directory: Path) -> int:
    """Check every policy file and report each one, good or bad: 1 if any is bad."""
    if not directory.is_dir():
        print(f"loopwarden: {directory}: not a directory", file=sys.stderr)
        return 2
    bad = 0
    for path in policy_files(directory):
        try:
            policy = load_policy_file(path)
        except PolicyError as exc:
            bad += 1
            print(f"loopwarden: {exc}", file=sys.stderr)
            continue
        print(f"ok  {policy.name}  mode={policy.mode} state_fail_mode={policy.state_fail_mode}")
    if bad:
        print(f"loopwarden: {bad} bad policy file(s) in {directory}", file=sys.stderr)
        return 1
    return 0


def _read_key(given: str | None) -> str | None:
    """The key to hash: the argument, else a prompt on a terminal, else one line of stdin."""
    if given:
        return given
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass("proxy key: ")
    line = sys.stdin.readline() if sys.stdin is not None else ""
    return line.rstrip("\r\n") or None


def _hash_key(given: str | None) -> int:
    try:
        key = _read_key(given)
    except (EOFError, KeyboardInterrupt):
        key = None
    if not key:
        print("loopwarden: no key given (pass it as an argument, type it, or pipe it on stdin)", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0


def _default_policies_dir() -> Path:
    """The directory ``serve`` loads when given no ``--policies-dir``."""
    configured = os.environ.get("LOOPWARDEN_POLICIES_DIR")
    return Path(configured) if configured else BUNDLED_POLICIES


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, info in Settings.model_fields.items():
        annotation = info.annotation
        args = typing.get_args(annotation)
        is_optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
        base = next((a for a in args if a is not type(None)), annotation) if is_optional else annotation
        help_text = f"{info.description} [env LOOPWARDEN_{name.upper()}; default {info.default!r}]"
        if base is bool:
            parser.add_argument(
                _flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif typing.get_origin(base) is typing.Literal:
            parser.add_argument(_flag(name), dest=name, choices=typing.get_args(base), default=None, help=help_text)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, metavar=name.upper(), help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopwarden", description="OpenAI-compatible guarding proxy for LLM agents.")
    parser.add_argument("--version", action="version", version=f"loopwarden {VERSION}", help="Print the version.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Run the proxy.")
    _add_settings_flags(serve)
    hashing = commands.add_parser("hash-key", help="Print the SHA-256 of a proxy key for the tenants file.")
    hashing.add_argument(
        "key", nargs="?", help="The key (when omitted: a prompt on a terminal, else the first line of stdin)."
    )
    check = commands.add_parser("check-policies", help="Validate the policy files of a directory, then exit.")
    check.add_argument(
        "directory",
        nargs="?",
        type=Path,
        help="Policy directory (default: what serve loads: $LOOPWARDEN_POLICIES_DIR, else the shipped policies).",
    )
    commands.add_parser("policy-schema", help="Print the JSON Schema of policy files.")
    commands.add_parser("policy-reference", help="Print the policy reference page (Markdown) made from that schema.")
    replay = commands.add_parser(
        "replay", help="Run recorded sessions through a policy's guards offline and show what it would have done."
    )
    replay.add_argument("file", nargs="?", help="A JSON Lines recording (omit with --redis-stream).")
    replay.add_argument("--policy", required=True, help="The policy to replay with (a name, or a .yaml file).")
    replay.add_argument(
        "--policies-dir",
        type=Path,
        help="Where named policies live (default: $LOOPWARDEN_POLICIES_DIR, else the shipped policies).",
    )
    replay.add_argument("--session", help="Replay only this session id (default: every session recorded).")
    replay.add_argument(
        "--judge",
        choices=("recorded", "done", "not_done"),
        default="recorded",
        help="What the judge says: as recorded (default), always done, or always not done.",
    )
    replay.add_argument("--redis-stream", help="Read the recording from this Redis stream instead of a file.")
    replay.add_argument("--redis-url", help="The Redis holding --redis-stream [env LOOPWARDEN_REDIS_URL].")
    return parser


def _replay_policy(name: str, directory: Path) -> Policy:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_policy_file(path)
    policy = load_policies(directory).get(name)
    if policy is None:
        raise PolicyError(f"no policy {name!r} in {directory}")
    return policy


def _replay(args: argparse.Namespace) -> int:
    from proxy.edge.replay import format_result, read_records, read_stream, replay_session, sessions_of

    try:
        policy = _replay_policy(args.policy, args.policies_dir or _default_policies_dir())
        if args.redis_stream:
            url = args.redis_url or os.environ.get("LOOPWARDEN_REDIS_URL")
            if not url:
                raise ValueError("--redis-stream needs --redis-url (or LOOPWARDEN_REDIS_URL)")
            records = asyncio.run(read_stream(url, args.redis_stream))
        elif args.file:
            with Path(args.file).open() as handle:
                records = read_records(handle)
        else:
            raise ValueError("give a recording FILE or --redis-stream")
    except (OSError, ValueError, RedisError) as exc:
        print(f"loopwarden: {exc}", file=sys.stderr)
        return 2
    sessions = sessions_of(records)
    if args.session is not None:
        sessions = {args.session: sessions[args.session]} if args.session in sessions else {}
    if not sessions:
        print("loopwarden: no recorded session to replay", file=sys.stderr)
        return 1
    for number, (session, requests) in enumerate(sessions.items()):
        result = asyncio.run(replay_session(session, requests, policy, judge=args.judge))
        print(("\n" if number else "") + format_result(result))
    return 0


def settings_from_args(namespace: argparse.Namespace) -> Settings:
    """Settings from flags given, then environment, then defaults."""
    given: dict[str, Any] = {
        name: getattr(namespace, name) for name in Settings.model_fields if getattr(namespace, name, None) is not None
    }
    return Settings(**given)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "hash-key":
        return _hash_key(args.key)
    if args.command == "check-policies":
        return _check_policies(args.directory or _default_policies_dir())
    if args.command == "policy-schema":
        sys.stdout.write(policy_schema_json())
        return 0
    if args.command == "policy-reference":
        sys.stdout.write(policy_reference_markdown(json.loads(policy_schema_json())))
        return 0
    if args.command == "replay":
        return _replay(args)
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"loopwarden: invalid settings: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    log_event("settings", settings.loggable(), logging.DEBUG)
    from proxy.edge.server import build_server  # deferred: importing uvicorn is not free

    try:
        server = build_server(settings)
        server.bind()
    except (TenantsFileError, PolicyError, ValueError) as exc:
        print(f"loopwarden: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        print(f"loopwarden: {exc.strerror}", file=sys.stderr)
        return 2
    log_event(
        "serving",
        {
            "version": VERSION,
            "host": settings.host,
            "port": server.port,
            "metrics_host": server.metrics.host,
            "metrics_port": server.metrics.port,
        },
    )
    server.run()
    return 0
