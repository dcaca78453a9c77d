"""The assignment model: what an assignment grades (parts, test cells, locked cells, hints), read from its
source notebook, and which assignment a notebook belongs to.

Reading and cutting notebooks is autograde.notebook_io's; repairing a submission, autograde.repair's;
checking the course's own notebooks, autograde.lint's."""

import ast
import hashlib
import re
from dataclasses import dataclass, field

import nbformat

from autograde import SOLUTIONS

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
RULE_PREFIX = "rule: "  # a hidden assertion's message names the rule it checks: "rule: <label>"
PART_HEADER = re.compile(r"^#{1,6}\s*(Part\s+[A-Za-z0-9]+)\b[^:]*:?\s*(.*)$", re.MULTILINE)


def points_text(points):
    """'1 point', '2 points', '0.5 points': a score's unit, in English."""
    return f"{points:g} point" + ("" if float(points) == 1 else "s")


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_test_cell(cell):
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


MEASURES_TAG = "measures"  # a course cell that only measures this machine: grading does not run it


def is_measuring_cell(cell):
    """A plain course cell tagged `measures`: it times this machine (or shows what it timed) and defines nothing
    a graded part uses; grading runs the released copy of it not at all (autograde.executor)."""
    meta = nbgrader_meta(cell)
    return (
        cell.get("cell_type") == "code"
        and MEASURES_TAG in (cell.get("metadata", {}).get("tags") or [])
        and not meta.get("grade")
        and not meta.get("solution")
        and not meta.get("locked")
    )


def is_locked_cell(cell):
    """A locked code cell that is not a test: the setup cell, or a given cell restating earlier answers."""
    meta = nbgrader_meta(cell)
    return (
        cell.get("cell_type") == "code"
        and bool(meta.get("locked"))
        and not meta.get("grade")
        and not meta.get("solution")
    )


def sha256(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class TestCell:
    __test__ = False  # a graded test cell, not a pytest class
    grade_id: str
    points: float
    source: str

    @property
    def visible_lines(self):
        """Number of leading source lines the learner sees (everything before the hidden block)."""
        lines = self.source.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(HIDDEN_BEGIN):
                return i
        return len(lines)

    @property
    def what(self):
        """The test's one-line docstring (what it checks), or its grade id."""
        first = self.source.strip().splitlines()[0] if self.source.strip() else ""
        return first.strip('"\' ') or self.grade_id

    def line(self, n):
        lines = self.source.splitlines()
        return lines[n - 1].strip() if 1 <= n <= len(lines) else ""

    @property
    def judge(self):
        """(judge module, function) where the hidden block names the judge that decides this cell outside the
        student's process (autograde/judges), else None."""
        from autograde.judges import marked

        return marked(self.source)

    @property
    def rules(self):
        """The rule labels the hidden block states: its string literals that begin with "rule: " (without it); for
        a judged cell, the labels its judge can raise."""
        if self.judge:
            from autograde.judges import rules_of

            return rules_of(*self.judge)
        tree = self._tree()
        if tree is None:
            return []
        found = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and n.value.startswith(RULE_PREFIX)
            and n.lineno > self.visible_lines
        ]
        return list(dict.fromkeys(n.value[len(RULE_PREFIX) :].strip() for n in sorted(found, key=lambda n: n.lineno)))

    def rule_at(self, line):
        """The rule label of the hidden statement at `line`: the innermost statement holding that line, or the
        first labelled statement after it in the same block, or else the last label of the statement that
        encloses it (a `try` that expects a ValueError); "" if there is none."""
        tree = self._tree()
        if tree is None or line <= self.visible_lines:
            return ""
        chain = []  # (span, block, index) of every statement holding the line
        for parent in ast.walk(tree):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stmts = getattr(parent, name, None)
                if not isinstance(stmts, list):
                    continue
                for i, stmt in enumerate(stmts):
                    if isinstance(stmt, (ast.stmt, ast.excepthandler)) and stmt.lineno <= line <= (
                        stmt.end_lineno or stmt.lineno
                    ):
                        chain.append(((stmt.end_lineno or stmt.lineno) - stmt.lineno, stmts, i))
        if not chain:
            return ""
        chain.sort(key=lambda c: c[0])
        _, stmts, i = chain[0]
        for stmt in stmts[i:]:
            labels = self._labels(stmt)
            if labels:
                return labels[0]
        for _, stmts, i in chain[1:]:
            labels = self._labels(stmts[i])
            if labels:
                return labels[-1]
        return ""

    @staticmethod
    def _labels(node):
        found = sorted(
            (
                n
                for n in ast.walk(node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(RULE_PREFIX)
            ),
            key=lambda n: (n.lineno, n.col_offset),
        )
        return [n.value[len(RULE_PREFIX) :].strip() for n in found]

    def _tree(self):
        try:
            return ast.parse(self.source)
        except SyntaxError:
            return None


@dataclass
class Part:
    label: str  # "Part A" (or the grade id when the notebook has no part headers)
    title: str
    tests: list = field(default_factory=list)
    functions: list = field(default_factory=list)  # names defined in the part's solution cells
    example: str = ""  # the "Worked example: ..." sentence of the part's instructions

    @property
    def points(self):
        return sum(t.points for t in self.tests)

    @property
    def grade_ids(self):
        return [t.grade_id for t in self.tests]


@dataclass
class Assignment:
    name: str
    notebook: str  # notebook name without .ipynb
    parts: list
    solution_ids: list

    @property
    def tests(self):
        return [t for p in self.parts for t in p.tests]

    @property
    def points(self):
        return sum(p.points for p in self.parts)

    def test(self, grade_id):
        for t in self.tests:
            if t.grade_id == grade_id:
                return t
        return None


def _defined_names(source):
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _worked_example(markdown):
    m = re.search(r"Worked example[s]?:\s*(.+?)(?:\n\s*\n|$)", markdown, re.DOTALL)
    return " ".join(m.group(1).split()) if m else ""


def source_notebook(name):
    """The instructor notebook (solutions/NAME/*.ipynb) of an assignment; exactly one is supported."""
    found = sorted((SOLUTIONS / name).glob("*.ipynb"))
    if len(found) != 1:
        raise ValueError(f"assignment {name}: expected one notebook in solutions/{name}/, found {len(found)}")
    return found[0]


def load_assignment(name):
    """Parts and test cells of an assignment, from its source notebook."""
    path = source_notebook(name)
    nb = nbformat.read(str(path), as_version=4)
    parts, current, solution_ids = [], None, []
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "markdown":
            m = PART_HEADER.search(cell.source)
            if m:
                current = Part(label=m.group(1), title=m.group(2).strip(), example=_worked_example(cell.source))
                parts.append(current)
            continue
        if meta.get("solution"):
            solution_ids.append(meta.get("grade_id"))
            if current is not None:
                current.functions += _defined_names(cell.source)
        if is_test_cell(cell):
            test = TestCell(meta["grade_id"], float(meta.get("points", 0)), cell.source)
            if current is None:  # a notebook without "Part X" headers: one part per test
                parts.append(Part(label=test.grade_id, title=test.what, tests=[test]))
            else:
                current.tests.append(test)
    parts = [p for p in parts if p.tests]
    return Assignment(name=name, notebook=path.stem, parts=parts, solution_ids=solution_ids)


def grade_ids_in(nb):
    """All nbgrader grade ids (solution and test cells) of a notebook object."""
    return {nbgrader_meta(c).get("grade_id") for c in nb.get("cells", []) if nbgrader_meta(c).get("grade_id")}


def identify(nb, candidates):
    """Which assignment(s) among `candidates` ({name: Assignment}) a notebook's grade ids belong to."""
    ids = grade_ids_in(nb)
    scores = {}
    for name, a in candidates.items():
        known = set(a.solution_ids) | {t.grade_id for t in a.tests}
        overlap = len(ids & known)
        if overlap:
            scores[name] = overlap
    return sorted(scores, key=lambda n: -scores[n])
