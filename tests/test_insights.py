"""The class's own measurements: what a notebook saves beside itself, and `autograde class-insights` collecting it."""

import json

import pytest

from autograde.__main__ import main
from autograde.insights import collect
from specdec.measure.my_measurements import FILE, class_points, load, record

NAME = "09_speculation_that_pays"


def _write(folder, notebook=NAME, capability="AVX512", speedup=None, v4=1.2, alpha=None):
    folder.mkdir(parents=True, exist_ok=True)
    path = record(
        notebook,
        {
            "path": "bf16",
            "c": 0.06,
            "v": {1: 1.05, 4: v4},
            "alpha": alpha or {"code": 0.6, "json": 0.88},
            "speedup": speedup or {"code": 1.4, "json": 2.5},
        },
        folder=folder,
    )
    doc = json.loads(path.read_text())
    doc["machine"]["capability"] = capability  # another student's machine
    path.write_text(json.dumps(doc))
    return path


def test_record_writes_the_machine_and_the_numbers_and_nan_as_null(tmp_path, capsys):
    path = record(
        NAME, {"c": 0.05, "v": {4: 1.1}, "missing": float("nan"), "crossover": {"measured": None}}, folder=tmp_path
    )
    assert path == tmp_path / FILE and "saved to" in capsys.readouterr().out
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1 and doc["notebook"] == NAME
    assert doc["measured"] == {"c": 0.05, "v": {"4": 1.1}, "missing": None, "crossover": {"measured": None}}
    assert set(doc["machine"]) == {"cpu_model", "capability", "logical_cpus", "torch", "threads"}
    assert load(path, notebook=NAME)["measured"]["v"]["4"] == 1.1


def test_record_where_it_cannot_write_says_so_and_goes_on(tmp_path, capsys):
    assert record(NAME, {"c": 0.1}, folder=tmp_path / "gone" / "deeper") is None  # a folder that is not there
    assert "could not write" in capsys.readouterr().out


def test_record_refuses_what_is_not_a_measurement(tmp_path):
    with pytest.raises(ValueError, match="measured"):
        record(NAME, {}, folder=tmp_path)
    with pytest.raises(ValueError, match=r"measured\.model"):
        record(NAME, {"model": object()}, folder=tmp_path)


@pytest.mark.parametrize(
    "text, field",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"schema": 1, "notebook": "%s", "written_at": "x", "machine": {"capability": "AVX2"}}' % NAME, "'measured'"),
        ('{"schema": 7, "notebook": "%s", "written_at": "x", "machine": {}, "measured": {}}' % NAME, "'schema'"),
        (
            '{"schema": 1, "notebook": "05_acceptance_in_practice", "written_at": "x", '
            '"machine": {"capability": "AVX2"}, '
            '"measured": {}}',
            "'notebook'",
        ),
        (
            '{"schema": 1, "notebook": "%s", "written_at": "x", "machine": {}, "measured": {}}' % NAME,
            "machine.capability",
        ),
    ],
)
def test_a_malformed_file_is_named_with_its_field(tmp_path, text, field):
    path = tmp_path / FILE
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load(path, notebook=NAME)
    assert str(path) in str(info.value) and field in str(info.value)


def test_collect_reads_both_layouts_and_names_the_missing_and_the_malformed(tmp_path):
    _write(tmp_path / "ada" / NAME)  # nbgrader's submitted/STUDENT/ASSIGNMENT/
    _write(tmp_path / "bob", capability="AVX2")  # a folder per student
    (tmp_path / "cy").mkdir()  # ran nothing
    (tmp_path / "dee").mkdir()
    (tmp_path / "dee" / FILE).write_text("{oops")
    records, problems = collect(NAME, tmp_path)
    assert sorted(records) == ["ada", "bob"]
    assert [who for who, _ in problems] == ["cy", "dee"]
    assert FILE in problems[0][1] and "not valid JSON" in problems[1][1]
    pts = class_points(records)
    assert sorted(pts["alpha"]) == ["code", "json"] and len(pts["speedup_vs_v4"]) == 4


def test_collect_reads_the_exchange_inbound_taking_each_students_latest(tmp_path):
    _write(tmp_path / f"ada+{NAME}+2026-12-01 10:00:00.000000 UTC+r1", speedup={"code": 1.1, "json": 1.5})
    _write(tmp_path / f"ada+{NAME}+2026-12-02 09:00:00.000000 UTC+r2", speedup={"code": 1.4, "json": 2.4})
    _write(
        tmp_path / "bob+05_acceptance_in_practice+2026-12-01 10:00:00.000000 UTC+r3",
        notebook="05_acceptance_in_practice",
    )
    records, problems = collect(NAME, tmp_path)
    assert list(records) == ["ada"] and problems == []
    assert records["ada"]["measured"]["speedup"]["json"] == 2.4


def test_class_insights_prints_each_student_skips_the_bad_and_plots(tmp_path, capsys):
    subs = tmp_path / "submitted"
    _write(subs / "ada" / NAME, speedup={"code": 1.5, "json": 2.6}, v4=1.1)
    _write(subs / "bob" / NAME, capability="AVX2", speedup={"code": 1.1, "json": 1.6}, v4=1.45)
    (subs / "cy").mkdir()
    out = tmp_path / "class.png"
    assert main(["class-insights", "09", str(subs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ada:" in printed and "bob:" in printed and "skipped cy" in printed
    assert "AVX2 1, AVX512 1" in printed
    assert out.is_file() and out.stat().st_size > 10_000


def test_class_insights_with_nothing_to_read_or_an_unknown_assignment(tmp_path, capsys):
    (tmp_path / "cy").mkdir()
    assert main(["class-insights", "09", str(tmp_path), "--out", str(tmp_path / "x.png")]) == 1
    assert "nothing to plot" in capsys.readouterr().out
    assert main(["class-insights", "99", str(tmp_path)]) == 2
    assert "unknown assignment" in capsys.readouterr().err
    assert main(["class-insights", "09", str(tmp_path / "absent")]) == 2
