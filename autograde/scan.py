"""Static scan of a submission for code that tampers with the grader rather than answering.

The tests run in the student's own Python process, so code that reaches into the interpreter (the
calling test's frame and its reference values, the builtins, IPython's exception display, the kernel)
could forge a pass.  Such code has no place in an answer to these notebooks; the scan names it, and the
grading tool gives the submission 0 with status "flagged" for an instructor to review
(``--keep-flagged`` keeps the autograded score instead).

The scan reads every code cell the student could edit (not the graded test cells, which nbgrader
replaces anyway) and ignores anything already present in the released notebook.
"""

import ast
import re

# modules whose import alone is a finding
MODULES = {
    "builtins",
    "ctypes",
    "gc",
    "inspect",
    "importlib",
    "traceback",
    "types",
    "marshal",
    "pickle",
    "dill",
    "cloudpickle",
    "threading",
    "_thread",
    "code",
    "codeop",
    "IPython",
    "ipykernel",
    "jupyter_client",
    "zmq",
    "nbgrader",
    "nbformat",
    "nbclient",
    "autograde",
    "sqlite3",
    "sqlalchemy",
    "faulthandler",
    "atexit",
    "signal",
    "__main__",
    "asyncio",
}
# names whose use is a finding
NAMES = {
    "get_ipython",
    "__builtins__",
    "__import__",
    "eval",
    "exec",
    "compile",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "__build_class__",
    "attrgetter",
    "methodcaller",
}
# attribute names whose use is a finding
ATTRIBUTES = {
    "_getframe",
    "f_back",
    "f_globals",
    "f_locals",
    "f_code",
    "f_trace",
    "f_builtins",
    "tb_frame",
    "tb_next",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "__globals__",
    "__code__",
    "__closure__",
    "__builtins__",
    "__subclasses__",
    "__bases__",
    "__mro__",
    "__dict__",
    "co_consts",
    "co_code",
    "settrace",
    "setprofile",
    "_current_frames",
    "set_custom_exc",
    "showtraceback",
    "_showtraceback",
    "user_ns",
    "shell_handlers",
    "iopub_socket",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__init_subclass__",
    "__traceback__",
    "last_traceback",
    "addaudithook",
    "attrgetter",
    "methodcaller",
    "cell_contents",
    "__defaults__",
    "__kwdefaults__",
    "cr_frame",
    "get_parent",
    "_parent_header",
}
# attributes flagged only on the sys module (torch's Module.modules() is fine)
SYS_ATTRIBUTES = {
    "modules",
    "exc_info",
    "exception",
    "audit",
    "meta_path",
    "path_hooks",
    "excepthook",
    "displayhook",
    "stdout",
    "stderr",
}
DYNAMIC_ATTR_FUNCS = {"getattr", "setattr", "delattr", "hasattr"}
MAGIC = re.compile(
    r"^\s*(%{1,2}\s*(config|load_ext|run|alias_magic|load|env|capture|writefile|script|sx|system"
    r"|bash|sh)\b|!)",
    re.MULTILINE,
)
BUILTIN_SHADOW_OK = {"_", "__"}


def strip_magics(source):
    """The cell without its IPython magic and shell lines (`%...`, `!...`), so that `ast` can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts)), node.id
    return "", ""


def imported_names(sources):
    """Names bound by import statements anywhere in these cells (np, torch, math, plt ...)."""
    names = set()
    for source in sources:
        try:
            tree = ast.parse(strip_magics(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
    return names


def findings_in(source, modules=frozenset()):
    """Sorted list of findings (short strings) in one cell's source; `modules`: imported names."""
    import builtins

    found = set()
    for m in MAGIC.finditer(source):
        found.add(f"magic {m.group(0).strip()[:20]}")
    try:
        tree = ast.parse(strip_magics(source))
    except SyntaxError:
        return sorted(found)
    builtin_names = {n for n in vars(builtins) if not n.startswith("_")}
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in MODULES:
                    found.add(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in MODULES:
                found.add(f"import {node.module}")
            for alias in node.names:
                if alias.name in NAMES or alias.name in ATTRIBUTES:
                    found.add(f"import {alias.name}")
        elif isinstance(node, ast.Name):
            if node.id in NAMES:
                found.add(node.id)
            elif node.id in DYNAMIC_ATTR_FUNCS and id(node) not in called and node.id != "hasattr":
                found.add(f"{node.id} passed on as a value")  # `g = getattr`, `map(setattr, ...)`
            elif isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in builtin_names:
                found.add(f"redefines builtin {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            found.add(f".{node.attr}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in SYS_ATTRIBUTES
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            found.add(f"sys.{node.attr}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in builtin_names:
            found.add(f"redefines builtin {node.name}")
        elif isinstance(node, (ast.Assign, ast.Delete)) and (
            isinstance(node, ast.Delete)
            or not isinstance(node.value, (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.UnaryOp))
        ):
            # `math.isclose = lambda ...`, `np.allclose = mine`, `del torch.equal` (not `cudnn.benchmark = True`)
            for target in node.targets:
                for t in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                    if isinstance(t, ast.Attribute):
                        dotted, root = _dotted(t)
                        if root in modules:
                            found.add(f"monkeypatches {dotted}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_ATTR_FUNCS:
            if node.func.id in ("setattr", "delattr") and node.args and _dotted(node.args[0])[1] in modules:
                found.add(f"{node.func.id} on {_dotted(node.args[0])[0]}")
            if len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                found.add(f"{node.func.id} with a computed name")
            elif (
                len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value) in ATTRIBUTES | NAMES
            ):
                found.add(f"{node.func.id} {node.args[1].value}")
    return sorted(found)


def _editable_cells(nb):
    for i, cell in enumerate(nb.get("cells", [])):
        meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
        if cell.get("cell_type") != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        yield i, cell.get("source", "")


def scan(submitted_nb, released_nb=None):
    """[(cell index, finding)] for code a student added that tampers with the grader."""
    cells = list(_editable_cells(submitted_nb))
    modules = imported_names(source for _, source in cells)
    baseline = set()
    if released_nb is not None:
        for _, source in _editable_cells(released_nb):
            baseline.update(findings_in(source, modules))
    result = []
    for i, source in cells:
        for finding in findings_in(source, modules):
            if finding not in baseline:
                result.append((i, finding))
    return result


def describe(findings, limit=6):
    parts = [f"{what} (cell {i})" for i, what in findings[:limit]]
    more = f" and {len(findings) - limit} more" if len(findings) > limit else ""
    return "; ".join(parts) + more
