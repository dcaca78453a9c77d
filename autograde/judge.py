"""A judge outside the student's process: the probe, its plain-data answers, and the channel between them.

Issue 60's protocol. `executor.SandboxedExecute` decides every test cell through it (`autograde.judges.judge_for`
names each cell's judge; a hidden block without one stops the run): no hidden test runs inside the student's
kernel. A hidden test becomes a *probe* and a *judge*:

- the **probe** is the only code the student's kernel sees of a test. It is generic: it calls one function of
  the notebook by name on arguments sent as plain data and answers with what came out, as plain data, in one
  ``display_data`` message of its own MIME type, tagged with a nonce drawn for that call. It holds no key, no
  expected value and no reference. The guard kernel compiles the probe's runner once, from its guard file,
  before any student code, and each probe is then one line of data (``probe_stub``); a plain kernel gets the
  runner's source with each probe (``probe_code``);
- the **judge** runs in the grader's process (or one it starts), never in the sandbox. It draws the inputs
  from a seed the kernel never sees, asks through the probe, computes the reference on the same inputs itself
  and decides. Its functions live in modules the release step never ships (``autograde/judges/``).

Whatever the student's code does to its own process (replacing ``json``, ``display``, the probe itself, or
answering every probe by hand) can only change the answers the judge reads: an answer passes when it is right
for inputs first seen at that moment, which is what the test asks. What a probe cannot prove is said in
docs/grading.md ("A judge outside the kernel").

Answers are parsed strictly (``decode``): JSON of a fixed set of node kinds, bounded in bytes, depth and
length, no pickle. A tensor or an array comes back as its dtype, shape and values; an exception the student's
function raised as its type name and message.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import secrets
import time
from dataclasses import dataclass

from autograde.guard_kernel import PROBE_MIME as MIME, PROBE_STUB

MAX_BYTES = 4_000_000  # of one answer's JSON
MAX_DEPTH = 16  # nesting of lists, tuples and dicts
MAX_ITEMS = 1_000_000  # numbers and strings in one answer, all levels together
MAX_TEXT = 10_000  # characters of one string (an exception's message is cut to this in the kernel)
ALIVE_EVERY = 1.0  # seconds between two looks at whether the kernel still runs, while a probe waits
MAX_PRINTED = 8 * 2**20  # bytes of messages one probe may make the grader read (prints, displays, the answer)


class ProbeError(Exception):
    """The kernel gave no well-formed answer to a probe: no message with the call's nonce, or one that does not
    parse as an answer. The judge counts the test as failed (the student's process answered nothing usable)."""


class NoAnswer(ProbeError):
    """The kernel ran a probe to its end (it went idle) and displayed no answer with the call's nonce: the probe
    always answers, even when the student's function raises, so its code or the kernel's messages had been
    replaced. The grader records the run as tampered."""


class Stalled(ProbeError):
    """The student's function, called by a probe, was still running at the probe's deadline, or printed more than
    ``MAX_PRINTED`` bytes first: the cell fails with `rule` (what the learner reads) and `came_back`, and the
    executor interrupts the kernel, whose probe `msg_id` is still running, before the notebook goes on."""

    def __init__(self, rule, came_back, msg_id):
        super().__init__(rule)
        self.rule, self.came_back, self.msg_id = rule, came_back, msg_id


class Broken(AssertionError):
    """A judge's verdict: the rule an answer broke (``str(exc)``, "rule: ..." as the notebook's contract words it)
    and what the student's function gave back on that input (``came_back``, from ``describe``), for the hint."""

    def __init__(self, rule, came_back=""):
        super().__init__(rule)
        self.came_back = came_back


def value_of(answer, rule):
    """The value that came back, or `rule` broken, with what was raised instead."""
    kind, value = answer
    if kind != "value":
        raise Broken(rule, describe(answer))
    return value


def number_of(answer, rule):
    """The number that came back (a plain number, or a NumPy or torch scalar, as float() reads it), or `rule`
    broken with what came back instead. NaN is never a number that is due (every comparison with it is false, so
    a check written ``abs(got - want) > tol`` would pass it); an infinity is returned, for the judge to decide."""
    got = value_of(answer, rule)
    try:
        number = float(got)
    except (TypeError, ValueError, OverflowError):
        raise Broken(rule, describe(answer)) from None
    if number != number:
        raise Broken(rule, "returned nan")
    return number


def value_errors(answers, names, raises, named):
    """Bad input, the judges' one idiom: each answer must be a ValueError (else the rule `raises` is broken) whose
    message names its argument, ``names[j]``: a name, or a tuple of names any of which will do (else `named`)."""
    for answer, name in zip(answers, names, strict=True):
        kind, value = answer
        if kind != "raised" or not value.is_a("ValueError"):
            raise Broken(raises, describe(answer))
        if not any(re.search(rf"\b{n}\b", value.message) for n in ((name,) if isinstance(name, str) else name)):
            raise Broken(named)


ANSWERS_VALID_INPUT = "rule: valid input returns an answer (ValueError is for bad input only)"


def answered(answers, rule=ANSWERS_VALID_INPUT):
    """Valid input beside the bad, in a bad-input cell: each answer must be a value, whatever its value (that is
    the other cells' rule). A function that raises ValueError on every input is not checking its input, and
    earns no bad-input cell."""
    for answer in answers:
        value_of(answer, rule)


def own_numbers(answers):
    """The learner's own upstream function's answers as floats, None for each that is not a number (it raised,
    returned NaN or something else). A downstream judge prices with these besides its reference, so a slip
    upstream costs the upstream cells only: the downstream answer passes when it is right on the reference or
    on the learner's own upstream values (where the learner's downstream function must call its own)."""
    out = []
    for answer in answers:
        try:
            out.append(number_of(answer, ""))
        except AssertionError:
            out.append(None)
    return out


def describe(answer) -> str:
    """What came back from one probe, in a few words: "raised TypeError", "returned None", "returned a dict of 3
    keys", "returned a torch int64 tensor of shape (1, 40)". Never the values: only the kind of answer."""
    kind, value = answer
    if kind == "raised":
        return f"raised {value.type}"
    return "returned " + kind_of(value)


def kind_of(v):
    """A value that came back, by its kind alone: "None", "a float", "a list of 3 (a int)", "a torch int64 tensor of
    shape (2,)"."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, Tensor):
        return f"a {v.kind} {v.dtype} {'tensor' if v.kind == 'torch' else 'array'} of shape {v.shape}"
    if isinstance(v, Other):
        return f"an object of type {v.type}"
    if isinstance(v, (list, tuple)):
        inner = sorted({kind_of(x).split(" of ")[0] for x in v})[:3]
        return f"a {type(v).__name__} of {len(v)}" + (f" ({', '.join(inner)})" if inner else "")
    if isinstance(v, dict):
        return f"a dict of {len(v)} keys"
    return f"a {type(v).__name__}"


@dataclass(frozen=True)
class Tensor:
    """A tensor or array the student's function returned: its kind ("torch" or "numpy"), dtype name, shape and
    values (nested lists, as ``tolist()`` gives them)."""

    kind: str
    dtype: str
    shape: tuple
    values: object

    def __float__(self):  # a 0-d tensor or a numpy scalar reads as its number, as float() would
        if self.shape != () or isinstance(self.values, (list, str)) or self.values is None:
            raise TypeError(f"a {self.kind} {self.dtype} tensor of shape {self.shape} is not one number")
        return float(self.values)


@dataclass(frozen=True)
class Raised:
    """The student's function raised: the exception's class name (and its bases' names, nearest first) and its
    message."""

    type: str
    bases: tuple
    message: str

    def is_a(self, name: str) -> bool:
        return name == self.type or name in self.bases


# ------------------------------------------------------------------------------------------ kernel side
def _encode(obj, _depth=0):
    """Plain data for JSON, run INSIDE the student's kernel (its source is part of the probe's runner, so it
    imports nothing of the course). Unknown objects become {"t": "other", "type": name}: the judge fails them."""
    if _depth > 16:
        return {"t": "other", "type": "too deep"}
    if obj is None or type(obj) in (bool, str):  # exact types: a subclass (numpy.float64) is tagged
        return obj
    if type(obj) is int:
        return obj if abs(obj) < 2**63 else {"t": "other", "type": "int beyond 64 bits"}
    if type(obj) is float:
        # no import here: in the kernel every import is an audit event the guard's hook inspects, on every call
        return obj if obj - obj == 0 else {"t": "float", "v": repr(obj)}
    if type(obj) in (list, tuple):
        items = [_encode(x, _depth + 1) for x in obj]
        return items if type(obj) is list else {"t": "tuple", "items": items}
    if type(obj) is dict:
        return {"t": "dict", "items": [[_encode(k, _depth + 1), _encode(v, _depth + 1)] for k, v in obj.items()]}
    kind = type(obj).__module__.split(".")[0]
    if kind in ("torch", "numpy") and hasattr(obj, "tolist") and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        values = obj.tolist()
        return {
            "t": "tensor",
            "kind": kind,
            "dtype": str(obj.dtype).replace("torch.", ""),
            "shape": [int(s) for s in obj.shape],
            "values": _encode(values, _depth + 1),
        }
    return {"t": "other", "type": type(obj).__module__ + "." + type(obj).__qualname__}


@dataclass(frozen=True)
class Build:
    """An argument the probe builds in the kernel from plain data (and the judge builds the same way for its own
    references): a tensor from its dtype and values, a seeded ``torch.Generator``, one of the notebook's own
    objects by name, or a model from a recipe (``tiny_llama``; a copy; a noisy copy; a sharpened head; a model
    whose forwards are counted). Made with the helpers below; written into the probe as a tuple tagged with a
    string drawn for that call, so that no plain data the judge sends can be mistaken for one."""

    kind: str
    args: tuple


def tensor(t):
    """A tensor argument: sent as its dtype, shape and raw bytes, rebuilt exactly. Bytes, not nested lists: a
    judge's 3,000 rounds of (N + 1, V) probabilities cost a second to write and parse as JSON numbers."""
    t = t.detach().contiguous()
    dtype = str(t.dtype).replace("torch.", "")
    if dtype not in _RAW_DTYPES:
        return Build("tensor", (dtype, t.tolist()))
    return Build("rawtensor", (dtype, [int(n) for n in t.shape], t.numpy().tobytes()))


_RAW_DTYPES = ("float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def ndarray(a):
    """A NumPy array argument: sent as its dtype and values, rebuilt exactly (floats as their repr)."""
    import numpy

    a = numpy.asarray(a)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"a: ndarray sends bool, integer and float arrays, got {a.dtype}")
    return Build("ndarray", (a.dtype.name, a.tolist()))


def cost(a: float, per_batch=0.0, per_token=0.0, squared=0.0, two_tokens=0.0):
    """A cost function (batch B, tokens t) -> seconds, sent as its coefficients and built on both sides as
    ``a + per_batch B + per_token B t + squared (B t)^2 + two_tokens [t == 2]`` (the same operations in the same
    order, so both sides compute the same floats)."""
    return Build("cost", tuple(float(c) for c in (a, per_batch, per_token, squared, two_tokens)))


def cost_of(c):
    """The judge's own copy of a ``cost`` recipe, as a Python function."""
    return build(c, {})


def generator(seed: int):
    return Build("generator", (int(seed),))


def named(name: str):
    """The notebook's own object of that name (the judge keeps its own copy for the reference)."""
    return Build("name", (name,))


def rows(t):
    """In ``probe.map``: call j gets row j of the tensor `t` (a Build from ``tensor``), sent and built once."""
    return Build("rows", (t,))


def seeds(values):
    """In ``probe.map``: call j gets a ``torch.Generator`` seeded with ``values[j]``."""
    return Build("seeds", ([int(v) for v in values],))


def nonfinite(text: str):
    """A float JSON cannot carry ("nan", "inf" or "-inf"), built as ``float(text)`` (bad input of a judge)."""
    if text not in ("nan", "inf", "-inf"):
        raise ValueError(f"text: nonfinite takes 'nan', 'inf' or '-inf', got {text!r}")
    return Build("float", (text,))


def tiny_llama(**kwargs):
    return Build("tiny_llama", (dict(kwargs),))


def copy_of(model):
    return Build("copy", (model,))


def noisy(model, scale: float, seed: int):
    """A copy of `model` with Gaussian noise of `scale` times each parameter's std added (torch seeded)."""
    return Build("noisy", (model, float(scale), int(seed)))


def sharp(model, factor: float):
    """A copy of `model` whose output head is multiplied by `factor` (sharper distributions)."""
    return Build("sharp", (model, float(factor)))


def double(model):
    """A float64 copy of `model` (end-to-end tests where float32 rounding could break a greedy tie)."""
    return Build("double", (model,))


def random_heads(model, n_heads: int, seed: int):
    """Medusa-style heads for `model` (``head_logits(h)`` -> (n_heads, V)): the model's own head plus fixed random
    projections of h, seeded; for tree decoding on models the course ships no heads for."""
    return Build("random_heads", (model, int(n_heads), int(seed)))


def call(name: str, *args, **kwargs):
    """The result of the notebook's own function `name` on these arguments (built first): in the kernel the
    student's copy, in the judge its own (`names`); a forged one can only make the student's own answers wrong."""
    return Build("call", (str(name), tuple(args), dict(kwargs)))


def item(container, key):
    """``container[key]`` of a built container (``item(named("hardware"), "A100 80GB SXM")``)."""
    return Build("item", (container, key))


def watched(x):
    """An argument the probe sends back, as it is after the call, in the answer's ``after`` (a list, one entry per
    watched argument of that call, in the order they were built): for "the inputs stay as they were". Not shared
    with other calls of the same probe; not for ``probe.map``."""
    return Build("watched", (x,))


def counted(model, label: str):
    """`model` itself, its forwards and its ``.model``'s counted under `label` and `label + ".model"`, its
    ``generate`` refused while the call runs (the counts are the process's own report: see docs/grading.md)."""
    return Build("counted", (model, str(label)))


def _build(x, tag, names, memo, counts):
    """Arguments from plain data, run on both sides: INSIDE the student's kernel (its source is part of the
    probe's runner) and in the judge (``build``). A tuple (tag, kind, ...) is built; other data passes through.
    Models are built once per probe (``memo``); ``counts`` receives the counted forwards."""
    if type(x) is list:
        return [_build(v, tag, names, memo, counts) for v in x]
    if type(x) is dict:
        return {k: _build(v, tag, names, memo, counts) for k, v in x.items()}
    if type(x) is not tuple:
        return x
    if not (len(x) >= 2 and x[0] == tag):
        return tuple(_build(v, tag, names, memo, counts) for v in x)
    if x[1] == "float":  # nan or inf (see nonfinite): no import needed
        return float(x[2])
    if x[1] == "cost":  # a cost function from its coefficients (see cost)
        a0, b0, b1, b2, e2 = x[2:7]
        return lambda B, t: a0 + b0 * B + b1 * B * t + b2 * (B * t) ** 2 + e2 * (t == 2)
    if x[1] == "ndarray":  # numpy is the notebook's own import: once per probe
        if "__numpy__" not in memo:
            import numpy

            memo["__numpy__"] = numpy
        return memo["__numpy__"].array(x[3], dtype=x[2])
    if "__torch__" not in memo:  # once per probe: an import is an audit event in the guarded kernel
        import copy

        import torch

        memo["__torch__"], memo["__copy__"] = torch, copy
    _t, _c = memo["__torch__"], memo["__copy__"]
    kind, a = x[1], x[2:]
    if kind == "rows":  # a mapped call's j-th row of a tensor (see map)
        return {tag: ("rows", _build(a[0], tag, names, memo, counts))}
    if kind == "seeds":  # a mapped call's generator seeded with the j-th seed
        return {tag: ("seeds", list(a[0]))}
    if kind == "tensor":
        return _t.tensor(a[1], dtype=getattr(_t, a[0]))
    if kind == "rawtensor":  # dtype, shape and raw bytes (see tensor): a fresh tensor of its own
        _dt = getattr(_t, a[0])
        if not a[2]:
            return _t.empty(a[1], dtype=_dt)
        return _t.frombuffer(bytearray(a[2]), dtype=_dt).reshape(a[1]).clone()
    if kind == "generator":
        return _t.Generator().manual_seed(a[0])
    if kind == "watched":  # an argument sent back after the call (see watched); never shared
        out = _build(a[0], tag, names, memo, counts)
        memo.setdefault("__watched__", []).append(out)
        return out
    key = repr(x)
    if key in memo:
        return memo[key]
    if kind == "name":
        out = names[a[0]]
    elif kind == "item":  # an entry of a built container (the notebook's hardware table)
        out = _build(a[0], tag, names, memo, counts)[a[1]]
    elif kind == "call":  # the notebook's own function of that name, on built arguments
        out = names[a[0]](*_build(a[1], tag, names, memo, counts), **_build(a[2], tag, names, memo, counts))
    elif kind == "tiny_llama":
        from specdec.core.decoding import tiny_llama as _tiny

        out = _tiny(**a[0])
    elif kind in ("copy", "noisy", "sharp", "double"):
        out = _c.deepcopy(_build(a[0], tag, names, memo, counts))
        if kind == "double":
            out = out.double()
        with _t.no_grad():
            if kind == "noisy":
                _t.manual_seed(a[2])
                for prm in out.parameters():
                    prm.add_(a[1] * prm.std() * _t.randn_like(prm))
            if kind == "sharp":
                out.lm_head.weight.mul_(a[1])
    elif kind == "random_heads":  # Medusa-like heads for any model (see random_heads)
        _m = _build(a[0], tag, names, memo, counts)
        _g = _t.Generator().manual_seed(a[2])
        _w = _t.randn(a[1], _m.config.vocab_size, _m.config.hidden_size, generator=_g) * 0.5

        class _Heads:
            def head_logits(self, h, _w=_w, _lm=_m.lm_head):
                base = _lm(h)  # the model's own guess mixed in: some of the heads' guesses are right
                return _t.stack([base + (w @ h.float()).to(base.dtype) for w in _w])

        out = _Heads()
    elif kind == "counted":
        out, label = _build(a[0], tag, names, memo, counts), a[1]

        def _count(name):
            counts[name] = 0

            def hook(module, args):
                counts[name] += 1

            return hook

        def _refuse(*args, **kwargs):
            raise AssertionError("generate() is not called here: the decoder runs its own loop")

        def _arm(out=out, label=label):  # after every argument is built, so that no copy carries the hooks
            handles = [
                out.register_forward_pre_hook(_count(label)),
                out.model.register_forward_pre_hook(_count(label + ".model")),
            ]
            had = "generate" in vars(out)
            out.generate = _refuse

            def _undo():
                for h in handles:
                    h.remove()
                if not had:
                    del out.generate

            memo.setdefault("__undo__", []).append(_undo)

        memo.setdefault("__arm__", []).append(_arm)
    else:
        raise ValueError(f"unknown argument kind {kind!r}")
    memo[key] = out
    return out


def _to_json(x, tag, depth=0):
    """What a probe sends, as JSON nodes, in one walk (judge side): plain data passes (tuples, dicts with any keys
    and bytes tagged, as answers are), a ``Build`` becomes a tuple tagged with `tag`, and anything else is refused
    (ValueError naming args): nothing but data crosses into the kernel."""
    if depth > MAX_DEPTH:
        raise ValueError("args: nested too deep")
    if x is None or type(x) in (bool, int, str):
        return x
    if type(x) is float:
        if not math.isfinite(x):
            raise ValueError(f"args: floats must be finite to be sent, got {x!r}")
        return x
    if type(x) is bytes:  # compressed: a judge's rounds repeat a few rows of p and q thousands of times, and
        return {"t": "bytes", "z": _b64(_zlib(x))}  # every character of a probe is read by IPython before it runs
    if isinstance(x, Build):
        if not (type(x.kind) is str and x.kind.isidentifier() and type(x.args) is tuple):
            raise ValueError(f"args: a malformed Build {x!r}")
        return {"t": "tuple", "items": [tag, x.kind] + [_to_json(v, tag, depth + 1) for v in x.args]}
    if type(x) is list:
        return [_to_json(v, tag, depth + 1) for v in x]
    if type(x) is tuple:
        return {"t": "tuple", "items": [_to_json(v, tag, depth + 1) for v in x]}
    if type(x) is dict:
        return {
            "t": "dict",
            "items": [[_to_json(k, tag, depth + 1), _to_json(v, tag, depth + 1)] for k, v in x.items()],
        }
    raise ValueError(f"args: only plain data is sent to the kernel, got {type(x).__name__}")


def _from_json(x):
    """The arguments back from their JSON nodes, run INSIDE the student's kernel (its source is sent with each
    probe): json.loads and this walk are many times faster than parsing thousands of calls as Python source."""
    if type(x) is list:
        return [_from_json(v) for v in x]
    if type(x) is dict:
        if x["t"] == "tuple":
            return tuple(_from_json(v) for v in x["items"])
        if x["t"] == "dict":
            return {_from_json(k): _from_json(v) for k, v in x["items"]}
        import base64 as _b64m
        import zlib as _zm

        return _zm.decompress(_b64m.b64decode(x["z"]))
    return x


def _zlib(data):
    import zlib

    return zlib.compress(data, 1)


def _b64(data):
    import base64

    return base64.b64encode(data).decode("ascii")


def build(x, names, memo=None, counts=None):
    """The judge's own copy of an argument (its models from its own copies of the notebook's objects, `names`)."""
    tag = "judge-" + secrets.token_hex(8)
    memo = {} if memo is None else memo
    return _build(_from_json(_to_json(x, tag)), tag, names, memo, {} if counts is None else counts)


_RUNNER = '''
def _ag_probe(_ag_ns, _ag_name, _ag_calls, _ag_many, _ag_nonce, _ag_tag, _ag_limit, _ag_mime):
    import json as _j, sys as _s
{builtins}
{functions}
    _ag_calls, _ag_memo, _ag_counts = _from_json(_j.loads(_ag_calls)), {{}}, {{}}

    def _ag_raised(_ag_e):
        return {{"raised": {{"type": type(_ag_e).__name__, "bases": [b.__name__ for b in type(_ag_e).__mro__[1:]],
                            "message": str(_ag_e)[:_ag_limit]}}}}

    def _ag_built(_ag_args, _ag_kwargs):
        _ag_a = _build(_ag_args, _ag_tag, _ag_ns, _ag_memo, _ag_counts)
        _ag_k = _build(_ag_kwargs, _ag_tag, _ag_ns, _ag_memo, _ag_counts)
        for _ag_arm in _ag_memo.pop("__arm__", []):
            _ag_arm()
        return _ag_a, _ag_k

    def _ag_call(_ag_a, _ag_k):
        _ag_before, _ag_watch = dict(_ag_counts), _ag_memo.pop("__watched__", None)
        if "__interrupted__" in _ag_memo:  # an interrupt ends the probe: the calls after it are not made
            return _ag_raised(_ag_memo["__interrupted__"])
        try:
            _ag_out = {{"value": _encode(_ag_ns[_ag_name](*_ag_a, **_ag_k))}}
        except BaseException as _ag_e:
            if isinstance(_ag_e, KeyboardInterrupt):
                _ag_memo["__interrupted__"] = _ag_e
            _ag_out = _ag_raised(_ag_e)
        if _ag_watch is not None:
            _ag_out["after"] = [_encode(_ag_w) for _ag_w in _ag_watch]
        if _ag_counts:
            _ag_out["observed"] = {{k: v - _ag_before.get(k, 0) for k, v in _ag_counts.items()}}
        return _ag_out

    def _ag_one(_ag_args, _ag_kwargs):
        try:
            _ag_a, _ag_k = _ag_built(_ag_args, _ag_kwargs)
        except BaseException as _ag_e:
            return _ag_raised(_ag_e)
        return _ag_call(_ag_a, _ag_k)

    def _ag_at(_ag_v, _ag_j):          # the j-th of a rows(...) or seeds(...) argument in a mapped call
        if type(_ag_v) is dict and _ag_tag in _ag_v:
            _ag_kind, _ag_seq = _ag_v[_ag_tag]
            if _ag_kind == "rows":
                return _ag_seq[_ag_j]
            return _ag_memo["__torch__"].Generator().manual_seed(_ag_seq[_ag_j])
        return _ag_v

    def _ag_map(_ag_n, _ag_args, _ag_kwargs):
        try:
            _ag_a, _ag_k = _ag_built(_ag_args, _ag_kwargs)
        except BaseException as _ag_e:
            return [_ag_raised(_ag_e)] * _ag_n
        return [_ag_call([_ag_at(v, j) for v in _ag_a], {{key: _ag_at(v, j) for key, v in _ag_k.items()}})
                for j in range(_ag_n)]
    try:
        if _ag_many is True:
            _ag_doc = {{"nonce": _ag_nonce, "answers": [_ag_one(a, k) for a, k in _ag_calls]}}
        elif _ag_many:
            _ag_doc = {{"nonce": _ag_nonce, "answers": _ag_map(_ag_many, *_ag_calls[0])}}
        else:
            _ag_doc = dict(_ag_one(*_ag_calls[0]), nonce=_ag_nonce)
    finally:
        for _ag_undo in _ag_memo.get("__undo__", []):
            _ag_undo()
    if not _ag_mime:
        return _j.dumps(_ag_doc)
    _s.modules["IPython.display"].display({{_ag_mime: _j.dumps(_ag_doc)}}, raw=True)
'''
_CALL = "_ag_probe(globals(), {name!r}, {calls!r}, {many!r}, {nonce!r}, {tag!r}, {limit}, {mime!r})\ndel _ag_probe\n"


@functools.lru_cache(maxsize=1)
def _builtins():
    """The builtins the probe's code names, bound from the builtins module inside the probe: a learner's global
    named `type`, `len` or `max` (the probe runs in the notebook's namespace) must not change what a probe does."""
    import ast
    import builtins

    code = _RUNNER.format(functions=_kernel_functions(), builtins="")
    used = sorted({n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name) and n.id in vars(builtins)})
    return "    import builtins as _ag_b\n    " + ", ".join(used) + " = " + ", ".join(f"_ag_b.{u}" for u in used)


@functools.lru_cache(maxsize=1)
def _kernel_functions():
    """The source of the functions a probe runs in the kernel (_encode, _build, _from_json), indented into it."""
    return "\n".join(
        "    " + line for fn in (_encode, _build, _from_json) for line in inspect.getsource(fn).splitlines()
    )


@functools.lru_cache(maxsize=1)
def runner_source() -> str:
    """The source of ``_ag_probe(namespace, name, calls, many, nonce, tag, limit, mime)``, the one function that
    answers every probe in the kernel. It imports nothing of the course (its helpers are written into it). The
    guard kernel compiles it once, from the guard file, before any student code runs, and answers each probe
    request (``probe_stub``) by calling it on the notebook's namespace: a request is then a line of data, not
    11 kB of code IPython would tokenize and compile again on every probe. With no mime it returns the answer's
    JSON text; with one it displays it under that mime (a plain kernel, ``probe_code``)."""
    return _RUNNER.format(functions=_kernel_functions(), builtins=_builtins())


def probe_request(name: str, args: tuple, nonce: str, kwargs=None, calls=None, n=None) -> list:
    """What one probe asks, as plain data: [name, calls as a JSON text, many, nonce, tag, limit], the arguments of
    ``_ag_probe`` after the namespace. Call `name` on `args` (and `kwargs`); or on each of `calls` (a list of
    (args, kwargs) pairs); or `n` times on `args`, mapped over their ``rows`` and ``seeds``.

    Arguments must be plain data (None, bools, ints, finite floats, strings, bytes, lists, tuples and dicts of
    them) or ``Build`` objects (tensors, generators, the notebook's objects by name, model recipes). They travel as
    one JSON string the kernel parses (written out as Python source, thousands of calls cost seconds to tokenize,
    IPython reading a cell line by line, and to parse), so nothing but data crosses into the kernel. A recipe
    repeated across calls is built once per probe."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Python identifier, got {name!r}")
    many = True if calls is not None else (int(n) if n else False)  # many calls; n calls mapped over rows
    calls = [(tuple(a), dict(k)) for a, k in calls] if calls is not None else [(tuple(args), dict(kwargs or {}))]
    tag = "ag-build-" + secrets.token_hex(8)
    return [name, json.dumps(_to_json(calls, tag, 1)), many, nonce, tag, MAX_TEXT]


def probe_code(name: str, args: tuple, nonce: str, kwargs=None, calls=None, n=None) -> str:
    """The cell a probe runs in a plain kernel (one without the guard's runner): the runner's source, then its call
    on the notebook's globals, displaying the answer under MIME. Arguments as ``probe_request``."""
    return _cell(probe_request(name, args, nonce, kwargs, calls, n))


def _cell(request):
    return runner_source() + _CALL.format(
        **dict(zip(("name", "calls", "many", "nonce", "tag", "limit"), request)), mime=MIME
    )


def probe_stub(request: list) -> str:
    """The one line the grader sends a guard kernel for a probe: the guard's marker and the request's JSON."""
    return PROBE_STUB + json.dumps(request)


# ------------------------------------------------------------------------------------------ judge side
def decode(text):
    """The answer of one probe, parsed strictly: ("value", v) or ("raised", Raised). ProbeError otherwise."""
    return _one(_document(text, ("value", "raised")))


def decode_many(text):
    """The answers of a probe of several calls, parsed strictly: a list of ("value", v) or ("raised", Raised)."""
    doc = _document(text, ("answers",))
    if not isinstance(doc["answers"], list) or not all(isinstance(a, dict) for a in doc["answers"]):
        raise ProbeError("answers must be a list of objects")
    budget = [MAX_ITEMS]
    return [_one(dict(a, nonce=doc["nonce"]), budget) for a in doc["answers"]]


def _observed(doc):
    """The counts a probe of one call reported (``counted`` arguments), as {label: int}; {} when none."""
    seen = doc.get("observed", {})
    if not (
        isinstance(seen, dict)
        and len(seen) < 64
        and all(isinstance(k, str) and len(k) < 200 and type(v) is int and 0 <= v < 2**63 for k, v in seen.items())
    ):
        raise ProbeError("observed counts must be a small object of names and non-negative ints")
    return dict(seen)


def _document(text, kinds):
    if not isinstance(text, str) or len(text) > MAX_BYTES:
        raise ProbeError(f"an answer must be a JSON text of at most {MAX_BYTES:,} bytes")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ProbeError(f"the answer is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nonce"), str):
        raise ProbeError("the answer is not an object with a nonce")
    if not any(kind in doc for kind in kinds):
        raise ProbeError(f"unexpected keys in the answer: {sorted(doc)}")
    return doc


class Answer(tuple):
    """("value", v) or ("raised", Raised), with ``after``: the watched arguments as they were after the call (a
    list), or None where the call watched none; and ``observed``: the counted forwards of that call ({label: n},
    the kernel's report: see ``counted``)."""

    after = None
    observed = {}


def _one(doc, budget=None):
    budget = [MAX_ITEMS] if budget is None else budget
    if "observed" in doc:
        seen = _observed(doc)
        answer = _one({key: v for key, v in doc.items() if key != "observed"}, budget)
        answer.observed = seen
        return answer
    if "after" in doc:
        if not isinstance(doc["after"], list) or len(doc["after"]) > 64:
            raise ProbeError("after must be a short list of the watched arguments")
        after = [_node(v, 0, budget) for v in doc["after"]]
        answer = Answer(_one({key: v for key, v in doc.items() if key != "after"}, budget))
        answer.after = after
        return answer
    if set(doc) - {"observed"} == {"nonce", "value"}:
        return Answer(("value", _node(doc["value"], 0, budget)))
    if set(doc) - {"observed"} == {"nonce", "raised"}:
        r = doc["raised"]
        if not (
            isinstance(r, dict)
            and set(r) == {"type", "bases", "message"}
            and isinstance(r["type"], str)
            and isinstance(r["message"], str)
            and isinstance(r["bases"], list)
            and all(isinstance(b, str) for b in r["bases"])
            and len(r["bases"]) < 64
        ):
            raise ProbeError("a raised answer needs a type, its bases and a message, as strings")
        return Answer(("raised", Raised(r["type"][:200], tuple(b[:200] for b in r["bases"]), r["message"][:MAX_TEXT])))
    raise ProbeError(f"unexpected keys in the answer: {sorted(doc)}")


def _no_constant(name):
    raise ValueError(f"{name} is not allowed in an answer (non-finite floats are tagged)")


def _node(x, depth, budget):
    if depth > MAX_DEPTH:
        raise ProbeError("the answer is nested too deep")
    budget[0] -= 1
    if budget[0] < 0:
        raise ProbeError(f"the answer holds more than {MAX_ITEMS:,} items")
    if x is None or isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, str):
        if len(x) > MAX_TEXT:
            raise ProbeError(f"a string in the answer is longer than {MAX_TEXT:,} characters")
        return x
    if isinstance(x, list):
        return [_node(v, depth + 1, budget) for v in x]
    if not isinstance(x, dict) or not isinstance(x.get("t"), str):
        raise ProbeError("an object in the answer must be tagged")
    tag, keys = x["t"], set(x)
    if tag == "tuple" and keys == {"t", "items"} and isinstance(x["items"], list):
        return tuple(_node(v, depth + 1, budget) for v in x["items"])
    if tag == "dict" and keys == {"t", "items"} and isinstance(x["items"], list):
        out = {}
        for pair in x["items"]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ProbeError("a dict's items must be [key, value] pairs")
            key = _node(pair[0], depth + 1, budget)
            try:
                hash(key)
            except TypeError:
                raise ProbeError("a dict key in the answer is not hashable") from None
            out[key] = _node(pair[1], depth + 1, budget)
        return out
    if tag == "float" and keys == {"t", "v"} and x["v"] in ("nan", "inf", "-inf"):
        return float(x["v"])
    if (
        tag == "tensor"
        and keys == {"t", "kind", "dtype", "shape", "values"}
        and x["kind"] in ("torch", "numpy")
        and isinstance(x["dtype"], str)
        and isinstance(x["shape"], list)
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in x["shape"])
        and len(x["shape"]) <= MAX_DEPTH
    ):
        values = _node(x["values"], depth + 1, budget)
        if not _has_shape(values, x["shape"]):
            raise ProbeError(f"a tensor's values do not have its shape {x['shape']}")
        if not _of_dtype(values, x["dtype"]):
            raise ProbeError(f"a tensor's values are not all of its dtype {x['dtype'][:40]}")
        return Tensor(x["kind"], x["dtype"][:40], tuple(x["shape"]), values)
    if tag == "other" and keys == {"t", "type"} and isinstance(x["type"], str):
        return Other(x["type"][:200])
    raise ProbeError(f"an object in the answer has an unknown tag or keys: {tag!r}")


@dataclass(frozen=True)
class Other:
    """An object the probe could not turn into plain data (the judge fails it where a value is expected)."""

    type: str


_LEAF_TYPES = {  # what tolist() gives for each dtype (an object that only claims to be a tensor gives others)
    **{name: (bool,) for name in ("bool",)},
    **{name: (int,) for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")},
    **{name: (float, int) for name in ("float16", "bfloat16", "float32", "float64", "half", "float", "double")},
}


def _of_dtype(values, dtype):
    """The values of a tensor answer are of the kind its dtype gives (ints for an int64 tensor, not strings);
    a dtype outside the table is not checked."""
    kinds = _LEAF_TYPES.get(dtype)
    if kinds is None:
        return True
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif not isinstance(v, kinds) or (isinstance(v, bool) and kinds != (bool,)):
            return False
    return True


def _has_shape(values, shape):
    if not shape:
        return not isinstance(values, list)
    return isinstance(values, list) and len(values) == shape[0] and all(_has_shape(v, shape[1:]) for v in values)


class _Probe:
    """``probe(name, *args, **kwargs)`` -> ("value", v) or ("raised", Raised), and ``probe.observed``: the counts
    that call reported; ``probe.many(name, calls)`` -> one answer per (args, kwargs) of `calls`, asked in one round
    trip; ``probe.map(name, n, args, kwargs)`` -> n answers, mapped over ``rows`` and ``seeds``. Subclasses say how
    a probe's request (``probe_request``) reaches the kernel and its answer comes back (``_ask``)."""

    def __init__(self):
        self.calls, self.observed = 0, {}

    def __call__(self, name, *args, **kwargs):
        nonce = secrets.token_hex(16)
        doc = _document(self._ask(name, probe_request(name, args, nonce, kwargs=kwargs), nonce), ("value", "raised"))
        self.observed = _observed(doc)
        return _one(doc)

    def many(self, name, calls):
        calls = list(calls)
        if not calls:
            return []
        nonce = secrets.token_hex(16)
        return self._answers(name, probe_request(name, (), nonce, calls=calls), nonce, len(calls))

    def map(self, name, n, args, kwargs=None):
        """n calls of `name` in one round trip, on `args` and `kwargs` built once; an argument made with ``rows``
        gives call j its row j, one made with ``seeds`` a generator seeded with its j-th seed."""
        nonce = secrets.token_hex(16)
        return self._answers(name, probe_request(name, tuple(args), nonce, kwargs=kwargs, n=n), nonce, n)

    def _answers(self, name, request, nonce, n):
        answers = decode_many(self._ask(name, request, nonce))
        if len(answers) != n:
            raise ProbeError(f"{len(answers)} answers to {n} calls of {name}")
        return answers


class KernelProbe(_Probe):
    """Ask a running kernel through probes.

    `client` is a jupyter_client (blocking) KernelClient of the student's kernel. Each call draws a nonce,
    executes the probe and reads that execution's iopub messages until the kernel is idle again; the first
    display_data message of MIME whose JSON names the nonce is the answer. Anything else the kernel prints or
    displays meanwhile is ignored; no answer, or an answer that does not parse, is a ProbeError.

    `stub`: the kernel is the guard kernel (autograde.guard_kernel), which holds the probe's runner: a probe is
    sent as one line of data (``probe_stub``). Otherwise (a plain kernel) as a cell with the runner's source."""

    def __init__(self, client, timeout=60.0, stub=False, alive=None):
        super().__init__()
        self.client, self.timeout, self.waited = client, float(timeout), 0.0  # waited: seconds in the kernel
        self.stub = bool(stub)
        self.alive = alive  # () -> bool: is the kernel's process still running (None: not asked)

    def _ask(self, name, request, nonce):
        t0 = time.monotonic()
        try:
            return self._ask_kernel(name, probe_stub(request) if self.stub else _cell(request), nonce)
        finally:
            self.waited += time.monotonic() - t0

    def _ask_kernel(self, name, code, nonce):
        """One probe's round trip, bounded as a whole: `timeout` seconds from the request to the kernel's idle, and
        ``MAX_PRINTED`` bytes of messages read meanwhile (every message counts, the probe's or not: what the
        grader reads is what it holds). Past either, ``Stalled``."""
        msg_id = self.client.execute(code, store_history=False, allow_stdin=False)
        deadline, printed, answer = time.monotonic() + self.timeout, 0, None
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                msg = self.client.get_iopub_msg(timeout=min(left, ALIVE_EVERY) if self.alive else left)
            except Exception:
                if self.alive is not None and time.monotonic() < deadline:
                    if self.alive():
                        continue
                    raise ProbeError(f"the kernel died while the judge's probe of {name} ran") from None
                raise Stalled(
                    f"rule: {name}() returns within {self.timeout:.0f} s on the judge's inputs",
                    f"was still running after {self.timeout:.0f} s",
                    msg_id,
                ) from None
            content = msg.get("content", {}) if isinstance(msg, dict) else {}
            printed += message_bytes(content)
            if printed > MAX_PRINTED:
                raise Stalled(
                    f"rule: {name}() prints at most {MAX_PRINTED // 2**20} MB when the judge calls it",
                    f"printed more than {MAX_PRINTED // 2**20} MB",
                    msg_id,
                )
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "display_data" and answer is None:
                text = (content.get("data") or {}).get(MIME)
                if isinstance(text, str):
                    try:
                        named = json.loads(text).get("nonce") == nonce
                    except (ValueError, AttributeError, RecursionError):
                        named = False
                    if named:
                        answer = text
            if kind == "status" and content.get("execution_state") == "idle":
                break
        self.calls += 1
        if answer is None:
            raise NoAnswer(f"the kernel gave no answer to the probe of {name}")
        return answer


def message_bytes(content):
    """Bytes of one message's printed text and displayed data (what a flood makes the grader read)."""
    if not isinstance(content, dict):
        return 0
    size = len(str(content.get("text", "")))
    data = content.get("data")
    if isinstance(data, dict):
        size += sum(len(str(v)) for v in data.values())
    return size + sum(len(str(line)) for line in content.get("traceback", []) or [])


class LocalProbe(_Probe):
    """The same probe runner called in this process, on `namespace` (a dict of the notebook's names), as the guard
    kernel calls it on the notebook's: for the course's own tests of the judges (the solution's functions, wrong
    implementations), never for grading."""

    def __init__(self, namespace):
        super().__init__()
        self.namespace = namespace

    def _ask(self, name, request, nonce):
        answer = _runner()(self.namespace, *request, None)  # what the guard kernel does with a probe_stub
        self.calls += 1
        if not (isinstance(answer, str) and json.loads(answer).get("nonce") == nonce):
            raise ProbeError(f"no answer to the probe of {name}")
        return answer


@functools.lru_cache(maxsize=1)
def _runner():
    space = {}
    exec(compile(runner_source(), "<autograde-probe>", "exec"), space)
    return space["_ag_probe"]
