"""autograde.judge: the probe's plain-data answers, parsed strictly, and notebook 11's first judges (issue 60's
protocol, not yet wired into the grader): run against the solution, wrong answers and a forging kernel."""

import ast
import json
import math
import re

import numpy as np
import pytest
import torch

from autograde import judge
from autograde.assignment import source_notebook
from autograde.judges import nb11


def _answer(value, nonce="n"):
    return json.dumps({"nonce": nonce, "value": judge._encode(value)})


def test_plain_data_round_trips_and_tensors_come_back_as_dtype_shape_values():
    value = {"a": [1, 2.5, None, True, "x"], 3: (1, float("nan")), "t": torch.tensor([[1, 2], [3, 4]])}
    kind, got = judge.decode(_answer(value))
    assert kind == "value" and got["a"] == [1, 2.5, None, True, "x"] and got[3][0] == 1 and math.isnan(got[3][1])
    assert got["t"] == judge.Tensor("torch", "int64", (2, 2), [[1, 2], [3, 4]])
    kind, got = judge.decode(_answer(np.arange(3, dtype=np.float32)))
    assert got == judge.Tensor("numpy", "float32", (3,), [0.0, 1.0, 2.0])
    kind, got = judge.decode(_answer({"x": np.float64(0.5), "n": np.int64(3)}))
    assert (
        got["x"] == judge.Tensor("numpy", "float64", (), 0.5) and float(got["x"]) == 0.5 and got["n"].dtype == "int64"
    )
    with pytest.raises(TypeError, match="not one number"):
        float(judge.Tensor("torch", "float32", (2,), [1.0, 2.0]))
    kind, got = judge.decode(_answer(object()))
    assert isinstance(got, judge.Other) and got.type == "builtins.object"
    kind, got = judge.decode(
        json.dumps({"nonce": "n", "raised": {"type": "ValueError", "bases": ["Exception"], "message": "counters: bad"}})
    )
    assert kind == "raised" and got.is_a("ValueError") and got.is_a("Exception") and not got.is_a("TypeError")


@pytest.mark.parametrize(
    "text, what",
    [
        ("not json", "not JSON"),
        ('{"nonce": "n", "value": NaN}', "not JSON"),
        ('[1, 2]', "nonce"),
        ('{"value": 1}', "nonce"),
        ('{"nonce": "n", "value": 1, "extra": 2}', "unexpected keys"),
        ('{"nonce": "n", "value": {"a": 1}}', "tagged"),
        ('{"nonce": "n", "value": {"t": "pickle", "v": "..."}}', "unknown tag"),
        (
            '{"nonce": "n", "value": {"t": "tensor", "kind": "torch", "dtype": "f", "shape": [2], "values": [1]}}',
            "shape",
        ),
        ('{"nonce": "n", "value": {"t": "dict", "items": [[[1], 2]]}}', "hashable"),
        ('{"nonce": "n", "raised": {"type": "E", "message": "m"}}', "raised answer"),
    ],
)
def test_an_answer_that_is_not_plain_data_is_refused(text, what):
    with pytest.raises(judge.ProbeError, match=what):
        judge.decode(text)


def test_answers_are_bounded():
    with pytest.raises(judge.ProbeError, match="longer than"):
        judge.decode(json.dumps({"nonce": "n", "value": "x" * (judge.MAX_TEXT + 1)}))
    deep = []
    for _ in range(judge.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(judge.ProbeError, match="too deep"):
        judge.decode(json.dumps({"nonce": "n", "value": deep}))
    with pytest.raises(judge.ProbeError, match="at most"):
        judge.decode(" " * (judge.MAX_BYTES + 1))


def test_only_plain_data_crosses_into_the_kernel():
    code = judge.probe_code("f", ({"a": [1, 2.5]}, "s"), "abc")
    call = next(node.value for node in ast.parse(code).body if isinstance(node, ast.Expr))  # _ag_probe(...)
    assert ast.unparse(call.args[0]) == "globals()"  # the notebook's namespace, then only data
    sent = [ast.literal_eval(arg) for arg in call.args[1:]]
    assert (
        sent[0] == "f"
        and "abc" in sent
        and json.loads(sent[1])
        == [
            {
                "t": "tuple",
                "items": [
                    {"t": "tuple", "items": [{"t": "dict", "items": [["a", [1, 2.5]]]}, "s"]},
                    {"t": "dict", "items": []},
                ],
            }
        ]
    )
    # to the guard kernel, which holds the runner, the same request travels as one line of JSON after its marker
    stub = judge.probe_stub(judge.probe_request("f", ({"a": [1, 2.5]}, "s"), "abc"))
    assert "\n" not in stub and stub.startswith(judge.PROBE_STUB)
    request = json.loads(stub[len(judge.PROBE_STUB) :])
    assert [request[0], json.loads(request[1])] == [sent[0], json.loads(sent[1])] and request[3] == "abc"
    ns = {"f": lambda d, s: (sorted(d), s, b"x", {1: (2,)})}
    assert judge.LocalProbe(ns)("f", {"a": [1, 2.5]}, "s") == (
        "value",
        (["a"], "s", judge.Other("builtins.bytes"), {1: (2,)}),
    )
    for bad in ((object(),), (float("nan"),), (torch.tensor([1]),)):
        with pytest.raises(ValueError, match="args"):
            judge.probe_code("f", bad, "abc")
    with pytest.raises(ValueError, match="identifier"):
        judge.probe_code("f(); import os", (), "abc")


def test_recipes_built_alike_on_both_sides_and_watched_arguments_come_back_after_the_call():
    """watched: the argument as the call left it (in ``after``, per call, never shared between calls); call and
    item: the notebook's own functions and tables by name, built on each side from its own names; double: a float64
    copy of a model."""

    def fill(mask, lengths):
        mask[0, 0] = 7  # changes its input in place
        return int(mask.sum())

    probe = judge.LocalProbe({"fill": fill, "table": {"a": 3}, "twice": lambda x, y=0: 2 * x + y})
    m = judge.tensor(torch.ones(2, 2, dtype=torch.long))
    answers = probe.many(
        "fill", [((judge.watched(m), judge.watched(judge.tensor(torch.zeros(2)))), {}), ((judge.watched(m), m), {})]
    )
    assert [a[1] for a in answers] == [10, 10]  # the second call's mask is a fresh copy, not the first's
    assert answers[0].after == [
        judge.Tensor("torch", "int64", (2, 2), [[7, 1], [1, 1]]),
        judge.Tensor("torch", "float32", (2,), [0.0, 0.0]),
    ]
    assert len(answers[1].after) == 1 and answers[1].after[0].values == [[7, 1], [1, 1]]
    assert probe("fill", m, m).after is None
    recipe = judge.call("twice", judge.item(judge.named("table"), "a"), y=1)
    assert probe("twice", recipe) == ("value", 14)
    assert judge.build(recipe, {"twice": lambda x, y=0: 10 * x + y, "table": {"a": 3}}) == 31  # the judge's own
    model = judge.build(judge.double(judge.tiny_llama(vocab_size=16, hidden_size=16, num_hidden_layers=1, seed=1)), {})
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    with pytest.raises(judge.ProbeError, match="after"):
        judge.decode(json.dumps({"nonce": "n", "value": 1, "after": {"t": "x"}}))


def test_a_learners_global_named_like_a_builtin_does_not_change_the_probe():
    """The probe runs in the notebook's namespace, where a learner may well have named a variable `type`, `len`,
    `max` or `list`: the probe binds the builtins it uses from the builtins module, so answers come back alike."""
    clean = judge.LocalProbe({"f": lambda x: (x, [x], {"k": x})})
    names = {
        "f": lambda x: (x, [x], {"k": x}),
        "type": "bf16",
        "len": 3,
        "list": None,
        "dict": {},
        "tuple": (),
        "isinstance": lambda *a: False,
        "globals": None,
        "float": int,
        "repr": str,
        "range": [],
        "str": 0,
    }
    calls = [((2,), {}), ((2.5,), {}), (("s",), {}), ((judge.tensor(torch.tensor([1, 2])),), {})]
    assert judge.LocalProbe(names).many("f", calls) == clean.many("f", calls)
    assert judge._builtins().split("=")[0].split() != []


def test_given_names_are_the_course_copies_of_a_notebooks_given_cells():
    """The judge's reference for 10's gate_k: the functions its given cells restate, run from the solution in a
    namespace of their own (no model loaded, the process's torch threads left alone)."""
    from autograde.judges import given_names

    threads = torch.get_num_threads()
    names = given_names("10_batches_and_servers")
    assert torch.get_num_threads() == threads and "target" not in names
    l8, l1 = names["model_spec"]("Llama-3.1-8B"), names["model_spec"]("Llama-3.2-1B")
    assert names["best_k_for_batch"](1, 400.0, 0.8, l8, l1, names["h100"]) >= 1
    assert not names["fits_in_memory"](l8, l1, names["h100"], 64, 8192.0)


def _solution_function(name):
    import nbformat

    nb = nbformat.read(str(source_notebook("11_real_engines")), as_version=4)
    ns = {}
    exec("import numbers, math, re", ns)
    exec(next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == name), ns)
    return ns[name]


def _in_process(fn):
    """A probe that calls `fn` here, through the same probe code, encoder and parser as the kernel's."""
    return judge.LocalProbe({name: fn for name in (nb11.FN, nb11.PARSER, nb11.GATE, nb11.TRACE)})


def _wrong(change, name=nb11.FN):
    right = _solution_function(name)

    def wrong(counters):
        return change(right(counters), counters)

    return wrong


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_solution_passes_every_judge_whatever_the_draw(seed):
    probes = {name: _in_process(_solution_function(name)) for name in (nb11.FN, nb11.PARSER, nb11.GATE, nb11.TRACE)}
    for cell, fn in nb11.JUDGES.items():
        fn(probes[next(name for name in probes if name in cell)], np.random.default_rng(seed))


@pytest.mark.parametrize(
    "wrong, cell, rule",
    [
        (
            _wrong(lambda r, c: dict(r, tau=c["accepted_tokens"] / c["drafts"])),
            "test_acceptance_from_counters",
            "tau = 1 + A / D",
        ),
        (
            _wrong(lambda r, c: dict(r, alpha=c["accepted_tokens"] / c["draft_tokens"])),
            "test_acceptance_from_counters",
            "alpha = A",
        ),
        (_wrong(lambda r, c: dict(r, alpha=np.float64(r["alpha"]))), "test_acceptance_from_counters", "plain floats"),
        (
            _wrong(
                lambda r, c: dict(
                    r, acceptance_rate=c["accepted_tokens"] / (c["drafts"] * len(c["accepted_per_position"]))
                )
            ),
            "test_acceptance_from_counters_edges",
            "divides by the draft tokens",
        ),
        (
            lambda c: {"alpha": 5 / 9, "tau": 2.25, "acceptance_rate": 5 / 12, "position_rates": [0.75, 0.5, 0.0]},
            "test_acceptance_from_counters",
            "alpha",
        ),
        (
            lambda t: _solution_function(nb11.PARSER)(
                "\n".join(line for line in t.splitlines() if 'engine="0"' in line or "{" not in line)
            ),
            "test_read_spec_counters",
            "series added up",
        ),  # the first engine's series only
        (
            _wrong(lambda r, t: dict(r, accepted_per_position=sorted(r["accepted_per_position"])), nb11.PARSER),
            "test_read_spec_counters",
            "positions 0 .. k - 1 in order",
        ),
        (_wrong(lambda r, t: dict(r, drafts=float(r["drafts"])), nb11.PARSER), "test_read_spec_counters", "plain ints"),
        (
            lambda d, m: (
                _solution_function(nb11.GATE)(d, m)
                or {"num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": [[1, m, 0]]}
            ),
            "test_vllm_gate_config",
            "every k that applies is 0",
        ),  # a config that never speculates, not None
        (
            lambda d, m: (
                lambda g: (
                    g
                    and dict(
                        g,
                        num_speculative_tokens_per_batch_size=[
                            [b, b, dict(sorted(d.items()))[max(x for x in d if x <= b)]] for b in range(1, m + 1)
                        ],
                    )
                )
            )(_solution_function(nb11.GATE)(d, m)),
            "test_vllm_gate_config",
            "merged",
        ),
        (
            lambda reqs: dict(
                _solution_function(nb11.TRACE)(reqs), first_token=[float(r["chunks"][0][0]) for r in reqs]
            ),
            "test_trace_from_stream",
            "empty chunks before it do not count",
        ),
        (
            lambda reqs: dict(_solution_function(nb11.TRACE)(reqs), finish=[float(r["chunks"][-1][0]) for r in reqs]),
            "test_trace_from_stream",
            "empty chunks after it do not count",
        ),
        (
            lambda reqs: dict(
                _solution_function(nb11.TRACE)(reqs), output_tokens=[sum(1 for c in r["chunks"] if c[1]) for r in reqs]
            ),
            "test_trace_from_stream_tokens",
            "summed (a chunk may carry several)",
        ),
        (
            lambda reqs: {key: tuple(v) for key, v in _solution_function(nb11.TRACE)(reqs).items()},
            "test_trace_from_stream",
            "plain floats (times) and plain ints",
        ),
    ],
)
def test_wrong_answers_fail_with_their_rule(wrong, cell, rule):
    with pytest.raises(AssertionError, match=re.escape(rule)):
        nb11.JUDGES[cell](_in_process(wrong), np.random.default_rng(5))


def test_a_bad_input_error_must_name_counters():
    right = _solution_function(nb11.FN)

    def vague(counters):
        try:
            return right(counters)
        except ValueError:
            raise ValueError("bad input") from None

    with pytest.raises(AssertionError, match="names counters"):
        nb11.test_acceptance_from_counters_bad_input(_in_process(vague), np.random.default_rng(0))


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    yield kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def _run(kc, code):
    reply = kc.execute_interactive(code, timeout=60, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]


def test_through_a_real_kernel_the_solution_passes_and_a_forger_fails(kernel):
    import inspect

    source = inspect.getsource(judge)  # nothing of the judge, only the probe, reaches the kernel
    right = next(
        c.source
        for c in __import__("nbformat").read(str(source_notebook("11_real_engines")), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == nb11.FN
    )
    _run(kernel, "import numbers, math, re\n" + right)
    probe = judge.KernelProbe(kernel, timeout=30)
    for cell, fn in nb11.JUDGES.items():
        if "acceptance_from_counters" in cell:
            fn(probe, np.random.default_rng(11))
    assert probe.calls >= 3 and "test_acceptance_from_counters" not in source.split("MIME =")[0]

    # a forger: answers the visible example whatever it is asked, and displays fake answers of its own first
    _run(
        kernel,
        f'''
from IPython.display import display
def acceptance_from_counters(counters):
    display({{"{judge.MIME}": '{{"nonce": "guess", "value": 1}}'}}, raw=True)
    return {{"alpha": 5 / 9, "tau": 2.25, "acceptance_rate": 5 / 12, "position_rates": [0.75, 0.5, 0.0]}}
''',
    )
    with pytest.raises(AssertionError, match="rule: "):
        nb11.test_acceptance_from_counters(probe, np.random.default_rng(12))

    # a kernel whose json module was replaced answers nothing the judge can read: no pass
    _run(
        kernel,
        'import sys, types\nfake = types.ModuleType("json")\nfake.dumps = lambda o: "{}"\nsys.modules["json"] = fake',
    )
    with pytest.raises(judge.ProbeError):
        probe(nb11.FN, {"drafts": 1})


def _judge_rules(module):
    """Every "rule: ..." string a judge module can raise (implicit concatenation is one constant to ast)."""
    import inspect

    tree = ast.parse(inspect.getsource(module))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("rule: ")
    }


@pytest.mark.parametrize("module", ["nb04", "nb11"])
def test_every_rule_a_judge_raises_is_in_the_contract(module):
    """The judges and the notebooks' contract stay in step: a rule label a judge raises is one docs/contract.md lists
    (with the notebook's words it quotes), so a failing judge's hint reads as the contract says."""
    import importlib
    from pathlib import Path

    contract = (Path(__file__).resolve().parents[1] / "docs" / "contract.md").read_text()
    rules = _judge_rules(importlib.import_module(f"autograde.judges.{module}"))
    assert len(rules) > 8
    missing = sorted(r for r in rules if f"`{r}`" not in contract)
    assert not missing, missing


def test_every_judged_cell_names_its_judge_and_every_judge_has_its_cell():
    """The freshness test: the judged notebooks' test cells and their judge modules are in step (a judged cell's
    hidden block is the one line naming its own judge, a cell without a judge keeps its test code, each judge has a
    cell), and no other notebook names a judge; the release step refuses a notebook where they are not."""
    import importlib

    import nbformat

    from autograde import assignments
    from autograde.assignment import source_notebook
    from autograde.judges import MARK, modules, out_of_step
    from autograde.release import judges_out_of_step

    assert judges_out_of_step(assignments()) == []
    for name, module in modules().items():
        judges = importlib.import_module(f"autograde.judges.{module}").JUDGES
        nb = nbformat.read(str(source_notebook(name)), as_version=4)
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
        at = next(i for i, c in enumerate(cells) if c.metadata["nbgrader"]["grade_id"] in judges)
        gid = cells[at].metadata["nbgrader"]["grade_id"]
        must = f"{gid}: its hidden block must be the one line {MARK.format(module=module, function=gid)!r}"
        renamed = nbformat.from_dict(cells[at])
        renamed.source = cells[at].source.replace(f".{module}.{gid}", f".{module}.test_nothing")
        assert out_of_step(name, cells[:at] + [renamed] + cells[at + 1 :]) == [must]
        code = nbformat.from_dict(cells[at])
        code.source = cells[at].source.replace("### END HIDDEN TESTS", "assert True\n### END HIDDEN TESTS")
        assert out_of_step(name, cells[:at] + [code] + cells[at + 1 :]) == [must]
        assert out_of_step(name, cells[:at] + cells[at + 1 :]) == [
            f"{gid}: autograde.judges.{module} judges a test cell the notebook does not have"
        ]
        other = nbformat.from_dict(cells[at])  # a new test cell that names a judge the module lacks
        other.metadata["nbgrader"]["grade_id"] = "test_new"
        other.source = (
            "assert True\n### BEGIN HIDDEN TESTS\n"
            + MARK.format(module=module, function="x")
            + "\n### END HIDDEN TESTS"
        )
        assert out_of_step(name, cells + [other]) == [
            f"test_new: names a judge, but autograde.judges.{module} has none for it"
        ]
        other.source = "assert True\n### BEGIN HIDDEN TESTS\nassert 2 + 2 == 4\n### END HIDDEN TESTS"
        assert out_of_step(name, cells + [other]) == [
            "test_new: its hidden tests have no judge (no hidden test runs "
            "in the student's kernel: write one in autograde/judges/)"
        ]
        other.source = "assert True"  # a test cell with no hidden block needs no judge
        assert out_of_step(name, cells + [other]) == []
    other = nbformat.read(str(source_notebook("05_acceptance_in_practice")), as_version=4)
    test = next(c for c in other.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code")
    test = nbformat.from_dict(test)
    test.source = (
        "assert True\n### BEGIN HIDDEN TESTS\n" + MARK.format(module="nb04", function="x") + "\n### END HIDDEN TESTS"
    )
    assert "00_no_judges" not in modules()  # a notebook with no judge module names none
    assert out_of_step("00_no_judges", [test])[0].endswith("but 00_no_judges has no judge module")


def test_no_released_test_cells_hidden_code_runs_in_the_kernel():
    """Every test cell of every notebook has a judge, and what the grader sends the student's kernel of it
    (executor.kernel_source) holds no line of a hidden block: its visible part, or its docstring where the judge
    repeats the visible check. The learner's released copy holds no hidden block at all; a hidden block without a
    judge is refused, by the grader and by the release step."""
    import nbformat

    from autograde import REPO, assignments
    from autograde.assignment import is_test_cell, nbgrader_meta, source_notebook
    from autograde.executor import kernel_source, visible_part
    from autograde.judges import judge_for, modules

    assert set(modules()) == set(assignments())
    checked = 0
    for name in assignments():
        released = nbformat.read(str(REPO / "notebooks" / name / f"{name}.ipynb"), as_version=4)
        assert not [c for c in released.cells if "HIDDEN TESTS" in c.source or "judged by the grader" in c.source], name
        for cell in nbformat.read(str(source_notebook(name)), as_version=4).cells:
            if not is_test_cell(cell):
                continue
            judge = judge_for(name, nbgrader_meta(cell)["grade_id"])
            assert judge is not None, (name, nbgrader_meta(cell)["grade_id"])
            sent = kernel_source(cell.source, judge)
            assert (
                "HIDDEN TESTS" not in sent
                and "judged by the grader" not in sent
                and (sent == visible_part(cell.source)[0] or sent == cell.source.split("\n", 1)[0])
            ), nbgrader_meta(cell)
            checked += 1
    assert checked >= 146, checked  # the eleven notebooks: 146 test cells
    with pytest.raises(ValueError, match="hidden block without a judge"):
        kernel_source("assert 1\n### BEGIN HIDDEN TESTS\nassert 2\n### END HIDDEN TESTS")
    assert kernel_source("assert 1") == "assert 1"


def test_no_test_cells_visible_part_ends_by_displaying_a_value():
    """What a test cell keeps is its visible part, so its last statement is now its visible part's last: a bare
    expression there displays its value, which nbgrader's Validator reads as partial credit ("partial credit
    cannot be greater than maximum points" for ridge_point's 295.3). Its value must be assigned instead."""
    import ast

    import nbformat

    from autograde import assignments
    from autograde.assignment import is_test_cell, nbgrader_meta, source_notebook
    from autograde.executor import visible_part

    shown = []
    for name in assignments():
        for cell in nbformat.read(str(source_notebook(name)), as_version=4).cells:
            if is_test_cell(cell):
                body = ast.parse(visible_part(cell.source)[0]).body
                last = body[-1] if body else None
                if isinstance(last, ast.Expr) and not (
                    isinstance(last.value, ast.Constant) and isinstance(last.value.value, str)
                ):
                    shown.append((name, nbgrader_meta(cell)["grade_id"]))
    assert shown == []


def test_a_judged_cells_rules_are_its_judges_in_order():
    """The contract's rules of a judged cell are read from its judge: the labels of the judge function and of the
    module's helpers and constants it names, in source order."""
    from autograde.assignment import load_assignment
    from autograde.judges import rules_of

    test = next(
        t for t in load_assignment("11_real_engines").tests if t.grade_id == "test_acceptance_from_counters_edges"
    )
    assert test.judge == ("nb11", "test_acceptance_from_counters_edges")
    assert (
        test.rules
        == rules_of("nb11", "test_acceptance_from_counters_edges")
        == [
            "rounds that drafted fewer than k (draft tokens < D k) count as rejections; the rate divides by the "
            "draft tokens"
        ]
    )
    assert "new_tokens is a 1-D LongTensor" in rules_of("nb04", "test_verify_distribution")  # from a helper it names
    with pytest.raises(ValueError, match="function"):
        rules_of("nb11", "test_nothing")


def test_a_greedy_decoder_fails_the_sampling_judges_whatever_pair_is_drawn():
    """04's two-token test draws its random pair again while one pair of first tokens carries more than MODE_MAX of
    the target's joint: against a near-certain target a greedy decoder passed once in a full run (1 of 60 draws in
    a sweep, at temperature 0.5-0.9). Greedy decoding with made-up statistics must fail every draw."""
    import torch

    from autograde.judge import LocalProbe
    from autograde.judges import nb04
    from specdec.core.decoding import greedy_generate

    def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
        out = greedy_generate(target, input_ids, max_new_tokens)
        return out, {"rounds": 1, "drafted": k, "accepted": k, "per_round": [(k, k)]}

    assert nb04.MODE_MAX <= 0.8
    probe = LocalProbe({"speculative_generate": speculative_generate, "torch": torch})
    for seed in range(4):
        for name in ("test_speculative_generate_distribution", "test_speculative_generate_distribution_temperature"):
            with pytest.raises(AssertionError, match="distributed as the target's own sampling"):
                nb04.JUDGES[name](probe, np.random.default_rng([seed, 7]))


# ------------------------------------------------------------------ the probe's own limits (issue 77)
class _Chatty:
    """A kernel client whose kernel never goes idle: a message of `size` characters every `every` seconds."""

    def __init__(self, size=1, every=0.01):
        self.size, self.every, self.read = size, every, 0

    def execute(self, code, **kwargs):
        return "probe-1"

    def get_iopub_msg(self, timeout):
        import time

        time.sleep(min(self.every, timeout))
        self.read += 1
        return {
            "parent_header": {"msg_id": "probe-1"},
            "msg_type": "stream",
            "content": {"name": "stdout", "text": "." * self.size},
        }


def test_a_probe_has_a_deadline_for_the_whole_call_not_per_message():
    """A function printing a dot every 10 ms never lets a per-message timeout expire: the call's deadline does."""
    import time

    probe = judge.KernelProbe(_Chatty(), timeout=0.5, stub=True)
    t0 = time.monotonic()
    with pytest.raises(judge.Stalled, match=r"returns within 0 s|returns within 1 s") as caught:
        probe("f", 1)
    assert time.monotonic() - t0 < 2, "the probe waited past its deadline"
    assert caught.value.came_back.startswith("was still running") and caught.value.msg_id == "probe-1"
    assert str(caught.value).startswith("rule: f() returns within")


def test_a_probe_stops_reading_a_flood():
    client = _Chatty(size=1_000_000, every=0)
    with pytest.raises(judge.Stalled, match="prints at most 8 MB") as caught:
        judge.KernelProbe(client, timeout=60, stub=True)("f", 1)
    assert caught.value.came_back == "printed more than 8 MB"
    assert client.read <= judge.MAX_PRINTED // 1_000_000 + 1, client.read


def test_a_probe_whose_kernel_died_says_so_at_once():
    import time

    class Silent(_Chatty):
        def get_iopub_msg(self, timeout):
            time.sleep(timeout)
            raise TimeoutError

    t0 = time.monotonic()
    with pytest.raises(judge.ProbeError, match="died") as caught:
        judge.KernelProbe(Silent(), timeout=30, stub=True, alive=lambda: False)("f", 1)
    assert not isinstance(caught.value, judge.Stalled)
    assert time.monotonic() - t0 < 3


def test_an_interrupt_ends_the_probe_and_the_calls_after_it_are_not_made():
    calls = []

    def stubborn(x):
        calls.append(x)
        raise KeyboardInterrupt

    answers = judge.LocalProbe({"stubborn": stubborn}).many("stubborn", [((j,), {}) for j in range(3)])
    assert calls == [0], calls
    assert [a[1].type for a in answers] == ["KeyboardInterrupt"] * 3


def test_an_object_that_only_claims_to_be_a_tensor_is_refused():
    fake = {"t": "tensor", "kind": "torch", "dtype": "int64", "shape": [2], "values": ["a", "b"]}
    with pytest.raises(judge.ProbeError, match="dtype int64"):
        judge.decode(json.dumps({"nonce": "n", "value": fake}))
    fake.update(values=[True, 1])
    with pytest.raises(judge.ProbeError, match="dtype int64"):
        judge.decode(json.dumps({"nonce": "n", "value": fake}))
    fake.update(values=[3, 1])
    assert judge.decode(json.dumps({"nonce": "n", "value": fake}))[1].values == [3, 1]


def test_nan_is_never_a_number_that_is_due():
    nan = judge.decode(json.dumps({"nonce": "n", "value": {"t": "float", "v": "nan"}}))
    with pytest.raises(judge.Broken, match="rule: r") as caught:
        judge.number_of(nan, "rule: r")
    assert caught.value.came_back == "returned nan"
    inf = judge.decode(json.dumps({"nonce": "n", "value": {"t": "float", "v": "inf"}}))
    assert judge.number_of(inf, "rule: r") == math.inf


def _judge_modules():
    from pathlib import Path

    return sorted(Path(judge.__file__).parent.joinpath("judges").glob("nb*.py"))


@pytest.mark.parametrize("path", _judge_modules(), ids=lambda p: p.stem)
def test_no_judge_tolerance_check_passes_nan(path):
    """`abs(got - want) > tol` is false for NaN, so NaN would pass it: checks are written `not ... <= tol`, and so
    is every distance a judge compares (the rule is simplest kept whole)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Call)
            and getattr(node.left.func, "id", "") == "abs"
            and any(isinstance(op, (ast.Gt, ast.GtE)) for op in node.ops)
        ):
            bad.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert not bad, bad
