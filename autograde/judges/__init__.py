"""The judges: each notebook's hidden tests, run by the grader outside the student's process (autograde.judge).

One module per notebook (``nb04`` for 04_speculative_decoder, ``nb11`` for 11_real_engines), never shipped to learners (the release step copies
notebooks only). A judge function takes ``probe`` (an ``autograde.judge.KernelProbe``: ``probe(name, *args)``
-> ("value", v) or ("raised", Raised)) and ``rng`` (a ``numpy.random.Generator`` seeded by the grader, fresh
for every grading run) and raises AssertionError("rule: ...") on the first rule the answers break. The
references are the judge's own code, independent of the solution notebook's.
"""


def judge_for(assignment: str, grade_id: str):
    """The judge of one test cell, or None where the cell's hidden block still runs in the kernel (the per-cell
    switch: the grader runs both kinds side by side while the notebooks move over)."""
    from autograde.judges import nb04, nb11

    return {"04_speculative_decoder": nb04.JUDGES, "11_real_engines": nb11.JUDGES}.get(assignment, {}).get(grade_id)


def warm(assignment: str):
    """Load what a notebook's judges need ahead of its first judged cell (the grader calls it in a thread while
    the kernel starts); nothing where the notebook has no judges or its judges need nothing loaded."""
    from autograde.judges import nb04

    fn = {"04_speculative_decoder": nb04.warm}.get(assignment)
    if fn is not None:
        fn()
