"""The judges: each notebook's hidden tests, run by the grader outside the student's process (autograde.judge).

One module per notebook (``nb04`` for 04_speculative_decoder, ``nb11`` for 11_real_engines), never shipped to
learners (the release step copies notebooks only). A judge function takes ``probe`` (an
``autograde.judge.KernelProbe``: ``probe(name, *args)``, ``probe.many``, ``probe.map``) and ``rng`` (a
``numpy.random.Generator`` seeded by the grader, fresh for every grading run) and raises an AssertionError
("rule: ...", a ``judge.Broken`` where it can say what came back) on the first rule the answers break. The
references are the judge's own code, independent of the solution notebook's.
"""


def _module(assignment: str):
    """The judge module of a notebook, or None (the one table of which notebooks have judges)."""
    from autograde.judges import nb04, nb11

    return {"04_speculative_decoder": nb04, "11_real_engines": nb11}.get(assignment)


def judge_for(assignment: str, grade_id: str):
    """The judge of one test cell, or None where the cell's hidden block still runs in the kernel (the per-cell
    switch: the grader runs both kinds side by side while the notebooks move over)."""
    module = _module(assignment)
    return module.JUDGES.get(grade_id) if module else None


def warm(assignment: str):
    """Load what a notebook's judges need ahead of its first judged cell (the grader calls it in a thread while
    the kernel starts); nothing where the notebook has no judges or its judges need nothing loaded."""
    fn = getattr(_module(assignment), "warm", None)
    if fn is not None:
        fn()
