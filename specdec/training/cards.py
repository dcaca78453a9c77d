"""The model card, data/models/README.md: what the pair's report (training.json) and the drafters' report
(drafters.json) say, in prose and tables. specdec.training.train_pair and specdec.training.train_drafters write it
after a run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specdec.training.corpus import portable_path


def file_sha256(path: Path) -> str:
    """sha256 of a file: the target weights that drafters record they were trained for."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# measured once on the shipped pair (seed 0); kept here so a retrain writes the same
# comparison into the card. Rerun a row with its command to check it.
MEASURED_NOTES = """
## Distillation or not (measured, greedy α teacher-forced on the held-out windows)

The draft was trained both ways against the same shipped target, with the same seed and batches:

| draft trained with | tokens | code α | prose α | json α | code / prose / json draft loss | sampled α code / prose / json |
|---|---|---|---|---|---|---|
| KL to the target (shipped) | 1,843,200 | **0.682** | **0.605** | **0.884** | 3.646 / 4.797 / 0.852 | 0.780 / 0.735 / 0.934 |
| cross-entropy, same tokens | 1,843,200 | 0.571 | 0.423 | 0.814 | 3.638 / 4.871 / 0.873 | 0.682 / 0.601 / 0.905 |
| cross-entropy, same CPU time | 3,686,400 | 0.562 | 0.443 | 0.823 | 3.014 / 3.997 / 0.741 | 0.674 / 0.561 / 0.937 |

`python -m specdec.training.train --target-from data/models --draft-loss ce [--draft-steps 900] --out runs/ce`
gives the last two rows. Distillation lifts greedy α by 0.06–0.18 and is kept. Note the last row:
at these budgets a 0.6 M-parameter draft trained on twice the tokens reaches a *lower* held-out
loss than the 5.3 M target, yet agrees with it less. α measures agreement with the target, not
quality, and the target is the reference only because it is the model being served.

On an idle machine (measured before this run, same shapes, 2 threads) a target step takes
1.33 s and a distillation step 0.90 s, so the default command needs about 17 minutes of
training, plus evaluation.

## Copying (measured; the reason prompt lookup gains little with this target)

Teacher-forced on 32 held-out copy-with-edit rows per domain (seed 0) (a 128-token window, a blank line, the
same window with 1–3 tokens replaced; `specdec.training.train.copy_skill`): how often the target's argmax is the
token that repeats the first copy, at the positions where it does.

| target | code | prose | json |
|---|---|---|---|
| shipped (plain windows) | 0.29 | 0.22 | 0.75 |
| `--copy-share 0.25` (a quarter of the rows are copy rows, same steps) | 0.30 | 0.21 | 0.76 |

A model that looks back and copies (an "induction head") would score near 1 on all three; JSON scores
high only because its structure is predictable anyway. Neither target learned to copy in 450 steps (nor did a target trained 200 steps on nothing but
repeated random-token sequences, the classic induction task: its copy accuracy stayed at 0.00), so
the shipped pair keeps the plain recipe (`--copy-share 0`, the default). The copy-trained run reached
greedy α 0.725 / 0.647 / 0.891 (code / prose / json, held-out windows) in 18 minutes on 2 cores.
Notebook 05 measures the consequence: prompt lookup is exact but finds little to copy.
"""


def matching_drafters(out: Path) -> dict | None:
    """drafters.json of `out` when its drafters were trained for the target now in `out`, else None."""
    file = out / "drafters.json"
    if not file.is_file():
        return None
    report = json.loads(file.read_text(encoding="utf-8"))
    if report.get("trained_for", {}).get("target_sha256") != file_sha256(out / "target" / "model.safetensors"):
        return None
    return report


DRAFTER_NAMES = {
    "medusa": "Medusa heads",
    "eagle": "EAGLE feature draft",
    "draft": "separate draft (draft/)",
    "early_exit_1": "early exit, 1 layer",
    "early_exit_2": "early exit, 2 layers",
}


def drafter_card(d: dict) -> str:
    """the drafters' section of the model card, from drafters.json."""
    dr = d["drafters"]

    def name(key):
        return DRAFTER_NAMES.get(key, key)

    cost = "\n".join(
        f"| {name(k)} | {v['params']:,} | {v['steps']} | {v['train_tokens']:,} | {v['seconds']['wall_s']:.0f} | "
        f"{v['seconds']['cpu_s']:.0f} | {_mb(v['disk_bytes'])} |"
        for k, v in dr.items()
    )
    curves = "\n".join(
        f"- {name(k)}: " + ", ".join(f"{s}: {loss:.3f} / {a:.3f}" for s, loss, a in v["curve"]) for k, v in dr.items()
    )

    def tail(curve):  # the held-out loss change over the last sixth of the run
        last = curve[-1]
        ref = [c for c in curve if c[0] <= last[0] - max(1, last[0] // 6)][-1:] or curve[:1]
        ref = ref[0]
        return (
            f"held-out loss {last[1]:.3f} at step {last[0]} ({100 * (last[1] - ref[1]) / ref[1]:+.1f} % over "
            f"the last {last[0] - ref[0]} steps), α {last[2]:.3f}"
        )

    flat = "\n".join(f"- {name(k)}: {tail(v['curve'])}" for k, v in dr.items())
    from specdec.core.drafters import RETRAIN_DRAFTERS

    runs = "\n".join(
        f"{name(k)}: `{v.get('command', d['command'])}`" + ("  " if i + 1 < len(dr) else "")
        for i, (k, v) in enumerate(dr.items())
    )
    domains = list(next(iter(d["eval"].values())))
    rows = "\n".join(
        f"| {name(k)} | {d['added_params'].get(k, 0):,} | "
        + " | ".join(f"{e[dom]['alpha']:.3f} | {e[dom]['tau']:.2f}" for dom in domains)
        + " |"
        for k, e in d["eval"].items()
    )
    heads = ""
    if "medusa" in d["eval"]:
        n = dr["medusa"]["n_heads"] if "medusa" in dr else 0
        heads = (
            "\n\nMedusa, greedy α per head (head i on h_t against the target's argmax for token t+1+i, "
            "teacher-forced).\nWith k drafts per round Medusa proposes min(k, heads) tokens, all from one "
            "hidden state:\n\n| domain | "
            + " | ".join(f"head {i}" for i in range(1, n + 1))
            + " |\n|---|"
            + "---|" * n
            + "\n"
            + "\n".join(
                f"| {dom} | "
                + " | ".join(f"{d['eval']['medusa'][dom][f'head_{i}']:.3f}" for i in range(1, n + 1))
                + " |"
                for dom in domains
            )
        )
    e, s = d["eval"].get("eagle"), d["eval"].get("draft")
    if e and s:
        wins = [dom for dom in domains if e[dom]["tau"] > s[dom]["tau"] and e[dom]["alpha"] > s[dom]["alpha"]]
        versus = (
            f"its α and τ beat the separate draft's on {', '.join(wins) if wins else 'no domain'} "
            f"(of {', '.join(domains)}), with {d['added_params']['eagle']:,} parameters against the draft's "
            f"{d['added_params']['draft']:,}."
        )
    else:
        versus = "this run measured it without the separate draft."
    med = dr.get("medusa", {})
    eag = dr.get("eagle", {})
    return f"""
## Drafters on the target's hidden states (Medusa heads, EAGLE feature draft)

Two drafters that read the target's last hidden state h_t (after its final norm, so `lm_head(h_t)` is
the target's logits) and reuse the target's own LM head (EAGLE also its token embeddings): they add
only their own weights, stored in fp16 in `medusa/` and `eagle/` with a `config.json` that records the
target they were trained for. Load them bound to a target (any dtype; the padded targets of
`specdec.core.models.padded_target` have the same hidden states) with `specdec.core.drafters.load_medusa(target)` and
`load_eagle(target)`; `MedusaProposer` and `EagleProposer` draft for the notebooks' decoding loop.

- **Medusa heads** ({med.get('n_heads', '?')}): head i maps h_t to `lm_head(h_t + SiLU(W_i h_t + b_i))`, a guess at token
  t+1+i (token t+1 is the target's own). W_i starts at zero, so each head starts as the target's head.
  Trained on the mean over heads of KL(p ‖ q) to the target's distribution at position t+i (distillation
  on the shifted logits, teacher-forced on the corpus).
- **EAGLE feature draft**: `fc([h_j ; e(x_(j+1))])` (2H → H), one Llama decoder layer (own RoPE and KV cache,
  MLP {eag.get('intermediate_size', '?')}) and a norm predict ĥ_(j+1); `lm_head(ĥ_(j+1))` guesses x_(j+2). Drafting feeds its own ĥ
  back in. Trained on KL(p ‖ q) to the target's next-token distribution + smooth-L1(ĥ, h), with U(−0.1, 0.1)
  noise on the input hidden states (EAGLE's recipe), teacher-forced on the target's true states.

```
{RETRAIN_DRAFTERS}
```

trains both with the defaults. The shipped files came from:
{runs}

Seed {d['seed']}, {d['threads']} torch thread(s) (with other work on the 2 cores, two threads that wait for each other
ran about 4× slower), batches of {d['batch']} × {d['seq_len']} tokens of the same corpus,
fresh each step, through the frozen shipped target; AdamW (β 0.9/0.95), 5 % warmup then cosine decay. Time
in seconds on this 2-core machine, **shared with other work during the run** (wall time depends on the
load; CPU time less so). Parameters are the drafter's own (trainable); the LM head (1,048,576) and
embeddings are the target's.

| drafter | parameters added | steps | tokens | wall | CPU | disk (fp16) |
|---|---|---|---|---|---|---|
{cost}

Held-out curve (step: loss / greedy α of the first prediction, on {d['eval_windows']} fixed held-out windows
per domain; loss is the training objective; per step in `drafters_log.csv`):

{curves}

At the end of each run:

{flat}

## Drafters compared (fp32, the shipped weights)

α: greedy, teacher-forced on the texts of `heldout.json`: the fraction of positions where the drafter's
first prediction (Medusa head 1, EAGLE fed the target's true state) is the target's argmax. τ: tokens
per target forward of greedy speculative decoding with k = {d['k']} drafts per round, {d['tau_prompts']} held-out prompts
of 32 tokens per domain (seed {d['seed']}), {d['tau_tokens']} new tokens each (`specdec.core.drafters.greedy_tau`).
Early exit: `specdec.core.models.early_exit_draft(target, n)`, the target's first n layers + its norm and head.

| drafter | parameters added | {' | '.join(f'{dom} α | {dom} τ' for dom in domains)} |
|---|---|{'---|---|' * len(domains)}
{rows}{heads}

Reading the table: Medusa's first head must guess token t+2 from h_t without seeing token t+1 (the
target's own next token), and its later heads guess further ahead, so on a 4-layer target its α is low
except on JSON; Medusa is meant to be verified as a token tree (the top-2 of each head,
`MedusaProposer.topk_tree`), not as a chain. The EAGLE draft sees both the target's state and the token
just chosen; {versus}
Early exit shares the target's weights (no parameters added) but its first layers agree with the full
target much less.

Measured in {d['eval_seconds']['wall_s']:.0f} s wall; every number here is in `drafters.json`.
""".replace("(1,048,576)", f"({d['trained_for']['hidden_size'] * d['trained_for']['vocab_size']:,})")


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def model_card(r: dict, drafters: dict | None = None) -> str:
    """data/models/README.md from the pair's report (training.json) and, when given, the drafters'
    (drafters.json)."""
    t, d, v = r["target"], r["draft"], r["versions"]
    rows = "\n".join(
        f"| {dom} | {e['loss_target']:.3f} | {e['loss_draft']:.3f} | {e['alpha_greedy']:.3f} | "
        f"{e['alpha_sampled']:.3f} | {e['alpha_greedy_shipped_texts']:.3f} | {e['tokens']:,} |"
        for dom, e in r["eval"].items()
    )
    corpus = "\n".join(
        f"| {dom} | {c['train']['docs']:,} | {c['train']['chars']:,} | {c['train']['tokens']:,} | "
        f"{c['heldout']['docs']:,} | {c['heldout']['tokens']:,} | {r['domain_weights'][dom]} |"
        for dom, c in r["corpus"].items()
    )

    def arch(a):
        return (
            f"{a['num_hidden_layers']} layers × {a['hidden_size']} hidden, "
            f"{a['num_attention_heads']} heads, MLP {a['intermediate_size']}, "
            f"tied embeddings: {a['tie_word_embeddings']}"
        )

    timing = "\n".join(
        f"| {phase} | {c['wall_s']:.0f} | {c['cpu_s']:.0f} | {c['cpu_s'] / r['threads']:.0f} |"
        for phase, c in r["seconds"].items()
    )
    return f"""# The course's tiny target/draft pair

Two Llama-style causal language models (`LlamaForCausalLM`) that share one tokenizer, trained
by this repository on this machine (2 CPU cores), so that notebooks 02–06 have a real target and
a real draft offline. Load them with `specdec.core.models.load_pair()`; held-out text per domain is
in `heldout.json` (`specdec.core.models.load_heldout()`).

| model | parameters | architecture | trained on | tokens | disk (fp16) |
|---|---|---|---|---|---|
| target | {t['params']:,} | {arch(t['arch'])} | next-token cross-entropy | {t['train_tokens']:,} | {_mb(r['disk_bytes']['target'])} |
| draft | {d['params']:,} | {arch(d['arch'])} | {'KL(p ‖ q) to the target logits (distillation)' if d['loss'] == 'kd' else 'next-token cross-entropy'} | {d['train_tokens']:,} | {_mb(r['disk_bytes']['draft'])} |

Target ÷ draft parameters: {t['params'] / d['params']:.1f}×. Tokenizer: byte-level BPE, {r['vocab_size']:,} tokens
(`<|endoftext|>` = BOS = EOS, `<|pad|>` = PAD), {_mb(r['disk_bytes']['tokenizer'])}. Both models have the same
`vocab_size` and special token ids, as transformers' `assistant_model=` requires.
Weights are stored in fp16; config.json says fp32, so `from_pretrained` computes in fp32.

Each model folder is a complete checkpoint: it holds its own copy of the tokenizer's files
(`tokenizer.json`, `tokenizer_config.json`), so stock transformers loads it alone, offline:
`AutoTokenizer.from_pretrained("data/models/target")` and
`pipeline("text-generation", model="data/models/target")` (the same for `data/models/draft`).

## Retrain

```
{r['command']}
```

seed {r['seed']}, {r['threads']} torch threads, sequences of {r['seq_len']} tokens, batches of {r['batch']},
AdamW (β 0.9/0.95, weight decay 0.1), 5 % warmup then cosine decay, peak lr {t['lr']} (target) and
{d['lr']} (draft). Time on this 2-core machine, in seconds. The cores were shared with other work,
so wall time depends on the load; CPU time (all threads of the process) depends on it less
(threads that wait for each other spin), and CPU ÷ threads is an upper estimate of the wall time
on {r['threads']} idle cores. Total is up to saving, before evaluation.

| phase | wall | CPU | CPU ÷ threads |
|---|---|---|---|
{timing}

The loss log is `train_log.csv`; every number here is also in `training.json`.

## Corpus

Built at run time by `specdec.training.corpus` from Python {v['python']} (its standard library, `sysconfig.get_paths()["stdlib"]`,
i.e. `{portable_path(v["stdlib"])}`); nothing is downloaded.
A document is held out when a hash of its name says so (about 3 % of code files, 10 % of prose
chunks and JSON records).

- **code**: the standard library's `.py` files, except `test/`, `tests/`, `idlelib/`, `lib2to3/`,
  `ensurepip/` and `site-packages/`.
- **prose**: `pydoc_data.topics.topics`, the language reference text behind `help()`, in chunks of
  about 2,000 characters.
- **json**: pretty-printed records (users, orders, log events, sensor readings) generated from the seed.

| domain | train docs | train chars | train tokens | held-out docs | held-out tokens | sampling weight |
|---|---|---|---|---|---|---|
{corpus}

## Held-out results (the shipped fp16 weights)

Teacher-forced on held-out windows of {r['seq_len']} tokens: loss in nats per token; greedy α is the
fraction of positions where the argmax of the target (p) and of the draft (q) agree; sampled α is
the mean of Σ min(p, q), the acceptance rate of speculative sampling at temperature 1. The last α
column is greedy α on the texts shipped in `heldout.json` ({', '.join(f'{k} {n:,}' for k, n in r['heldout_shipped_chars'].items())} characters).

| domain | target loss | draft loss | greedy α | sampled α | greedy α, heldout.json | tokens |
|---|---|---|---|---|---|---|
{rows}
{MEASURED_NOTES}{drafter_card(drafters) if drafters else ""}
Versions: torch {v['torch']}, transformers {v['transformers']}, tokenizers {v['tokenizers']}.
"""
