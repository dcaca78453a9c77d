"""Exact-type conversions the graded tests compare with (docs/contract.md, "Types").

A test never compares a value the learner's code returned through that value's own methods: an object
whose `tolist()` or `__eq__` answers "equal" to anything would pass every comparison.  `exact_ids` and
`exact_equal` accept exactly `torch.Tensor` (no subclass: `__torch_function__` and `tolist` stay torch's
own) and turn it into plain Python before comparing; `exact_plain` accepts only plain Python values
(int, float, bool, str, None, and lists, tuples and dicts of exactly those types).
"""

import torch


def _exact_tensor(x, what):
    if type(x) is not torch.Tensor:
        raise AssertionError(f"{what} must be a torch.Tensor (exactly, not a subclass), got {type(x).__name__}")
    return x


def exact_ids(x, what="the result"):
    """`x.tolist()` for a torch.Tensor exactly (nested lists of plain ints/floats/bools); AssertionError else."""
    return torch.Tensor.tolist(_exact_tensor(x, what))


def exact_equal(a, b):
    """torch.equal for two torch.Tensors exactly (same shape and values); AssertionError for another type."""
    return torch.equal(_exact_tensor(a, "the result"), _exact_tensor(b, "the expected value"))


_PLAIN = (int, float, bool, str, type(None))


def exact_plain(x, what="the result"):
    """`x` itself if it is built only of plain Python values (int, float, bool, str, None, and lists, tuples and
    dicts of them, each of exactly that type, not a subclass); AssertionError else."""
    kind = type(x)
    if kind in _PLAIN:
        return x
    if kind in (list, tuple):
        for item in x:
            exact_plain(item, what)
        return x
    if kind is dict:
        for key, value in x.items():
            exact_plain(key, what)
            exact_plain(value, what)
        return x
    raise AssertionError(f"{what} must be plain Python values (int, float, list, tuple ...), got {kind.__name__}")
