"""`python -m autograde class-insights ASSIGNMENT [SUBMISSIONS]`: the class's own measurements.

Each speed notebook (05, 09, 10) saves what the learner's machine measured in my_measurements.json beside the
notebook (specdec/measure/my_measurements.py); it travels with the submission. This collects the files of every student,
names the missing and malformed ones, prints a line per student and writes a plot of the class.
"""

from pathlib import Path

from autograde import WORK, assignments
from autograde.grade_class import inbound_attempts
from specdec.measure.my_measurements import FILE, class_points, load, plot_class


def resolve(assignment):
    """An assignment by name, or by its number (09)."""
    names = assignments()
    if assignment in names:
        return assignment
    matches = [n for n in names if n.split("_", 1)[0] == str(assignment).zfill(2)]
    if len(matches) != 1:
        raise ValueError(f"unknown assignment {assignment!r}; known: {', '.join(names)}")
    return matches[0]


def collect(assignment, submissions):
    """({student: record}, [(student, problem)]) from a folder of submissions: one sub-folder per student,
    holding the file directly or under ASSIGNMENT/ (nbgrader's submitted/STUDENT/ASSIGNMENT/), or the exchange's
    inbound/ (STUDENT+ASSIGNMENT+TIMESTAMP+RANDOM/: each student's latest submission of ASSIGNMENT)."""
    root = Path(submissions)
    if not root.is_dir():
        raise ValueError(f"{root}: not a folder of submissions")
    attempts = inbound_attempts(root, assignment)
    if attempts is not None:  # the names hold nbgrader's timestamps: the latest sorts last
        folders = {student: max(entries, key=lambda e: e.name) for student, entries in attempts.items()}
    else:
        # a student id never holds '+' (nbgrader splits submission names on it): such a folder is another
        # assignment's submission in inbound/
        folders = {d.name: d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".") and "+" not in d.name}
    records, problems = {}, []
    for student, folder in sorted(folders.items()):
        found = next((c for c in (folder / assignment / FILE, folder / FILE) if c.is_file()), None)
        if found is None:
            problems.append((student, f"no {FILE} (the notebook was not run to its end, or the file was removed)"))
            continue
        try:
            records[student] = load(found, notebook=assignment)
        except ValueError as exc:
            problems.append((student, str(exc)))
    return records, problems


def _summary(doc):
    m, parts = doc["measured"], []
    if "path" in m:
        parts.append(f"path {m['path']}")
    for key, label in (("bandwidth_gb_s", "bandwidth {:.1f} GB/s"), ("c", "c {:.3f}")):
        if isinstance(m.get(key), (int, float)):
            parts.append(label.format(m[key]))
    if isinstance((m.get("v") or {}).get("4"), (int, float)):
        parts.append(f"v(4) {m['v']['4']:.2f}")
    for name in ("alpha", "speedup"):
        if isinstance(m.get(name), dict) and m[name]:
            parts.append(
                f"{name} "
                + ", ".join(f"{k} {v:.2f}" for k, v in sorted(m[name].items()) if isinstance(v, (int, float)))
            )
    return "; ".join(parts)


def class_insights(assignment, submissions=None, out=None):
    name = resolve(assignment)
    folder = Path(submissions) if submissions else WORK / "submitted"
    records, problems = collect(name, folder)
    for student, doc in sorted(records.items()):
        mach = doc["machine"]
        print(
            f"{student}: {mach.get('cpu_model', '?')} "
            f"({mach.get('capability', '?')}, {mach.get('logical_cpus', '?')} CPUs)"
            + (", quick mode" if doc.get("quick_mode") else "")
            + f": {_summary(doc)}"
        )
    for who, problem in problems:
        print(f"skipped {who}: {problem}")
    if not records:
        print(f"no readable {FILE} in {folder}: nothing to plot")
        return 1
    out = Path(out) if out else WORK / f"insights_{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    pts = class_points(records)
    plot_class(records, out, f"{name}: {len(records)} students' machines")
    print(
        f"{len(records)} students' measurements ({len(problems)} skipped), machines: "
        + ", ".join(f"{c} {n}" for c, n in sorted(pts["capability"].items()))
        + f"; plot: {out}"
    )
    return 0
