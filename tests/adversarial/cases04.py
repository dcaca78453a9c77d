"""Submissions of assignment 04 for the grading-integrity suite: cheats that rebind what a test trusts, and
correct answers written differently from the solution.

`build(dest)` writes one trimmed notebook per student under `dest` and returns {student: Expect}.
The two `rebind_*` cases are the submissions that scored 10/12 and 12/12 (of 12 then) before the guard recorded what
the locked cells bind (docs/grading.md has the before/after table).
"""

from pathlib import Path

import nbformat

from adversarial.cases import Expect, meta, trimmed
from autograde import REPO

A = "04_speculative_decoder"
SOLUTION = REPO / "solutions" / A / f"{A}.ipynb"
RELEASED = REPO / "notebooks" / A / f"{A}.ipynb"
FULL = 14.0
VERIFY_POINTS = 6.0  # Part A: the four verify tests


def released():
    return nbformat.read(str(RELEASED), as_version=4)


def solution_answers():
    nb = nbformat.read(str(SOLUTION), as_version=4)
    return {meta(c)["grade_id"]: c.source for c in nb.cells if meta(c).get("solution")}


def with_answers(answers):
    nb = trimmed(released())
    for cell in nb.cells:
        if meta(cell).get("solution") and meta(cell).get("grade_id") in answers:
            cell.source = answers[meta(cell)["grade_id"]]
    return nb


CHECKS = '''    if not (isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] == 1
            and input_ids.shape[1] >= 1):
        raise ValueError("input_ids must be a (1, T) tensor")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if k < 1:
        raise ValueError("k must be >= 1")
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
'''

# the first submission: prompt + zeros, and the reference decoder of the greedy test rebound
REBIND_REFERENCE = (
    '''@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
'''
    + CHECKS
    + '''    zeros = torch.zeros(1, max_new_tokens, dtype=torch.long)
    return torch.cat([input_ids, zeros], dim=1), {"rounds": 1, "drafted": 0, "accepted": 0, "per_round": [(0, 0)]}


def greedy_generate(model, input_ids, max_new_tokens):      # the name the greedy test compares against
    return torch.cat([input_ids, torch.zeros(1, max_new_tokens, dtype=torch.long)], dim=1)
'''
)

# the second submission: plain greedy decoding, made-up stats, and the forward counter rebound
REBIND_COUNTER = (
    '''import math as _math

from specdec.core.decoding import greedy_generate as _plain


@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
'''
    + CHECKS
    + '''    rounds = _math.ceil(max_new_tokens / (k + 1))
    accepted = max_new_tokens - rounds
    per_round = [(k, min(k, accepted - i * k)) if accepted - i * k > 0 else (k, 0) for i in range(rounds)]
    per_round = [(k, n) for _, n in per_round]
    return _plain(target, input_ids, max_new_tokens), {"rounds": rounds, "drafted": k * rounds,
                                                       "accepted": sum(n for _, n in per_round),
                                                       "per_round": per_round}


class ForwardCounter:                  # the name the hidden test counts forward calls with: never counts
    calls = 0

    def __init__(self, model):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
'''
)

# correct, written differently: a loop in verify (one uniform per position, drawn only while accepting)
LOOP_VERIFY = '''def verify(p, q, draft_tokens, generator=None):
    """Accept or reject each drafted token in turn; the first rejection ends the round."""
    if not isinstance(q, torch.Tensor) or q.dim() != 2:
        raise ValueError("q: expected a (k, V) tensor")
    k, V = q.shape
    if not isinstance(p, torch.Tensor) or p.dim() != 2 or p.shape[0] != k + 1 or p.shape[1] != V:
        raise ValueError("p: expected a (k + 1, V) tensor that matches q")
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 1 or len(draft_tokens) != k:
        raise ValueError("draft_tokens: expected k token ids")
    out = []
    for i in range(k):
        x = int(draft_tokens[i])
        if not 0 <= x < V:
            raise ValueError("draft_tokens: id out of range")
        px, qx = float(p[i, x]), float(q[i, x])
        u = float(torch.rand(1, generator=generator))
        if (qx > 0 and u < px / qx) or (qx == 0 and px > 0):
            out.append(x)
            continue
        residual = torch.clamp(p[i] - q[i], min=0)
        dist = residual / residual.sum() if residual.sum() > 0 else p[i]
        out.append(int(torch.multinomial(dist, 1, generator=generator)))
        return torch.tensor(out, dtype=torch.long), i
    out.append(int(torch.multinomial(p[k], 1, generator=generator)))
    return torch.tensor(out, dtype=torch.long), k
'''

# correct, written differently: static caches indexed by position (as gpt-fast keeps them), rewound and
# overwritten instead of cropped
STATIC_CACHE_DECODER = (
    '''@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
    """Speculative decoding with static caches indexed by position: a rejected position is overwritten later."""
    from transformers import StaticCache
'''
    + CHECKS
    + '''    seq = input_ids.long()
    start, size = seq.shape[1], seq.shape[1] + max_new_tokens + 2 * k + 4
    caches = {m: StaticCache(config=m.config, max_cache_len=size) for m in (target, draft)}
    done = {target: 0, draft: 0}                 # positions whose keys and values are valid in each cache

    def run(model, upto):                        # logits of positions done[model] .. upto - 1
        for layer in caches[model].layers:       # write from position done[model] on: a static cache is
            if getattr(layer, "is_initialized", False):   # overwritten in place, never cropped
                layer.cumulative_length.fill_(done[model])
        pos = torch.arange(done[model], upto)
        out = model(seq_ext[:, done[model]:upto], cache=caches[model], use_cache=True,
                    position_ids=pos.view(1, -1))
        done[model] = upto
        return out.logits[0]

    stats = {"rounds": 0, "drafted": 0, "accepted": 0, "per_round": []}
    while seq.shape[1] - start < max_new_tokens:
        n_draft = min(k, max_new_tokens - (seq.shape[1] - start))
        L = seq.shape[1]
        done[target], done[draft] = min(done[target], L - 1), min(done[draft], L - 1)
        seq_ext, qs = seq, []
        for _ in range(n_draft):
            q_next = probs_from_logits(run(draft, seq_ext.shape[1])[-1], temperature)
            qs.append(q_next)
            seq_ext = torch.cat([seq_ext, sample(q_next, generator).view(1, 1)], dim=1)
        p = probs_from_logits(run(target, seq_ext.shape[1])[-(n_draft + 1):], temperature)
        new, n = verify(p, torch.stack(qs), seq_ext[0, L:], generator)
        seq = torch.cat([seq, new.view(1, -1)], dim=1)
        stats["rounds"] += 1
        stats["drafted"] += n_draft
        stats["accepted"] += n
        stats["per_round"].append((n_draft, n))
    return seq[:, :start + max_new_tokens], stats
'''
)


def build(dest):
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    answers = solution_answers()
    cases = {
        "rebind_reference": (
            {**answers, "speculative_generate": REBIND_REFERENCE},
            Expect(
                VERIFY_POINTS,
                "tampered",
                what="prompt + zeros; greedy_generate rebound in the answer cell",
                detail=["greedy_generate"],
            ),
        ),
        "rebind_counter": (
            {**answers, "speculative_generate": REBIND_COUNTER},
            # Part A and the input checks; the greedy-output cells (the draft never runs: issue 77), the
            # stats, the forward count and the sampling cells fail
            Expect(
                VERIFY_POINTS + 1,
                "tampered",
                what="plain greedy, made-up stats; ForwardCounter rebound in the answer cell",
                detail=["ForwardCounter"],
            ),
        ),
        "loop_verify": (
            {**answers, "verify": LOOP_VERIFY},
            Expect(FULL, "ok", what="correct, written differently: a loop in verify, other messages"),
        ),
        "static_cache_decoder": (
            {**answers, "speculative_generate": STATIC_CACHE_DECODER},
            Expect(
                FULL,
                "ok",
                what="correct, written differently: static caches indexed by position, rewound instead of cropped",
            ),
        ),
    }
    expect = {}
    for student, (ans, exp) in cases.items():
        (dest / student).mkdir()
        nbformat.write(with_answers(ans), str(dest / student / f"{A}.ipynb"))
        expect[student] = exp
    return expect
