"""How commands are resolved and their flags turned into params."""

from __future__ import annotations

import sys

import pytest

from radt.cli.run import launcher_parser, parse_listener_options, split_argv
from radt.errors import UsageError
from radt.launch.command import params_from_args, resolve_argv, script_args


@pytest.mark.parametrize(
    ("args", "params"),
    [
        (["--batch-size", "128", "--lr", "0.1"], {"batch-size": "128", "lr": "0.1"}),
        (["--lr=0.1", "--name=a=b"], {"lr": "0.1", "name": "a=b"}),
        (["--amp", "--epochs", "2"], {"amp": "True", "epochs": "2"}),
        (
            ["-b", "64", "--offset", "-3", "--scale", "-.5"],
            {"b": "64", "offset": "-3", "scale": "-.5"},
        ),
        (["data/", "--lr", "1", "extra"], {"lr": "1"}),
        (["--tag", "a", "--tag", "b"], {"tag": "a b"}),
        (["--weird$flag", "1"], {"weird_flag": "1"}),
        (["--", "--lr", "2"], {"lr": "2"}),
    ],
)
def test_flags_become_params_like_original_radt(args, params):
    assert params_from_args(args) == params


def test_long_values_are_cut_to_mlflow_limit():
    assert len(params_from_args(["--x", "y" * 7000])["x"]) == 6000


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["train.py", "--lr", "1"], ["--lr", "1"]),
        (["python", "-u", "-m", "pkg.train", "--lr", "1"], ["--lr", "1"]),
        (["python3.11", "-X", "dev", "train.py", "--lr", "1"], ["--lr", "1"]),
        (
            ["torchrun", "--nproc_per_node", "2", "train.py", "--lr", "1"],
            ["--nproc_per_node", "2", "train.py", "--lr", "1"],
        ),
    ],
)
def test_script_args_skip_the_interpreter_options(command, expected):
    assert script_args(command) == expected


def test_torchrun_style_commands_keep_both_sets_of_flags():
    args = script_args(["torchrun", "--nproc_per_node", "2", "train.py", "--lr", "1"])
    assert params_from_args(args) == {"nproc_per_node": "2", "lr": "1"}


def test_py_file_runs_with_this_interpreter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert resolve_argv(["train.py", "--lr", "1"]) == [sys.executable, "train.py", "--lr", "1"]


def test_other_commands_run_as_given():
    assert resolve_argv(["true", "a b"]) == ["true", "a b"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["missing.py"], "script not found: missing.py"),
        (["no-such-tool-xyz"], "command not found: no-such-tool-xyz"),
        (["./nowhere/tool"], "command not found or not executable: ./nowhere/tool"),
        ([], "no command given"),
    ],
)
def test_unrunnable_commands_are_usage_errors(tmp_path, monkeypatch, command, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=message):
        resolve_argv(command)


@pytest.mark.parametrize(
    ("argv", "own", "command"),
    [
        (["-e", "x", "train.py", "-e", "y"], ["-e", "x"], ["train.py", "-e", "y"]),
        (["--max-time=2", "-l", "top", "--", "-weird"], ["--max-time=2", "-l", "top"], ["-weird"]),
        (["--tag", "a=b", "python", "-m", "m"], ["--tag", "a=b"], ["python", "-m", "m"]),
        (["-e", "x"], ["-e", "x"], []),
    ],
)
def test_radt_options_end_where_the_command_begins(argv, own, command):
    assert split_argv(argv, launcher_parser()) == (own, command)


def test_listener_options_are_grouped_by_listener():
    assert parse_listener_options(["top.per_core=1", "nvml.x=2", "top.y=3"]) == {
        "top": {"per_core": "1", "y": "3"},
        "nvml": {"x": "2"},
    }
