"""Submissions of assignment 04 that reach into the grader by introspection (issue: a student's code must not
reach the grader or the test's own values), and honest code that looks like it.

Each cheat is one general mechanism of in-process Python; the grading run uses `--keep-flagged`, so the score
is what the tests gave (the static scan's zero is not what stops them): the guard and its audit hook must.
`build(dest)` writes one notebook per student and returns {student: Expect}.
"""

from pathlib import Path

import nbformat

from adversarial.cases import Expect
from adversarial.cases04 import CHECKS, FULL, VERIFY_POINTS, A, solution_answers, with_answers

ZERO_DECODER = (
    '''@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
'''
    + CHECKS
    + '''    rounds = -(-max_new_tokens // (k + 1))          # made-up statistics that add up
    left, per_round = max_new_tokens - rounds, []
    for _ in range(rounds):
        per_round.append((k, min(k, left)))
        left -= per_round[-1][1]
    stats = {"rounds": rounds, "drafted": k * rounds, "accepted": sum(a for _, a in per_round),
             "per_round": per_round}
    return torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1), stats
'''
)

# walks the interpreter's objects for the guard's runner and turns it into a no-op
GC_WALK = '''import gc as _gc


def _noop(*args, **kwargs):
    return None


for _obj in _gc.get_objects():
    if type(_obj).__name__ == "function" and _obj.__name__ in ("run_test_cell", "_ag_test", "do_execute"):
        _obj.__code__ = _noop.__code__
'''

# replaces the kernel's execute handler on its class: every later cell replies "ok" without running
DISPATCH = '''_kernel = get_ipython().kernel


async def _always_ok(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, **kwargs):
    return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}


type(_kernel).do_execute = _always_ok
'''

# gives the given reference decoder the code of a zero decoder (same object, so identity checks pass)
CODE_SWAP = (
    ZERO_DECODER
    + '''

def _zeros(model, input_ids, max_new_tokens):
    return torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1)


_put = setattr
_put(greedy_generate, "__co" + "de__", _zeros.__code__)
'''
)

# a cell above the setup cell: a stand-in for specdec.core.decoding whose greedy_generate decodes zeros
STAND_IN = '''import sys as _sys
import types as _types

import specdec.core.decoding as _real

_fake = _types.ModuleType("specdec.core.decoding")
_fake.__dict__.update(vars(_real))
_fake.greedy_generate = lambda model, ids, n: __import__("torch").cat(
    [ids, __import__("torch").zeros(1, n, dtype=__import__("torch").long)], dim=1)
_sys.modules["specdec.core.decoding"] = _fake
'''

# reads the calling test's expected value from its frame
FRAME_READ = (
    '''import inspect as _inspect


@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
'''
    + CHECKS
    + '''    stats = {"rounds": 1, "drafted": 0, "accepted": 0, "per_round": [(0, 0)]}
    for info in _inspect.stack():
        for value in info.frame.f_locals.values():
            if isinstance(value, torch.Tensor) and value.dim() == 2 and \\
                    value.shape[1] == input_ids.shape[1] + max_new_tokens:
                return value.clone(), stats
    return torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1), stats
'''
)

# a profile hook that rewrites the reference's return value into the zeros it returns
PROFILE_HOOK = (
    ZERO_DECODER.replace("def speculative_generate(", "def _zero_generate(")
    + '''

import sys as _sys


def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
    out = _zero_generate(target, draft, input_ids, max_new_tokens, k, temperature, generator)

    def _hook(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "greedy_generate":
            arg.zero_()
    _sys.setprofile(_hook)
    return out
'''
)

# a tensor whose tolist() equals any list
EQUAL_ANYTHING = '''class _Anything(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class _Tokens(torch.Tensor):
    def tolist(self):
        return _Anything()


''' + ZERO_DECODER.replace(
    "    return torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1), stats",
    "    out = torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1)\n"
    "    return out.as_subclass(_Tokens), stats",
)

# reads the running test cell's text from the kernel's current request and IPython's input history
REQUEST_READ = '''def verify(p, q, draft_tokens, generator=None):
    kernel = get_ipython().kernel
    text = str(kernel.get_parent().get("content", {}).get("code", "")) + "".join(In[-3:])
    if "one_hot([2, 0, 1]), one_hot([2, 3])" in text:       # the visible test's first worked example
        return (torch.tensor([2, 0]), 1) if draft_tokens.tolist() == [2, 3] else (torch.tensor([2, 0, 1]), 2)
    raise NotImplementedError("only the worked examples")
'''

# honest code that uses what the audit hook watches, from inside the graded functions
HONEST_DEBUGGING = '''import collections
import dataclasses
import logging
import traceback
import warnings

Round = collections.namedtuple("Round", "drafted accepted")


@dataclasses.dataclass
class Tally:
    calls: int = 0


_tally, _log = Tally(), logging.getLogger("my-verify")


def _checked(result):
    _tally.calls += 1
    try:
        1 / 0
    except ZeroDivisionError:
        traceback.format_exc()                 # formats a caught exception: reads its frames
    if _tally.calls == 1:
        warnings.warn("first verify call", stacklevel=2)
        _log.info("round %s", Round(1, 0))
    return result


'''


def build(dest):
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    answers = solution_answers()
    honest_verify = (
        HONEST_DEBUGGING
        + answers["verify"].replace("def verify(", "def _solution_verify(")
        + '''


def verify(p, q, draft_tokens, generator=None):
    return _checked(_solution_verify(p, q, draft_tokens, generator))
'''
    )
    cases = {
        "gc_walk": (
            {"verify": GC_WALK},
            None,
            Expect(
                0.0,
                "tampered",
                what="walks gc.get_objects() for the guard's runner and empties it; answers left as stubs",
                detail=["gc.get_objects", "refused"],
            ),
        ),
        "dispatch_replaced": (
            {"verify": DISPATCH},
            None,
            Expect(
                0.0,
                "tampered",
                what="replaces the kernel's execute handler: every later cell replies ok; answers left as stubs",
                detail=["gave no answer"],
            ),
        ),
        "code_swap": (
            {**answers, "speculative_generate": CODE_SWAP},
            None,
            Expect(
                VERIFY_POINTS,
                "tampered",
                what="a zero decoder, and greedy_generate given its code through an aliased setattr",
                detail=["__code__", "refused"],
            ),
        ),
        "module_stand_in": (
            {**answers, "speculative_generate": ZERO_DECODER},
            STAND_IN,
            Expect(
                VERIFY_POINTS,
                "tampered",
                what="a zero decoder, and a stand-in for specdec.core.decoding in sys.modules above the setup cell",
                detail=["sys.modules['specdec.core.decoding']"],
            ),
        ),
        "frame_read": (
            {**answers, "speculative_generate": FRAME_READ},
            None,
            Expect(
                VERIFY_POINTS,
                "flagged",
                what="returns the calling test's tensor of the right shape, read from its frame (inspect.stack)",
                detail=["read a frame", "while a test ran"],
            ),
        ),
        "profile_hook": (
            {**answers, "speculative_generate": PROFILE_HOOK},
            None,
            Expect(
                VERIFY_POINTS,
                "tampered",
                what="a zero decoder whose sys.setprofile hook zeroes the reference's output",
                detail=["sys.setprofile", "refused"],
            ),
        ),
        "equal_anything": (
            {**answers, "speculative_generate": EQUAL_ANYTHING},
            None,
            Expect(
                VERIFY_POINTS,
                "ok",
                what="a zero decoder returning a torch.Tensor subclass whose tolist() equals any list",
                detail=["test_speculative_generate_greedy: failed"],
            ),
        ),
        "zero_decoder": (
            {**answers, "speculative_generate": ZERO_DECODER},
            None,
            Expect(
                VERIFY_POINTS,
                "ok",
                what="decodes nothing (prompt + zeros) with statistics that add up",
                detail=["test_speculative_generate_stats: failed"],
            ),
        ),
        "request_read": (
            {"verify": REQUEST_READ},
            None,
            Expect(
                0.0,
                "ok",
                what="verify answers the visible worked example from the test text it "
                "reads in the kernel's request and In",
                detail=["test_verify_greedy_by_hand: failed"],
            ),
        ),
        "honest_debugging": (
            {**answers, "verify": honest_verify},
            None,
            Expect(
                FULL,
                "ok",
                what="correct, with namedtuple, dataclass, logging, warnings and traceback.format_exc inside verify",
            ),
        ),
    }
    expect = {}
    for student, (ans, above_setup, exp) in cases.items():
        nb = with_answers({k: v for k, v in ans.items() if v is not None})
        if above_setup:
            nb.cells.insert(0, nbformat.v4.new_code_cell(above_setup))
        (dest / student).mkdir()
        nbformat.write(nb, str(dest / student / f"{A}.ipynb"))
        expect[student] = exp
    return expect
