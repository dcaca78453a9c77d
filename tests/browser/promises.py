"""What a notebook promises to show, read from its source before anything runs.

Rule (documented in tests/test_browser.py): a code cell promises a figure when, outside function
bodies and outside branches that test for CUDA, it
  - calls pyplot to make or show a figure (plt.subplots, plt.figure, plt.plot, plt.show, ...),
  - calls a figure-making helper of specdec.plotting (new_axes), or
  - calls, decorates with interact, or passes (as to `interact(draw, ...)`) a function defined in the
    notebook that does one of these, directly or through another such function.
In the browser every such cell must show at least one rendered image. The rule is read from the
source, not from a kernel's outputs, so a figure that silently never appears (wrong matplotlib
backend, a plot drawn on a closed figure) is caught.

A cell builds an interactive widget when it calls interact/interactive/interact_manual or a slider
constructor (IntSlider, FloatSlider, SelectionSlider, ...), or decorates a function with interact.
In the browser such a cell must show a rendered widget (not its text fallback); the first one that
also promises a figure is the explorer whose slider the test drags.
"""

import ast

from IPython.core.inputtransformer2 import TransformerManager

PYPLOT_FIGURE_CALLS = {
    "show",
    "figure",
    "subplots",
    "subplot",
    "subplot_mosaic",
    "plot",
    "scatter",
    "bar",
    "barh",
    "hist",
    "imshow",
    "loglog",
    "semilogx",
    "semilogy",
    "step",
    "fill_between",
    "errorbar",
    "contour",
    "contourf",
    "pcolormesh",
    "stairs",
    "axhline",
    "axvline",
}
HELPER_FIGURE_CALLS = {"new_axes"}  # specdec.plotting helpers that create a figure
WIDGET_CALLS = {
    "interact",
    "interactive",
    "interact_manual",
    "IntSlider",
    "FloatSlider",
    "FloatLogSlider",
    "SelectionSlider",
    "IntRangeSlider",
    "FloatRangeSlider",
    "SelectionRangeSlider",
}

_transformer = TransformerManager()


def parse(source):
    """The cell as a Python module (IPython magics and shell escapes turned into Python)."""
    try:
        return ast.parse(_transformer.transform_cell(source))
    except SyntaxError:
        return ast.parse("")


def _call_name(func):
    """('plt', 'show') for plt.show(), (None, 'new_axes') for new_axes()."""
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        return owner, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None


def _mentions_cuda(test):
    return "cuda" in ast.unparse(test)


def _top_level_nodes(tree):
    """Every node that runs when the cell runs: skip function/class bodies (kept aside) and the body
    of `if ...cuda...:` branches (GPU cells are optional and never run on the CPU machine)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield node  # the definition itself (its decorators run)
            stack.extend(getattr(node, "decorator_list", []))
            continue
        if isinstance(node, ast.If) and _mentions_cuda(node.test):
            stack.append(node.test)
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _makes_figure_directly(node, plotting):
    if not isinstance(node, ast.Call):
        return False
    owner, name = _call_name(node.func)
    if owner in ("plt", "pyplot") and name in PYPLOT_FIGURE_CALLS:
        return True
    if owner is None and name in HELPER_FIGURE_CALLS | plotting:
        return True
    if owner in ("specdec.plotting", "plotting") and name in HELPER_FIGURE_CALLS:
        return True
    return False


def plotting_functions(cells_sources):
    """Names of functions defined anywhere in the notebook that make a figure when called."""
    defs = {}
    for source in cells_sources:
        for node in ast.walk(parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = node
    plotting = set()
    changed = True
    while changed:
        changed = False
        for name, node in defs.items():
            if name in plotting:
                continue
            if any(_makes_figure_directly(n, plotting) for stmt in node.body for n in ast.walk(stmt)):
                plotting.add(name)
                changed = True
    return plotting


def cell_promises_figure(source, plotting):
    for node in _top_level_nodes(parse(source)):
        if _makes_figure_directly(node, plotting):
            return True
        if isinstance(node, ast.Call):
            # interact(draw, alpha=(0, 1)) and friends: a plotting function handed to a call
            if any(isinstance(a, ast.Name) and a.id in plotting for a in node.args):
                return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in plotting:
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if "interact" in ast.unparse(target):
                    return True
    return False


def figure_cells(nb):
    """Indices of the code cells that promise a figure."""
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    plotting = plotting_functions(sources)
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and cell_promises_figure(c.source, plotting)]


def cell_builds_widget(source):
    for node in _top_level_nodes(parse(source)):
        if isinstance(node, ast.Call) and _call_name(node.func)[1] in WIDGET_CALLS:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if _call_name(target)[1] in WIDGET_CALLS:
                    return True
    return False


def widget_cells(nb):
    """Indices of the code cells that build an interactive ipywidgets control."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and cell_builds_widget(c.source)]
