"""What a learner does in JupyterLab, as Playwright steps, and what the page then shows.

The clicks are the learner's (menus, toolbar buttons, slider handles). The page is read through
`window.jupyterapp` (JupyterLab's `expose_app_in_browser`), which maps every notebook cell to its own
DOM node, so a rendered <img> is attributed to the cell whose output holds it.
"""

import time

APP = "window.jupyterapp"
CURRENT = f"{APP}.shell.currentWidget"
CURRENT_NODE = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook tab on show

# one entry per cell: the kernel's outputs (from the notebook model) and what the DOM shows
CELL_REPORT_JS = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((cell, i) => {
    const model = cell.model;
    const json = model.toJSON();
    const outputs = (json.outputs || []);
    const imgs = Array.from(cell.node.querySelectorAll('.jp-OutputArea img'));
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    return {
      index: i,
      type: model.type,
      source: model.sharedModel.getSource(),
      execution_count: json.execution_count ?? null,
      prompt: prompt ? prompt.textContent.trim() : '',
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      image_outputs: outputs.filter(o => o.data && Object.keys(o.data).some(k => k.startsWith('image/'))).length,
      widget_outputs: outputs.filter(o => o.data && o.data['application/vnd.jupyter.widget-view+json']).length,
      imgs_rendered: imgs.filter(im => im.complete && im.naturalWidth > 0 && im.naturalHeight > 0).length,
      imgs_total: imgs.length,
      sliders: cell.node.querySelectorAll('.widget-slider').length,
      widgets: cell.node.querySelectorAll('.jupyter-widgets').length,
    };
  });
}
"""


def load_lab(page, base_url, timeout_s=180):
    """Load JupyterLab in the page once; later notebooks open inside it without a reload."""
    if app_loaded(page, base_url):
        return
    page.goto(f"{base_url}/lab")
    page.wait_for_function(f"() => !!({APP} && {APP}.shell)", timeout=timeout_s * 1000)
    page.evaluate(f"async () => {{ await {APP}.restored; }}")


def open_notebook(page, base_url, path, kernel=True, timeout_s=180):
    """Open a notebook the way a double-click in the file browser does (docmanager:open) and wait
    until it is shown and, with `kernel`, its kernel is idle. kernel=False opens it without one
    (File browser > Open With > Notebook (no kernel))."""
    load_lab(page, base_url, timeout_s)
    args = {"path": path, "factory": "Notebook"}
    if not kernel:
        args["kernelPreference"] = {"shouldStart": False, "shouldReuse": False}
    page.evaluate(f"async (args) => {{ await {APP}.commands.execute('docmanager:open', args); }}", args)
    page.wait_for_function(
        f"{APP} && {CURRENT} && {CURRENT}.context && {CURRENT}.context.path === {path!r} && {CURRENT}.context.isReady",
        timeout=timeout_s * 1000,
    )
    if kernel:
        wait_kernel_idle(page, timeout_s)


def app_loaded(page, base_url):
    return page.url.startswith(base_url) and page.evaluate(f"() => !!({APP} && {APP}.shell)")


def wait_kernel_idle(page, timeout_s):
    page.wait_for_function(f"{CURRENT}.sessionContext.session?.kernel?.status === 'idle'", timeout=timeout_s * 1000)


def menu(page, menu_label, item_label):
    """Click a menu bar entry, then one of its items by its label (e.g. Run > Run All Cells)."""
    page.locator(".lm-MenuBar-itemLabel").get_by_text(menu_label, exact=True).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel").get_by_text(item_label, exact=True).click()


def busy_cells(page):
    """Indices of cells still queued or running (prompt [*])."""
    return page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets"
        ".map((c, i) => [i, c.node.querySelector('.jp-InputPrompt')?.textContent || ''])"
        ".filter(([i, t]) => t.includes('*')).map(([i]) => i)"
    )


def run_all_and_wait(page, timeout_s):
    """Run > Run All Cells; wait until nothing is queued and the kernel is idle. Returns seconds."""
    t0 = time.perf_counter()
    menu(page, "Run", "Run All Cells")
    # the run has started once some prompt shows [*] or the kernel is busy
    page.wait_for_function(
        f"{CURRENT}.sessionContext.session?.kernel?.status === 'busy'"
        " || Array.from(document.querySelectorAll('.jp-InputPrompt')).some(p => p.textContent.includes('*'))"
        " || Array.from(document.querySelectorAll('.jp-InputPrompt')).some(p => /\\[\\d+\\]/.test(p.textContent))",
        timeout=60_000,
    )
    deadline = t0 + timeout_s
    quiet = 0
    while time.perf_counter() < deadline:
        status = page.evaluate(f"() => {CURRENT}.sessionContext.session?.kernel?.status")
        quiet = quiet + 1 if status == "idle" and not busy_cells(page) else 0
        if quiet >= 2:  # idle twice in a row, 0.25 s apart: not a gap between two cells
            return time.perf_counter() - t0
        time.sleep(0.25)
    raise TimeoutError(f"cells {busy_cells(page)} still running after {timeout_s} s")


def cell_report(page):
    return page.evaluate(CELL_REPORT_JS)


def save(page):
    page.evaluate(f"async () => {{ await {APP}.commands.execute('docmanager:save'); }}")
    page.wait_for_function(f"!{CURRENT}.context.model.dirty", timeout=30_000)


def cell_locator(page, index):
    """A Playwright locator for the DOM node of cell `index` of the current notebook."""
    page.evaluate(f"(i) => {CURRENT}.content.widgets[i].node.setAttribute('data-test-cell', String(i))", index)
    return page.locator(f"{CURRENT_NODE} [data-test-cell='{index}']")


def scroll_to_cell(page, index, part=None):
    """Scroll cell `index` (or one part of it, e.g. '.jp-Cell-outputWrapper') to the top of the view."""
    page.evaluate(
        f"""([i, part]) => {{
        const node = {CURRENT}.content.widgets[i].node;
        ((part && node.querySelector(part)) || node).scrollIntoView({{block: 'start'}});
    }}""",
        [index, part],
    )
    page.wait_for_timeout(300)


def widget_image_src(cell):
    """The src of the image an ipywidgets output (interact) shows in this cell, or None."""
    imgs = cell.locator(".widget-output img, .jupyter-widgets-output-area img")
    if imgs.count() == 0:
        return None
    return imgs.last.get_attribute("src")


def drag_slider(page, cell, fraction=-0.35, which=0):
    """Drag the handle of the cell's `which`-th slider by `fraction` of its track, as a mouse would.
    Returns (readout before, readout after)."""
    slider = cell.locator(".widget-slider").nth(which)
    slider.scroll_into_view_if_needed()
    readout = slider.locator(".widget-readout")
    before = readout.inner_text() if readout.count() else None
    track = slider.locator(".noUi-target, .slider-container").first.bounding_box()
    handle = slider.locator(".noUi-handle").first.bounding_box()
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    steps = 8
    for s in range(1, steps + 1):
        page.mouse.move(x + fraction * track["width"] * s / steps, y)
    page.mouse.up()
    after = readout.inner_text() if readout.count() else None
    return before, after


def wait_widget_image_changed(page, cell_index, old_src, timeout_s=60):
    """Wait until the cell's widget output shows a loaded image whose data differs from `old_src`."""
    page.wait_for_function(
        """([i, old]) => {
            const node = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
            const imgs = node.querySelectorAll('.widget-output img, .jupyter-widgets-output-area img');
            const img = imgs[imgs.length - 1];
            return !!img && img.getAttribute('src') !== old && img.complete && img.naturalWidth > 0;
        }""",
        arg=[cell_index, old_src],
        timeout=timeout_s * 1000,
    )
    return (
        cell_locator(page, cell_index)
        .locator(".widget-output img, .jupyter-widgets-output-area img")
        .last.get_attribute("src")
    )


def wait_widget_settled(page, cell_index, timeout_s=60, quiet_s=1.0):
    """Wait until the kernel is idle and the cell's widget image has not changed for `quiet_s`
    (a drag sends one update per slider step; the last one is what the learner ends up seeing)."""
    deadline, last, since = time.perf_counter() + timeout_s, None, time.perf_counter()
    while time.perf_counter() < deadline:
        state = page.evaluate(
            """(i) => {
                const panel = window.jupyterapp.shell.currentWidget;
                const imgs = panel.content.widgets[i].node.querySelectorAll(
                    '.widget-output img, .jupyter-widgets-output-area img');
                const img = imgs[imgs.length - 1];
                return [panel.sessionContext.session?.kernel?.status,
                        img && img.complete ? img.getAttribute('src') : null];
            }""",
            cell_index,
        )
        if state != last or state[0] != "idle":
            last, since = state, time.perf_counter()
        elif time.perf_counter() - since >= quiet_s:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the widget in cell {cell_index} kept changing for {timeout_s} s")


def click_validate(page, timeout_s):
    """Click nbgrader's Validate toolbar button; return the result dialog's class and text."""
    page.locator(f"{CURRENT_NODE} .validate-button").click()
    dialog = page.locator(".jp-Dialog", has=page.locator(".jp-Dialog-header", has_text="Validation Results"))
    dialog.wait_for(timeout=timeout_s * 1000)
    body = dialog.locator("#validation-message")
    result = {"class": body.get_attribute("class") or "", "text": body.inner_text()}
    return dialog, result


def dismiss_dialog(dialog):
    dialog.locator(".jp-Dialog-footer button").last.click()
    dialog.wait_for(state="detached", timeout=10_000)


def close_current(page):
    """Shut down the current notebook's kernel and close its tab without a save prompt."""
    page.evaluate(f"""async () => {{
        const panel = {CURRENT};
        if (!panel || !panel.sessionContext) return;
        try {{ await panel.sessionContext.shutdown(); }} finally {{ panel.dispose(); }}
    }}""")
