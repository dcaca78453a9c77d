"""The course as learners meet it: JupyterLab in a real, headless Chromium.

One `jupyter lab` (localhost, random free port, no token) serves a temporary learner workspace, set up
as `make lab` sets up my-work/ (autograde.workspace.set_up: the released notebooks, the workspace's own
nbgrader config, a published local exchange), in which the learner has done the work (each solution
in place of the learner's copy); one browser page opens them one after another, as a learner would:

- every solution notebook: Run > Run All Cells, wait until the kernel is idle with nothing queued,
  then no cell holds an error, every cell that promises a figure shows a rendered image, and every
  image the kernel sent is rendered. "Promises a figure" is read from the source
  (tests/browser/promises.py): the cell makes or shows a matplotlib figure (plt.subplots, plt.show,
  new_axes, ...) or calls/interacts with a notebook function that does, outside function bodies and
  outside `if torch.cuda...` branches. The kernel is shut down before the next notebook opens.
- the first notebook with an ipywidgets slider: drag its slider, the explorer's figure changes.
  The same drag is proven on a throwaway notebook, so a broken mechanism is told apart from a
  notebook without an explorer.
- nbgrader's Validate button, on a workspace notebook: started over (the learner's copy moved away and
  the set-up run again) it reports failure, with the solution success; nbgrader's Assignment List opens
  from the Nbgrader menu and lists the workspace's notebooks as downloaded.

Kernels run the notebooks in full mode, as a learner does: this Run All is the test run's one execution of
each solution. The notebook is saved after it, and tests/test_notebooks.py judges those outputs with nbgrader's
Validator and checks the 180 s budget on this Run All's time instead of executing the notebook again
(SPECDEC_BROWSER_QUICK=1: the smaller measurement sweeps, and test_notebooks.py executes the solutions itself).
Nothing is written into solutions/ or notebooks/. Screenshots, the server log, per-notebook times (times.json),
the executed notebooks of the full run and, on failure, the executed notebook go to tests/artifacts/browser/
(git-ignored). With SPECDEC_DOCS_SCREENSHOT=1 the run also
refreshes docs/jupyterlab.png, the README's screenshot.

Needs /usr/bin/chromium (`apt-get install chromium`; `make test` installs it) and playwright from
requirements.txt; no browser is downloaded. SPECDEC_BROWSER_NOTEBOOKS=01_x,03_y limits the notebooks run.
"""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from browser import page as lab_page
from browser.lab import CHROMIUM, LabServer, launch_browser
from browser.promises import figure_cells, widget_cells
from nbhelpers import ASSIGNMENTS, EXECUTED, MEASUREMENTS, NOTEBOOK_SECONDS, read, solution_path

from autograde import NOTEBOOKS, REPO
from autograde.release import publish
from autograde.workspace import set_up
from specdec.measure.my_measurements import FILE as INSIGHTS_FILE

ARTIFACTS = REPO / "tests" / "artifacts" / "browser"
DOCS_SCREENSHOT = REPO / "docs" / "jupyterlab.png"
VIEWPORT = {"width": 1280, "height": 800}
BUDGET_S = 900  # the whole browser run (every solution's full Run All), CI on 2 cores: reported
# full mode unless SPECDEC_BROWSER_QUICK=1 (the smaller measurement sweeps)
QUICK = "1" if os.environ.get("SPECDEC_BROWSER_QUICK") == "1" else "0"
# Run All is waited for this long; the 180 s budget of a full run is asserted by test_notebooks.py on its time
RUN_S = NOTEBOOK_SECONDS if QUICK == "1" else 2 * NOTEBOOK_SECONDS

_only = [n for n in os.environ.get("SPECDEC_BROWSER_NOTEBOOKS", "").split(",") if n]
RUN = [n for n in ASSIGNMENTS if not _only or n in _only]


def _explorer_cells(nb):
    """Cells that build a widget and promise a figure: interactive explorers."""
    return sorted(set(widget_cells(nb)) & set(figure_cells(nb)))


def _first_explorer():
    return next((name for name in RUN if _explorer_cells(read(solution_path(name)))), None)


EXPLORER = _first_explorer()
TIMES = {}  # notebook -> seconds from Run All Cells to idle
CPU = {}  # notebook -> CPU seconds its kernel used (start-up and run)
SLIDER_MOVED = {}  # notebook -> (readout before, readout after)

pytestmark = [pytest.mark.browser, pytest.mark.notebooks, pytest.mark.timeout(RUN_S + 120)]

if os.environ.get("SPECDEC_SKIP_BROWSER") == "1":
    pytestmark = [pytestmark, pytest.mark.skip(reason="SPECDEC_SKIP_BROWSER=1")]


def _nb(*sources):
    import nbformat

    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in sources])


def test_the_figure_promise_rule_reads_the_source():
    """No browser: which cells count as promising a figure, or as building a widget."""
    nb = _nb(
        "fig, ax = new_axes('t')\nax.plot([1], [2])",  # 0 helper makes a figure
        "def draw(a=1):\n    plt.plot([a])\n    plt.show()",  # 1 only defines it
        "draw(2)",  # 2 calls a plotting function
        "widgets.interact(draw, a=(0, 5))",  # 3 explorer
        "if torch.cuda.is_available():\n    plt.show()",  # 4 GPU only
        "x = 1  # plt.show() in a comment",  # 5 nothing
        "%matplotlib inline\nplt.figure()",  # 6 magic + figure
        "@interact(a=(0, 1))\ndef g(a):\n    draw(a)",  # 7 decorated explorer
    )
    assert figure_cells(nb) == [0, 2, 3, 6, 7]
    assert widget_cells(nb) == [3, 7]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `apt-get install chromium` (make test does this), "
            "or set SPECDEC_SKIP_BROWSER=1 to skip the browser tests"
        )
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    base = tmp_path_factory.mktemp("lab")
    root = base / "my-work"
    # the learner's workspace as `make lab` sets it up: a published local exchange, the released
    # notebooks copied into the workspace with its own nbgrader config (the Assignment List's settings)
    publish(base / "exchange")
    sync = set_up(NOTEBOOKS, root)
    assert sorted(sync.added) == [f"{n}/{n}.ipynb" for n in ASSIGNMENTS], sync.messages
    # a learner who has done the work: the solution in place of their copy
    for name in RUN:
        shutil.copyfile(solution_path(name), root / name / f"{name}.ipynb")
    server = LabServer(
        root,
        base / "home",
        cwd=REPO,
        env_extra={"SPECDEC_QUICK": QUICK, "SPECDEC_EXCHANGE": str(base / "exchange")},
        log_path=ARTIFACTS / "jupyter-lab.log",
    )
    t0 = time.perf_counter()
    server.start()
    server.load_at_start = os.getloadavg()
    yield server
    server.stop()
    _summary(request, server, time.perf_counter() - t0)


def _summary(request, lab, wall_s):
    (ARTIFACTS / "times.json").write_text(
        json.dumps(
            {
                "SPECDEC_QUICK": QUICK,
                "notebooks_s": {k: round(v, 1) for k, v in TIMES.items()},
                "kernel_cpu_s": {k: round(v, 1) for k, v in CPU.items()},
                "browser_module_wall_s": round(wall_s, 1),
                "cpus": os.cpu_count(),
                "load_average_at_start": lab.load_at_start,
                "load_average_at_end": os.getloadavg(),
            },
            indent=1,
        )
    )
    rep = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if rep is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        _write_summary(rep, lab, wall_s)


def _write_summary(rep, lab, wall_s):
    rep.write_line("")
    rep.write_line(f"JupyterLab browser run (Run All Cells -> kernel idle, SPECDEC_QUICK={QUICK}):")
    for name, s in TIMES.items():
        cpu = f"   kernel CPU {CPU[name]:6.1f} s" if name in CPU else ""
        rep.write_line(f"  {name:40s} {s:6.1f} s{cpu}")
    rep.write_line(
        f"  {'whole browser module (server, browser, validate, ...)':40s} {wall_s:6.1f} s "
        f"(budget {BUDGET_S} s; {os.cpu_count()} CPUs, load average "
        f"{lab.load_at_start[0]:.1f} at start)"
    )
    rep.write_line(f"  screenshots and log: {ARTIFACTS.relative_to(REPO)}/")


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_browser(p)
        pg = browser.new_page(viewport=VIEWPORT)
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()


def _shot(page, name):
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path.relative_to(REPO)


def _close(page, lab):
    """Close the notebook and shut its kernel down, so the next one has both cores."""
    try:
        lab_page.close_current(page)
    finally:
        lab.shutdown_kernels()


def _keep_executed_notebook(page, lab, rel):
    """On failure: save the executed notebook and copy it next to the screenshots."""
    try:
        lab_page.save(page)
        shutil.copy(lab.root / rel, ARTIFACTS / Path(rel).name)
    except Exception as exc:  # the report should still say what failed first
        print(f"could not keep the executed notebook: {exc}")


@pytest.mark.parametrize("name", RUN)
def test_solution_runs_in_jupyterlab_without_errors_and_shows_its_figures(name, lab, page):
    nb = read(solution_path(name))
    promised = figure_cells(nb)
    rel = f"{name}/{name}.ipynb"
    ok = False
    try:
        lab_page.open_notebook(page, lab.url, rel)
        TIMES[name] = seconds = lab_page.run_all_and_wait(page, RUN_S)
        report = lab_page.cell_report(page)
        assert len(report) == len(nb.cells), f"{name}: JupyterLab shows {len(report)} cells, file has {len(nb.cells)}"

        errors = [(r["index"], e) for r in report for e in r["errors"]]
        if errors:
            lab_page.scroll_to_cell(page, errors[0][0])
        shot = _shot(page, name)
        assert not errors, f"{name}: cells raised {errors}; screenshot {shot}"
        not_run = [
            r["index"] for r in report if r["type"] == "code" and r["source"].strip() and r["execution_count"] is None
        ]
        assert not not_run, f"{name}: cells {not_run} never ran; screenshot {shot}"

        missing = [i for i in promised if report[i]["imgs_rendered"] < 1]
        if missing:
            lab_page.scroll_to_cell(page, missing[0])
            shot = _shot(page, f"{name}-missing-figure")
        assert not missing, (
            f"{name}: cells {missing} promise a figure but show no rendered image "
            f"(promised in cells {promised}); screenshot {shot}"
        )
        unrendered = [r["index"] for r in report if r["imgs_rendered"] < r["image_outputs"]]
        assert not unrendered, f"{name}: cells {unrendered} hold image outputs the page did not render; {shot}"
        no_widget = [i for i in widget_cells(nb) if report[i]["widgets"] < 1]
        assert not no_widget, f"{name}: cells {no_widget} build an ipywidgets control the page did not render; {shot}"

        CPU[name] = lab.kernel_cpu_seconds()
        if name == EXPLORER:
            _move_explorer_slider(page, name, _explorer_cells(nb)[0], report)
        print(f"{name}: ran in {seconds:.1f} s in JupyterLab; figures in cells {promised}")
        if QUICK == "0":  # the full run: keep its outputs for test_notebooks.py to judge
            lab_page.save(page)
            kept = ARTIFACTS / "executed" / f"{name}.ipynb"
            kept.parent.mkdir(exist_ok=True)
            shutil.copyfile(lab.root / rel, kept)
            EXECUTED[name] = (kept, seconds)
            measured = (lab.root / rel).parent / INSIGHTS_FILE
            if measured.is_file():  # what the notebook saved beside itself, for test_notebooks.py
                MEASUREMENTS[name] = ARTIFACTS / "executed" / f"{name}.{INSIGHTS_FILE}"
                shutil.copyfile(measured, MEASUREMENTS[name])
        ok = True
    finally:
        if not ok:
            print(
                f"{name} failed: screenshot {_shot(page, f'{name}-failure')}, server log "
                f"{(ARTIFACTS / 'jupyter-lab.log').relative_to(REPO)}"
            )
            _keep_executed_notebook(page, lab, rel)
        _close(page, lab)


def _move_explorer_slider(page, name, index, report):
    """Drag the first slider of the notebook's first explorer; the explorer's figure must change."""
    assert report[index]["sliders"] > 0, f"{name}: the explorer in cell {index} shows no slider"
    cell = lab_page.cell_locator(page, index)
    lab_page.scroll_to_cell(page, index)
    old = lab_page.widget_image_src(cell)
    assert old, f"{name}: the explorer in cell {index} shows no figure in its widget output"
    before, after = lab_page.drag_slider(page, cell, fraction=-0.35)
    assert before != after, f"{name}: dragging the slider in cell {index} left its value at {before}"
    new = lab_page.wait_widget_image_changed(page, index, old)
    assert new != old
    SLIDER_MOVED[name] = (before, after)
    _readme_screenshot(page, index)


def _readme_screenshot(page, index):
    """The explorer after the drag, sidebar folded, as the README shows it."""
    lab_page.wait_widget_settled(page, index)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    lab_page.scroll_to_cell(page, index, ".widget-interact")
    page.mouse.move(5, 5)
    shot = ARTIFACTS / "jupyterlab.png"
    page.screenshot(path=str(shot))
    page.evaluate("() => window.jupyterapp.shell.expandLeft()")
    if os.environ.get("SPECDEC_DOCS_SCREENSHOT") == "1":
        DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
        _small_png(shot, DOCS_SCREENSHOT)


def _small_png(src, dest):
    """The README screenshot as a 256-colour PNG (a fraction of the size, same look)."""
    from PIL import Image

    Image.open(src).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dest, optimize=True)


def test_the_first_explorer_slider_changes_its_figure(lab):
    if EXPLORER is None:
        pytest.skip(
            "no notebook in solutions/ has an ipywidgets slider yet "
            "(the mechanism is still proven on a throwaway notebook below)"
        )
    if EXPLORER not in TIMES:
        pytest.skip(f"{EXPLORER} was not run in this session (deselected)")
    assert EXPLORER in SLIDER_MOVED, f"{EXPLORER}: the slider was not moved (see the test that ran it)"


THROWAWAY = '''\
import matplotlib.pyplot as plt
import ipywidgets as widgets

def draw(slope=2.0):
    fig, ax = plt.subplots(figsize=(4, 2.5))
    ax.plot([0, 1, 2, 3], [slope * x for x in range(4)])
    ax.set_ylim(0, 30)
    ax.set_title(f"slope {slope:.1f}")
    plt.show()

widgets.interact(draw, slope=widgets.FloatSlider(value=8.0, min=0.0, max=10.0, step=0.5))
'''


def test_dragging_a_slider_redraws_an_interact_figure_on_a_throwaway_notebook(lab, page):
    """The drag-and-compare mechanism itself, on a one-cell notebook: only while no course notebook
    has an explorer (once one has, the test above drags a real slider)."""
    if EXPLORER is not None:
        pytest.skip(f"proven on {EXPLORER}'s explorer instead")
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(THROWAWAY)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    (lab.root / "throwaway").mkdir(exist_ok=True)
    nbformat.write(nb, str(lab.root / "throwaway" / "slider.ipynb"))
    assert figure_cells(nb) == [0] and widget_cells(nb) == [0]

    try:
        lab_page.open_notebook(page, lab.url, "throwaway/slider.ipynb")
        lab_page.run_all_and_wait(page, 120)
        report = lab_page.cell_report(page)
        assert report[0]["errors"] == [] and report[0]["sliders"] == 1, report[0]
        cell = lab_page.cell_locator(page, 0)
        page.wait_for_function(
            "() => document.querySelector('.widget-output img, .jupyter-widgets-output-area img')?.naturalWidth > 0",
            timeout=60_000,
        )
        old = lab_page.widget_image_src(cell)
        before, after = lab_page.drag_slider(page, cell, fraction=-0.3)
        assert (before, after) != ("8.0", "8.0") and before != after, (before, after)
        new = lab_page.wait_widget_image_changed(page, 0, old)
        assert new != old
    finally:
        _shot(page, "throwaway-slider")
        _close(page, lab)


def test_nbgrader_validate_fails_an_untouched_learner_notebook_and_passes_its_solution(lab, page):
    """nbgrader's Validate toolbar button on the workspace's copy of the notebook that ran fastest above
    (the validator executes the whole notebook again on the server, twice): started over as the README
    says (the learner's copy moved away, the set-up run again) it fails; with the solution it passes."""
    name = min(TIMES, key=TIMES.get) if TIMES else ASSIGNMENTS[0]
    rel = f"{name}/{name}.ipynb"
    seconds = {}
    for kind, expect in (("learner", "validation-failed"), ("solution", "validation-success")):
        if kind == "learner":
            (lab.root / rel).rename(lab.root / f"{name}-my-old-copy.ipynb")
            sync = set_up(NOTEBOOKS, lab.root)
            assert sync.restored == [rel] and (lab.root / rel).read_bytes() == (NOTEBOOKS / rel).read_bytes(), (
                sync.messages
            )
        else:
            shutil.copyfile(solution_path(name), lab.root / rel)
        try:
            lab_page.open_notebook(page, lab.url, rel, kernel=False)
            t0 = time.perf_counter()
            dialog, result = lab_page.click_validate(page, NOTEBOOK_SECONDS)
            seconds[kind] = time.perf_counter() - t0
            shot = _shot(page, f"validate-{kind}")
            assert expect in result["class"].split(), (
                f"{kind} copy of {name}: Validate showed {result['class']!r}: {result['text'][:500]}; {shot}"
            )
            want = "The following cell failed" if kind == "learner" else "Success! Your notebook passes all the tests."
            assert want in result["text"], f"{kind} copy of {name}: {result['text'][:500]}"
            lab_page.dismiss_dialog(dialog)
        finally:
            _close(page, lab)
    print(f"Validate on {name}: learner copy {seconds['learner']:.1f} s, solution {seconds['solution']:.1f} s")


def test_nbgrader_assignment_list_shows_the_course_as_downloaded(lab, page):
    """Nbgrader > Assignment List: every assignment under "Downloaded assignments", no exchange error."""
    lab_page.load_lab(page, lab.url)
    lab_page.menu(page, "Nbgrader", "Assignment List")
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for(timeout=60_000)
    for section in ("Released assignments", "Downloaded assignments", "Submitted assignments"):
        panel.get_by_text(section, exact=True).wait_for(timeout=60_000)
    downloaded = panel.locator("#fetched_assignments_list")
    try:
        for name in RUN:
            downloaded.get_by_text(name, exact=True).first.wait_for(timeout=60_000)
    finally:
        shot = _shot(page, "assignment-list")
    if os.environ.get("SPECDEC_DOCS_SCREENSHOT") == "1" and RUN == ASSIGNMENTS:  # the whole course listed
        _small_png(REPO / shot, DOCS_SCREENSHOT.parent / "assignment-list.png")
    text = panel.inner_text()
    assert "does not exist" not in text, f"the Assignment List reports an exchange error: {text[:400]}; {shot}"


def test_given_cells_show_their_summary_folded_and_expand_on_a_click(lab, page):
    """A given cell (restated answers) is folded to its first line, the `# Given: restated from ...` summary;
    a click on the placeholder shows the code. On the workspace's learner copy of 09 (two given cells)."""
    from autograde.given import given_cells

    name = "09_speculation_that_pays"
    rel = f"{name}/{name}-given-check.ipynb"  # beside the workspace's own copy, which other tests run
    shutil.copyfile(NOTEBOOKS / name / f"{name}.ipynb", lab.root / rel)
    given = given_cells(read(lab.root / rel))
    assert given, f"{name} has no given cell"
    try:
        lab_page.open_notebook(page, lab.url, rel, kernel=False)
        for index, cell in given:
            node = lab_page.cell_locator(page, index)
            lab_page.scroll_to_cell(page, index)
            placeholder = node.locator(".jp-InputPlaceholder")
            assert placeholder.count() == 1 and placeholder.is_visible(), f"{name} cell {index} is not folded"
            shown = placeholder.locator(".jp-PlaceholderText").inner_text().strip()
            assert shown == cell.source.splitlines()[0], f"{name} cell {index}: the folded cell shows {shown!r}"
            assert (
                node.locator(".jp-InputArea .cm-content").count() == 0 or not node.locator(".jp-InputArea").is_visible()
            )
            placeholder.locator(".jp-Placeholder-content").click()
            code = node.locator(".jp-InputArea .cm-content")
            code.wait_for(state="visible", timeout=10_000)
            assert "def " in code.inner_text(), (
                f"{name} cell {index}: expanded, it shows no code; {_shot(page, 'given-expanded')}"
            )
    finally:
        _close(page, lab)
