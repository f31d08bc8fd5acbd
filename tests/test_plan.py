"""Plans: reading, validating and writing back radT's CSV of workloads."""

from __future__ import annotations

import csv
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from radt.errors import UsageError
from radt.plans.model import (
    Collocation,
    Plan,
    PlanError,
    Problem,
    Row,
    Workload,
    format_problems,
)
from radt.plans.read import parse_collocation, read_plan
from radt.plans.writeback import lock_path, write_results

REPO = Path(__file__).resolve().parents[1]

ORIGINAL = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
1, 1, , , 0, 3g.40gb, examples/train.py, smi+top, --batch-size 64
1, 1, , , 0, 4g.40gb, examples/train.py, smi+top, --batch-size 128
1, 2, , , 0, mps:50, examples/train.py, -, --lr 0.1
"""

HEADER = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"


@pytest.fixture
def work(tmp_path, tmp_path_factory, monkeypatch) -> Path:
    """A current folder with examples/train.py in it (radT's home, with the plan locks, apart)."""
    monkeypatch.setenv("RADT_HOME", str(tmp_path_factory.mktemp("radt-home")))
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "train.py").write_text(
        "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, text: str, name: str = "plan.csv") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def problems_of(path: Path) -> str:
    with pytest.raises(PlanError) as info:
        read_plan(path)
    return str(info.value)


def rows_plan(work: Path, *rows: str) -> Path:
    return write(work, HEADER + "".join(row + "\n" for row in rows))


# ------------------------------------------------------------------ good plans


def test_original_example(work):
    plan = read_plan(write(work, ORIGINAL))
    assert [(w.experiment, w.name) for w in plan.workloads] == [("1", "1"), ("1", "2")]
    first, second = plan.workloads
    a, b = first.rows
    assert (a.line, b.line, second.rows[0].line) == (2, 3, 4)
    assert (a.letter, b.letter, second.rows[0].letter) == ("A", "B", "A")
    assert a.collocation == Collocation("mig", mig_profile="3g.40gb")
    assert b.collocation.label == "4g.40gb"
    assert second.rows[0].collocation == Collocation("mps", mps_thread_pct=50)
    assert a.devices == ["0"]
    assert a.listeners == "smi+top"
    assert second.rows[0].listeners is None
    assert a.params == ["--batch-size", "64"]
    assert a.command == ["examples/train.py", "--batch-size", "64"]
    assert (a.status, a.run, a.power_limit_w, a.env, a.name) == ("", "", None, {}, "")
    assert first.status == "" and plan.pending() == plan.workloads


def test_rows_of_a_workload_are_grouped_even_when_apart(work):
    path = rows_plan(
        work,
        "e, w1, , , 0, naive, examples/train.py, , ",
        "e, w2, , , 1, naive, examples/train.py, , ",
        "e, w1, , , 0, naive, examples/train.py, , --seed 2",
        "f, w1, , , 0, naive, examples/train.py, , ",
    )
    plan = read_plan(path)
    assert [w.label for w in plan.workloads] == ["e/w1", "e/w2", "f/w1"]
    assert [(r.line, r.letter) for r in plan.workloads[0].rows] == [(2, "A"), (4, "B")]
    assert [r.line for r in plan.rows] == [2, 4, 3, 5]


def test_letters_go_on_after_z(work):
    rows = [f"1, 1, , , 0, naive, examples/train.py, , --i {i}" for i in range(28)]
    plan = read_plan(rows_plan(work, *rows))
    letters = [row.letter for row in plan.workloads[0].rows]
    assert letters[:3] == ["A", "B", "C"] and letters[25:] == ["Z", "AA", "AB"]


def test_only_the_required_columns(work):
    plan = read_plan(write(work, "Experiment,Workload,File\nexp,w,examples/train.py\n"))
    row = plan.rows[0]
    assert row.collocation == Collocation("none")
    assert (row.devices, row.listeners, row.params, row.status, row.run) == ([], None, [], "", "")


def test_header_is_case_and_space_tolerant_and_new_columns(work):
    text = (
        " experiment ,WORKLOAD, name, file ,Power Limit, env ,collocation\n"
        "1, 1, baseline, examples/train.py, 300W, OMP_NUM_THREADS=4 TAG='a b', -\n"
        "1, 2, , examples/train.py, 250.5, -, none\n"
    )
    plan = read_plan(write(work, text))
    first, second = plan.rows
    assert first.name == "baseline"
    assert first.power_limit_w == 300.0 and second.power_limit_w == 250.5
    assert first.env == {"OMP_NUM_THREADS": "4", "TAG": "a b"} and second.env == {}
    assert plan.workloads[0].power_limit_w == 300.0


def test_comments_and_blank_lines_are_skipped_but_counted(work):
    text = (
        "# a study of MIG vs MPS\n"
        + HEADER
        + "\n"
        + "# baseline first\n"
        + "1, 1, , , 0, none, examples/train.py, , \n"
        + "   \n"
        + "1, 2, , , 0, mpss, examples/train.py, , \n"
    )
    message = problems_of(write(work, text))
    assert "plan.csv line 7: unknown collocation mode 'mpss'" in message


def test_line_numbers_after_a_quoted_cell_over_two_lines(work):
    text = HEADER + '1, 1, , , 0, naive, examples/train.py, , "--note\nsecond line"\n'
    text += "1, 2, , , 0, bogus, examples/train.py, , \n"
    message = problems_of(write(work, text))
    assert "line 4: unknown collocation mode 'bogus'" in message


def test_original_status_cells_are_understood(work):
    path = rows_plan(
        work,
        "1, 1, FINISHED myrun (0_A), abc, 0, -, examples/train.py, , ",
        "1, 2, failed, def, 1, -, examples/train.py, , ",
        "1, 3, -, -, 2, -, examples/train.py, , ",
    )
    plan = read_plan(path)
    assert [w.status for w in plan.workloads] == ["FINISHED", "FAILED", ""]
    assert plan.rows[0].run == "abc" and plan.rows[2].run == ""


@pytest.mark.parametrize(
    ("cell", "devices"),
    [
        ("-", []),
        ("", []),
        ("0", ["0"]),
        ("0+1", ["0", "1"]),
        ('"0,1"', ["0", "1"]),
        ("GPU-5c4f1b9a-1111-2222-3333-444455556666", ["GPU-5c4f1b9a-1111-2222-3333-444455556666"]),
        ("MIG-0a1b2c3d-1111-2222-3333-444455556666", ["MIG-0a1b2c3d-1111-2222-3333-444455556666"]),
    ],
)
def test_devices(work, cell, devices):
    plan = read_plan(rows_plan(work, f"1, 1, , , {cell}, naive, examples/train.py, , "))
    assert plan.rows[0].devices == devices


def test_file_may_be_a_command(work):
    path = rows_plan(
        work,
        'x, 1, , , 0, -, python -m pkg.train --config "a b.yaml", , --lr 1',
        "x, 2, , , 0, -, python -u examples/train.py, , --lr 1",
    )
    plan = read_plan(path)
    assert plan.rows[0].command == [
        "python",
        "-m",
        "pkg.train",
        "--config",
        "a b.yaml",
        "--lr",
        "1",
    ]
    assert plan.rows[1].command == ["python", "-u", "examples/train.py", "--lr", "1"]


def test_a_byte_order_mark_is_ignored_and_kept(work):
    path = work / "plan.csv"
    path.write_bytes(b"\xef\xbb\xbf" + ORIGINAL.encode())
    plan = read_plan(path)
    write_results(plan, plan.workloads[1], {4: ("FINISHED", "r1")})
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfExperiment, Workload")
    assert b"1, 2, FINISHED, r1, 0, mps:50" in data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-", Collocation("none")),
        ("", Collocation("none")),
        ("none", Collocation("none")),
        ("NAIVE", Collocation("naive")),
        (" mps ", Collocation("mps")),
        ("mps:50", Collocation("mps", mps_thread_pct=50)),
        ("mps:100", Collocation("mps", mps_thread_pct=100)),
        ("mps:1", Collocation("mps", mps_thread_pct=1)),
        ("1g.5gb", Collocation("mig", mig_profile="1g.5gb")),
        ("1g.10gb+me", Collocation("mig", mig_profile="1g.10gb+me")),
        ("3g.40gb", Collocation("mig", mig_profile="3g.40gb")),
        ("7g.141gb", Collocation("mig", mig_profile="7g.141gb")),
        ("MIG 2g.35gb", Collocation("mig", mig_profile="2g.35gb")),
    ],
)
def test_parse_collocation(text, expected):
    assert parse_collocation(text) == expected


@pytest.mark.parametrize(
    ("collocation", "label"),
    [
        (Collocation("none"), "none"),
        (Collocation("naive"), "naive"),
        (Collocation("mps"), "mps"),
        (Collocation("mps", mps_thread_pct=50), "mps:50"),
        (Collocation("mig", mig_profile="3g.40gb"), "3g.40gb"),
    ],
)
def test_collocation_label(collocation, label):
    assert collocation.label == label
    assert parse_collocation(label) == collocation


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("mpss", "unknown collocation mode 'mpss' (use -, none, naive, mps, mps:PCT"),
        ("mig", "unknown collocation mode 'mig'"),
        ("mps:0", "from 1 to 100"),
        ("mps:101", "from 1 to 100"),
        ("mps:half", "from 1 to 100"),
        ("3g.40", "MIG profile '3g.40' is not valid"),
        ("3g40gb", "unknown collocation mode '3g40gb'"),
        ("1c.3g.40gb", "compute-instance profile; give the GPU-instance profile instead, e.g. 3g"),
    ],
)
def test_parse_collocation_rejects(text, fragment):
    with pytest.raises(ValueError) as info:
        parse_collocation(text)
    assert fragment in str(info.value)


def test_our_scanner_reads_what_the_csv_module_reads(work):
    lines = [
        'a, b , "c, d", "e ""q"" f",  g',
        'x,,"",  "  ", y  ',
        '1, "multi\nline", 3',
        'p, q"r, s',
    ]
    path = write(work, "Experiment,Workload,File,Params,Name\n" + "\n".join(lines) + "\n")
    from radt.plans.scanner import physical_lines, scan

    records, problems = scan(physical_lines(path.read_text()))
    reader = csv.reader(path.open(newline=""), skipinitialspace=True, strict=True)
    expected = [[cell.strip() for cell in cells] for cells in reader]
    assert problems == []
    assert [record.cells for record in records] == expected


# ------------------------------------------------------------------ security


def test_params_never_pass_through_a_shell(work):
    path = rows_plan(work, "1, 1, , , 0, -, examples/train.py, , ; rm -rf ~ $(touch pwned) `id`")
    row = read_plan(path).rows[0]
    assert row.params == [";", "rm", "-rf", "~", "$(touch", "pwned)", "`id`"]
    out = subprocess.run(
        [sys.executable, *row.command], capture_output=True, text=True, check=True, cwd=work
    )
    assert json.loads(out.stdout) == row.params
    assert not (work / "pwned").exists()


# ------------------------------------------------------------------ problems


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ("1, 1, , , 0, mpss, examples/train.py, , ", "unknown collocation mode 'mpss'"),
        ("1, 1, , , 0, 3g.4xgb, examples/train.py, , ", "MIG profile '3g.4xgb' is not valid"),
        ("1, 1, , , 0, mps:0, examples/train.py, , ", "must be a whole number from 1 to 100"),
        ("1, 1, , , 0, mps:150, examples/train.py, , ", "must be a whole number from 1 to 100"),
        ("1, 1, , , 0, naive, , , --lr 1", "missing File"),
        ("1, 1, , , 0, naive, -, , --lr 1", "missing File"),
        ("1, 1, , , 0, naive, missing.py, , ", "File 'missing.py' not found"),
        ("1, 1, , , 0, naive, python nope/x.py, , ", "File 'nope/x.py' not found"),
        ('1, 1, , , 0, naive, examples/train.py, , --msg "unclosed', "Params"),
        ("1, 1, , , 0, naive, 'examples/train.py, , ", "File"),
        ("1, 1, , , 0, naive, examples/train.py, top++nvml, ", "Listeners 'top++nvml'"),
        ("1, 1, , , cuda:0, naive, examples/train.py, , ", "unknown device 'cuda:0'"),
        (", 1, , , 0, naive, examples/train.py, , ", "missing Experiment"),
        ("1, -, , , 0, naive, examples/train.py, , ", "missing Workload"),
        ("1, 1, , , -, 3g.40gb, examples/train.py, , ", "needs exactly one GPU in Devices"),
        ("1, 1, , , 0+1, 3g.40gb, examples/train.py, , ", "needs exactly one GPU in Devices"),
        (
            "1, 1, , , MIG-0a1b2c3d-1111, 3g.40gb, examples/train.py, , ",
            "needs a whole GPU in Devices",
        ),
        ("1, 1, , , 0, naive, examples/train.py, , , extra", "10 cells, but the header names 9"),
        (
            "1, 1, , , 0,1, naive, examples/train.py, , ",
            'quote a cell that contains commas, e.g. "0,1"',
        ),
    ],
)
def test_each_row_problem_names_its_line(work, row, fragment):
    path = rows_plan(work, "1, 0, , , 0, naive, examples/train.py, , ", row)
    message = problems_of(path)
    assert message.startswith(f"{path} has 1 problem; nothing was started:\n")
    assert f"{path} line 3: " in message
    assert fragment in message


@pytest.mark.parametrize("value", ["-5", "0", "abc", "nan", "inf", "250 kW"])
def test_power_limit_must_be_a_positive_number(work, value):
    text = f"Experiment, Workload, File, PowerLimit\n1, 1, examples/train.py, {value}\n"
    message = problems_of(write(work, text))
    assert f"line 2: PowerLimit '{value}' is not a positive number of watts" in message


def test_job_and_warmup_columns(work):
    text = (
        "Experiment, Workload, File, Params, Job, Warmup Epochs, warmup_s\n"
        "1, 1, examples/train.py, --seed 1, resnet18 cifar, 2, -\n"
        "1, 2, examples/train.py, , -, , 12.5\n"
        "1, 3, examples/train.py, , , 1, \n"
    )
    rows = read_plan(write(work, text)).rows
    assert [(r.job, r.warmup_epochs, r.warmup_s) for r in rows] == [
        ("resnet18 cifar", 2, None),
        (None, None, 12.5),
        (None, 1, None),
    ]


@pytest.mark.parametrize(
    ("cells", "fragment"),
    [
        ("job, 0, ", "WarmupEpochs '0' is not a whole number of epochs, at least 1"),
        ("job, 1.5, ", "WarmupEpochs '1.5' is not a whole number of epochs"),
        ("job, two, ", "WarmupEpochs 'two' is not a whole number of epochs"),
        ("job, , -3", "WarmupS '-3' is not a number of seconds, 0 or more"),
        ("job, , soon", "WarmupS 'soon' is not a number of seconds"),
        ("job, , nan", "WarmupS 'nan' is not a number of seconds"),
        ("job, 2, 30", "give WarmupEpochs or WarmupS, not both"),
        ("x" * 251 + ", , ", "Job must be one line of at most 250 characters"),
    ],
)
def test_job_and_warmup_cells_are_checked_with_their_line(work, cells, fragment):
    text = (
        "Experiment, Workload, File, Job, WarmupEpochs, WarmupS\n"
        "1, 1, examples/train.py, job, 1, \n"
        f"1, 2, examples/train.py, {cells}\n"
    )
    path = write(work, text)
    message = problems_of(path)
    assert message.startswith(f"{path} has 1 problem; nothing was started:\n")
    assert f"{path} line 3: {fragment}" in message


def test_the_example_collocation_plan_gives_every_client_its_job():
    rows = read_plan(REPO / "examples" / "collocation.csv", cwd=REPO).rows
    assert len(rows) == 3
    assert {row.job for row in rows} == {"cnn-2048"}
    assert "--seed" in rows[2].command


@pytest.mark.parametrize("value", ["A", "1A=2", "=x", "A-B=1"])
def test_env_must_be_key_value(work, value):
    text = f"Experiment, Workload, File, Env\n1, 1, examples/train.py, OK=1 {value}\n"
    message = problems_of(write(work, text))
    assert f"line 2: Env '{value}' is not KEY=VALUE" in message


def test_file_is_resolved_from_the_current_folder_not_the_plan_folder(work, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("plans")
    (elsewhere / "local.py").write_text("")
    text = "Experiment, Workload, File\n1, 1, local.py\n1, 2, examples/train.py\n"
    path = write(elsewhere, text)
    message = problems_of(path)
    assert f"{path} line 2: File 'local.py' not found" in message
    assert "line 3" not in message
    only_local = write(elsewhere, "Experiment, Workload, File\n1, 1, local.py\n", "b.csv")
    assert read_plan(only_local, cwd=elsewhere).rows[0].file == "local.py"


def test_malformed_csv_text_after_closing_quote(work):
    path = rows_plan(
        work,
        '1, 1, , , 0, naive, examples/train.py, , "--a" b',
        "1, 2, , , 0, mpss, examples/train.py, , ",
    )
    message = problems_of(path)
    assert "line 2: malformed CSV: text after a closing quote in cell 9" in message
    assert "line 3: unknown collocation mode 'mpss'" in message


def test_malformed_csv_unterminated_quote(work):
    path = rows_plan(
        work,
        "1, 1, , , 0, mpss, examples/train.py, , ",
        '1, 2, , , 0, naive, examples/train.py, , "--a 1',
        "1, 3, , , 0, naive, examples/train.py, , ",
    )
    message = problems_of(path)
    assert "line 3: malformed CSV: unterminated quote in cell 9" in message
    assert "line 2: unknown collocation mode" in message


def test_space_after_a_closing_quote_is_fine(work):
    path = rows_plan(work, '1, 1, , , "0,1" , naive, examples/train.py, , "--a 1"  ')
    row = read_plan(path).rows[0]
    assert row.devices == ["0", "1"] and row.params == ["--a", "1"]


def test_unknown_column_with_a_suggestion(work):
    text = "Experiment, Workload, Colocation, File, Color\n1, 1, mps, examples/train.py, red\n"
    message = problems_of(write(work, text))
    assert "line 1: unknown column 'Colocation'" in message
    assert "did you mean 'Collocation'?" in message
    assert "line 1: unknown column 'Color'" in message
    assert "has 2 problems" in message


def test_duplicate_column(work):
    message = problems_of(write(work, "Experiment, Workload, File, file\n1, 1, a.py, b.py\n"))
    assert "line 1: duplicate column 'file' (columns 3 and 4)" in message


def test_missing_required_columns(work):
    message = problems_of(write(work, "Experiment, Devices\n1, 0\n"))
    assert "line 1: missing columns Workload, File (required: Experiment, Workload, File)" in (
        message
    )


def test_a_plan_without_a_header(work):
    message = problems_of(write(work, "1, 1, , , 0, naive, examples/train.py, , \n"))
    assert "line 1: the first row is not a header" in message
    assert message.count("\n") == 1


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing yet\n"])
def test_empty_plan(work, text):
    message = problems_of(write(work, text))
    assert "the plan is empty" in message


def test_header_without_rows(work):
    message = problems_of(write(work, HEADER + "# 1, 1, , , 0, naive, examples/train.py, , \n"))
    assert "line 1: the plan has a header but no rows" in message


def test_plan_not_found_or_not_text(work):
    with pytest.raises(UsageError, match="plan not found"):
        read_plan(work / "nope.csv")
    (work / "bin.csv").write_bytes(HEADER.encode() + b"1, 1, \xff\xfe\n")
    with pytest.raises(PlanError, match="line 2: not UTF-8 text"):
        read_plan(work / "bin.csv")


def test_a_plan_with_many_problems_reports_them_all(work):
    text = (
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, "
        "PowerLimit, Env\n"
        "1, 1, , , 0, mpss, examples/train.py, , , , \n"
        "1, 1, , , 0, naive, , , , , \n"
        "1, 2, , , 0, naive, nothere.py, , , -3, \n"
        "# fine\n"
        "1, 3, , , 0, mps:500, examples/train.py, , --x 'open, , NOEQUALS\n"
        '1, 4, , , 0, naive, examples/train.py, , "a" b, , \n'
    )
    path = write(work, text)
    with pytest.raises(PlanError) as info:
        read_plan(path)
    message = str(info.value)
    lines = message.splitlines()
    assert lines[0] == f"{path} has 8 problems; nothing was started:"
    assert [p.line for p in info.value.problems] == sorted(p.line for p in info.value.problems)
    numbers = [int(line.split(" line ")[1].split(":")[0]) for line in lines[1:]]
    assert numbers == [2, 3, 4, 4, 6, 6, 6, 7]
    assert "line 3: missing File" in message
    assert "line 4: File 'nothere.py' not found" in message
    assert "line 4: PowerLimit '-3'" in message
    assert "line 6: Env 'NOEQUALS' is not KEY=VALUE" in message
    assert "line 7: malformed CSV" in message


def test_format_problems():
    text = format_problems("p.csv", [Problem(3, "b"), Problem(None, "a"), Problem(2, "c")])
    assert text.splitlines() == [
        "p.csv has 3 problems; nothing was started:",
        "p.csv: a",
        "p.csv line 2: c",
        "p.csv line 3: b",
    ]
    assert isinstance(PlanError("p.csv", [Problem(1, "x")]), UsageError)


# ------------------------------------------------------- workloads that clash


@pytest.mark.parametrize(
    ("first", "second", "fragment"),
    [
        ("0, none", "0, naive", "uses GPU 0, which line 2 has to itself (collocation none"),
        ("0, naive", "0, none", "collocation none means the run has its GPU to itself"),
        ("-, none", "1, naive", "collocation none"),
        ("0, mps", "0, 3g.40gb", "collocation 3g.40gb cannot share GPU 0 with mps on line 2"),
        ("0, naive", "0, mps:30", "collocation mps:30 cannot share GPU 0 with naive on line 2"),
        ("0+1, naive", "1, mps", "cannot share GPU 1"),
        ("0, 4g.40gb", "0, 4g.40gb", "need 8 compute slices; a GPU has at most 7"),
    ],
)
def test_rows_that_cannot_share_a_gpu(work, first, second, fragment):
    path = rows_plan(
        work,
        f"1, 1, , , {first}, examples/train.py, , ",
        f"1, 1, , , {second}, examples/train.py, , ",
    )
    message = problems_of(path)
    assert "line 3: " in message and fragment in message


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("0, none", "1, none"),  # two baselines, each alone on its own GPU
        ("0, mps", "1, 3g.40gb"),
        ("0, mps:50", "0, mps:20"),
        ("0, naive", "0, naive"),
        ("0, 3g.40gb", "0, 4g.40gb"),
        ("0, 1g.10gb", "1, 7g.80gb"),
    ],
)
def test_rows_that_can_run_together(work, first, second):
    path = rows_plan(
        work,
        f"1, 1, , , {first}, examples/train.py, , ",
        f"1, 1, , , {second}, examples/train.py, , ",
    )
    assert len(read_plan(path).workloads[0].rows) == 2


def test_a_none_row_in_another_workload_is_fine(work):
    path = rows_plan(
        work,
        "1, base, , , 0, none, examples/train.py, , ",
        "1, shared, , , 0, naive, examples/train.py, , ",
        "1, shared, , , 0, naive, examples/train.py, , ",
    )
    assert len(read_plan(path).workloads) == 2


def test_power_limit_must_agree_on_a_shared_gpu(work):
    text = (
        "Experiment, Workload, Devices, Collocation, File, PowerLimit\n"
        "1, 1, 0, naive, examples/train.py, 250\n"
        "1, 1, 0, naive, examples/train.py, 300\n"
        "1, 2, 0, naive, examples/train.py, 250\n"
        "1, 2, 1, naive, examples/train.py, 300\n"
        "1, 3, 0, naive, examples/train.py, 250\n"
        "1, 3, 0, naive, examples/train.py, -\n"
    )
    message = problems_of(write(work, text))
    assert "line 3: PowerLimit 300 W differs from 250 W on line 2 for GPU 0" in message
    assert "has 1 problem" in message
    fixed = read_plan(write(work, text.replace("1, 1, 0, naive, examples/train.py, 300", "")))
    two, three = fixed.workloads[1], fixed.workloads[2]
    assert two.power_limit_w is None and two.power_limits_w == {"0": 250.0, "1": 300.0}
    assert three.power_limit_w == 250.0


# ------------------------------------------------------------------ pending


def make_workload(*statuses: str) -> Workload:
    rows = [
        Row(
            line=i + 2,
            experiment="1",
            workload="1",
            status=status,
            run="",
            devices=[],
            collocation=Collocation("naive"),
            file="x.py",
            listeners=None,
            params=[],
            power_limit_w=None,
            env={},
        )
        for i, status in enumerate(statuses)
    ]
    return Workload("1", "1", rows)


@pytest.mark.parametrize(
    ("statuses", "aggregate"),
    [
        (("",), ""),
        (("", ""), ""),
        (("FINISHED", "FINISHED"), "FINISHED"),
        (("FINISHED", "FAILED"), "FAILED"),
        (("FAILED", "FAILED"), "FAILED"),
        (("FINISHED", ""), ""),
        (("FAILED", ""), ""),
        (("FAILED", "KILLED"), "KILLED"),
        (("RUNNING", "FINISHED"), "RUNNING"),
    ],
)
def test_workload_status(statuses, aggregate):
    assert make_workload(*statuses).status == aggregate


def test_pending_skips_finished_and_failed_unless_rerun():
    labels = ["", "FINISHED", "FAILED", "KILLED", "RUNNING"]
    workloads = [make_workload(status) for status in labels]
    plan = Plan(Path("plan.csv"), workloads)
    assert [w.status for w in plan.pending()] == ["", "KILLED", "RUNNING"]
    assert [w.status for w in plan.pending(rerun=True)] == ["", "FAILED", "KILLED", "RUNNING"]


def test_pending_after_a_re_read(work):
    path = write(work, ORIGINAL)
    plan = read_plan(path)
    write_results(plan, plan.workloads[0], {2: ("FINISHED", "r1"), 3: ("FAILED", "r2")})
    write_results(plan, plan.workloads[1], {4: ("FINISHED", "r3")})
    again = read_plan(path)
    assert again.pending() == []
    assert [w.label for w in again.pending(rerun=True)] == ["1/1"]


# ------------------------------------------------------------------ record


def test_record_changes_only_status_and_run(work):
    text = (
        "# MIG vs MPS, run on the H100 box\n"
        "Experiment ,Workload, Name, Status, Run, Devices, Collocation, File, Listeners, "
        "Params, PowerLimit, Env\n"
        "\n"
        '1, 1, base, , , 0, 3g.40gb, examples/train.py, smi+top, "--a 1, --b 2", 250, A=1\n'
        "1, 1, two,  -  , -, 0, 4g.40gb, examples/train.py, smi+top, --batch-size 128, 250, \n"
        "# later\n"
        "1, 2, , , , 0, mps:50, examples/train.py, -, --lr 0.1, , \n"
    )
    path = write(work, text)
    plan = read_plan(path)
    workload = plan.workloads[0]
    write_results(plan, workload, {4: ("FINISHED", "0123abcd"), 5: ("failed", "4567ef")})
    expected = text.replace("base, , ,", "base, FINISHED, 0123abcd,").replace(
        "two,  -  , -,", "two,  FAILED  , 4567ef,"
    )
    assert path.read_text() == expected
    assert [(r.status, r.run) for r in workload.rows] == [
        ("FINISHED", "0123abcd"),
        ("FAILED", "4567ef"),
    ]
    assert [(r.status, r.run) for r in read_plan(path).workloads[0].rows] == [
        ("FINISHED", "0123abcd"),
        ("FAILED", "4567ef"),
    ]


def test_record_without_spaces_keeps_crlf_and_quotes_where_needed(work):
    path = work / "plan.csv"
    path.write_bytes(
        b"Experiment,Workload,Status,Run,File,Params\r\n"
        b'1,1,,,examples/train.py,"--a ""x"""\r\n'
        b"1,2,,,examples/train.py,--b"
    )
    plan = read_plan(path)
    write_results(plan, plan.workloads[0], {2: ("KILLED", 'odd, "id"')})
    write_results(plan, plan.workloads[1], {3: ("FINISHED", "r2")})
    assert path.read_bytes() == (
        b"Experiment,Workload,Status,Run,File,Params\r\n"
        b'1,1,KILLED,"odd, ""id""",examples/train.py,"--a ""x"""\r\n'
        b"1,2,FINISHED,r2,examples/train.py,--b"
    )
    assert read_plan(path).rows[0].run == 'odd, "id"'


def test_record_adds_missing_status_and_run_columns(work):
    path = write(
        work,
        "Experiment, Workload, File\n1, 1, examples/train.py\n1, 2, examples/train.py\n",
    )
    plan = read_plan(path)
    write_results(plan, plan.workloads[1], {3: ("FINISHED", "r9")})
    assert path.read_text() == (
        "Experiment, Workload, File, Status, Run\n"
        "1, 1, examples/train.py\n"
        "1, 2, examples/train.py, FINISHED, r9\n"
    )
    again = read_plan(path)
    assert [w.status for w in again.workloads] == ["", "FINISHED"]


def test_record_keeps_a_multi_line_cell(work):
    text = HEADER + '1, 1, , , 0, naive, examples/train.py, , "--a\n--b"\n'
    path = write(work, text)
    plan = read_plan(path)
    write_results(plan, plan.workloads[0], {2: ("FINISHED", "r")})
    assert path.read_text() == text.replace("1, 1, , ,", "1, 1, FINISHED, r,")


def test_record_finds_its_row_after_the_file_was_edited(work):
    path = write(work, ORIGINAL)
    plan = read_plan(path)
    path.write_text("# a note added while running\n" + path.read_text())
    write_results(plan, plan.workloads[1], {4: ("FINISHED", "r3")})
    assert "1, 2, FINISHED, r3, 0, mps:50" in path.read_text()
    assert read_plan(path).workloads[1].rows[0].line == 5


def test_record_refuses_when_the_row_is_gone_and_rejects_stray_lines(work):
    path = write(work, ORIGINAL)
    plan = read_plan(path)
    with pytest.raises(ValueError, match="not rows of workload 1/2"):
        write_results(plan, plan.workloads[1], {2: ("FINISHED", "x")})
    path.write_text(HEADER + "1, 1, , , 0, 3g.40gb, examples/train.py, smi+top, \n")
    with pytest.raises(UsageError, match="changed while radT ran"):
        write_results(plan, plan.workloads[1], {4: ("FINISHED", "x")})


def test_record_is_atomic(work, monkeypatch):
    path = write(work, ORIGINAL)
    os.chmod(path, 0o640)
    inode = path.stat().st_ino
    plan = read_plan(path)
    write_results(plan, plan.workloads[0], {2: ("FINISHED", "r1")})
    assert path.stat().st_ino != inode  # replaced, not rewritten in place
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in work.iterdir()) == ["examples", "plan.csv"]
    assert lock_path(path).is_file()  # the lock is in radT's home, not beside the plan

    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_results(plan, plan.workloads[1], {4: ("FINISHED", "r3")})
    assert path.read_text() == before
    assert sorted(p.name for p in work.iterdir()) == ["examples", "plan.csv"]


def test_record_through_a_symlink_keeps_the_link(work):
    real = write(work, ORIGINAL, "real.csv")
    link = work / "plan.csv"
    link.symlink_to(real)
    plan = read_plan(link)
    write_results(plan, plan.workloads[1], {4: ("FINISHED", "r3")})
    assert link.is_symlink()
    assert "FINISHED, r3" in real.read_text()


def test_record_waits_for_the_lock(work):
    path = write(work, ORIGINAL)
    plan = read_plan(path)
    lock_path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(path), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        writer = threading.Thread(
            target=write_results, args=(plan, plan.workloads[1], {4: ("FINISHED", "r3")})
        )
        writer.start()
        time.sleep(0.3)
        assert writer.is_alive() and "FINISHED" not in path.read_text()
        fcntl.flock(lock, fcntl.LOCK_UN)
    writer.join(5)
    assert not writer.is_alive() and "FINISHED, r3" in path.read_text()


def many_workloads(work: Path, count: int) -> Path:
    rows = [f"1, w{i}, , , {i % 4}, naive, examples/train.py, , --i {i}" for i in range(count)]
    return rows_plan(work, *rows)


def test_concurrent_threads_never_lose_updates(work):
    count = 16
    path = many_workloads(work, count)
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        plan = read_plan(path)  # each "radT" has its own view of the plan
        barrier.wait()
        for attempt in range(3):
            workload = plan.workloads[i]
            write_results(
                plan, workload, {workload.rows[0].line: ("FINISHED", f"run{i}-{attempt}")}
            )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    runs = [row.run for row in read_plan(path).rows]
    assert runs == [f"run{i}-2" for i in range(count)]


def test_concurrent_processes_never_lose_updates(work):
    count = 8
    path = many_workloads(work, count)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from radt.plans.read import read_plan\n"
        "from radt.plans.writeback import write_results\n"
        "i = int(sys.argv[1])\n"
        "plan = read_plan(Path(sys.argv[2]))\n"
        "while not Path('go').exists():\n"
        "    time.sleep(0.01)\n"
        "for n in range(5):\n"
        "    w = plan.workloads[i]\n"
        "    write_results(plan, w, {w.rows[0].line: ('FINISHED', f'p{i}-{n}')})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(i), str(path)], cwd=work, env=env)
        for i in range(count)
    ]
    time.sleep(0.5)
    (work / "go").write_text("")
    assert [proc.wait(60) for proc in procs] == [0] * count
    assert [row.run for row in read_plan(path).rows] == [f"p{i}-4" for i in range(count)]


def test_trailing_commas_from_a_spreadsheet_are_fine(work):
    text = "Experiment,Workload,File,,\n1,1,examples/train.py,,\n1,2,examples/train.py,,,\n"
    path = write(work, text)
    plan = read_plan(path)
    assert [w.label for w in plan.workloads] == ["1/1", "1/2"]
    write_results(plan, plan.workloads[0], {2: ("FINISHED", "r1")})
    assert path.read_text().splitlines() == [
        "Experiment,Workload,File,,,Status,Run",
        "1,1,examples/train.py,,,FINISHED,r1",
        "1,2,examples/train.py,,,",
    ]
    assert read_plan(path).workloads[0].status == "FINISHED"


def test_a_value_under_a_nameless_column(work):
    message = problems_of(write(work, "Experiment,Workload,File,\n1,1,examples/train.py,x\n"))
    assert "line 2: cell 4 ('x') is under a column without a name" in message


def test_record_pads_a_short_row(work):
    path = write(work, HEADER + "1, 1, , , 0, naive, examples/train.py\n")
    plan = read_plan(path)
    write_results(plan, plan.workloads[0], {2: ("FINISHED", "r1")})
    assert path.read_text() == HEADER + "1, 1, FINISHED, r1, 0, naive, examples/train.py\n"
