"""Test strength, in process: plausible wrong implementations fail their part's tests, and correct ones
written differently pass them.

For one notebook (01-11) the harness builds the solution namespace the way nbhelpers.solution_namespace
does (the setup cell, the locked given cells and the solution cells, in notebook order), with one solution
cell's source replaced. Then it runs that part's test cells, whole (visible and hidden tests), each in a
copy of the namespace, as the grader does. A part's test cells are the graded cells between its solution
cell and the next solution cell.

- every part's unmodified solution passes all of its test cells (so the harness itself can fail);
- every WRONG case makes at least one of them raise;
- every CORRECT case (the same answer, written differently) passes all of them.
- every ONE_RULE_SLIPS case (one rule broken) fails exactly its cells and the part's other cells pass:
  partial credit follows the rules.

A case's `first` names the test cell that should catch it; it runs first, and a wrong case stops at its
first failure, which keeps the file fast (about a minute on a shared 2-core CPU).
"""

import ast
import re
import time
from dataclasses import dataclass

import matplotlib
import matplotlib.pyplot
import nbformat
import numpy as np
import pytest

matplotlib.use("Agg")

from adversarial import cases04
from nbhelpers import solution_path

from autograde.assignment import TestCell
from autograde.executor import visible_part
from autograde.judge import LocalProbe

pytestmark = pytest.mark.slow

NOTEBOOKS = {
    "01": "01_decode_is_bandwidth_bound",
    "02": "02_verification_is_almost_free",
    "03": "03_acceptance_math",
    "04": "04_speculative_decoder",
    "05": "05_acceptance_in_practice",
    "06": "06_h100_configs_real_timings",
    "07": "07_batch_crossover",
    "08": "08_break_even_acceptance",
    "09": "09_speculation_that_pays",
    "10": "10_batches_and_servers",
    "11": "11_real_engines",
    "12": "12_moe_and_quantised",
}
# notebooks whose ordinary cells are quick and define names the tests use: run them all (plots off screen)
RUN_EVERY_CELL = {"07", "08", "12"}
# names the test cells use that an ordinary (not executed here) cell of the notebook defines
PRELUDE = {"01": 'cfg_8b, cfg_70b = configs["Llama-3.1-8B"], configs["Llama-3.1-70B"]\n'}


def _grading(cell):
    return cell.metadata.get("nbgrader", {})


_NOTEBOOK_CACHE, _SETUP_CACHE = {}, {}


def notebook(prefix):
    if prefix not in _NOTEBOOK_CACHE:
        _NOTEBOOK_CACHE[prefix] = nbformat.read(str(solution_path(NOTEBOOKS[prefix])), as_version=4)
    return _NOTEBOOK_CACHE[prefix]


def setup_namespace(prefix):
    """The setup cell's names (models, tables), executed once per notebook and shared."""
    if prefix not in _SETUP_CACHE:
        ns = {"__name__": f"wrong_impl_{prefix}"}
        for cell in notebook(prefix).cells:
            if cell.cell_type == "code" and "setup" in cell.metadata.get("tags", []):
                exec(compile(cell.source, f"{prefix}:setup", "exec"), ns)
        exec(PRELUDE.get(prefix, ""), ns)
        _SETUP_CACHE[prefix] = ns
    return _SETUP_CACHE[prefix]


def solution_source(prefix, part):
    return next(
        c.source for c in notebook(prefix).cells if _grading(c).get("solution") and _grading(c).get("grade_id") == part
    )


def parts(prefix):
    return [_grading(c)["grade_id"] for c in notebook(prefix).cells if _grading(c).get("solution")]


def part_test_cells(prefix, part):
    """(grade_id, source) of the graded cells between `part`'s solution cell and the next solution cell."""
    found, inside = [], False
    for cell in notebook(prefix).cells:
        g = _grading(cell)
        if g.get("solution"):
            inside = g.get("grade_id") == part
        elif inside and cell.cell_type == "code" and g.get("grade"):
            found.append((g["grade_id"], cell.source))
    assert found, f"{prefix} {part}: no test cell found"
    return found


def namespace(prefix, replaced=None):
    """Setup names + given and solution cells in notebook order; `replaced` = {grade_id: new source}."""
    ns = dict(setup_namespace(prefix))
    for cell in notebook(prefix).cells:
        g = _grading(cell)
        if cell.cell_type != "code":
            continue
        if g.get("solution") or (
            g.get("locked") and not g.get("grade") and "setup" not in cell.metadata.get("tags", [])
        ):
            source = (replaced or {}).get(g.get("grade_id"), cell.source)
            exec(compile(source, f"{prefix}:{g.get('grade_id')}", "exec"), ns)
        elif prefix in RUN_EVERY_CELL and not g and "setup" not in cell.metadata.get("tags", []):
            try:  # the notebook's own cells (tables, plots) define names its tests use
                exec(compile(cell.source, f"{prefix}:cell", "exec"), ns)
            except Exception:  # noqa: BLE001  (a cell that needs an answer the case replaced)
                pass
    matplotlib.pyplot.close("all")
    return ns


JUDGE_SEED = 3  # the judges' generator here; the grader draws a fresh seed for every run


def judge_of(test):
    """The judge function a judged test cell names (autograde/judges)."""
    import importlib

    module, function = test.judge
    return getattr(importlib.import_module(f"autograde.judges.{module}"), function)


def run_part(prefix, part, source=None, first=None, stop_at_first_failure=False):
    """[(test cell, error)] for the test cells of `part` that raise, with `part`'s solution replaced by `source`."""
    return run_parts(prefix, [part], {part: source} if source is not None else None, first, stop_at_first_failure)


def run_parts(prefix, which, replaced=None, first=None, stop_at_first_failure=False, ns=None):
    """[(test cell, error)] for the test cells of the parts `which` that raise, with the solutions of `replaced`
    ({part: source}) replaced: one namespace, as the grader runs the notebook (or `ns`, built already)."""
    ns = namespace(prefix, replaced) if ns is None else ns
    cells = [cell for part in which for cell in part_test_cells(prefix, part)]
    if first is not None:
        assert first in dict(cells), f"{prefix} {which}: no test cell {first}"
        cells = sorted(cells, key=lambda c: c[0] != first)
    failures = []
    for grade_id, cell_source in cells:
        test = TestCell(grade_id, 1.0, cell_source)
        try:  # a judged cell: the visible part runs here, its judge decides the rest as the grader does
            exec(
                compile(visible_part(cell_source)[0] if test.judge else cell_source, f"{prefix}:{grade_id}", "exec"),
                dict(ns),
            )
            if test.judge:
                try:  # a judge that crashes is the course's bug: it propagates, it is not the student's failure
                    judge_of(test)(LocalProbe(ns), np.random.default_rng([JUDGE_SEED, len(failures)]))
                except AssertionError as e:
                    failures.append(
                        Failure(grade_id, f"AssertionError: {str(e)[:200]}", test.visible_lines + 2, str(e))
                    )
                    if stop_at_first_failure:
                        break
                continue
        except Exception as e:  # an assert, or the wrong code crashing: either way the test cell fails
            tb, line = e.__traceback__, 0
            while tb is not None:  # the line of the test cell where it failed, as the grader reports it
                if tb.tb_frame.f_code.co_filename == f"{prefix}:{grade_id}":
                    line = tb.tb_lineno
                tb = tb.tb_next
            failures.append(Failure(grade_id, f"{type(e).__name__}: {str(e)[:200]}", line, str(e)))
            if stop_at_first_failure:
                break
    return failures


@dataclass
class Failure:
    grade_id: str
    text: str
    line: int
    message: str

    def __getitem__(self, i):  # (grade_id, text), as printed
        return (self.grade_id, self.text)[i]

    def __eq__(self, other):
        return (self.grade_id, self.text) == tuple(other) if isinstance(other, tuple) else NotImplemented


def patched(prefix, part, *replacements):
    """The solution of `part` with each (old, new) replaced once; `old` must occur exactly once."""
    source = solution_source(prefix, part)
    for old, new in replacements:
        assert source.count(old) == 1, f"{prefix} {part}: {old!r} occurs {source.count(old)} times in the solution"
        source = source.replace(old, new)
    return source


@dataclass
class Case:
    prefix: str
    part: str
    what: str
    source: object  # the cell's source, or a callable returning it (patched lazily)
    first: str = None  # the test cell expected to catch it (wrong cases)
    failed_before: bool = True  # did the tests catch it before the grading-integrity work? (reported, not asserted)

    def text(self):
        return self.source() if callable(self.source) else self.source


def P(prefix, part, *replacements):
    return lambda: patched(prefix, part, *replacements)


# --------------------------------------------------------------------------------------------- wrong answers
WRONG = [
    # 01: units and formula variants
    Case(
        "01",
        "weight_bytes",
        "bits instead of bytes (x 8)",
        P("01", "weight_bytes", ("return params * bytes_per_param", "return params * bytes_per_param * 8")),
    ),
    Case(
        "01",
        "weight_bytes",
        "GiB instead of bytes",
        P("01", "weight_bytes", ("return params * bytes_per_param", "return params * bytes_per_param / 2**30")),
    ),
    Case(
        "01",
        "weight_bytes",
        "ignores tie_word_embeddings (always a separate LM head)",
        P("01", "weight_bytes", ('lm_head = 0 if cfg["tie_word_embeddings"] else embedding', "lm_head = embedding")),
        first="test_weight_bytes",
    ),
    Case(
        "01",
        "weight_bytes",
        "ignores the config's head_dim (always hidden_size // heads)",
        P("01", "weight_bytes", ('head_dim = cfg.get("head_dim") or h // n_heads', "head_dim = h // n_heads")),
        first="test_weight_bytes",
    ),
    Case(
        "01",
        "weight_bytes",
        "bytes_per_param <= 0 accepted",
        P("01", "weight_bytes", ("if not bytes_per_param > 0:", "if False:")),
        first="test_weight_bytes_bad_input",
    ),
    Case(
        "01",
        "ridge_point",
        "bandwidth in bits/s (FLOP per bit)",
        P("01", "ridge_point", ("return float(flops / bandwidth)", "return float(flops / (8 * bandwidth))")),
    ),
    Case(
        "01",
        "ridge_point",
        "inverted: bandwidth / flops",
        P("01", "ridge_point", ("return float(flops / bandwidth)", "return float(bandwidth / flops)")),
    ),
    Case(
        "01",
        "kv_bytes_per_token",
        "K only (no factor 2 for V)",
        P("01", "kv_bytes_per_token", ('return 2 * cfg["num_hidden_layers"]', 'return cfg["num_hidden_layers"]')),
    ),
    Case(
        "01",
        "kv_bytes_per_token",
        "attention heads instead of KV heads",
        P(
            "01",
            "kv_bytes_per_token",
            ('cfg["num_key_value_heads"] * head_dim', 'cfg["num_attention_heads"] * head_dim'),
        ),
    ),
    Case(
        "01",
        "kv_bytes_per_token",
        "ignores the config's head_dim",
        P(
            "01",
            "kv_bytes_per_token",
            (
                'head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]',
                'head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]',
            ),
        ),
        first="test_kv_bytes_per_token",
    ),
    Case(
        "01",
        "kv_bytes_per_token",
        "bits instead of bytes",
        P("01", "kv_bytes_per_token", ("* head_dim * bytes_per_elem", "* head_dim * bytes_per_elem * 8")),
    ),
    Case(
        "01",
        "decode_step_seconds",
        "ignores kv_bytes",
        P(
            "01",
            "decode_step_seconds",
            ("return float((weight_bytes + kv_bytes) / bandwidth)", "return float(weight_bytes / bandwidth)"),
        ),
    ),
    Case(
        "01",
        "decode_step_seconds",
        "milliseconds instead of seconds",
        P(
            "01",
            "decode_step_seconds",
            (
                "return float((weight_bytes + kv_bytes) / bandwidth)",
                "return float((weight_bytes + kv_bytes) / bandwidth * 1e3)",
            ),
        ),
    ),
    # 02
    Case(
        "02",
        "width_where_cost_grows",
        "bits per parameter (x 8)",
        P(
            "02",
            "width_where_cost_grows",
            ("return float(ridge * bytes_per_param / 2)", "return float(ridge * 8 * bytes_per_param / 2)"),
        ),
    ),
    Case(
        "02",
        "width_where_cost_grows",
        "inverted: ridge * 2 / bytes_per_param",
        P(
            "02",
            "width_where_cost_grows",
            ("return float(ridge * bytes_per_param / 2)", "return float(ridge * 2 / bytes_per_param)"),
        ),
    ),
    Case(
        "02",
        "predicted_cost_ratio",
        "compared with a batch-1 step instead of a step at the same batch",
        P("02", "predicted_cost_ratio", ("/ max(1.0, batch / w_star))", "/ 1.0)")),
        first="test_predicted_cost_ratio",
    ),
    Case(
        "02",
        "predicted_cost_ratio",
        "ignores the batch",
        P(
            "02",
            "predicted_cost_ratio",
            ("max(1.0, batch * width / w_star) / max(1.0, batch / w_star)", "max(1.0, width / w_star)"),
        ),
    ),
    # 03
    Case(
        "03",
        "expected_tokens",
        "forgets the target's own token: alpha (1 - alpha^k) / (1 - alpha)",
        P(
            "03",
            "expected_tokens",
            ("return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)", "return alpha * (1.0 - alpha ** k) / (1.0 - alpha)"),
        ),
    ),
    Case(
        "03",
        "expected_tokens",
        "alpha^k in place of alpha^(k+1)",
        P("03", "expected_tokens", ("alpha ** (k + 1)", "alpha ** k")),
    ),
    Case(
        "03",
        "expected_tokens",
        "k = 4.0 accepted (a float that is a whole number: 03 says an int)",
        P(
            "03",
            "expected_tokens",
            (
                "if isinstance(k, bool) or not isinstance(k, numbers.Integral):",
                "if isinstance(k, bool) or not (isinstance(k, numbers.Integral) or (isinstance(k, float) and k.is_integer())):",
            ),
        ),
    ),
    Case(
        "03",
        "expected_tokens",
        "no special case at alpha = 1 (0 / 0)",
        P("03", "expected_tokens", ("if alpha == 1.0:", "if False:")),
        first="test_expected_tokens_edges",
    ),
    Case(
        "03",
        "expected_tokens",
        "k = 2.5 accepted (int(k) silently)",
        P("03", "expected_tokens", ("raise ValueError(f\"k must be an integer >= 1, got {k!r}\")", "pass")),
        first="test_expected_tokens_bad_input",
    ),
    Case(
        "03",
        "simulate_tokens_per_round",
        "the formula instead of a simulation",
        P(
            "03",
            "simulate_tokens_per_round",
            ("return float(n_accepted.mean() + 1.0)", "return float(sum(alpha ** i for i in range(k + 1)))"),
        ),
        first="test_simulate_tokens_per_round",
    ),
    Case(
        "03",
        "simulate_tokens_per_round",
        "forgets the +1 token",
        P(
            "03",
            "simulate_tokens_per_round",
            ("return float(n_accepted.mean() + 1.0)", "return float(n_accepted.mean())"),
        ),
    ),
    Case(
        "03",
        "simulate_tokens_per_round",
        "counts every accepted draft, not the prefix before the first rejection",
        P("03", "simulate_tokens_per_round", ("np.cumprod(accepted, axis=1).sum(axis=1)", "accepted.sum(axis=1)")),
    ),
    Case(
        "03", "speedup", "without the draft cost: expected_tokens alone", P("03", "speedup", ("/ (k * c + 1.0))", ")"))
    ),
    Case(
        "03",
        "speedup",
        "k + 1 draft steps per round: ((k + 1) c + 1)",
        P("03", "speedup", ("/ (k * c + 1.0))", "/ ((k + 1) * c + 1.0))")),
    ),
    Case(
        "03",
        "speedup",
        "k + 1 in the wrong place: expected_tokens(alpha, k + 1)",
        P(
            "03",
            "speedup",
            ("return float(expected_tokens(alpha, k) /", "return float(expected_tokens(alpha, k + 1) /"),
        ),
    ),
    Case(
        "03",
        "speedup",
        "forgets the verify step: E / (k c)",
        P("03", "speedup", ("/ (k * c + 1.0))", "/ max(k * c, 1e-12))")),
    ),
    Case(
        "03",
        "speedup",
        "a message that does not name c (but contains the letter c: 'draft cost')",
        P(
            "03",
            "speedup",
            (
                'raise ValueError(f"c (draft step / target step) must be >= 0, got {c}")',
                'raise ValueError(f"the draft cost must be >= 0, got {c}")',
            ),
        ),
        first="test_speedup",
        failed_before=False,
    ),
    Case(
        "03",
        "best_k",
        "ties go to the largest k (>=)",
        P("03", "best_k", ("if value > best_value:", "if value >= best_value:")),
        first="test_best_k",
    ),
    Case(
        "03",
        "best_k",
        "searches 1 .. k_max - 1",
        P("03", "best_k", ("range(2, int(k_max) + 1)", "range(2, int(k_max))")),
        first="test_best_k",
    ),
    # 04: verify
    Case(
        "04",
        "verify",
        "forgets the bonus token when every draft is accepted",
        P(
            "04",
            "verify",
            (
                "    t = sample(dist, generator).view(1)",
                "    if n == k:\n        return draft_tokens[:n].clone(), n\n    t = sample(dist, generator).view(1)",
            ),
        ),
    ),
    Case(
        "04",
        "verify",
        "correction sampled from p instead of the residual max(0, p - q)",
        P("04", "verify", ("dist = residual / mass if mass > 0 else p[n]", "dist = p[n]")),
        first="test_verify_distribution",
    ),
    Case(
        "04",
        "verify",
        "correction = argmax of the residual, not a sample",
        P(
            "04",
            "verify",
            (
                "dist = residual / mass if mass > 0 else p[n]",
                "dist = torch.nn.functional.one_hot(residual.argmax(), V).float()",
            ),
        ),
        first="test_verify_distribution",
    ),
    Case(
        "04",
        "verify",
        "acceptance ratio inverted: q / p",
        P(
            "04",
            "verify",
            (
                "ratio = torch.where(q_i > 0, p_i / q_i.clamp(min=1e-30), (p_i > 0).to(p.dtype))",
                "ratio = torch.where(p_i > 0, q_i / p_i.clamp(min=1e-30), (q_i > 0).to(p.dtype))",
            ),
        ),
        first="test_verify_distribution",
    ),
    Case(
        "04",
        "verify",
        "no check that draft_tokens are ids in [0, V) (an IndexError, or a silent wrap for -1)",
        P(
            "04",
            "verify",
            ("    if k and not (0 <= int(draft_tokens.min()) and int(draft_tokens.max()) < V):\n", "    if False:\n"),
        ),
        first="test_verify_bad_input",
        failed_before=False,
    ),
    Case(
        "04",
        "verify",
        "one uniform draw shared by all k drafts (acceptances no longer independent)",
        P(
            "04",
            "verify",
            (
                "r = torch.rand(k, generator=generator)             # (k,) uniform in [0, 1)",
                "r = torch.rand(1, generator=generator).expand(k)",
            ),
        ),
        first="test_verify_distribution",
    ),
    # 04: speculative_generate
    Case(
        "04",
        "speculative_generate",
        "drafts the argmax but passes softmax q to verify (temperature > 0)",
        P(
            "04",
            "speculative_generate",
            (
                "seq = torch.cat([seq, sample(q_next, generator).view(1, 1)], dim=1)",
                "seq = torch.cat([seq, q_next.argmax().view(1, 1)], dim=1)",
            ),
        ),
        first="test_speculative_generate_distribution",
        failed_before=False,
    ),
    Case(
        "04",
        "speculative_generate",
        "its own accept loop that samples the correction from p instead of the residual",
        lambda: (
            '''
def _accept(p, q, drafts, generator):
    k = q.shape[0]
    n = 0
    while n < k and float(torch.rand(1, generator=generator)) < min(1.0, float(p[n, drafts[n]] / q[n, drafts[n]])):
        n += 1
    return torch.cat([drafts[:n], sample(p[n], generator).view(1)]), n    # BUG at a rejection: p, not the residual
'''
            + patched(
                "04",
                "speculative_generate",
                (
                    "new, n = verify(p, torch.stack(qs), drafts, generator)",
                    "new, n = _accept(p, torch.stack(qs), drafts, generator)",
                ),
            )
        ),
        first="test_speculative_generate_distribution",
        failed_before=False,
    ),
    Case(
        "04",
        "speculative_generate",
        "off-by-one rollback: the target keeps the rejected draft's KV entry (crop k - n - 1)",
        P(
            "04",
            "speculative_generate",
            (
                "        keep = tokens.shape[1] - 1                               # 4. roll back: caches hold tokens[:, :-1] at most\n"
                "        for cache in (target_cache, draft_cache):\n"
                "            extra = cache.get_seq_length() - keep\n",
                "        keep = tokens.shape[1] - 1\n"
                "        for cache in (target_cache, draft_cache):\n"
                "            extra = cache.get_seq_length() - keep - (cache is target_cache and n < k_round)\n",
            ),
            (
                "p = probs_from_logits(feed(target, target_cache, seq)[-(k_round + 1):], temperature)",
                "p = probs_from_logits(target(seq[:, -(k_round + 1):], cache=target_cache, use_cache=True).logits[0], temperature)",
            ),
        ),
        first="test_speculative_generate_greedy",
    ),
    Case(
        "04",
        "speculative_generate",
        "target at temperature 1 whatever `temperature` (only the draft is tempered)",
        P(
            "04",
            "speculative_generate",
            (
                "p = probs_from_logits(feed(target, target_cache, seq)[-(k_round + 1):], temperature)",
                "p = probs_from_logits(feed(target, target_cache, seq)[-(k_round + 1):], temperature and 1.0)",
            ),
        ),
        first="test_speculative_generate_distribution",
    ),
    Case(
        "04",
        "speculative_generate",
        "a message that does not name k (but contains the letter k: 'token')",
        P(
            "04",
            "speculative_generate",
            (
                'raise ValueError(f"k must be >= 1, got {k}")',
                'raise ValueError(f"a round drafts at least 1 token, got {k}")',
            ),
        ),
        first="test_speculative_generate_bad_input",
        failed_before=False,
    ),
    Case(
        "04",
        "speculative_generate",
        "drops the bonus token of a fully accepted round",
        P(
            "04",
            "speculative_generate",
            (
                "tokens = torch.cat([tokens, new.view(1, -1)], dim=1)",
                "tokens = torch.cat([tokens, (new[:-1] if n == k_round else new).view(1, -1)], dim=1)",
            ),
        ),
        first="test_speculative_generate_stats",
    ),
    Case(
        "04",
        "speculative_generate",
        "draft samples from torch's global generator, not `generator`",
        P(
            "04",
            "speculative_generate",
            (
                "seq = torch.cat([seq, sample(q_next, generator).view(1, 1)], dim=1)",
                "seq = torch.cat([seq, sample(q_next).view(1, 1)], dim=1)",
            ),
        ),
        first="test_speculative_generate_stats",
    ),
    # 05
    Case(
        "05",
        "estimate_alpha",
        "accepted / drafted",
        lambda: (
            '''
def estimate_alpha(accepted, drafted):
    accepted, drafted = list(accepted), list(drafted)
    if len(accepted) != len(drafted):
        raise ValueError("accepted and drafted must have the same length")
    if any(not 0 <= n <= k for n, k in zip(accepted, drafted)):
        raise ValueError("accepted counts must be in [0, drafted]")
    if sum(drafted) == 0:
        raise ValueError("drafted holds no tested draft")
    return float(sum(accepted) / sum(drafted))
'''
        ),
    ),
    Case(
        "05",
        "estimate_alpha",
        "a failure counted in every round, also the fully accepted ones",
        P(
            "05",
            "estimate_alpha",
            ("failures = sum(1 for n, k in zip(accepted, drafted) if n < k)", "failures = len(accepted)"),
        ),
    ),
    Case(
        "05",
        "estimate_alpha",
        "no rounds: ZeroDivisionError instead of ValueError",
        P(
            "05",
            "estimate_alpha",
            (
                '    if successes + failures == 0:\n        raise ValueError("drafted holds no tested draft token (no rounds, or every round drafted 0)")\n',
                "",
            ),
        ),
        first="test_estimate_alpha_bad_input",
    ),
    Case(
        "05",
        "round_terms",
        "no line (every k at one point): c as the mean of each k's cost per drafted token, not pooled",
        P(
            "05",
            "round_terms",
            (
                'c, c_round = sum(p["propose_seconds"] for p in profile.values()) / drafted / token_seconds, 0.0',
                'c, c_round = sum(p["propose_seconds"] / max(p["drafted"], 1) for p in profile.values()) / len(profile) / token_seconds, 0.0',
            ),
        ),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "one c pooled over every k and no c_round: the per-token model without its line",
        P("05", "round_terms", ("if len(set(xs)) == 1:", "if True:")),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "the line's slope taken as c_round and its intercept as c",
        P(
            "05",
            "round_terms",
            ("        c_round = y_bar - c * x_bar\n", "        c, c_round = y_bar - c * x_bar, c\n"),
        ),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "the line through each k's total seconds, not its seconds per round",
        P(
            "05",
            "round_terms",
            (
                'xs = [p["drafted"] / p["rounds"] for p in profile.values()]',
                'xs = [p["drafted"] for p in profile.values()]',
            ),
            (
                'ys = [p["propose_seconds"] / p["rounds"] / token_seconds for p in profile.values()]',
                'ys = [p["propose_seconds"] / token_seconds for p in profile.values()]',
            ),
        ),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "o keeps the verify forward in the round's rest",
        P(
            "05",
            "round_terms",
            (
                'rest = sum(p["total_seconds"] - p["propose_seconds"] - p["verify_seconds"] for p in profile.values())',
                'rest = sum(p["total_seconds"] - p["propose_seconds"] for p in profile.values())',
            ),
        ),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "v(k) per round forgotten: the verify seconds of all rounds",
        P(
            "05",
            "round_terms",
            ('float(p["verify_seconds"] / p["rounds"] / token_seconds)', 'float(p["verify_seconds"] / token_seconds)'),
        ),
        first="test_round_terms",
    ),
    Case(
        "05",
        "round_terms",
        "a profile with no drafted token divides by zero instead of raising ValueError",
        P(
            "05",
            "round_terms",
            (
                '    if drafted == 0:\n        raise ValueError("profile holds no drafted token: c cannot be measured")\n',
                "",
            ),
        ),
        first="test_round_terms_bad_input",
    ),
    Case(
        "05",
        "predicted_speedup",
        "the round overhead paid per drafted token, k (c + o)",
        P(
            "05",
            "predicted_speedup",
            (
                'cost = k * terms["c"] + terms["c_round"] + terms["v"][k] + terms["o"]',
                'cost = k * (terms["c"] + terms["o"]) + terms["c_round"] + terms["v"][k]',
            ),
        ),
        first="test_predicted_speedup",
    ),
    Case(
        "05",
        "predicted_speedup",
        "the bare model: no round overhead",
        P(
            "05",
            "predicted_speedup",
            (
                'cost = k * terms["c"] + terms["c_round"] + terms["v"][k] + terms["o"]',
                'cost = k * terms["c"] + terms["v"][k]',
            ),
        ),
        first="test_predicted_speedup",
    ),
    Case(
        "05",
        "predicted_speedup",
        "the proposer's cost per round left out",
        P(
            "05",
            "predicted_speedup",
            (
                'cost = k * terms["c"] + terms["c_round"] + terms["v"][k] + terms["o"]',
                'cost = k * terms["c"] + terms["v"][k] + terms["o"]',
            ),
        ),
        first="test_predicted_speedup",
    ),
    Case(
        "05",
        "predicted_speedup",
        "the proposer's cost per round paid per drafted token, k (c + c_round)",
        P(
            "05",
            "predicted_speedup",
            (
                'cost = k * terms["c"] + terms["c_round"] + terms["v"][k] + terms["o"]',
                'cost = k * (terms["c"] + terms["c_round"]) + terms["v"][k] + terms["o"]',
            ),
        ),
        first="test_predicted_speedup",
    ),
    Case(
        "05",
        "ngram_propose",
        "the earliest match instead of the most recent",
        P("05", "ngram_propose", ("j = int(hits[-1, 0])", "j = int(hits[0, 0])")),
    ),
    Case(
        "05",
        "ngram_propose",
        "no overlap between the match and the suffix",
        P(
            "05",
            "ngram_propose",
            (
                "windows = tokens[:L - 1].unfold(0, n, 1)",
                "windows = tokens[:max(L - n, 0)].unfold(0, n, 1) if L >= 2 * n else tokens.new_empty(0, n)",
            ),
        ),
        first="test_ngram_propose",
    ),
    # 06
    Case(
        "06",
        "roofline_step_seconds",
        "FLOPs from bytes: 2 x weight_bytes(cfg, bytes_per_param) x tokens",
        P(
            "06",
            "roofline_step_seconds",
            (
                "compute_s = 2 * weight_bytes(cfg, 1) * tokens",
                "compute_s = 2 * weight_bytes(cfg, bytes_per_param) * tokens",
            ),
        ),
    ),
    Case(
        "06",
        "roofline_step_seconds",
        "memory time always in bf16 (ignores bytes_per_param)",
        P(
            "06",
            "roofline_step_seconds",
            ("decode_step_seconds(weight_bytes(cfg, bytes_per_param),", "decode_step_seconds(weight_bytes(cfg),"),
        ),
        first="test_roofline_step_seconds",
    ),
    Case(
        "06",
        "roofline_step_seconds",
        "compute not split across the GPUs",
        P("06", "roofline_step_seconds", ("/ (n_gpus * gpu.flops_per_s)", "/ gpu.flops_per_s")),
    ),
    Case(
        "06",
        "spec_tokens_per_second",
        "verify step over k tokens instead of k + 1",
        P("06", "spec_tokens_per_second", ("tokens=k + 1)", "tokens=k)")),
        first="test_spec_tokens_per_second",
    ),
    Case(
        "06",
        "spec_tokens_per_second",
        "k + 1 draft steps per round",
        P("06", "spec_tokens_per_second", ("(k * draft_s + verify_s)", "((k + 1) * draft_s + verify_s)")),
    ),
    Case(
        "06",
        "spec_tokens_per_second",
        "ignores the draft step floor",
        P(
            "06",
            "spec_tokens_per_second",
            (
                "draft_s = max(roofline_step_seconds(draft_cfg, gpu, n_gpus), draft_step_floor_s)",
                "draft_s = roofline_step_seconds(draft_cfg, gpu, n_gpus)",
            ),
        ),
    ),
    Case(
        "06",
        "memory_needed_bytes",
        "the draft's KV cache forgotten (its weights counted)",
        lambda: (
            '''
def memory_needed_bytes(target_cfg, draft_cfg, batch, context):
    if not batch >= 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not context >= 0:
        raise ValueError(f"context must be >= 0, got {context}")
    total = weight_bytes(target_cfg) + batch * context * kv_bytes_per_token(target_cfg)
    return int(total + (0 if draft_cfg is None else weight_bytes(draft_cfg)))
'''
        ),
    ),
    Case(
        "06",
        "memory_needed_bytes",
        "GB instead of bytes",
        P("06", "memory_needed_bytes", ("return int(sum(", "return (1e-9 * sum(")),
    ),
    Case(
        "06",
        "max_concurrent_sequences",
        "reserve taken from what the weights leave, not from the whole memory",
        P(
            "06",
            "max_concurrent_sequences",
            (
                "free = (1 - reserve_fraction) * n_gpus * gpu_memory_bytes - weight_bytes_total",
                "free = (1 - reserve_fraction) * (n_gpus * gpu_memory_bytes - weight_bytes_total)",
            ),
        ),
    ),
    Case(
        "06",
        "max_concurrent_sequences",
        "round() instead of floor",
        P(
            "06",
            "max_concurrent_sequences",
            (
                "int(math.floor(free / (context * kv_bytes_per_token_total)))",
                "int(round(free / (context * kv_bytes_per_token_total)))",
            ),
        ),
        first="test_max_concurrent_sequences",
    ),
    Case(
        "06",
        "max_concurrent_sequences",
        "a negative count when the weights do not fit",
        P("06", "max_concurrent_sequences", ("    if free <= 0:\n        return 0\n", "")),
        first="test_max_concurrent_sequences",
    ),
    # 10: batched accept, rollback, serving metrics, the gate
    Case(
        "10",
        "batched_accept",
        "counts every matching draft, not the leading ones",
        P("10", "batched_accept", ("n_accepted = agree.cumprod(dim=1).sum(dim=1)", "n_accepted = agree.sum(dim=1)")),
        first="test_batched_accept",
    ),
    Case(
        "10",
        "batched_accept",
        "next token is always the bonus (last) position",
        P("10", "batched_accept", (".gather(1, n_accepted.view(-1, 1)).view(-1)", "[:, -1].clone()")),
        first="test_batched_accept",
    ),
    Case(
        "10",
        "batched_accept",
        "no check that target_argmax has k + 1 columns",
        P(
            "10",
            "batched_accept",
            ("or tuple(target_argmax.shape) != (B, k + 1)):", "or target_argmax.shape[0] != B):"),
        ),
        first="test_batched_accept_bad_input",
    ),
    Case(
        "10",
        "rollback",
        "off by one: also rejects the token fed first (keeps n, not n + 1 slots)",
        P("10", "rollback", ("keep = (slot <= n_accepted.view(-1, 1))", "keep = (slot < n_accepted.view(-1, 1))")),
        first="test_rollback",
    ),
    Case(
        "10",
        "rollback",
        "changes the caller's mask in place",
        P("10", "rollback", ("new_mask = mask.clone()", "new_mask = mask")),
        first="test_rollback",
    ),
    Case(
        "10",
        "rollback",
        "truncates every row to the smallest acceptance",
        P("10", "rollback", ("keep = (slot <= n_accepted.view(-1, 1))", "keep = (slot <= n_accepted.min())")),
        first="test_rollback",
    ),
    Case(
        "10",
        "rollback",
        "lengths left unchanged",
        P("10", "rollback", ("return new_mask, lengths - (k - n_accepted)", "return new_mask, lengths.clone()")),
        first="test_rollback",
    ),
    Case(
        "10",
        "serving_metrics",
        "TPOT over all output tokens (not output tokens - 1)",
        P("10", "serving_metrics", ("tpot = (finish - first) / (out - 1)", "tpot = (finish - first) / out")),
        first="test_serving_metrics",
    ),
    Case(
        "10",
        "serving_metrics",
        "nearest-rank percentiles instead of numpy's linear default",
        P(
            "10",
            "serving_metrics",
            (
                '"ttft_p99": float(np.percentile(ttft, 99))',
                '"ttft_p99": float(np.percentile(ttft, 99, method="nearest"))',
            ),
        ),
        first="test_serving_metrics",
    ),
    Case(
        "10",
        "serving_metrics",
        "a request exactly at a bound misses it (< instead of <=)",
        P(
            "10",
            "serving_metrics",
            ("good = (ttft <= ttft_slo) & (tpot <= tpot_slo)", "good = (ttft < ttft_slo) & (tpot < tpot_slo)"),
        ),
        first="test_serving_metrics",
    ),
    Case(
        "10",
        "serving_metrics",
        "goodput meeting either bound, not both",
        P(
            "10",
            "serving_metrics",
            ("good = (ttft <= ttft_slo) & (tpot <= tpot_slo)", "good = (ttft <= ttft_slo) | (tpot <= tpot_slo)"),
        ),
        first="test_serving_metrics",
    ),
    Case(
        "10",
        "serving_metrics",
        "span up to the last finish from time 0 (not from the first arrival)",
        P("10", "serving_metrics", ("span = finish.max() - arrival.min()", "span = finish.max()")),
        first="test_serving_metrics",
    ),
    Case(
        "10",
        "gate_k",
        "the longest context instead of the mean",
        P("10", "gate_k", ("float(lengths.mean())", "float(lengths.max())")),
        first="test_gate_k",
    ),
    Case(
        "10",
        "gate_k",
        "the round's own terms not passed on to best_k_for_batch",
        P(
            "10",
            "gate_k",
            (
                "best_k_for_batch(batch, context, alpha, target, draft, gpu, k_max, first_draft_tokens, c_round, sampler_passes, c_step)",
                "best_k_for_batch(batch, context, alpha, target, draft, gpu, k_max)",
            ),
        ),
        first="test_gate_k_best_k",
    ),
    Case(
        "10",
        "gate_k",
        "c_step not passed on to best_k_for_batch",
        P(
            "10",
            "gate_k",
            (
                "best_k_for_batch(batch, context, alpha, target, draft, gpu, k_max, first_draft_tokens, c_round, sampler_passes, c_step)",
                "best_k_for_batch(batch, context, alpha, target, draft, gpu, k_max, first_draft_tokens, c_round, sampler_passes)",
            ),
        ),
        first="test_gate_k_best_k",
    ),
    Case(
        "10",
        "gate_k",
        "no memory check (a state that does not fit raises instead of 0)",
        P("10", "gate_k", ("    if not fits_in_memory(target, draft, gpu, batch, context):\n        return 0\n", "")),
        first="test_gate_k",
    ),
    # 11: the engines' counters, alpha from them, a trace from a stream, vLLM's gate
    Case(
        "11",
        "read_spec_counters",
        "keeps '_total' in the name (vLLM's counters are missed)",
        P(
            "11",
            "read_spec_counters",
            ('        if name.endswith("_total"):\n            name = name[: -len("_total")]\n', ""),
        ),
    ),
    Case(
        "11",
        "read_spec_counters",
        "keeps the prefix before ':' (llama.cpp's counters are missed)",
        P("11", "read_spec_counters", ('name = match.group(1).rsplit(":", 1)[-1]', "name = match.group(1)")),
    ),
    Case(
        "11",
        "read_spec_counters",
        "the last series wins (series of one counter not added up)",
        P(
            "11",
            "read_spec_counters",
            ("totals[names[name]] = totals.get(names[name], 0) + int(value)", "totals[names[name]] = int(value)"),
        ),
    ),
    Case(
        "11",
        "acceptance_from_counters",
        "alpha as accepted / drafted (the engine's acceptance rate)",
        P(
            "11",
            "acceptance_from_counters",
            ('"alpha": float(accepted / (accepted + drafts - per[-1]))', '"alpha": float(accepted / draft_tokens)'),
        ),
    ),
    Case(
        "11",
        "acceptance_from_counters",
        "tau without the target's own token (A / D)",
        P("11", "acceptance_from_counters", ('"tau": float(1 + accepted / drafts)', '"tau": float(accepted / drafts)')),
    ),
    Case(
        "11",
        "trace_from_stream",
        "first token at the first chunk, even one carrying no token",
        P(
            "11",
            "trace_from_stream",
            (
                "            if n > 0:\n                first = when if first is None else first\n",
                "            first = when if first is None else first\n            if n > 0:\n",
            ),
        ),
    ),
    Case(
        "11",
        "trace_from_stream",
        "counts chunks, not tokens",
        P("11", "trace_from_stream", ("finish, tokens = when, tokens + int(n)", "finish, tokens = when, tokens + 1")),
    ),
    Case(
        "11",
        "vllm_gate_config",
        "equal neighbours not merged",
        P("11", "vllm_gate_config", ("if ranges and ranges[-1][2] == k:", "if False:")),
    ),
    Case(
        "11",
        "vllm_gate_config",
        "a table of zeros instead of None when speculation is off everywhere",
        P("11", "vllm_gate_config", ("    if k_max == 0:\n        return None\n", "")),
    ),
    Case(
        "11",
        "vllm_gate_config",
        "the last range ends at the largest decided batch, not at max_num_seqs",
        P("11", "vllm_gate_config", ("else int(max_num_seqs)", "else batch")),
    ),
]

# ------------------------------------------------------------------------------ correct, written differently
CORRECT = [
    Case(
        "04",
        "verify",
        "a Python loop over the drafts (one uniform per draft, stop at the first rejection)",
        cases04.LOOP_VERIFY,
    ),
    Case(
        "04",
        "speculative_generate",
        "no KV cache: every forward recomputes the whole sequence (exact, slower)",
        '''
@torch.no_grad()
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
    """Speculative decoding without caches: each model reruns the whole sequence at every forward."""
    if not (isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] == 1 and input_ids.shape[1] >= 1):
        raise ValueError("input_ids: need a (1, T) tensor, T >= 1")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens: need at least 1")
    if k < 1:
        raise ValueError("k: need at least 1 draft token per round")
    if temperature < 0:
        raise ValueError("temperature: must not be negative")
    tokens, T = input_ids.long(), input_ids.shape[1]
    stats = {"rounds": 0, "drafted": 0, "accepted": 0, "per_round": []}
    while tokens.shape[1] - T < max_new_tokens:
        k_round = min(k, max_new_tokens - (tokens.shape[1] - T))
        seq, qs = tokens, []
        for _ in range(k_round):
            q_next = probs_from_logits(draft(seq).logits[0, -1], temperature)
            qs.append(q_next)
            seq = torch.cat([seq, sample(q_next, generator).view(1, 1)], dim=1)
        p = probs_from_logits(target(seq).logits[0, -(k_round + 1):], temperature)
        new, n = verify(p, torch.stack(qs), seq[0, tokens.shape[1]:], generator)
        tokens = torch.cat([tokens, new.view(1, -1)], dim=1)
        stats["rounds"] += 1
        stats["drafted"] += k_round
        stats["accepted"] += n
        stats["per_round"].append((k_round, n))
    return tokens[:, :T + max_new_tokens], stats
''',
    ),
    Case(
        "03",
        "expected_tokens",
        "numpy inside (the series with np.arange), a different error message",
        '''
def expected_tokens(alpha, k):
    """(1 - alpha**(k+1)) / (1 - alpha) tokens per round, as the series 1 + alpha + ... + alpha**k."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"bad k={k!r}: the draft length is an integer of at least 1")
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"bad alpha={alpha!r}: an acceptance rate lies in [0, 1]")
    return float(np.sum(float(alpha) ** np.arange(int(k) + 1)))
''',
    ),
    Case(
        "03",
        "expected_tokens",
        "no float() conversion of the inputs: numpy scalars in, numpy scalars out (numpy inputs are not specified)",
        '''
def expected_tokens(alpha, k):
    """(1 - alpha**(k+1)) / (1 - alpha); k + 1 at alpha = 1."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1.0 - alpha)
''',
    ),
    Case(
        "03",
        "speedup",
        "numpy inside",
        '''
def speedup(alpha, k, c):
    """expected_tokens(alpha, k) / (k c + 1)."""
    if np.isnan(c) or c < 0:
        raise ValueError("c, the draft cost ratio, must be >= 0")
    return float(np.divide(expected_tokens(alpha, k), np.add(np.multiply(k, c), 1.0)))
''',
    ),
    Case(
        "03",
        "best_k",
        "np.argmax over all k (the first maximum is the smallest k)",
        '''
def best_k(alpha, c, k_max=16):
    """The smallest k in 1..k_max with the highest speedup."""
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError("k_max: must be an integer >= 1")
    values = np.array([speedup(alpha, k, c) for k in range(1, k_max + 1)])
    return int(np.argmax(values)) + 1
''',
    ),
    Case(
        "01",
        "ridge_point",
        "a different but valid error message",
        '''
def ridge_point(flops, bandwidth):
    """FLOP/B where compute time equals memory time."""
    for name, value in (("flops", flops), ("bandwidth", bandwidth)):
        if not value > 0:
            raise ValueError(f"invalid {name}={value!r} (expected a positive rate)")
    return flops / bandwidth * 1.0
''',
    ),
    Case(
        "05",
        "estimate_alpha",
        "numpy arrays and a different error message",
        '''
def estimate_alpha(accepted, drafted):
    """alpha-hat = sum(n) / (sum(n) + rounds with n < k)."""
    a, d = np.asarray(accepted, dtype=np.int64), np.asarray(drafted, dtype=np.int64)
    if a.shape != d.shape:
        raise ValueError("length mismatch between accepted and drafted")
    if (d < 0).any():
        raise ValueError("negative entry in drafted")
    if (a < 0).any() or (a > d).any():
        raise ValueError("entry of accepted outside [0, drafted]")
    tested = int(a.sum()) + int((a < d).sum())
    if tested == 0:
        raise ValueError("nothing tested: drafted is empty or all zero")
    return float(a.sum() / tested)
''',
    ),
    Case(
        "05",
        "estimate_alpha",
        "one range check 0 <= accepted[i] <= drafted[i] naming accepted (a negative drafted fails it too)",
        P(
            "05",
            "estimate_alpha",
            ("        if k < 0:\n            raise ValueError(f\"drafted counts must be >= 0, got {k}\")\n", ""),
            (
                'raise ValueError(f"accepted counts must be in [0, drafted], got accepted {n} with drafted {k}")',
                'raise ValueError(f"accepted: round count {n} out of range")',
            ),
        ),
    ),
    Case(
        "05",
        "round_terms",
        "numpy sums and its own messages",
        lambda: (
            '''
def round_terms(profile, token_seconds):
    import numpy as np
    if isinstance(token_seconds, bool) or not np.isfinite(token_seconds) or token_seconds <= 0:
        raise ValueError("token_seconds: need a finite positive time")
    if not isinstance(profile, dict) or len(profile) == 0:
        raise ValueError("profile: empty")
    need = {"rounds", "drafted", "propose_seconds", "verify_seconds", "total_seconds"}
    for k, p in profile.items():
        if type(k) is not int or k < 1 or not isinstance(p, dict) or not need <= set(p):
            raise ValueError("profile: bad entry")
        if type(p["rounds"]) is not int or p["rounds"] < 1 or type(p["drafted"]) is not int or p["drafted"] < 0:
            raise ValueError("profile: bad counts")
        t = np.array([p["propose_seconds"], p["verify_seconds"], p["total_seconds"]], dtype=float)
        if not np.all(np.isfinite(t)) or np.any(t < 0) or t[0] + t[1] > t[2] * (1 + 1e-9):
            raise ValueError("profile: bad times")
    rows = np.array([[p["rounds"], p["drafted"], p["propose_seconds"], p["verify_seconds"], p["total_seconds"]]
                     for p in profile.values()], dtype=float)
    if rows[:, 1].sum() == 0:
        raise ValueError("profile: nothing drafted")
    x, y = rows[:, 1] / rows[:, 0], rows[:, 2] / rows[:, 0] / token_seconds
    if np.ptp(x) == 0:
        c, c_round = rows[:, 2].sum() / rows[:, 1].sum() / token_seconds, 0.0
    else:
        c, c_round = np.polyfit(x, y, 1)
    o = (rows[:, 4] - rows[:, 2] - rows[:, 3]).sum() / rows[:, 0].sum() / token_seconds
    return {"c": float(c), "c_round": float(c_round), "o": float(o), "v": {int(k): float(p["verify_seconds"] / p["rounds"] / token_seconds) for k, p in profile.items()}}
'''
        ),
    ),
    Case(
        "05",
        "ngram_propose",
        "a plain loop from the end and a different error message",
        '''
def ngram_propose(tokens, n, k):
    """Tokens that followed the most recent earlier occurrence of the last n tokens (at most k)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError("tokens: a 1-D tensor is required")
    if n < 1:
        raise ValueError("invalid n (need at least 1)")
    if k < 1:
        raise ValueError("invalid k (need at least 1)")
    ids = tokens.tolist()
    L = len(ids)
    for j in range(L - n - 1, -1, -1):
        if ids[j:j + n] == ids[L - n:]:
            return torch.tensor(ids[j + n:j + n + k], dtype=torch.long)
    return torch.zeros(0, dtype=torch.long)
''',
    ),
    Case(
        "06",
        "max_concurrent_sequences",
        "counts with // on floats and a different error message",
        '''
def max_concurrent_sequences(gpu_memory_bytes, n_gpus, weight_bytes_total, kv_bytes_per_token_total, context,
                             reserve_fraction=0.1):
    """Whole sequences of `context` tokens whose KV fits next to the weights."""
    checks = (("gpu_memory_bytes", gpu_memory_bytes > 0), ("n_gpus", n_gpus >= 1), ("weight_bytes_total", weight_bytes_total >= 0),
              ("kv_bytes_per_token_total", kv_bytes_per_token_total > 0), ("context", context >= 1),
              ("reserve_fraction", 0 <= reserve_fraction < 1))
    for name, ok in checks:
        if not ok:
            raise ValueError(f"out of range: {name}")
    usable = n_gpus * gpu_memory_bytes * (1 - reserve_fraction)
    return max(0, int((usable - weight_bytes_total) // (context * kv_bytes_per_token_total)))
''',
    ),
]


WRONG += [
    Case(
        "07",
        "step_seconds",
        "one sequence's KV for the whole batch (KV not multiplied by batch)",
        P(
            "07",
            "step_seconds",
            ('kv = batch * context * model["kv_bytes_per_token"]', 'kv = context * model["kv_bytes_per_token"]'),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "KV re-read per query position (batch expansion where the multi-query kernel is stated)",
        P(
            "07",
            "step_seconds",
            (
                'kv = batch * context * model["kv_bytes_per_token"]',
                'kv = batch * tokens * context * model["kv_bytes_per_token"]',
            ),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "one max over the terms instead of their sum (kernels overlapped)",
        P(
            "07",
            "step_seconds",
            (
                "return float(sum(step_terms(model, gpu, batch, context, tokens).values()))",
                "return float(max(step_terms(model, gpu, batch, context, tokens).values()))",
            ),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "the input embedding counted as streamed",
        P(
            "07",
            "step_seconds",
            (
                '"gemm": roofline(model["layer_bytes"], m * model["layer_bytes"]),',
                '"gemm": roofline(model["weight_bytes"] - model["lm_head_bytes"], m * (model["weight_bytes"] - model["lm_head_bytes"])),',
            ),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "tensor parallelism without the all-reduce term",
        P("07", "step_seconds", ("    if n > 1:\n", "    if n > 1 and False:\n")),
    ),
    Case(
        "07",
        "step_seconds",
        "tensor parallelism: every GPU reads all the bytes (not 1/n)",
        P(
            "07",
            "step_seconds",
            ("return max(n_bytes / n / bw, n_flops / n / flops)", "return max(n_bytes / bw, n_flops / n / flops)"),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "the fixed cost left out",
        P(
            "07",
            "step_seconds",
            (
                '"fixed": gpu.fixed_s + (gpu.fixed_s_per_layer * model["layers"] if isinstance(gpu, TPGroup) else 0.0),',
                '"fixed": 0.0,',
            ),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "the fixed cost per forward left out (per layer only)",
        P("07", "step_seconds", ('"fixed": gpu.fixed_s + (', '"fixed": 0.0 + (')),
    ),
    Case(
        "07",
        "step_seconds",
        "the attained fractions left out (datasheet peaks whatever the GPU attains)",
        P(
            "07",
            "step_seconds",
            (
                "bw, flops, m = gpu.bandwidth_bytes_per_s * gpu.mbu, gpu.flops_per_s * gpu.mfu, batch * tokens",
                "bw, flops, m = gpu.bandwidth_bytes_per_s, gpu.flops_per_s, batch * tokens",
            ),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "the bandwidth fraction applied to the KV read twice",
        P("07", "step_seconds", ('"attention": roofline(kv, ', '"attention": roofline(kv / gpu.mbu, ')),
    ),
    Case(
        "07",
        "step_seconds",
        "the fixed cost per layer counted per token (x M)",
        P(
            "07",
            "step_seconds",
            ('gpu.fixed_s_per_layer * model["layers"] if', 'gpu.fixed_s_per_layer * model["layers"] * m if'),
        ),
    ),
    Case(
        "07",
        "step_seconds",
        "the fixed cost per forward counted per token (x M)",
        P("07", "step_seconds", ('"fixed": gpu.fixed_s + (', '"fixed": m * gpu.fixed_s + (')),
    ),
    Case(
        "07",
        "spec_speedup",
        "the draft costs nothing even when it is a model",
        P(
            "07",
            "spec_speedup",
            ("    if draft is not None:\n        dg = draft_gpus(gpu)", "    if False:\n        dg = draft_gpus(gpu)"),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "the draft's first pass left out (one token whatever first_draft_tokens says)",
        P(
            "07",
            "spec_speedup",
            ("step_seconds(draft, dg, batch, context, tokens=first)", "step_seconds(draft, dg, batch, context)"),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "the first pass added to k one-token steps (k + 1 draft forwards)",
        P(
            "07",
            "spec_speedup",
            ("+ (k - 1) * step_seconds(draft, dg, batch, context)", "+ k * step_seconds(draft, dg, batch, context)"),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "the draft cost per drafted token only (c_round left out)",
        P("07", "spec_speedup", ("(draft_s + c_round + c_step + verify)", "(draft_s + c_step + verify)")),
    ),
    Case(
        "07",
        "spec_speedup",
        "c_step on the round only (the plain step does not pay the scheduler)",
        P(
            "07",
            "spec_speedup",
            (
                "sampler_seconds(target, gpu, batch, sampler_passes) + c_step\n",
                "sampler_seconds(target, gpu, batch, sampler_passes)\n",
            ),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "c_step paid by every forward of the round (k draft steps and the verify)",
        P(
            "07",
            "spec_speedup",
            ("(draft_s + c_round + c_step + verify)", "(draft_s + c_round + (k + 1) * c_step + verify)"),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "the sampler on the verify only",
        P(
            "07",
            "spec_speedup",
            (
                "plain = step_seconds(target, gpu, batch, context) + sampler_seconds(target, gpu, batch, sampler_passes) + c_step",
                "plain = step_seconds(target, gpu, batch, context) + c_step",
            ),
            (" + k * sampler_seconds(draft, dg, batch, sampler_passes))", ")"),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "first_draft_tokens taken as a number even when it is a function of k (vLLM's k + 2 read as 1)",
        P(
            "07",
            "spec_speedup",
            (
                "first = first_pass_tokens(first_draft_tokens, k)",
                "first = first_draft_tokens if not callable(first_draft_tokens) else 1",
            ),
        ),
    ),
    Case(
        "07",
        "spec_speedup",
        "the draft on the target's GPUs whatever draft_n says",
        P("07", "spec_speedup", ("dg = draft_gpus(gpu)", "dg = gpu")),
    ),
    Case(
        "07",
        "spec_speedup",
        "KV left out (the zero-context model at every context)",
        P(
            "07",
            "spec_speedup",
            (
                "plain = step_seconds(target, gpu, batch, context) + sampler_seconds",
                "plain = step_seconds(target, gpu, batch, 0) + sampler_seconds",
            ),
            (
                "verify = step_seconds(target, gpu, batch, context, tokens=k + 1)",
                "verify = step_seconds(target, gpu, batch, 0, tokens=k + 1)",
            ),
        ),
    ),
    Case(
        "07",
        "fit_step_line",
        "the line through the origin (no intercept, fixed_s 0)",
        P(
            "07",
            "fit_step_line",
            (
                "fixed, per_token, per_kv = np.linalg.lstsq(X, y, rcond=None)[0]",
                "fixed, (per_token, per_kv) = 0.0, np.linalg.lstsq(X[:, 1:], y, rcond=None)[0]",
            ),
        ),
    ),
    Case(
        "07",
        "fit_step_line",
        "coefficients clipped at zero (a fit with a negative term returned as 0)",
        P(
            "07",
            "fit_step_line",
            (
                'return {"fixed_s": float(fixed), "per_token_s": float(per_token), "per_kv_token_s": float(per_kv)}',
                'return {"fixed_s": max(0.0, float(fixed)), "per_token_s": max(0.0, float(per_token)), '
                '"per_kv_token_s": max(0.0, float(per_kv))}',
            ),
        ),
    ),
    Case(
        "07",
        "fit_step_line",
        "the KV column one sequence's context (L), not batch x context",
        P("07", "fit_step_line", ("X = np.array([[1.0, b * t, b * L] for", "X = np.array([[1.0, b * t, L] for")),
    ),
    Case(
        "07",
        "fit_step_line",
        "batched tokens as the batch (a verify row's k + 1 tokens not counted)",
        P("07", "fit_step_line", ("X = np.array([[1.0, b * t, b * L] for", "X = np.array([[1.0, b, b * L] for")),
        first="test_fit_step_line",
    ),
    Case(
        "07",
        "line_speedup",
        "the drafter's cost per token not multiplied by the batch",
        P(
            "07",
            "line_speedup",
            (
                "return float(tau * step(1) / (c_round + c_token * batch * k + step(k + 1)))",
                "return float(tau * step(1) / (c_round + c_token * k + step(k + 1)))",
            ),
        ),
    ),
    Case(
        "07",
        "line_speedup",
        "the verify over k tokens, not k + 1",
        P(
            "07",
            "line_speedup",
            (
                "return float(tau * step(1) / (c_round + c_token * batch * k + step(k + 1)))",
                "return float(tau * step(1) / (c_round + c_token * batch * k + step(k)))",
            ),
        ),
    ),
    Case(
        "07",
        "line_crossover",
        "a speedup of exactly 1 counted as paying",
        P("07", "line_crossover", ("<= 1.0:", "< 1.0:")),
    ),
    Case(
        "07",
        "line_crossover",
        "the batches in the order given, not ascending",
        P("07", "line_crossover", ("ordered = sorted(batches)", "ordered = list(batches)")),
    ),
    Case(
        "07",
        "break_even_batch",
        "the round's own terms not passed on (the bare round at every state)",
        P(
            "07",
            "break_even_batch",
            (
                "spec_speedup(batch + 1, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round,\n                                                  sampler_passes, c_step) > 1.0:",
                "spec_speedup(batch + 1, context, alpha, k, target, draft, gpu) > 1.0:",
            ),
        ),
    ),
    Case(
        "07",
        "break_even_batch",
        "the first batch that does not pay instead of the last that does",
        P(
            "07",
            "break_even_batch",
            ("return int(batch), bool(batch == limit)", "return int(batch + 1), bool(batch == limit)"),
        ),
    ),
    Case(
        "08",
        "check_claim",
        "a round above k + 1 plain steps left to break_even_alpha (which raises)",
        P(
            "08",
            "check_claim",
            (
                "alphas = tuple(break_even_alpha(k, ratio) if ratio <= k + 1 else None for ratio in ratios)",
                "alphas = tuple(break_even_alpha(k, ratio) for ratio in ratios)",
            ),
        ),
    ),
    Case(
        "08",
        "round_cost_ratio",
        "the draft runs once per round, not k times",
        P("08", "round_cost_ratio", (" + (k - 1) * step_seconds(draft, dg, batch, context)", "")),
    ),
    Case(
        "08",
        "round_cost_ratio",
        "c_round left out of the round",
        P(
            "08",
            "round_cost_ratio",
            (
                "return float((draft_s + c_round + c_step + verify) / plain)",
                "return float((draft_s + c_step + verify) / plain)",
            ),
        ),
        first="test_round_cost_ratio",
    ),
    Case(
        "08",
        "round_cost_ratio",
        "c_step in the round only (the plain step does not pay the scheduler)",
        P(
            "08",
            "round_cost_ratio",
            (
                "sampler_seconds(target, gpu, batch, sampler_passes) + c_step   # checks the rest",
                "sampler_seconds(target, gpu, batch, sampler_passes)   # checks the rest",
            ),
        ),
        first="test_round_cost_ratio",
    ),
    Case(
        "08",
        "round_cost_ratio",
        "the sampler left out of the plain step (the round pays it, the baseline does not)",
        P(
            "08",
            "round_cost_ratio",
            (
                "plain = step_seconds(target, gpu, batch, context) + sampler_seconds(target, gpu, batch, sampler_passes) + c_step",
                "plain = step_seconds(target, gpu, batch, context) + 0 * sampler_seconds(target, gpu, batch, sampler_passes) + c_step",
            ),
        ),
        first="test_round_cost_ratio",
    ),
    Case(
        "08",
        "round_cost_ratio",
        "the first pass read as one token whatever first_draft_tokens says",
        P(
            "08",
            "round_cost_ratio",
            ("step_seconds(draft, dg, batch, context, tokens=first)", "step_seconds(draft, dg, batch, context)"),
        ),
        first="test_round_cost_ratio",
    ),
    Case(
        "08",
        "should_speculate",
        "the round's own terms not passed on to spec_speedup",
        P(
            "08",
            "should_speculate",
            (
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round, sampler_passes, c_step)",
                "spec_speedup(batch, context, alpha, k, target, draft, gpu)",
            ),
        ),
    ),
    Case(
        "08",
        "should_speculate",
        "c_step not passed on (the round's terms are, the step's is not)",
        P(
            "08",
            "should_speculate",
            (
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round, sampler_passes, c_step)",
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round, sampler_passes)",
            ),
        ),
    ),
    Case(
        "08",
        "best_k_for_batch",
        "the round's own terms not passed on to spec_speedup",
        P(
            "08",
            "best_k_for_batch",
            (
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round, sampler_passes, c_step)",
                "spec_speedup(batch, context, alpha, k, target, draft, gpu)",
            ),
        ),
        first="test_best_k_for_batch",
    ),
    Case(
        "08",
        "best_k_for_batch",
        "vLLM's first pass fixed at k_max + 2 for every k (not a function of each k)",
        P(
            "08",
            "best_k_for_batch",
            (
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_draft_tokens, c_round, sampler_passes, c_step)",
                "spec_speedup(batch, context, alpha, k, target, draft, gpu, first_pass_tokens(first_draft_tokens, k_max), c_round, sampler_passes, c_step)",
            ),
        ),
        first="test_best_k_for_batch",
    ),
    Case(
        "08",
        "deployment_plan",
        "the round's own terms not passed on to best_k_for_batch",
        P(
            "08",
            "deployment_plan",
            (
                "k = best_k_for_batch(state[0], state[1], a, target, draft, gpu, k_max, *terms)",
                "k = best_k_for_batch(state[0], state[1], a, target, draft, gpu, k_max)",
            ),
        ),
        first="test_deployment_plan",
    ),
    Case(
        "08",
        "best_k_for_batch",
        "ties go to the largest k",
        P("08", "best_k_for_batch", ("if value > best_value:", "if value >= best_value and k > 0:")),
    ),
    Case("08", "should_speculate", "a tie counts as worth it", P("08", "should_speculate", ("> 1.0)", ">= 1.0)"))),
    Case(
        "08",
        "deployment_plan",
        "fleet speedup as the share-weighted mean of speedups (not of times)",
        P(
            "08",
            "deployment_plan",
            (
                'time_ratio = sum(share / total / speedups[state] for state, share in states.items())',
                'time_ratio = 1.0 / sum(share / total * speedups[state] for state, share in states.items())',
            ),
        ),
    ),
]

CORRECT += [
    Case(
        "10",
        "batched_accept",
        "a Python loop per row, ids read with tolist(), int32 inputs widened at the end",
        '''
def batched_accept(target_argmax, drafts):
    """Greedy acceptance per row, by a loop over each row's drafts."""
    for name, t in (("drafts", drafts), ("target_argmax", target_argmax)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.is_floating_point():
            raise ValueError(f"{name} must be a 2-D integer tensor")
    if drafts.shape[1] < 1:
        raise ValueError("drafts must hold k >= 1 columns")
    if tuple(target_argmax.shape) != (drafts.shape[0], drafts.shape[1] + 1):
        raise ValueError("target_argmax must have shape (B, k + 1)")
    counts, nexts = [], []
    for d_row, t_row in zip(drafts.tolist(), target_argmax.tolist()):
        n = 0
        for d, t in zip(d_row, t_row):
            if d != t:
                break
            n += 1
        counts.append(n)
        nexts.append(t_row[n])
    return torch.tensor(counts).long(), torch.tensor(nexts).long()
''',
    ),
    Case(
        "10",
        "rollback",
        "a loop per row over a copy, lengths by subtraction row by row",
        '''
def rollback(mask, lengths, n_accepted, k):
    """Per-sequence rollback, one row at a time, on copies."""
    if type(k) is not int or k < 1:
        raise ValueError("k must be an integer >= 1")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[1] < k + 1:
        raise ValueError("mask must be 2-D with at least k + 1 columns")
    B, T = mask.shape
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,):
        raise ValueError("lengths must have shape (B,)")
    if not isinstance(n_accepted, torch.Tensor) or n_accepted.shape != (B,) or n_accepted.is_floating_point():
        raise ValueError("n_accepted must be B integers")
    if any(n < 0 or n > k for n in n_accepted.tolist()):
        raise ValueError("n_accepted must lie in 0..k")
    new_mask, new_lengths = mask.detach().clone(), lengths.detach().clone()
    for b, n in enumerate(n_accepted.tolist()):
        for j in range(T - (k - n), T):
            new_mask[b, j] = 0
        new_lengths[b] = lengths[b] - (k - n)
    return new_mask, new_lengths
''',
    ),
]

WRONG += [
    Case(
        "08",
        "round_cost_ratio",
        "the draft on the target's GPUs (gpu), not on draft_gpus(gpu)",
        P("08", "round_cost_ratio", ("dg = draft_gpus(gpu)", "dg = gpu")),
    ),
    Case(
        "08",
        "round_cost_ratio",
        "the verify step priced as one plain step (its compute-bound GEMMs left out)",
        P(
            "08",
            "round_cost_ratio",
            ("step_seconds(target, gpu, batch, context, tokens=k + 1)", "step_seconds(target, gpu, batch, context)"),
        ),
    ),
]

CORRECT += [
    Case(
        "08",
        "break_even_alpha",
        "Newton's method on E(alpha) - cost_ratio instead of bisection",
        '''
def break_even_alpha(k, cost_ratio):
    """Smallest alpha with expected_tokens(alpha, k) >= cost_ratio, by Newton's method (E is increasing)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not cost_ratio > 0:
        raise ValueError(f"cost_ratio must be > 0, got {cost_ratio}")
    if cost_ratio > k + 1:
        raise ValueError(f"cost_ratio {cost_ratio} > k + 1: no alpha pays")
    if cost_ratio <= 1:
        return 0.0
    e = lambda a: sum(a ** i for i in range(k + 1))                  # E(alpha, k) as the series
    de = lambda a: sum(i * a ** (i - 1) for i in range(1, k + 1))    # its derivative
    a = 1.0                                    # E is convex and increasing: from the right, Newton never overshoots
    for _ in range(200):
        step = (e(a) - cost_ratio) / de(a)
        a = min(1.0, max(0.0, a - step))
        if abs(step) < 1e-13:
            break
    while e(a) < cost_ratio and a < 1.0:       # the answer must pay: nudge up to the first alpha that does
        a = min(1.0, a + 1e-12)
    return float(a)
''',
    )
]


_RATIO_09 = 'accept = min(1.0, float(target_p[x] / q_node[x])) if q_node[x] > 0 else float(target_p[x] > 0)'

WRONG += [
    # 09 Parts A and B: the path and the k chosen from measured numbers
    Case(
        "09",
        "choose_path",
        "the arithmetic mean over the domains, not the geometric",
        P(
            "09",
            "choose_path",
            (
                "return math.prod(speedups) ** (1 / len(speedups)) / row[\"step\"]",
                "return sum(speedups) / len(speedups) / row[\"step\"]",
            ),
        ),
        first="test_choose_path_budget_and_domains",
    ),
    Case(
        "09",
        "choose_path",
        "the prediction at the row's largest k, not its best k",
        P(
            "09",
            "choose_path",
            (
                "for k in row[\"v\"]]) for a in alphas.values()]",
                "for k in [max(row[\"v\"])]]) for a in alphas.values()]",
            ),
        ),
        first="test_choose_path",
    ),
    Case(
        "09",
        "choose_path",
        "the step budget ignored",
        P("09", "choose_path", ('fits = [r for r in rows if r["step"] <= budget]', "fits = list(rows)")),
        first="test_choose_path_budget_and_domains",
    ),
    Case(
        "09",
        "choose_path",
        "the largest predicted speedup (the ratio), not the most tokens per second",
        P(
            "09",
            "choose_path",
            (
                "return math.prod(speedups) ** (1 / len(speedups)) / row[\"step\"]",
                "return math.prod(speedups) ** (1 / len(speedups))",
            ),
        ),
        first="test_choose_path",
    ),
    Case(
        "09",
        "choose_path",
        "the fastest plain step, not the fastest decoding",
        P("09", "choose_path", ("key=tokens_per_second)", "key=lambda r: 1 / r[\"step\"])")),
        first="test_choose_path",
    ),
    Case(
        "09",
        "choose_path",
        "every affordable width, not the widest",
        P(
            "09",
            "choose_path",
            (
                'return max([r for r in fits if r["width"] == widest], key=tokens_per_second)',
                "return max(fits, key=tokens_per_second)",
            ),
        ),
        first="test_choose_path",
    ),
    Case(
        "09",
        "choose_path",
        "plain decoding not counted where no k pays",
        P("09", "choose_path", ("max([1.0] + [expected_tokens(a, k)", "max([expected_tokens(a, k)")),
        first="test_choose_path",
    ),
    Case(
        "09",
        "choose_path",
        "the round's own terms left out (the bare E(alpha, k) / (k c + v(k)))",
        P(
            "09",
            "choose_path",
            ('(k * row["c"] + row["c_round"] + row["v"][k] + row["o"])', '(k * row["c"] + row["v"][k])'),
        ),
        first="test_choose_path",
    ),
    Case(
        "09",
        "rule_k",
        "the k with the largest tokens per round E(alpha, k), not the best speedup",
        P(
            "09",
            "rule_k",
            (
                "speed = {int(k): predicted_speedup(alpha, k, terms) for k in sorted(set(ks))}",
                "speed = {int(k): expected_tokens(alpha, k) for k in sorted(set(ks))}",
            ),
        ),
        first="test_rule_k",
    ),
    Case(
        "09",
        "rule_k",
        "every k of terms['v'], not only those of ks",
        P("09", "rule_k", ("for k in sorted(set(ks))}", 'for k in sorted(terms["v"])}')),
        first="test_rule_k",
    ),
    # 10 Parts C and D: a run priced from measured forwards, the crossover read off a curve
    Case(
        "10",
        "run_seconds",
        "the draft's first step over 1 token (k one-token draft steps)",
        P("10", "run_seconds", ("draft_s(B, 2) + (k - 1) * draft_s(B, 1)", "k * draft_s(B, 1)")),
        first="test_run_seconds_speculative",
    ),
    Case(
        "10",
        "run_seconds",
        "the draft's prefill left out",
        P(
            "10",
            "run_seconds",
            ("speculative = (target_s(B, P - 1) + draft_s(B, P - 1)", "speculative = (target_s(B, P - 1)"),
        ),
        first="test_run_seconds_speculative",
    ),
    Case(
        "10",
        "run_seconds",
        "N plain steps after the prefill instead of N - 1",
        P("10", "run_seconds", ("(new_tokens - 1) * target_s(B, 1)", "new_tokens * target_s(B, 1)")),
        first="test_run_seconds_plain",
    ),
    Case(
        "10",
        "run_seconds",
        "the arguments of the cost functions swapped (tokens, batch)",
        P(
            "10",
            "run_seconds",
            (
                "plain = target_s(B, P) + (new_tokens - 1) * target_s(B, 1)",
                "plain = target_s(P, B) + (new_tokens - 1) * target_s(1, B)",
            ),
        ),
        first="test_run_seconds_plain",
    ),
    Case(
        "10",
        "crossing",
        "interpolated linearly in B and in the speedup",
        P(
            "10",
            "crossing",
            (
                "return float(math.exp(math.log(a) + (math.log(b) - math.log(a)) * fa / (fa - fb)))",
                "return float(a + (b - a) * (points[a] - 1) / (points[a] - points[b]))",
            ),
        ),
        first="test_crossing",
    ),
    Case(
        "10",
        "crossing",
        "the batches in the dict's order, not sorted",
        P("10", "crossing", ("bs = sorted(points)", "bs = list(points)")),
        first="test_crossing",
    ),
    Case(
        "09",
        "tree_mask",
        "positions by node index, not by depth",
        P(
            "09",
            "tree_mask",
            (
                "return mask, torch.tensor(depth, dtype=torch.long) + prefix_len - 1",
                "return mask, torch.arange(N, dtype=torch.long) + prefix_len",
            ),
        ),
        first="test_tree_mask",
    ),
    Case(
        "09",
        "tree_mask",
        "a node sees its parent but not the rest of its ancestors",
        P(
            "09",
            "tree_mask",
            ("mask[i, prefix_len:] |= mask[parent, prefix_len:]", "mask[i, prefix_len + parent] = True"),
        ),
        first="test_tree_mask",
    ),
    Case(
        "09",
        "tree_mask",
        "the plain causal mask (every earlier node visible)",
        P("09", "tree_mask", ("mask[i, prefix_len + i] = True", "mask[i, prefix_len:prefix_len + i + 1] = True")),
        first="test_tree_mask",
    ),
    Case(
        "09",
        "tree_mask",
        "positions from the root's own position (off by one)",
        P("09", "tree_mask", ("+ prefix_len - 1", "+ prefix_len")),
        first="test_tree_mask",
    ),
    Case(
        "09",
        "tree_mask",
        "a parent after its child accepted",
        P(
            "09",
            "tree_mask",
            ("if not -1 <= parent < i:", "if not -1 <= parent < N:"),
            (
                "depth.append(1 if parent < 0 else depth[parent] + 1)",
                "depth.append(1 if parent < 0 or parent >= i else depth[parent] + 1)",
            ),
        ),
        first="test_tree_mask_bad_input",
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "children matched against the target's choice after the root at every level",
        P(
            "09",
            "verify_tree_greedy",
            ("want = target_next[node + 1]", "want = target_next[0] if not path else target_next[path[-1]]"),
        ),
        first="test_verify_tree_greedy",
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "the last matching child instead of the first",
        P(
            "09",
            "verify_tree_greedy",
            (
                "child = next((i for i in range(N) if parents[i] == node and tokens[i] == want), None)",
                "child = next((i for i in reversed(range(N)) if parents[i] == node and tokens[i] == want), None)",
            ),
        ),
        first="test_verify_tree_greedy",
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "no bonus: the target's choice after the root whatever was accepted",
        P("09", "verify_tree_greedy", ("return path, want", "return path, target_next[0]")),
        first="test_verify_tree_greedy",
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "any node with the right token at the right depth, not only children",
        P(
            "09",
            "verify_tree_greedy",
            ("if parents[i] == node and tokens[i] == want", "if tokens[i] == want and i not in path and i > node"),
        ),
        first="test_verify_tree_greedy",
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "target_next of any length accepted",
        P("09", "verify_tree_greedy", ("if len(target_next) != N + 1:", "if len(target_next) < N + 1 and False:")),
        first="test_verify_tree_greedy_bad_input",
    ),
    # 09 Part D: sampled verification over a tree (SpecInfer's rule)
    Case(
        "09",
        "verify_tree_sampled",
        "accepting with p alone: min(1, p'(x)), not p'(x) / q(x)",
        P("09", "verify_tree_sampled", (_RATIO_09, "accept = float(target_p[x])")),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "no residual update between siblings: every child tested against p, the correction from max(p - q, 0)",
        P(
            "09",
            "verify_tree_sampled",
            (_RATIO_09, _RATIO_09.replace("target_p[x]", "p[node + 1][x]")),
            ("residual = (target_p - q_node).clamp(min=0)", "residual = (p[node + 1] - q_node).clamp(min=0)"),
        ),
        first="test_verify_tree_sampled",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "every child tested against p; the residual chained for the correction only",
        P("09", "verify_tree_sampled", (_RATIO_09, _RATIO_09.replace("target_p[x]", "p[node + 1][x]"))),
        first="test_verify_tree_sampled",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "one uniform draw per node, shared by its children (not one per child)",
        P(
            "09",
            "verify_tree_sampled",
            (
                "        for child in (i for i in range(N) if parents[i] == node):",
                "        u = float(torch.rand(1, generator=generator))\n        for child in (i for i in range(N) if parents[i] == node):",
            ),
            ("if float(torch.rand(1, generator=generator)) < accept:", "if u < accept:"),
        ),
        first="test_verify_tree_sampled_distribution_draws",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "one uniform draw per round, shared by every child tried at every node",
        P(
            "09",
            "verify_tree_sampled",
            (
                "    path, node = [], -1\n",
                "    path, node = [], -1\n    u = float(torch.rand(1, generator=generator))\n",
            ),
            ("if float(torch.rand(1, generator=generator)) < accept:", "if u < accept:"),
        ),
        first="test_verify_tree_sampled_distribution_draws",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "the residual from p, not from p' - q (not chained)",
        P(
            "09",
            "verify_tree_sampled",
            ("residual = (target_p - q_node).clamp(min=0)", "residual = (p[node + 1] - q_node).clamp(min=0)"),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "the greedy walk: children matched against the argmax of p, the argmax after it",
        """
def verify_tree_sampled(parents, tokens, p, q, generator=None):
    parents, tokens = [int(a) for a in parents], [int(t) for t in tokens]
    if len(tokens) != len(parents):
        raise ValueError("tokens: one per node")
    path, node = [], -1
    while True:
        want = int(p[node + 1].argmax())
        child = next((i for i in range(len(parents)) if parents[i] == node and tokens[i] == want), None)
        if child is None:
            return path, want
        path.append(child)
        node = child
""",
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "the next token after rejected children drawn from p, not from the residual",
        P(
            "09",
            "verify_tree_sampled",
            ("return path, int(sample(target_p, generator))", "return path, int(sample(p[node + 1], generator))"),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "the residual not normalised before the next child is tried",
        P(
            "09",
            "verify_tree_sampled",
            ("target_p = residual / residual.sum() if residual.sum() > 0 else target_p", "target_p = residual"),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "q's row of the node itself, q[node] (q[-1] for the root), not the row its children came from",
        P(
            "09",
            "verify_tree_sampled",
            ("target_p, q_node = p[node + 1], q[node + 1]", "target_p, q_node = p[node + 1], q[node]"),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "p's row of the parent, p[node] (p[-1] for the root), not the row after the node",
        P(
            "09",
            "verify_tree_sampled",
            ("target_p, q_node = p[node + 1], q[node + 1]", "target_p, q_node = p[node], q[node + 1]"),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "only the first child of a node tried (a chain with the tree's width spent for nothing)",
        P(
            "09",
            "verify_tree_sampled",
            (
                "for child in (i for i in range(N) if parents[i] == node):",
                "for child in [i for i in range(N) if parents[i] == node][:1]:",
            ),
        ),
        first="test_verify_tree_sampled_distribution",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "rows of p and q not checked to be distributions",
        P("09", "verify_tree_sampled", ("if not (bool((t >= 0).all())", "if False and not (bool((t >= 0).all())")),
        first="test_verify_tree_sampled_bad_input",
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "token ids outside [0, V) not refused (an IndexError instead of a ValueError)",
        P("09", "verify_tree_sampled", ("if any(not 0 <= t < V for t in tokens):", "if False:")),
        first="test_verify_tree_sampled_bad_input",
    ),
]

CORRECT += [
    Case(
        "09",
        "tree_mask",
        "ancestors walked up one by one, positions from a depth loop",
        '''
def tree_mask(parents, prefix_len):
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 1:
        raise ValueError(f"prefix_len must be an int >= 1, got {prefix_len!r}")
    par = list(map(int, parents))
    for i, a in enumerate(par):
        if a < -1 or a >= i:
            raise ValueError(f"parents: node {i} has parent {a}")
    n = len(par)
    mask = torch.zeros((n, prefix_len + n), dtype=torch.bool)
    pos = torch.empty(n, dtype=torch.long)
    for i in range(n):
        mask[i, :prefix_len] = True
        j, depth = i, 0
        while j != -1:
            mask[i, prefix_len + j] = True
            j, depth = par[j], depth + 1
        pos[i] = prefix_len - 1 + depth
    return mask, pos
''',
    ),
    Case(
        "09",
        "verify_tree_greedy",
        "children listed once, walked with a dict",
        '''
def verify_tree_greedy(parents, tokens, target_next):
    parents, tokens, target_next = (list(map(int, x)) for x in (parents, tokens, target_next))
    if any(not -1 <= a < i for i, a in enumerate(parents)):
        raise ValueError("parents: every parent must come before its child")
    if len(tokens) != len(parents):
        raise ValueError("tokens: one per node")
    if len(target_next) != len(parents) + 1:
        raise ValueError("target_next: one per node plus the root")
    children = {}
    for i, a in enumerate(parents):
        children.setdefault(a, []).append(i)
    path, node = [], -1
    while True:
        match = [c for c in children.get(node, []) if tokens[c] == target_next[node + 1]]
        if not match:
            return path, int(target_next[node + 1])
        node = match[0]
        path.append(node)
''',
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "one uniform per child, a node's drawn all at once before its children are tried",
        P(
            "09",
            "verify_tree_sampled",
            (
                "        for child in (i for i in range(N) if parents[i] == node):      # tried in index order\n",
                "        kids = [i for i in range(N) if parents[i] == node]\n"
                "        for child, u in zip(kids, torch.rand(len(kids), generator=generator).tolist()):\n",
            ),
            ("if float(torch.rand(1, generator=generator)) < accept:", "if u < accept:"),
        ),
    ),
    Case(
        "09",
        "verify_tree_sampled",
        "recursive, in float64 numpy, the next token by torch.multinomial",
        '''
def verify_tree_sampled(parents, tokens, p, q, generator=None):
    par, tok = [int(a) for a in parents], [int(t) for t in tokens]
    n = len(par)
    if any(not -1 <= a < i for i, a in enumerate(par)):
        raise ValueError("parents: each parent must come before its child")
    if len(tok) != n:
        raise ValueError("tokens: one per node")
    if not (torch.is_tensor(p) and p.dim() == 2 and p.shape[0] == n + 1):
        raise ValueError("p: expected N + 1 rows of target probabilities")
    if not (torch.is_tensor(q) and tuple(q.shape) == tuple(p.shape)):
        raise ValueError("q: expected the shape of p")
    P, Q = p.double().numpy(), q.double().numpy()
    for name, m in (("p", P), ("q", Q)):
        if not ((m >= 0).all() and (np.abs(m.sum(axis=1) - 1) <= 1e-3).all()):
            raise ValueError(f"{name}: every row must be a distribution")
    if any(t < 0 or t >= P.shape[1] for t in tok):
        raise ValueError("tokens: ids out of range")
    children = {}
    for i, a in enumerate(par):
        children.setdefault(a, []).append(i)

    def walk(node, path):
        r, qq = P[node + 1], Q[node + 1]
        for c in children.get(node, []):
            x = tok[c]
            u = torch.rand((), generator=generator).item()
            if (qq[x] > 0 and u * qq[x] < r[x]) or (qq[x] == 0 and r[x] > 0):
                return walk(c, path + [c])
            left = np.maximum(r - qq, 0.0)
            if left.sum() > 0:
                r = left / left.sum()
        return path, int(torch.multinomial(torch.from_numpy(r), 1, generator=generator))

    return walk(-1, [])
''',
    ),
]


def _id(case):
    return f"{case.prefix}-{case.part}-{case.what[:40]}"


ALL_PARTS = [(prefix, part) for prefix in NOTEBOOKS for part in parts(prefix)]


WRONG += [
    # 12: the experts a pass reads, the bits each read is at
    Case(
        "12",
        "expected_experts",
        "experts counted per token (r M, capped at E), not distinct",
        P("12", "expected_experts", ("return float(E * (1.0 - (1.0 - r / E) ** M))", "return float(min(E, r * M))")),
    ),
    Case(
        "12",
        "moe_step_seconds",
        "the KV cache read at the weights' bits",
        P(
            "12",
            "moe_step_seconds",
            (
                'attention = roofline(batch * context * spec["kv_bytes_per_token"],',
                'attention = roofline(batch * context * spec["kv_bytes_per_token"] * spec["dense_bits"] '
                '/ spec["kv_bits"],',
            ),
        ),
    ),
    Case(
        "12",
        "moe_step_seconds",
        "every expert read whatever the pass routes (a dense read)",
        P(
            "12",
            "moe_step_seconds",
            ('expected_experts(spec["experts"], spec["experts_per_token"], m)', 'spec["experts"]'),
        ),
    ),
    Case(
        "12",
        "moe_step_seconds",
        "shared experts missed (only the routed experts read and multiplied)",
        P(
            "12",
            "moe_step_seconds",
            ('(routed + spec["shared_experts"])', "routed"),
            ('(spec["experts_per_token"] + spec["shared_experts"])', 'spec["experts_per_token"]'),
        ),
    ),
    Case(
        "12",
        "moe_step_seconds",
        "one token's experts read whatever the pass (the premise of 01-11)",
        P(
            "12",
            "moe_step_seconds",
            (
                'expected_experts(spec["experts"], spec["experts_per_token"], m)',
                'expected_experts(spec["experts"], spec["experts_per_token"], batch)',
            ),
        ),
    ),
    Case(
        "12",
        "pays_most_and_stops",
        "the first paying batch as the last",
        P(
            "12",
            "pays_most_and_stops",
            ("return best, (max(paying) if paying else None)", "return best, (min(paying) if paying else None)"),
        ),
    ),
]


@pytest.mark.parametrize("prefix,part", ALL_PARTS, ids=[f"{p}-{q}" for p, q in ALL_PARTS])
def test_the_solution_passes_every_test_cell_of_its_part(prefix, part):
    t0 = time.perf_counter()
    assert run_part(prefix, part) == [], f"{prefix} {part}: the unmodified solution fails"
    print(f"{prefix} {part}: {time.perf_counter() - t0:.1f} s")


@pytest.mark.parametrize("case", CORRECT, ids=[_id(c) for c in CORRECT])
def test_a_correct_implementation_written_differently_passes(case):
    failures = run_part(case.prefix, case.part, case.text())
    assert failures == [], f"{case.prefix} {case.part}: '{case.what}' is correct but fails {failures}"


# ------------------------------------------------------------------------------------ fairness, by inspection
def _hidden_blocks(prefix):
    for cell in notebook(prefix).cells:
        g = _grading(cell)
        if cell.cell_type == "code" and g.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            a = cell.source.index("### BEGIN HIDDEN TESTS")
            b = cell.source.index("### END HIDDEN TESTS")
            yield g["grade_id"], cell.source[a:b]


def _is_rule(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("rule: ")


@pytest.mark.parametrize("prefix", NOTEBOOKS)
def test_every_hidden_assert_carries_a_literal_rule_label(prefix):
    """Hidden asserts (and hidden `raise AssertionError(...)`) fail with a fixed "rule: ..." string: no f-string,
    no hidden input or expected value in the message."""
    bad = []
    for grade_id, block in _hidden_blocks(prefix):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Assert) and not _is_rule(node.msg):
                bad.append(f"{grade_id} line {node.lineno}: assert without a literal rule label")
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and getattr(node.exc.func, "id", "") == "AssertionError"
            ):
                if len(node.exc.args) != 1 or not _is_rule(node.exc.args[0]):
                    bad.append(f"{grade_id} line {node.lineno}: raise AssertionError without a literal rule label")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("prefix", NOTEBOOKS)
def test_message_checks_use_word_boundaries(prefix):
    """`"k" in str(e)` passes for any message containing the letter k: test cells use re.search(r"\\bk\\b", ...)."""
    bad = [
        _grading(c)["grade_id"]
        for c in notebook(prefix).cells
        if c.cell_type == "code" and _grading(c).get("grade") and re.search(r"\bin str\(e\)", c.source)
    ]
    assert not bad, f"{prefix}: substring checks of an error message in {bad}"


# ----------------------------------------------------------------------------- the rule a wrong answer breaks
def _contract_rules(prefix):
    from nbhelpers import parse_contract

    return {rule for part in parse_contract()[NOTEBOOKS[prefix]].values() for rule in part["rules"]}


@pytest.mark.parametrize("case", WRONG, ids=[_id(c) for c in WRONG])
def test_a_wrong_implementation_fails_a_test_of_its_part_and_is_told_which_rule(case):
    """The wrong implementation fails a test of its part; what `check` shows for the first failing test is the
    visible line, or the label of the hidden rule (one of docs/contract.md's for that notebook), found from the
    failing line as the grader finds it. (One run of the part per case.)"""
    from autograde.outcomes import RULE_PREFIX

    failures = run_part(case.prefix, case.part, case.text(), first=case.first, stop_at_first_failure=True)
    assert failures, f"{case.prefix} {case.part}: passes every test although it is wrong: {case.what}"
    print(f"{case.prefix} {case.part}: '{case.what}' fails {failures[0][0]}: {failures[0][1][:120]}")
    failure = failures[0]
    test = TestCell(failure.grade_id, 1.0, dict(part_test_cells(case.prefix, case.part))[failure.grade_id])
    assert failure.line, f"{case.what}: no line of {failure.grade_id} in the traceback"
    if failure.line <= test.visible_lines:
        assert test.line(failure.line), f"{case.what}: fails a visible line, which check shows"
        return
    said = failure.message[len(RULE_PREFIX) :].strip() if failure.message.startswith(RULE_PREFIX) else ""
    label = said if said in test.rules else test.rule_at(failure.line)
    assert label, f"{case.what}: fails line {failure.line} of {failure.grade_id}, which names no rule"
    assert label in _contract_rules(case.prefix), f"{case.what}: rule {label!r} is not in docs/contract.md"


# the four modelling errors a reviewer of notebook 07's step model looks for: each breaks a hidden rule by itself
# (run without the visible lines of the test cells, which catch most of them first)
MODEL_ERRORS_07 = {
    "one max over the terms instead of their sum (kernels overlapped)": "step_seconds is the sum of the terms (dependent kernels), not one max",
    "the input embedding counted as streamed": "the input embedding is not streamed (only layer_bytes and lm_head_bytes are read)",
    "KV re-read per query position (batch expansion where the multi-query kernel is stated)": "each sequence's KV is read once per step for all its queries (a multi-query verify kernel)",
    "tensor parallelism without the all-reduce term": "tensor parallelism: two all-reduces per layer (latency + ring transfer)",
}


@pytest.mark.parametrize("what", sorted(MODEL_ERRORS_07))
def test_each_step_model_error_of_07_breaks_its_own_hidden_rule(what):
    """Run through test_step_seconds' judge alone (not the cell's visible lines, which catch most of them first)."""
    from autograde.judges import nb07
    from autograde.outcomes import RULE_PREFIX

    case = next(c for c in WRONG if c.prefix == "07" and c.what == what)
    ns = namespace("07", {case.part: case.text()})
    with pytest.raises(AssertionError) as failed:
        nb07.test_step_seconds(LocalProbe(ns), np.random.default_rng([JUDGE_SEED, 0]))
    message = str(failed.value)
    assert message.startswith(RULE_PREFIX), f"{what}: fails without a rule label: {message[:120]}"
    assert message[len(RULE_PREFIX) :].strip() == MODEL_ERRORS_07[what], f"{what}: fails {message!r}"


def test_a_gate_that_ignores_the_drafts_memory_is_told_the_memory_rule():
    """A learner's 10 gate that checked memory without the draft was told "return a plain int": the error its
    best_k_for_batch raised at a state that only fits without the draft came before the next labelled statement.
    Judged outside the kernel, the failure names the memory rule and says what came back (the error raised)."""
    from autograde.judge import Broken
    from autograde.judges import nb10

    wrong = patched(
        "10",
        "gate_k",
        (
            "if not fits_in_memory(target, draft, gpu, batch, context):",
            "if not fits_in_memory(target, None, gpu, batch, context):",
        ),
    )
    ns = namespace("10", {"gate_k": wrong})
    with pytest.raises(Broken) as failed:
        nb10.test_gate_k(LocalProbe(ns), np.random.default_rng([JUDGE_SEED, 0]))
    assert str(failed.value) == "rule: 0 when the state does not fit in memory with the draft", failed.value
    assert failed.value.came_back == "raised ValueError", failed.value.came_back


# ---------------------------------------------------------------------- partial credit: a slip costs its rule
# Every test cell is worth 1 point and checks one group of rules. Each slip below is one plausible mistake in one
# rule of a part's solution: (notebook, part, what, old text, new text, the test cells it must fail). It must fail
# exactly those cells, and the part's other cells must still pass, so the slip costs those points and no more.
ONE_RULE_SLIPS = [
    (
        '12',
        'pays_most_and_stops',
        'a speedup of exactly 1 counted as not paying (> 1, not >= 1)',
        'paying = [b for b, s in zip(batches, speed) if s >= 1.0]',
        'paying = [b for b, s in zip(batches, speed) if s > 1.0]',
        {'test_pays_most_and_stops'},
    ),
    (
        '12',
        'expected_experts',
        'r > E accepted (the formula goes negative)',
        'if r > E:',
        'if r > E and False:',
        {'test_expected_experts_bad_input'},
    ),
    (
        '12',
        'moe_step_seconds',
        "the KV cache read at the weights' bits",
        'attention = roofline(batch * context * spec["kv_bytes_per_token"],',
        'attention = roofline(batch * context * spec["kv_bytes_per_token"] * spec["dense_bits"] / spec["kv_bits"],',
        {'test_moe_step_seconds_bits'},
    ),
    (
        '01',
        'weight_bytes',
        'tied embeddings still counted as a separate LM head',
        'lm_head = 0 if cfg["tie_word_embeddings"] else embedding',
        'lm_head = embedding',
        {'test_weight_bytes_models'},
    ),
    (
        '01',
        'weight_bytes',
        'returns a NumPy integer',
        'return params * bytes_per_param',
        'return np.int64(params) * bytes_per_param',
        {'test_weight_bytes'},
    ),
    (
        '01',
        'ridge_point',
        'returns a NumPy float',
        'return float(flops / bandwidth)',
        'return np.float64(flops) / bandwidth',
        {'test_ridge_point'},
    ),
    (
        '01',
        'ridge_point',
        'flops = 0 accepted (only negative rejected)',
        'if not flops > 0:',
        'if flops < 0:',
        {'test_ridge_point_bad_input'},
    ),
    (
        '01',
        'kv_bytes_per_token',
        'head_dim from the config ignored',
        'head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]',
        'head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]',
        {'test_kv_bytes_per_token'},
    ),
    (
        '01',
        'kv_bytes_per_token',
        'bytes_per_elem = 0 accepted (only negative rejected)',
        'if not bytes_per_elem > 0:',
        'if bytes_per_elem < 0:',
        {'test_kv_bytes_per_token_bad_input'},
    ),
    (
        '01',
        'decode_step_seconds',
        'KV bytes forgotten',
        'return float((weight_bytes + kv_bytes) / bandwidth)',
        'return float(weight_bytes / bandwidth)',
        {'test_decode_step_seconds'},
    ),
    (
        '01',
        'decode_step_seconds',
        'a negative bandwidth accepted (only 0 rejected)',
        'if not bandwidth > 0:',
        'if bandwidth == 0:',
        {'test_decode_step_seconds_bad_input'},
    ),
    (
        '02',
        'width_where_cost_grows',
        "bytes_per_param truncated to an int (int4's 0.5 lost)",
        'return float(ridge * bytes_per_param / 2)',
        'return float(ridge * int(bytes_per_param) / 2)',
        {'test_width_where_cost_grows_byte_widths'},
    ),
    (
        '02',
        'width_where_cost_grows',
        'a negative bytes_per_param accepted (only 0 rejected)',
        'if not bytes_per_param > 0:',
        'if bytes_per_param == 0:',
        {'test_width_where_cost_grows_bad_input'},
    ),
    (
        '02',
        'predicted_cost_ratio',
        "the batch forgotten in the verify step's tokens",
        'max(1.0, batch * width / w_star)',
        'max(1.0, width / w_star)',
        {'test_predicted_cost_ratio_batch'},
    ),
    (
        '02',
        'predicted_cost_ratio',
        'a width below 1 accepted',
        'if not width >= 1:',
        'if not width > 0:',
        {'test_predicted_cost_ratio_bad_input'},
    ),
    (
        '03',
        'expected_tokens',
        'the alpha = 1 case forgotten (0 / 0)',
        '    if alpha == 1.0:\n        return float(k + 1)\n',
        '',
        {'test_expected_tokens_edges'},
    ),
    (
        '03',
        'expected_tokens',
        'a NaN alpha accepted (range checked with < and >)',
        'if not 0 <= alpha <= 1:',
        'if alpha < 0 or alpha > 1:',
        {'test_expected_tokens_bad_input'},
    ),
    (
        '03',
        'simulate_tokens_per_round',
        'every accepted draft counted, not the prefix before the first rejection',
        'np.cumprod(accepted, axis=1).sum(axis=1)',
        'accepted.sum(axis=1)',
        {'test_simulate_tokens_per_round'},
    ),
    (
        '03',
        'simulate_tokens_per_round',
        'n_rounds >= 1 not checked',
        ' or n_rounds < 1:',
        ':',
        {'test_simulate_tokens_per_round_bad_input'},
    ),
    ('03', 'speedup', 'k + 1 draft steps counted per round', 'k * c + 1.0', '(k + 1) * c + 1.0', {'test_speedup'}),
    ('03', 'speedup', 'a NaN c accepted (checked as c < 0)', 'if not c >= 0:', 'if c < 0:', {'test_speedup_bad_input'}),
    ('03', 'best_k', 'ties go to the largest k', 'if value > best_value:', 'if value >= best_value:', {'test_best_k'}),
    ('03', 'best_k', 'k_max < 1 not rejected', ' or k_max < 1:', ':', {'test_best_k_bad_input'}),
    (
        '04',
        'verify',
        'negative draft ids not rejected (only the upper bound checked)',
        '0 <= int(draft_tokens.min()) and ',
        '',
        {'test_verify_bad_input'},
    ),
    (
        '04',
        'speculative_generate',
        "per_round records k, not the shortened last round's k",
        'stats["per_round"].append((k_round, n))',
        'stats["per_round"].append((k, n))',
        {'test_speculative_generate_stats'},
    ),
    (
        '05',
        'estimate_alpha',
        'one k assumed: every round compared with the longest draft of all rounds',
        'if n < k)',
        'if n < max(drafted))',
        {'test_estimate_alpha_formula'},
    ),
    (
        '05',
        'round_terms',
        "no line through one point: c as the mean of each k's cost per token, not pooled",
        'c, c_round = sum(p["propose_seconds"] for p in profile.values()) / drafted / token_seconds, 0.0',
        'c, c_round = sum(p["propose_seconds"] / max(p["drafted"], 1) for p in profile.values()) / len(profile) / token_seconds, 0.0',
        {'test_round_terms_formula'},
    ),
    (
        '05',
        'predicted_speedup',
        'E(alpha, k) inline without the alpha = 1 case',
        'return float(expected_tokens(alpha, k) / cost)',
        'return float((1 - alpha ** (k + 1)) / (1 - alpha) / cost)',
        {'test_predicted_speedup_formula'},
    ),
    (
        '05',
        'predicted_speedup',
        'v read at the longest measured draft length instead of at k',
        'terms["v"][k] + terms["o"]',
        'terms["v"][max(terms["v"])] + terms["o"]',
        {'test_predicted_speedup_formula'},
    ),
    (
        '05',
        'ngram_propose',
        'no overlap between the match and the suffix',
        'windows = tokens[:L - 1].unfold(0, n, 1)',
        'windows = tokens[:max(L - n, 0)].unfold(0, n, 1) if L >= 2 * n else tokens.new_empty(0, n)',
        {'test_ngram_propose_matches'},
    ),
    (
        '06',
        'roofline_step_seconds',
        'compute time not split across the GPUs',
        'compute_s = 2 * weight_bytes(cfg, 1) * tokens / (n_gpus * gpu.flops_per_s)',
        'compute_s = 2 * weight_bytes(cfg, 1) * tokens / gpu.flops_per_s',
        {'test_roofline_step_seconds'},
    ),
    (
        '06',
        'roofline_step_seconds',
        'tokens 0 accepted',
        'if not tokens >= 1:',
        'if not tokens >= 0:',
        {'test_roofline_step_seconds_bad_input'},
    ),
    (
        '06',
        'spec_tokens_per_second',
        'a negative draft_step_floor_s accepted',
        '    if not draft_step_floor_s >= 0:\n        raise ValueError(f"draft_step_floor_s must be >= 0 seconds, got {draft_step_floor_s}")\n',
        '',
        {'test_spec_tokens_per_second_bad_input'},
    ),
    (
        '06',
        'spec_tokens_per_second',
        'the verify step over k tokens, not k + 1',
        'tokens=k + 1',
        'tokens=k',
        {'test_spec_tokens_per_second', 'test_spec_tokens_per_second_no_floor'},
    ),
    (
        '06',
        'memory_needed_bytes',
        'the KV cache of one sequence, not of the batch',
        'batch * context * kv_bytes_per_token(cfg)',
        'context * kv_bytes_per_token(cfg)',
        {'test_memory_needed_bytes'},
    ),
    (
        '06',
        'memory_needed_bytes',
        'batch 0 accepted',
        'if not batch >= 1:',
        'if not batch >= 0:',
        {'test_memory_needed_bytes_bad_input'},
    ),
    (
        '06',
        'max_concurrent_sequences',
        'rounded to the nearest, not down',
        'int(math.floor(free / (context * kv_bytes_per_token_total)))',
        'int(round(free / (context * kv_bytes_per_token_total)))',
        {'test_max_concurrent_sequences_whole'},
    ),
    (
        '06',
        'max_concurrent_sequences',
        'a negative count when the weights do not fit',
        'if free <= 0:\n        return 0\n    ',
        '',
        {'test_max_concurrent_sequences_whole'},
    ),
    (
        '07',
        'step_seconds',
        'the fixed cost per step, not per layer',
        'gpu.fixed_s + (gpu.fixed_s_per_layer * model["layers"] if',
        'gpu.fixed_s + (gpu.fixed_s_per_layer if',
        {'test_step_seconds_parallel'},
    ),
    (
        '07',
        'step_seconds',
        'a ring all-reduce without the (n - 1) / n factor',
        '2 * (n - 1) / n * message',
        '2 * message',
        {'test_step_seconds_parallel'},
    ),
    (
        '07',
        'step_seconds',
        'tokens 2.5 accepted (no integer check)',
        'isinstance(tokens, bool) or not isinstance(tokens, numbers.Integral) or tokens < 1',
        'tokens < 1',
        {'test_step_seconds_bad_input'},
    ),
    (
        '07',
        'spec_speedup',
        "the draft's steps on the target's GPUs, not draft_gpus(gpu)",
        'dg = draft_gpus(gpu)',
        'dg = gpu',
        {'test_spec_speedup_draft'},
    ),
    (
        '07',
        'spec_speedup',
        'no ValueError when the state does not fit in memory',
        '    if not fits_in_memory(target, draft, gpu, batch, context):\n        raise ValueError(f"batch {batch} x context {context} tokens does not fit in memory: "\n                         f"{memory_needed_bytes(target, draft, batch, context) / 1e9:.1f} GB needed")\n',
        '',
        {'test_spec_speedup_bad_input'},
    ),
    (
        '07',
        'break_even_batch',
        'the tie rule: a speedup of exactly 1 counted as paying',
        'sampler_passes, c_step) > 1.0',
        'sampler_passes, c_step) >= 1.0',
        {'test_break_even_batch'},
    ),
    (
        '07',
        'break_even_batch',
        'no ValueError when not even one sequence fits',
        'if fits < 1:',
        'if fits < 0:',
        {'test_break_even_batch_bad_input'},
    ),
    (
        '08',
        'round_cost_ratio',
        "the draft's steps on the target's GPUs, not draft_gpus(gpu)",
        'dg = draft_gpus(gpu)',
        'dg = gpu',
        {'test_round_cost_ratio_draft_gpus'},
    ),
    (
        '08',
        'round_cost_ratio',
        'no ValueError when the state does not fit in memory',
        '    if not fits_in_memory(target, draft, gpu, batch, context):\n        raise ValueError(f"batch {batch} x context {context} tokens does not fit in memory")\n',
        '',
        {'test_round_cost_ratio_bad_input'},
    ),
    (
        '08',
        'break_even_alpha',
        'a cost ratio of exactly 1 bisected, not 0.0',
        'if cost_ratio <= 1:',
        'if cost_ratio < 1:',
        {'test_break_even_alpha_zero'},
    ),
    (
        '08',
        'break_even_alpha',
        'a cost ratio of exactly k + 1 raises instead of giving 1.0',
        'if cost_ratio > k + 1:',
        'if cost_ratio >= k + 1:',
        {'test_break_even_alpha_top'},
    ),
    (
        '08',
        'speedup_from_times',
        'the round and plain times swapped',
        'plain_step_s / round_s)',
        'round_s / plain_step_s)',
        {'test_speedup_from_times'},
    ),
    (
        '08',
        'speedup_from_times',
        'no ValueError for a round time <= 0',
        '    if not round_s > 0:\n        raise ValueError(f"round_s must be > 0 seconds, got {round_s}")\n',
        '',
        {'test_speedup_from_times_bad_input'},
    ),
    (
        '08',
        'check_claim',
        'break-even judged by one speedup near 1, not over the range',
        'holds = min(speedups) <= 1 + tolerance and max(speedups) >= 1 - tolerance',
        'holds = any(abs(s - 1) <= tolerance for s in speedups)',
        {'test_check_claim'},
    ),
    (
        '08',
        'check_claim',
        'the order of round_s_range not checked',
        'not 0 < round_s_range[0] <= round_s_range[1]',
        'not 0 < round_s_range[0]',
        {'test_check_claim_bad_input'},
    ),
    (
        '08',
        'best_k_for_batch',
        'ties go to the largest k',
        'if value > best_value:',
        'if value >= best_value:',
        {'test_best_k_for_batch'},
    ),
    (
        '08',
        'deployment_plan',
        'the shares not normalised by their total',
        'share / total / speedups[state]',
        'share / speedups[state]',
        {'test_deployment_plan_fleet'},
    ),
    (
        '08',
        'deployment_plan',
        'no ValueError when the shares total 0',
        '    if not total > 0:\n        raise ValueError("states must have a positive total share")\n',
        '',
        {'test_deployment_plan_bad_input'},
    ),
    (
        '09',
        'tree_mask',
        'positions off by one (prefix_len + depth)',
        'torch.tensor(depth, dtype=torch.long) + prefix_len - 1',
        'torch.tensor(depth, dtype=torch.long) + prefix_len',
        {'test_tree_mask_positions'},
    ),
    (
        '09',
        'verify_tree_greedy',
        'the length of target_next not checked',
        '    if len(target_next) != N + 1:\n        raise ValueError(f"target_next must hold N + 1 = {N + 1} ids, got {len(target_next)}")\n',
        '',
        {'test_verify_tree_greedy_bad_input'},
    ),
    (
        '09',
        'verify_tree_sampled',
        'token ids not checked against the vocabulary',
        '    if any(not 0 <= t < V for t in tokens):\n        raise ValueError(f"tokens must be ids in [0, {V}), got {tokens}")\n',
        '',
        {'test_verify_tree_sampled_bad_input'},
    ),
    (
        '09',
        'choose_path',
        'a step equal to the budget left out',
        'fits = [r for r in rows if r["step"] <= budget]',
        'fits = [r for r in rows if r["step"] < budget]',
        {'test_choose_path_budget_and_domains'},
    ),
    (
        '09',
        'choose_path',
        'a budget of 0 accepted',
        'or not budget > 0:',
        'or budget < 0:',
        {'test_choose_path_bad_input'},
    ),
    (
        '09',
        'rule_k',
        'the largest k on a tie',
        'best = max(speed, key=lambda k: (speed[k], -k))',
        'best = max(speed, key=lambda k: (speed[k], k))',
        {'test_rule_k'},
    ),
    (
        '09',
        'rule_k',
        'never off: the best k even where it does not pay',
        'return best if speed[best] > 1 else 0',
        'return best',
        {'test_rule_k_off'},
    ),
    (
        '09',
        'rule_k',
        'a prediction of exactly 1 counted as paying',
        'return best if speed[best] > 1 else 0',
        'return best if speed[best] >= 1 else 0',
        {'test_rule_k_off'},
    ),
    (
        '10',
        'run_seconds',
        'the times returned as NumPy floats',
        'return float(plain), float(speculative)',
        'return np.float64(plain), np.float64(speculative)',
        {'test_run_seconds_plain'},
    ),
    (
        '10',
        'run_seconds',
        'k = 1 priced with one one-token draft step too many',
        '(k - 1) * draft_s(B, 1)',
        'max(k - 1, 1) * draft_s(B, 1)',
        {'test_run_seconds_speculative'},
    ),
    (
        '10',
        'crossing',
        'the last fall through 1, not the first',
        'for a, b in zip(bs, bs[1:]):',
        'for a, b in reversed(list(zip(bs, bs[1:]))):',
        {'test_crossing_none_and_bad_input'},
    ),
    (
        '10',
        'crossing',
        'a speedup of exactly 1 at the larger batch not a crossing',
        'if points[a] > 1 >= points[b]:',
        'if points[a] > 1 > points[b]:',
        {'test_crossing'},
    ),
    (
        '10',
        'batched_accept',
        "next_tokens keeps the input's integer dtype (not a LongTensor)",
        'next_tokens = target_argmax.long().gather(',
        'next_tokens = target_argmax.gather(',
        {'test_batched_accept'},
    ),
    (
        '10',
        'rollback',
        'lengths cut by k + 1 - n_accepted (off by one)',
        'return new_mask, lengths - (k - n_accepted)',
        'return new_mask, lengths - (k + 1 - n_accepted)',
        {'test_rollback_lengths'},
    ),
    (
        '10',
        'serving_metrics',
        'a request exactly at an SLO bound misses it',
        'good = (ttft <= ttft_slo) & (tpot <= tpot_slo)',
        'good = (ttft < ttft_slo) & (tpot < tpot_slo)',
        {'test_serving_metrics_rates'},
    ),
    (
        '10',
        'gate_k',
        'memory checked without the draft',
        'if not fits_in_memory(target, draft, gpu, batch, context):',
        'if not fits_in_memory(target, None, gpu, batch, context):',
        {'test_gate_k'},
    ),
    (
        '11',
        'acceptance_from_counters',
        'the acceptance rate over D * k, not the draft tokens (short drafts ignored)',
        '"acceptance_rate": float(accepted / draft_tokens)',
        '"acceptance_rate": float(accepted / (drafts * k))',
        {'test_acceptance_from_counters_edges'},
    ),
    (
        '11',
        'acceptance_from_counters',
        'tau returned as a NumPy float',
        '"tau": float(1 + accepted / drafts)',
        '"tau": np.float64(1 + accepted / drafts)',
        {'test_acceptance_from_counters'},
    ),
    (
        '11',
        'trace_from_stream',
        'chunks counted, not tokens',
        'finish, tokens = when, tokens + int(n)',
        'finish, tokens = when, tokens + 1',
        {'test_trace_from_stream_tokens'},
    ),
    (
        '11',
        'trace_from_stream',
        'token counts summed as floats',
        'finish, tokens = when, tokens + int(n)',
        'finish, tokens = when, tokens + float(n)',
        {'test_trace_from_stream'},
    ),
]


def _points(prefix, part):
    return {
        c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
        for c in notebook(prefix).cells
        if c.cell_type == "code"
        and _grading(c).get("grade")
        and not _grading(c).get("solution")
        and c.metadata["nbgrader"]["grade_id"] in dict(part_test_cells(prefix, part))
    }


@pytest.mark.parametrize("slip", ONE_RULE_SLIPS, ids=[f"{s[0]}-{s[1]}-{s[2][:40]}" for s in ONE_RULE_SLIPS])
def test_a_one_rule_slip_loses_only_that_rules_points(slip):
    prefix, part, what, old, new, expected = slip
    points = _points(prefix, part)
    assert set(expected) <= set(points), (
        f"{prefix} {part}: {set(expected) - set(points)} are not test cells of the part"
    )
    failing = {f.grade_id for f in run_part(prefix, part, patched(prefix, part, (old, new)))}
    lost, total = sum(points[g] for g in failing), sum(points.values())
    print(f"{prefix} {part}: '{what}' fails {sorted(failing)}: {total - lost:g} of {total:g} points")
    assert failing, f"{prefix} {part}: '{what}' passes every test cell"
    assert failing == set(expected), f"{prefix} {part}: '{what}' fails {sorted(failing)}, expected {sorted(expected)}"
    assert lost < total, f"{prefix} {part}: '{what}' loses the whole part"


def test_every_notebook_shows_a_slip_that_costs_only_its_rule():
    """Each notebook with a part of several test cells has at least one slip above."""
    several = {prefix for prefix in NOTEBOOKS if any(len(part_test_cells(prefix, p)) > 1 for p in parts(prefix))}
    shown = {slip[0] for slip in ONE_RULE_SLIPS}
    assert several <= shown, f"no one-rule slip for notebooks {sorted(several - shown)}"


def _raising_stub(source):
    """The solution cell with every function's body replaced by `raise ValueError(...)` naming all its arguments:
    no implementation at all, only the one answer a bad-input rule wants."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
            node.body = [ast.parse(f"raise ValueError({'bad input: ' + ', '.join(names)!r})").body[0]]
    return ast.unparse(tree)


@pytest.mark.parametrize("prefix", sorted(NOTEBOOKS))
def test_a_stub_that_raises_valueerror_on_everything_earns_no_cell(prefix):
    """Issue 77: with no implementation at all, functions that raise ValueError naming every argument earned the
    bad-input cells (09 5 of 21, 10 4/16, 11 4/10, 08 3/17, 07 1/16). A bad-input cell now also calls the
    function on valid input and wants an answer (`autograde.judge.answered`), so the stub earns nothing."""
    stubs = {part: _raising_stub(solution_source(prefix, part)) for part in parts(prefix)}
    ns = namespace(prefix, stubs)
    earned = []
    for part in parts(prefix):
        for grade_id, cell_source in part_test_cells(prefix, part):
            test = TestCell(grade_id, 1.0, cell_source)
            try:
                exec(compile(visible_part(cell_source)[0] if test.judge else cell_source, grade_id, "exec"), dict(ns))
                if test.judge:
                    judge_of(test)(LocalProbe(ns), np.random.default_rng([JUDGE_SEED, 0]))
            except Exception:  # noqa: BLE001  (an assert or the stub's ValueError: the cell fails)
                continue
            earned.append(grade_id)
    assert not earned, f"{prefix}: a stub that raises ValueError on everything passes {earned}"


SHAPES_ONLY_09 = {
    "tree_mask": '''
def tree_mask(parents, prefix_len):
    n = len(parents)
    return torch.zeros((n, prefix_len + n), dtype=torch.bool), torch.zeros(n, dtype=torch.long)
''',
    "verify_tree_greedy": '''
def verify_tree_greedy(parents, tokens, target_next):
    return [], 0
''',
}


@pytest.mark.parametrize("part", sorted(SHAPES_ONLY_09))
def test_an_answer_of_the_right_types_only_earns_nothing_in_09(part):
    """Issue 77: zeros of the right shape from `tree_mask` and `([], 0)` from `verify_tree_greedy` earned their
    types cells (15 of 21 where 13 is fair). The types cells now also check the values the contract fixes for any
    tree, loosely (each row attends somewhere, positions past the sequence; a chain from the root, a bonus among
    target_next's ids), so these answers earn no cell of their part."""
    cells = {grade_id for grade_id, _ in part_test_cells("09", part)}
    failing = {f.grade_id for f in run_part("09", part, SHAPES_ONLY_09[part])}
    assert f"test_{part}_types" in cells
    assert failing == cells, f"09 {part}: an answer of the right types only passes {sorted(cells - failing)}"


# ---------------------------------------------------------------- one slip upstream costs its own part's cells only
# Issue 78: a slip in a function that later parts call (12's expected_experts and moe_step_seconds, 07's step_seconds
# and line_speedup, 08's speedup_from_times and best_k_for_batch) cost the later parts' points too (12 A's r M 9
# points). A downstream judge now passes an answer that is right on the learner's own upstream values
# (`autograde.judge.own_numbers`), and the visible checks downstream test the downstream rule only.
UPSTREAM_SLIPS = [
    # (notebook, part, the slip, (old, new) in the solution, the cells of its own part it fails)
    (
        "12",
        "expected_experts",
        "experts counted per token (r M, capped at E), not distinct",
        ("return float(E * (1.0 - (1.0 - r / E) ** M))", "return float(min(E, r * M))"),
        {"test_expected_experts", "test_expected_experts_distinct"},
    ),
    (
        "12",
        "moe_step_seconds",
        "the KV cache read at the weights' bits",
        (
            'attention = roofline(batch * context * spec["kv_bytes_per_token"],',
            'attention = roofline(batch * context * spec["kv_bytes_per_token"] * spec["dense_bits"] / spec["kv_bits"],',
        ),
        {"test_moe_step_seconds_bits"},
    ),
    (
        "12",
        "moe_step_seconds",
        "dequantisation counted per token, not per weight read",
        (
            '2 * m * active + dequant(spec["expert_bits"]) * read',
            '2 * m * active + m * dequant(spec["expert_bits"]) * read',
        ),
        {"test_moe_step_seconds_bits"},
    ),
    (
        "12",
        "moe_step_seconds",
        "the datasheet peaks where the GPU's attained fractions are due",
        (
            "bw, flops, m = gpu.bandwidth_bytes_per_s * gpu.mbu, gpu.flops_per_s * gpu.mfu, batch * tokens",
            "bw, flops, m = gpu.bandwidth_bytes_per_s, gpu.flops_per_s, batch * tokens",
        ),
        {"test_moe_step_seconds", "test_moe_step_seconds_bits", "test_moe_step_seconds_verify"},
    ),
    (
        "12",
        "moe_step_seconds",
        "one token's experts read whatever the pass",
        (
            'expected_experts(spec["experts"], spec["experts_per_token"], m)',
            'expected_experts(spec["experts"], spec["experts_per_token"], batch)',
        ),
        {"test_moe_step_seconds", "test_moe_step_seconds_bits", "test_moe_step_seconds_verify"},
    ),
    (
        "12",
        "moe_speedup",
        "the verify pass over k tokens, not k + 1",
        ("moe_step_seconds(spec, gpu, batch, context, k + 1)", "moe_step_seconds(spec, gpu, batch, context, k)"),
        {"test_moe_speedup"},
    ),
    (
        "07",
        "line_speedup",
        "the draft's per-token cost without the batch",
        ("(c_round + c_token * batch * k + step(k + 1)))", "(c_round + c_token * k + step(k + 1)))"),
        {"test_line_speedup"},
    ),
    (
        "07",
        "line_speedup",
        "the verify at step(k), not step(k + 1)",
        ("step(k + 1)))", "step(k)))"),
        {"test_line_speedup"},
    ),
    (
        "07",
        "spec_speedup",
        "the draft's first pass read as one token whatever first_draft_tokens says",
        ("step_seconds(draft, dg, batch, context, tokens=first)", "step_seconds(draft, dg, batch, context)"),
        {"test_spec_speedup_draft"},
    ),
    (
        "08",
        "speedup_from_times",
        "the round and plain times swapped",
        ("plain_step_s / round_s)", "round_s / plain_step_s)"),
        {"test_speedup_from_times"},
    ),
    (
        "08",
        "best_k_for_batch",
        "ties go to the largest k",
        ("if value > best_value:", "if value >= best_value and k > 0:"),
        {"test_best_k_for_batch"},
    ),
    (
        "10",
        "batched_accept",
        "counts every matching draft, not the leading ones",
        ("n_accepted = agree.cumprod(dim=1).sum(dim=1)", "n_accepted = agree.sum(dim=1)"),
        {"test_batched_accept", "test_batched_accept_next_tokens"},
    ),
    (
        "10",
        "batched_accept",
        "next token is always the bonus (last) position",
        (".gather(1, n_accepted.view(-1, 1)).view(-1)", "[:, -1].clone()"),
        {"test_batched_accept_next_tokens"},
    ),
]

_SOLVED = {}


def _slipped_failures(prefix, part, replacement):
    """{grade_id: message} of the failing test cells of `part` and every later part, with `part`'s solution slipped:
    the solution's namespace is built once per notebook and the slipped cell run into it (later functions call the
    slipped one, as in the learner's kernel), then put back."""
    if prefix not in _SOLVED:
        _SOLVED[prefix] = namespace(prefix)
    ns, source = _SOLVED[prefix], patched(prefix, part, replacement)
    names = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    saved = {n: ns[n] for n in names}
    exec(compile(source, f"{prefix}:{part}", "exec"), ns)
    try:
        later = parts(prefix)[parts(prefix).index(part) :]
        return {f.grade_id: f.message for f in run_parts(prefix, later, ns=ns)}
    finally:
        ns.update(saved)


@pytest.mark.parametrize("slip", UPSTREAM_SLIPS, ids=[f"{s[0]}-{s[1]}-{s[2][:40]}" for s in UPSTREAM_SLIPS])
def test_an_upstream_slip_costs_its_own_cells_only_and_the_hint_names_its_function(slip):
    from autograde.assignment import load_assignment
    from autograde.explain import functions_of

    prefix, part, what, replacement, own = slip
    failing = _slipped_failures(prefix, part, replacement)
    assert set(failing) == own, f"{prefix} {part}: '{what}' fails {sorted(failing)}, expected {sorted(own)} only"
    assignment = load_assignment(NOTEBOOKS[prefix])
    for grade_id in failing:  # check's hint names the function its test checks, not every function of the part
        home = next(p for p in assignment.parts if grade_id in p.grade_ids)
        test = next(t for t in home.tests if t.grade_id == grade_id)
        assert functions_of(test, home) == [part], f"{grade_id}: the hint would name {functions_of(test, home)}"
