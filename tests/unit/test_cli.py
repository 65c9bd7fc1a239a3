"""The command line, in process: flags derived from the settings, exit codes and messages of each
command (the subprocess runs of ``serve`` are in tests/integration/test_cli.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from proxy.cli import build_parser, main, policy_schema_json, settings_from_args
from proxy.edge.tenants import hash_key
from proxy.settings import Settings


def serve_flags(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_every_setting_has_a_flag():
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]

    assert {action.dest for action in serve._actions} >= set(Settings.model_fields)


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        pytest.param(["--read-timeout", "7"], "read_timeout", 7.0, id="a-number"),
        pytest.param(["--reuse-port"], "reuse_port", True, id="a-switch-on"),
        pytest.param(["--no-log-contents"], "log_contents", False, id="a-switch-off"),
        pytest.param(["--log-level", "debug"], "log_level", "debug", id="a-choice"),
        pytest.param(["--upstream", "http://up/v1/"], "upstream", "http://up/v1", id="checked-as-the-setting"),
    ],
)
def test_a_flag_sets_its_setting(argv, field, value):
    assert getattr(serve_flags(*argv), field) == value


def test_a_flag_wins_over_its_variable_and_a_variable_fills_what_no_flag_gave(monkeypatch):
    monkeypatch.setenv("LOOPWARDEN_PORT", "9100")
    monkeypatch.setenv("LOOPWARDEN_HOST", "0.0.0.0")

    settings = serve_flags("--port", "9200")

    assert (settings.port, settings.host) == (9200, "0.0.0.0")


def test_a_log_level_not_offered_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--log-level", "loud"])

    assert exited.value.code == 2
    assert "invalid choice: 'loud'" in capsys.readouterr().err


def test_an_invalid_setting_exits_2_without_serving(capsys):
    assert main(["serve", "--port", "8080", "--metrics-port", "8080"]) == 2
    assert "invalid settings" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "stdin", "code", "out"),
    [
        pytest.param(["hash-key", "lw-key"], "", 0, hash_key("lw-key") + "\n", id="the-argument"),
        pytest.param(["hash-key"], "lw-piped\r\n", 0, hash_key("lw-piped") + "\n", id="one-line-of-stdin"),
        pytest.param(["hash-key"], "", 2, "", id="nothing-given"),
    ],
)
def test_hash_key_prints_the_hash_of_the_key_given(argv, stdin, code, out, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))

    assert main(argv) == code
    assert capsys.readouterr().out == out


def test_check_policies_reports_each_file_and_exits_1_when_one_is_bad(tmp_path, capsys):
    (tmp_path / "good.yaml").write_text("max_steps: 5\n")
    (tmp_path / "bad.yaml").write_text("max_steps: many\n")

    assert main(["check-policies", str(tmp_path)]) == 1
    printed = capsys.readouterr()
    assert printed.out.startswith("ok  good  mode=")
    assert "bad.yaml" in printed.err
    assert "1 bad policy file(s)" in printed.err


def test_check_policies_of_no_directory_exits_2(tmp_path, capsys):
    assert main(["check-policies", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_check_policies_passes_the_shipped_policies(capsys):
    assert main(["check-policies", str(Path(__file__).parents[2] / "policies")]) == 0


def test_the_policy_schema_leaves_out_the_name_a_file_gives(capsys):
    assert main(["policy-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "LoopWarden policy"
    assert "name" not in schema["properties"]
    assert "max_steps" in schema["properties"]
    assert policy_schema_json() == json.dumps(schema, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(["replay", "--policy", "default"], 2, "give a recording FILE or --redis-stream", id="no-input"),
        pytest.param(
            ["replay", "--policy", "default", "--redis-stream", "lw:rec"], 2, "needs --redis-url", id="no-redis-url"
        ),
        pytest.param(["replay", "--policy", "nonesuch", "x.jsonl"], 2, "no policy 'nonesuch'", id="unknown-policy"),
        pytest.param(["replay", "--policy", "default", "/no/such/file.jsonl"], 2, "No such file", id="missing-file"),
    ],
)
def test_replay_without_what_it_needs_exits_2_saying_what_is_missing(argv, code, message, monkeypatch, capsys):
    monkeypatch.delenv("LOOPWARDEN_REDIS_URL", raising=False)

    assert main(argv) == code
    assert message in capsys.readouterr().err


def test_replay_of_a_recording_without_the_session_asked_for_exits_1(tmp_path, capsys):
    recording = tmp_path / "empty.jsonl"
    recording.write_text("")

    assert main(["replay", "--policy", "default", str(recording), "--session", "s9"]) == 1
    assert "no recorded session to replay" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--version"], ["--version", "serve"]])
def test_version_prints_the_packages_version_and_exits_0(argv, capsys):
    from proxy.version import VERSION

    with pytest.raises(SystemExit) as exited:
        main(argv)

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"loopwarden {VERSION}\n"
