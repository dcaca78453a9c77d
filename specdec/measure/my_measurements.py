"""What a learner's machine measured, saved beside the notebook, and the class's numbers collected from submissions.

The speed notebooks (05, 09, 10) end with `record(NAME, {...})`: it writes `my_measurements.json` into the
notebook's own folder (the kernel's working directory), so it travels with the submission. It holds the CPU
model and capability, torch's version and threads, and the numbers the notebook measured; nothing about the
person beyond the student id nbgrader already files the submission under.

`python -m autograde class-insights ASSIGNMENT` reads these files from the collected submissions
(autograde/insights.py, with `load`) and plots the class (`plot_class`): speedup against measured v(4), α per domain
with its spread, machines by capability. A missing or malformed file is named and skipped.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

FILE = "my_measurements.json"
SCHEMA = 1
_TOP = ("schema", "notebook", "written_at", "machine", "measured")


def machine() -> dict:
    """The machine as the course describes it: CPU model, torch's kernel capability, logical CPUs, torch, threads."""
    import torch

    from specdec.measure.kernels import cpu_capability, cpu_name

    return {
        "cpu_model": cpu_name(),
        "capability": cpu_capability(),
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__.split("+")[0],
        "threads": torch.get_num_threads(),
    }


def _plain(value, where):
    # JSON-safe copy: dict keys as strings, numbers as finite floats or ints, strings, bools, None
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a number, a string or a dict of them") from None
    if not math.isfinite(number):
        return None  # not measured (nan): stored as null
    return int(number) if isinstance(value, int) else number


def record(notebook, measured, folder=None, quick=None):
    """Write `measured` (a dict of numbers, strings and dicts of them) with the machine's description to
    FOLDER/my_measurements.json (default: the working directory, the notebook's folder). Returns the path, or
    None when the folder cannot be written (a read-only copy): one line says so, the notebook goes on. The file
    also holds "steadiness": every timing section's spread, load and verdict (specdec.measure.timing.Steadiness)."""
    if not isinstance(measured, dict) or not measured:
        raise ValueError("measured must be a non-empty dict of the notebook's measurements")
    from specdec import QUICK
    from specdec.measure.timing import WATCHED

    doc = {
        "schema": SCHEMA,
        "notebook": str(notebook),
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick_mode": bool(QUICK if quick is None else quick),
        "machine": machine(),
        "measured": _plain(measured, "measured"),
        "steadiness": _plain(WATCHED, "steadiness"),
    }  # every timing section's spread and load (specdec.measure.timing)
    path = Path(folder or os.getcwd()) / FILE
    try:
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        print(f"could not write {path} ({exc.strerror}): your measurements are not saved with this notebook")
        return None
    print(
        f"saved to {path.name} beside this notebook (it goes with your submission): "
        f"{doc['machine']['cpu_model']}, {doc['machine']['capability']}; " + ", ".join(sorted(doc["measured"]))
    )
    return path


def load(path, notebook=None) -> dict:
    """Read one my_measurements.json; ValueError naming the file and the field that is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    for key in _TOP:
        if key not in doc:
            raise ValueError(f"{path}: field {key!r} is missing")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"{path}: field 'schema' is {doc['schema']!r}, this course reads schema {SCHEMA}")
    if notebook is not None and doc["notebook"] != notebook:
        raise ValueError(f"{path}: field 'notebook' is {doc['notebook']!r}, expected {notebook!r}")
    if not isinstance(doc["machine"], dict) or not isinstance(doc["machine"].get("capability"), str):
        raise ValueError(f"{path}: field 'machine.capability' is missing or not a string")
    if not isinstance(doc["measured"], dict):
        raise ValueError(f"{path}: field 'measured' must be an object")
    return doc


def _number(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def class_points(records):
    """The plotted values: {"speedup_vs_v4": [(student, domain, v4, speedup)], "alpha": {domain: [values]},
    "capability": {capability: students}}."""
    out = {"speedup_vs_v4": [], "alpha": {}, "capability": {}}
    for student, doc in records.items():
        cap = doc["machine"].get("capability", "unknown")
        out["capability"][cap] = out["capability"].get(cap, 0) + 1
        m = doc["measured"]
        v4 = _number((m.get("v") or {}).get("4"))
        for domain, s in (m.get("speedup") or {}).items():
            if v4 is not None and _number(s) is not None:
                out["speedup_vs_v4"].append((student, domain, v4, s))
        for domain, a in (m.get("alpha") or {}).items():
            if _number(a) is not None:
                out["alpha"].setdefault(domain, []).append(a)
    return out


def plot_class(records, path, title):
    """Three panels (speedup against v(4), α per domain, machines by capability) saved to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pts = class_points(records)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    domains = sorted({d for _, d, _, _ in pts["speedup_vs_v4"]})
    for j, d in enumerate(domains):
        sel = [(v, s) for _, dd, v, s in pts["speedup_vs_v4"] if dd == d]
        ax.plot([v for v, _ in sel], [s for _, s in sel], "o", color=f"C{j}", label=d)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xlabel("measured v(4): a 5-token verify in decode steps")
    ax.set_ylabel("measured speedup (x)")
    ax.set_title("speedup against v(4)" if domains else "speedup against v(4): none recorded", fontsize=9)
    if domains:
        ax.legend(fontsize=8)
    ax = axes[1]
    names = sorted(pts["alpha"])
    for j, d in enumerate(names):
        vals = pts["alpha"][d]
        ax.plot(np.full(len(vals), j) + np.linspace(-0.1, 0.1, len(vals)), vals, "o", color=f"C{j}", alpha=0.7)
        ax.plot([j - 0.25, j + 0.25], [np.median(vals)] * 2, "k-", lw=2)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("α (dots: students; bar: median)")
    ax.set_title("α per domain" if names else "α per domain: none recorded", fontsize=9)
    ax = axes[2]
    caps = sorted(pts["capability"])
    ax.bar(caps, [pts["capability"][c] for c in caps], color="C2")
    ax.set_ylabel("students")
    ax.set_title("machines by torch's CPU capability", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
