"""The repairs a submitted notebook gets before nbgrader sees it."""

from autograde.assignment import is_locked_cell, is_test_cell, nbgrader_meta


def normalize(nb, released):
    """Repair the nbgrader metadata of a submission so that nbgrader can grade it; return the notes.

    nbgrader 0.9.6 crashes on some damaged metadata (a duplicated test cell; a test cell whose solution
    cell lost its metadata) instead of grading.  Here, before nbgrader sees the notebook: a renamed
    cell's old id (listed in the release's `former_ids`) becomes its new one; metadata with an unknown or missing
    grade id is removed; of duplicated grade ids the last cell keeps them (as nbgrader's DeduplicateIds does); and
    every test cell and locked cell (setup, given answers) the submission lacks is put back from the released
    notebook, after the nearest cell that precedes it in the release (else a locked cell at the
    top, a test cell at the end).
    nbgrader then overwrites every test cell's source, type and points from the gradebook.
    """
    import copy
    import uuid

    notes = []
    known = {nbgrader_meta(c).get("grade_id"): c for c in released.cells if nbgrader_meta(c).get("grade_id")}
    order = list(known)
    # a cell the course renamed (its release lists the old id in `former_ids`): a copy made before keeps the
    # old id, and is that cell, not the student's own code
    former = {old: gid for gid, c in known.items() for old in c.get("metadata", {}).get("former_ids", [])}
    present = {nbgrader_meta(c).get("grade_id") for c in nb.cells}
    for cell in nb.cells:
        m = cell.get("metadata", {}).get("nbgrader")
        gid = m.get("grade_id") if isinstance(m, dict) else None
        if gid not in known and gid in former and former[gid] not in present:
            m["grade_id"] = former[gid]
            present.add(former[gid])
            notes.append(f"cell {gid!r} is the course's {former[gid]!r} (renamed since your copy was made)")
    for cell in nb.cells:
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        m = cell.metadata["nbgrader"]
        gid = m.get("grade_id") if isinstance(m, dict) else None
        if gid not in known:
            del cell.metadata["nbgrader"]
            notes.append(f"ignored nbgrader metadata of unknown cell {gid!r}")
    seen = set()
    for cell in reversed(nb.cells):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid is None:
            continue
        if gid in seen:
            del cell.metadata["nbgrader"]
            notes.append(f"cell {gid} appears twice: graded the last one")
        seen.add(gid)
    restored = []
    for pos, gid in enumerate(order):
        if not (is_test_cell(known[gid]) or is_locked_cell(known[gid])):
            continue
        present = {nbgrader_meta(c).get("grade_id"): i for i, c in enumerate(nb.cells)}
        if gid in present:
            continue
        anchors = [present[g] for g in order[:pos] if g in present]
        cell = copy.deepcopy(known[gid])
        cell["id"] = uuid.uuid4().hex[:12]
        # after the nearest known cell that precedes it in the release; with none, a locked cell (the setup
        # cell) goes to the top, where it runs before everything, and a test cell to the end
        nb.cells.insert(max(anchors) + 1 if anchors else (0 if is_locked_cell(cell) else len(nb.cells)), cell)
        restored.append(gid)
    if restored:
        notes.append(f"restored {len(restored)} missing test or locked cell(s): {', '.join(restored)}")
    ids = set()
    for cell in nb.cells:
        if not cell.get("id") or cell["id"] in ids:
            cell["id"] = uuid.uuid4().hex[:12]
        ids.add(cell["id"])
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 5))
    return notes
