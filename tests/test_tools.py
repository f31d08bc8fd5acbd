"""The one way radT runs a tool (radt.tools) and the one GPU inventory (radt.gpus), on real
child processes and the fake nvidia-smi of tests/fakes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import path_without_nvidia_tools
from radt.listeners._tools import gpus_here

from radt import tools
from radt.gpus import list_gpus

PY = sys.executable


def test_a_tool_that_answers_gives_its_output_and_status():
    result = tools.run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert result.ok and result.returncode == 0 and result.error is None
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert result.check() is result and result.ran() is result
    assert result.value(lambda r: r.stdout.strip(), default="none") == "out"


def test_a_missing_tool_is_a_result_until_the_caller_asks():
    result = tools.run(["no-such-tool-xyz", "-L"])
    assert not result.ok and result.returncode is None and result.missing
    assert result.reason() == "no-such-tool-xyz not found on PATH"
    assert result.value(lambda r: r.stdout, default="n/a") == "n/a"
    with pytest.raises(tools.ToolMissing, match="^no-such-tool-xyz not found on PATH$"):
        result.ran()
    with pytest.raises(tools.ToolMissing):
        result.check()


def test_a_tool_past_its_time_limit_is_killed_with_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time;"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid));"
        "print('started', flush=True); time.sleep(60)"
    )
    result = tools.run([PY, "-c", script], timeout_s=2)
    assert result.returncode is None and not result.ok
    assert result.reason() == f"`{result.command}` did not finish within 2 s"
    assert result.stdout == "started\n"  # what it printed before is kept
    with pytest.raises(tools.ToolError, match="did not finish within 2 s"):
        result.ran()
    child = int(pid_file.read_text())
    done = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True)
    assert done.stdout.strip() in ("", "Z")  # gone, or a zombie waiting for init


def test_a_non_zero_exit_answered_but_is_not_ok():
    result = tools.run([PY, "-c", "import sys; print('half'); sys.exit('Unable to: no access')"])
    assert result.returncode == 1 and result.error is None and not result.ok
    assert result.ran() is result  # it answered: its words are the caller's to read
    assert result.reason() == "exit status 1: Unable to: no access"
    assert result.value(len, default=-1) == -1
    with pytest.raises(tools.ToolError, match=r"failed: half; Unable to: no access$"):
        result.check()


def test_garbage_output_is_kept_as_printed_and_merged_in_order():
    script = (
        "import os;"
        "os.write(1, b'\\xff\\xfe not utf-8\\n');"
        "os.write(2, b'warning\\n'); os.write(1, b'end\\n')"
    )
    result = tools.run([PY, "-c", script], merge_stderr=True)
    assert result.ok and result.stderr == ""
    assert result.stdout == "\ufffd\ufffd not utf-8\nwarning\nend\n"
    assert result.first_line() == "\ufffd\ufffd not utf-8" and result.last_line() == "end"
    assert result.summary() == "\ufffd\ufffd not utf-8; warning; end"


def test_stdin_and_environment_reach_the_tool():
    result = tools.run(
        [PY, "-c", "import os, sys; print(sys.stdin.read().strip(), os.environ['WHO'])"],
        stdin="get_server_list\n",
        env={"WHO": "radt", "PATH": "/usr/bin:/bin"},
    )
    assert result.check().stdout == "get_server_list radt\n"


# --------------------------------------------------------------------------- the inventory


def test_inventory_lists_the_fake_gpus(fakes_on_path):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    gpus = list_gpus()
    assert [(g.index, g.uuid, g.migs) for g in gpus] == [
        (0, "GPU-faae5314-b87e-87c0-400b-b7cfb9e7b310", []),
        (1, "GPU-20af7308-7522-d66f-fe01-fb6f0551a4b9", []),
    ]
    assert {g.name for g in gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert gpus_here() == gpus


@pytest.mark.parametrize("uuids", ["", "r450"])
def test_inventory_lists_mig_devices_under_their_gpu(fakes_on_path, tmp_path, uuids):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_STATE", str(tmp_path / "state.json"))
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_MIG", "1")
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_MIG_UUIDS", uuids)
    tools.run(["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.20gb,1g.5gb", "-C"]).check()
    (gpu,) = list_gpus()
    assert gpu.index == 0 and gpu.uuid == "GPU-faae5314-b87e-87c0-400b-b7cfb9e7b310"
    assert sorted(m.name for m in gpu.migs) == ["1g.5gb", "3g.20gb"]
    assert [m.index for m in gpu.migs] == [0, 1]
    prefix = f"MIG-{gpu.uuid}/" if uuids else "MIG-"
    assert all(m.uuid.startswith(prefix) for m in gpu.migs)


def test_inventory_says_why_it_has_no_gpu(fakes_on_path, clean_env):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "0")  # exit status 6, as the real one
    with pytest.raises(tools.ToolError, match="^`nvidia-smi -L` failed: No devices were found$"):
        list_gpus()
    with pytest.raises(tools.ToolError, match="^no NVIDIA GPU$"):
        gpus_here()
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "1")
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_FAIL", "nvml")
    with pytest.raises(tools.ToolError, match="^`nvidia-smi -L` failed: NVIDIA-SMI has failed"):
        list_gpus()
    with pytest.raises(tools.ToolError) as why:
        gpus_here()
    assert str(why.value) == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
    )
    clean_env.setenv("PATH", path_without_nvidia_tools())
    with pytest.raises(tools.ToolMissing, match="^nvidia-smi not found on PATH$"):
        list_gpus()
