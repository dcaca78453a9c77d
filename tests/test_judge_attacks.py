"""04, 09, 10 and 11 graded through the judge against attacks from inside the student's process, with the real tool
(`python -m autograde class`, sandboxed, `--keep-flagged` so that a score is what the tests gave, not the scan's
zero): the guard's key read from its closure and passes signed with it (directly, through runpy, through exec
with its audit record dropped), the guard's tables emptied, a torch function mode left entered, torch.Tensor's
methods replaced on the class, a profile hook armed from timeit-compiled code, numpy changed through vars(np).
Each scores nothing on the cells it attacks; the solution and correct answers written differently keep full
marks (tests/adversarial/judge_attacks.py)."""

import pytest
from adversarial import judge_attacks
from adversarial.classrun import class_run

from autograde import sandbox

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(1200)]
ASSIGNMENTS = ["04_speculative_decoder", "09_speculation_that_pays", "10_batches_and_servers", "11_real_engines"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the attacks are graded in the sandbox: {why}"
    out = {}
    for assignment in ASSIGNMENTS:
        root = tmp_path_factory.mktemp(assignment[:2])
        expect = judge_attacks.build(root / "subs", assignment)
        done, rows = class_run(
            assignment,
            root / "subs",
            root / "work",
            "--jobs",
            "2",
            "--cell-timeout",
            "120",
            "--keep-flagged",
            "--skip-preflight",
        )
        out[assignment] = expect, done, rows
    return out


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_case_is_graded(runs, assignment):
    expect, done, rows = runs[assignment]
    assert set(rows) == set(expect), done.stdout[-3000:] + done.stderr[-3000:]


CASES = [(a, s) for a in ASSIGNMENTS for s in judge_attacks.cases(a)]


@pytest.mark.parametrize("assignment,student", CASES, ids=[f"{a[:2]}-{s}" for a, s in CASES])
def test_an_attack_scores_nothing_on_what_it_attacks_and_honest_code_keeps_full_marks(runs, assignment, student):
    expect, _, rows = runs[assignment]
    exp, total = expect[student], rows[student]["total"]
    detail = {part: (row["score"], row["status"], row["detail"][:300]) for part, row in rows[student].items()}
    if exp.status == "ok":  # honest: full marks, nothing flagged
        assert (float(total["score"]), total["status"]) == (exp.score, "ok"), (student, detail)
    else:
        assert float(total["score"]) <= exp.score, (student, exp.what, detail)
