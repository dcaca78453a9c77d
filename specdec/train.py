"""Train the course's tiny target/draft pair and ship it: ``python -m specdec.train``.

Steps: build the three-domain corpus (specdec.corpus), train one byte-level BPE tokenizer,
train the target (LlamaForCausalLM) on next-token cross-entropy, train the draft (a much
smaller LlamaForCausalLM, same vocabulary) by distillation on the target's logits, save both
in fp16 with save_pretrained, then reload them and measure held-out loss and greedy α per
domain for the model card. Everything is seeded; with the same seed, thread count and
Python version the run reproduces.

    python -m specdec.train --out data/models           # the shipped pair (~20 min, 2 cores)
    python -m specdec.train --smoke --out /tmp/pair     # a few steps, tiny sizes (CI)

``python -m specdec.train drafters`` trains the drafters that ride on a trained target (Medusa heads and
an EAGLE feature draft, specdec.drafters) against the frozen target of ``--target-from`` (default
``--out``), saves them in medusa/ and eagle/, and measures greedy α and τ per domain against the
separate draft and early exit; ``--smoke`` for tests. Its numbers go to drafters.json and the card.

    python -m specdec.train drafters --out data/models              # the shipped drafters (~15 min)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .corpus import DOMAINS, corpus_versions, load_corpus, portable_path
from .decoding import count_params
from .models import default_path, load_pair

EOS = "<|endoftext|>"
PAD = "<|pad|>"
MAX_POSITIONS = 1024  # rope positions; prompts + generation in the notebooks stay below

TARGET_ARCH = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                   num_attention_heads=4, tie_word_embeddings=False)
DRAFT_ARCH = dict(hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=2, tie_word_embeddings=True)
SMOKE_TARGET_ARCH = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, tie_word_embeddings=False)
SMOKE_DRAFT_ARCH = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=1, tie_word_embeddings=True)

# defaults under --smoke: tiny sizes, a capped corpus, a few steps
SMOKE = dict(vocab_size=384, seq_len=32, batch=4, target_steps=3, draft_steps=3,
             max_chars=60_000, eval_windows=2, log_every=1, json_records=200)

# the share of training sequences drawn from each domain
DOMAIN_WEIGHTS = {"code": 0.6, "prose": 0.2, "json": 0.2}

# held-out text shipped for the notebooks: about this many characters per domain
HELDOUT_SHIP_CHARS = 4000
HELDOUT_SNIPPET_CHARS = 1000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m specdec.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=default_path(), help="folder to write the pair to")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--target-steps", type=int, default=450)
    p.add_argument("--draft-steps", type=int, default=450)
    p.add_argument("--target-lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--draft-loss", choices=("kd", "ce"), default="kd",
                   help="kd: KL to the target's logits (distillation); ce: next-token cross-entropy")
    p.add_argument("--target-from", type=Path, default=None,
                   help="reuse the tokenizer and target of this trained folder; train only the draft")
    p.add_argument("--max-chars", type=int, default=None, help="cap each domain's text")
    p.add_argument("--json-records", type=int, default=8000, help="generated JSON records")
    p.add_argument("--copy-share", type=float, default=0.0,
                   help="share of training rows that are copy-with-edit rows (a window, a blank line, "
                        "the same window with a few tokens replaced); 0 trains on plain windows only")
    p.add_argument("--eval-windows", type=int, default=32, help="held-out windows per domain")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--smoke", action="store_true", help="tiny sizes and a few steps (CI)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv:
        p.set_defaults(**SMOKE)  # explicit flags still win
    args = p.parse_args(argv)
    args.target_arch = SMOKE_TARGET_ARCH if args.smoke else TARGET_ARCH
    args.draft_arch = SMOKE_DRAFT_ARCH if args.smoke else DRAFT_ARCH
    args.command = "python -m specdec.train " + shlex.join(argv)
    return args


# --- tokenizer -------------------------------------------------------------------------

def train_tokenizer(corpus: dict, vocab_size: int):
    """one byte-level BPE for both models, trained on the training split of all domains."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = [t for d in DOMAINS for t in corpus[d]["train"]]
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, pad_token=PAD,
                                   model_max_length=MAX_POSITIONS)


def encode_streams(tokenizer, corpus: dict) -> dict:
    """{domain: {split: 1-D LongTensor}}: documents joined, each followed by EOS."""
    eos = tokenizer.eos_token_id
    streams = {}
    for domain in DOMAINS:
        streams[domain] = {}
        for split, texts in corpus[domain].items():
            ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
            flat = [tok for doc in ids for tok in doc + [eos]]
            streams[domain][split] = torch.tensor(flat, dtype=torch.long)  # (N,)
    return streams


# --- models ----------------------------------------------------------------------------

def make_model(tokenizer, arch: dict, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **arch)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# --- training --------------------------------------------------------------------------

def copy_row(stream: torch.Tensor, length: int, sep: torch.Tensor, gen: torch.Generator,
             max_edits: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, copied) for one copy-with-edit row of `length` tokens: a window A of the stream, the
    separator, then A again with 1..max_edits tokens replaced by tokens drawn from the stream (an
    edit), cut to length. `copied` (length,) is True where the row's token repeats the first copy
    (predictable by looking back), i.e. in the second copy except at the edits.

    Plain text rarely repeats itself within a window, so a small model trained on windows alone
    never learns to look back and copy; these rows teach it, as re-emitting an edited record or
    file asks of a served model.
    """
    half = (length - len(sep)) // 2
    rest = length - half - len(sep)                       # second copy; >= half
    start = torch.randint(0, len(stream) - rest, (1,), generator=gen).item()
    first = stream[start:start + half]
    second = stream[start:start + rest].clone()
    n_edits = torch.randint(1, max_edits + 1, (1,), generator=gen).item()
    where = torch.randint(0, half, (n_edits,), generator=gen)
    second[where] = stream[torch.randint(0, len(stream), (n_edits,), generator=gen)]
    copied = torch.zeros(length, dtype=torch.bool)
    copied[half + len(sep):half + len(sep) + half] = True
    copied[half + len(sep) + where] = False
    return torch.cat([first, sep, second]), copied


def sample_batch(streams: dict, batch: int, seq_len: int, gen: torch.Generator,
                 copy_share: float = 0.0, sep: torch.Tensor | None = None) -> torch.Tensor:
    """random windows of seq_len + 1 tokens, each row's domain drawn by DOMAIN_WEIGHTS; with
    copy_share > 0 that share of rows (on average) are copy-with-edit rows (copy_row)."""
    weights = torch.tensor([DOMAIN_WEIGHTS[d] for d in DOMAINS])
    picks = torch.multinomial(weights, batch, replacement=True, generator=gen)  # (B,)
    rows = []
    for i in picks.tolist():
        stream = streams[DOMAINS[i]]["train"]
        if copy_share > 0 and torch.rand(1, generator=gen).item() < copy_share:
            rows.append(copy_row(stream, seq_len + 1, sep, gen)[0])
            continue
        start = torch.randint(0, len(stream) - seq_len - 1, (1,), generator=gen).item()
        rows.append(stream[start:start + seq_len + 1])
    return torch.stack(rows)  # (B, T+1)


def separator(tokenizer) -> torch.Tensor:
    """the token ids of a blank line, between the two copies of a copy row."""
    return torch.tensor(tokenizer("\n\n", add_special_tokens=False)["input_ids"], dtype=torch.long)


def lr_at(step: int, steps: int, peak: float) -> float:
    """linear warmup over 5 % of the steps, then cosine decay to 10 % of the peak."""
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def ce_loss(model, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1], use_cache=False).logits  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())


def kd_loss_fn(target):
    """KL(p || q) per position, p = target probs, q = draft probs, averaged over positions."""
    def kd_loss(draft, batch: torch.Tensor) -> torch.Tensor:
        inputs = batch[:, :-1]  # (B, T)
        with torch.no_grad():
            log_p = F.log_softmax(target(inputs, use_cache=False).logits, dim=-1)  # (B, T, V)
        log_q = F.log_softmax(draft(inputs, use_cache=False).logits, dim=-1)  # (B, T, V)
        return F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True,
                        reduction="batchmean")
    return kd_loss


class Clock:
    """wall and CPU seconds since creation; CPU time counts every thread of this process,
    so it says more than wall time when other work shares the cores."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict:
        return {"wall_s": round(time.perf_counter() - self.wall, 1),
                "cpu_s": round(time.process_time() - self.cpu, 1)}


def train_model(model, loss_fn, streams, args, name: str, steps: int, lr: float, log: list) -> None:
    """AdamW on sampled batches, logging the loss every args.log_every steps."""
    gen = torch.Generator().manual_seed(args.seed + (0 if name == "target" else 1))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    clock = Clock()
    bar = tqdm(range(steps), desc=f"{name} ({args.draft_loss if name == 'draft' else 'ce'})")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        loss = loss_fn(model, sample_batch(streams, args.batch, args.seq_len, gen, args.copy_share, args.sep))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_every == 0 or step == steps - 1:
            log.append(dict(model=name, step=step, loss=round(loss.item(), 4),
                            lr=round(opt.param_groups[0]["lr"], 6), **clock.read()))
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


# --- evaluation ------------------------------------------------------------------------

def heldout_windows(stream: torch.Tensor, seq_len: int, n: int) -> torch.Tensor:
    """n windows of seq_len + 1 tokens spread evenly over the stream."""
    n = max(1, min(n, (len(stream) - 1) // seq_len))
    starts = torch.linspace(0, len(stream) - seq_len - 1, n).long().tolist()
    return torch.stack([stream[s:s + seq_len + 1] for s in starts])  # (N, T+1)


@torch.no_grad()
def agreement(target, draft, ids: torch.Tensor) -> dict:
    """teacher-forced comparison of the pair on token ids (N, T+1).

    loss_*: mean next-token cross-entropy in nats; alpha_greedy: fraction of positions where
    the argmax of p and of q agree; alpha_sampled: mean of sum_v min(p, q), the acceptance
    rate of speculative sampling at temperature 1.
    """
    inputs, labels = ids[:, :-1], ids[:, 1:]  # (N, T)
    logits_p = target(inputs, use_cache=False).logits  # (N, T, V)
    logits_q = draft(inputs, use_cache=False).logits  # (N, T, V)
    p, q = logits_p.softmax(-1), logits_q.softmax(-1)  # (N, T, V)
    return {
        "loss_target": F.cross_entropy(logits_p.flatten(0, 1), labels.flatten()).item(),
        "loss_draft": F.cross_entropy(logits_q.flatten(0, 1), labels.flatten()).item(),
        "alpha_greedy": (logits_p.argmax(-1) == logits_q.argmax(-1)).float().mean().item(),
        "alpha_sampled": torch.minimum(p, q).sum(-1).mean().item(),
        "tokens": labels.numel(),
    }


def greedy_alpha_on_texts(target, draft, tokenizer, texts: list[str]) -> float:
    """teacher-forced greedy α pooled over whole texts (one forward per text)."""
    agree = total = 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids  # (1, T)
            p_top = target(ids, use_cache=False).logits.argmax(-1)  # (1, T)
            q_top = draft(ids, use_cache=False).logits.argmax(-1)  # (1, T)
            agree += (p_top == q_top).sum().item()
            total += ids.numel()
    return agree / total


@torch.no_grad()
def copy_skill(target, draft, stream: torch.Tensor, length: int, sep: torch.Tensor, n: int,
               seed: int = 0) -> dict:
    """teacher-forced on n held-out copy-with-edit rows, at the positions whose next token repeats
    the first copy: how often the target's argmax is that token (copy_target), the draft's
    (copy_draft), and how often the two argmaxes agree (alpha_copy)."""
    gen = torch.Generator().manual_seed(seed)
    rows, masks = zip(*(copy_row(stream, length, sep, gen) for _ in range(n)))
    ids, copied = torch.stack(rows), torch.stack(masks)[:, 1:]          # (N, T+1), (N, T)
    p_top = target(ids[:, :-1], use_cache=False).logits.argmax(-1)     # (N, T)
    q_top = draft(ids[:, :-1], use_cache=False).logits.argmax(-1)
    labels = ids[:, 1:]
    return {"copy_target": (p_top == labels)[copied].float().mean().item(),
            "copy_draft": (q_top == labels)[copied].float().mean().item(),
            "alpha_copy": (p_top == q_top)[copied].float().mean().item()}


def evaluate(target, draft, tokenizer, streams, heldout: dict, args) -> dict:
    """per domain: the windowed metrics, copying, and greedy α on the shipped held-out texts."""
    results = {}
    sep = separator(tokenizer)
    for domain in DOMAINS:
        windows = heldout_windows(streams[domain]["heldout"], args.seq_len, args.eval_windows)
        results[domain] = agreement(target, draft, windows)
        results[domain].update(copy_skill(target, draft, streams[domain]["heldout"], args.seq_len + 1, sep,
                                          args.eval_windows, seed=args.seed))
        results[domain]["alpha_greedy_shipped_texts"] = greedy_alpha_on_texts(
            target, draft, tokenizer, heldout[domain])
    return results


# --- shipping --------------------------------------------------------------------------

def _snippet(text: str, limit: int) -> str:
    """whole lines from the middle of text, at most `limit` characters (file headers are
    licences and docstrings, not typical code)."""
    if len(text) <= limit:
        return text
    start = text.find("\n", (len(text) - limit) // 2) + 1
    piece = text[start:start + limit]
    return piece[:piece.rfind("\n")] if "\n" in piece else piece


def heldout_sample(corpus: dict) -> dict:
    """a few KB of held-out text per domain, in stable order, for the notebooks and tests."""
    sample = {}
    for domain in DOMAINS:
        texts, size = [], 0
        for text in corpus[domain]["heldout"]:
            if size >= HELDOUT_SHIP_CHARS:
                break
            piece = _snippet(text, HELDOUT_SNIPPET_CHARS).strip("\n")
            if piece.strip():
                texts.append(piece)
                size += len(piece)
        sample[domain] = texts
    return sample


def save_model(model, folder: Path, tokenizer) -> None:
    """a complete checkpoint: fp16 safetensors (halves the size) under a config that says fp32, so that a
    plain from_pretrained, like load_pair, computes in fp32 (fp16 matmuls are slow on CPUs), and the
    tokenizer's files, so that AutoTokenizer and pipeline() load the folder alone."""
    model.to(torch.float16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.to(torch.float32)
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "dtype": "float32"}, indent=2) + "\n")


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def tokenizer_bytes(folder: Path) -> int:
    """the size of the tokenizer files in a model folder (each model folder holds a copy)."""
    return sum((folder / name).stat().st_size for name in TOKENIZER_FILES)


def write_log(log: list, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["model", "step", "loss", "lr", "wall_s", "cpu_s"])
        writer.writeheader()
        writer.writerows(log)


# --- main ------------------------------------------------------------------------------

def build_tokenizer_and_target(corpus, args, log: list, times: dict):
    """train both, or reuse them from --target-from."""
    if args.target_from is not None:
        target, _, tokenizer = load_pair(args.target_from)
        args.sep = separator(tokenizer)
        return tokenizer, target, encode_streams(tokenizer, corpus)
    clock = Clock()
    tokenizer = train_tokenizer(corpus, args.vocab_size)
    args.sep = separator(tokenizer)
    streams = encode_streams(tokenizer, corpus)
    times["tokenizer"] = clock.read()
    clock = Clock()
    target = make_model(tokenizer, args.target_arch, args.seed)
    train_model(target, ce_loss, streams, args, "target", args.target_steps, args.target_lr, log)
    times["target"] = clock.read()
    return tokenizer, target, streams


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["drafters"]:
        return main_drafters(argv[1:])
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    total = Clock()
    times, log = {}, []
    corpus = load_corpus(seed=args.seed, max_chars=args.max_chars, json_records=args.json_records)
    tokenizer, target, streams = build_tokenizer_and_target(corpus, args, log, times)
    clock = Clock()
    draft = make_model(tokenizer, args.draft_arch, args.seed + 1)
    loss_fn = kd_loss_fn(target) if args.draft_loss == "kd" else ce_loss
    train_model(draft, loss_fn, streams, args, "draft", args.draft_steps, args.draft_lr, log)
    times["draft"] = clock.read()

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    save_model(target, out / "target", tokenizer)
    save_model(draft, out / "draft", tokenizer)
    heldout = heldout_sample(corpus)
    (out / "heldout.json").write_text(json.dumps(heldout, indent=1, ensure_ascii=False), encoding="utf-8")
    write_log(log, out / "train_log.csv")
    times["total"] = total.read()

    target, draft, tokenizer = load_pair(out)  # measure what ships (fp16 weights)
    report = make_report(args, corpus, streams, target, draft, tokenizer, heldout, times, out)
    (out / "training.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "README.md").write_text(model_card(report, matching_drafters(out)), encoding="utf-8")
    print_summary(report)
    return report


def make_report(args, corpus, streams, target, draft, tokenizer, heldout, times, out) -> dict:
    tokens = args.batch * args.seq_len
    return {
        "command": args.command,
        "seed": args.seed,
        "threads": args.threads,
        "versions": {**corpus_versions(), "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "vocab_size": len(tokenizer),
        "target": {"params": count_params(target), "arch": args.target_arch,
                   "steps": args.target_steps, "train_tokens": args.target_steps * tokens,
                   "lr": args.target_lr, "from": str(args.target_from) if args.target_from else None},
        "draft": {"params": count_params(draft), "arch": args.draft_arch, "loss": args.draft_loss,
                  "steps": args.draft_steps, "train_tokens": args.draft_steps * tokens, "lr": args.draft_lr},
        "seq_len": args.seq_len,
        "batch": args.batch,
        "copy_share": args.copy_share,
        "domain_weights": DOMAIN_WEIGHTS,
        "corpus": {d: {s: {"docs": len(corpus[d][s]), "chars": sum(map(len, corpus[d][s])),
                           "tokens": len(streams[d][s])} for s in ("train", "heldout")}
                   for d in DOMAINS},
        "heldout_shipped_chars": {d: sum(map(len, heldout[d])) for d in DOMAINS},
        "seconds": times,
        "disk_bytes": {**{name: folder_bytes(out / name) for name in ("target", "draft")},
                       "tokenizer": tokenizer_bytes(out / "target")},
        "eval": evaluate(target, draft, tokenizer, streams, heldout, args),
    }


def print_summary(report: dict) -> None:
    print(f"seconds {report['seconds']}")
    for domain, r in report["eval"].items():
        print(f"{domain:6s} loss target {r['loss_target']:.3f} draft {r['loss_draft']:.3f} "
              f"alpha greedy {r['alpha_greedy']:.3f} sampled {r['alpha_sampled']:.3f} "
              f"(shipped texts {r['alpha_greedy_shipped_texts']:.3f}) copy target {r['copy_target']:.3f} "
              f"draft {r['copy_draft']:.3f} alpha {r['alpha_copy']:.3f}")


# --- model card ------------------------------------------------------------------------

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

`python -m specdec.train --target-from data/models --draft-loss ce [--draft-steps 900] --out runs/ce`
gives the last two rows. Distillation lifts greedy α by 0.06–0.18 and is kept. Note the last row:
at these budgets a 0.6 M-parameter draft trained on twice the tokens reaches a *lower* held-out
loss than the 5.3 M target, yet agrees with it less. α measures agreement with the target, not
quality, and the target is the reference only because it is the model being served.

On an idle machine (measured before this run, same shapes, 2 threads) a target step takes
1.33 s and a distillation step 0.90 s, so the default command needs about 17 minutes of
training, plus evaluation.

## Copying (measured; the reason prompt lookup gains little with this target)

Teacher-forced on 32 held-out copy-with-edit rows per domain (seed 0) (a 128-token window, a blank line, the
same window with 1–3 tokens replaced; `specdec.train.copy_skill`): how often the target's argmax is the
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
    if report.get("trained_for", {}).get("target_sha256") != _sha256(out / "target" / "model.safetensors"):
        return None
    return report


DRAFTER_NAMES = {"medusa": "Medusa heads", "eagle": "EAGLE feature draft", "draft": "separate draft (draft/)",
                 "early_exit_1": "early exit, 1 layer", "early_exit_2": "early exit, 2 layers"}


def drafter_card(d: dict) -> str:
    """the drafters' section of the model card, from drafters.json."""
    dr = d["drafters"]
    name = lambda key: DRAFTER_NAMES.get(key, key)
    cost = "\n".join(f"| {name(k)} | {v['params']:,} | {v['steps']} | {v['train_tokens']:,} | {v['seconds']['wall_s']:.0f} | "
                     f"{v['seconds']['cpu_s']:.0f} | {_mb(v['disk_bytes'])} |" for k, v in dr.items())
    curves = "\n".join(f"- {name(k)}: " + ", ".join(f"{s}: {loss:.3f} / {a:.3f}" for s, loss, a in v["curve"])
                       for k, v in dr.items())

    def tail(curve):  # the held-out loss change over the last sixth of the run
        last = curve[-1]
        ref = [c for c in curve if c[0] <= last[0] - max(1, last[0] // 6)][-1:] or curve[:1]
        ref = ref[0]
        return (f"held-out loss {last[1]:.3f} at step {last[0]} ({100 * (last[1] - ref[1]) / ref[1]:+.1f} % over "
                f"the last {last[0] - ref[0]} steps), α {last[2]:.3f}")
    flat = "\n".join(f"- {name(k)}: {tail(v['curve'])}" for k, v in dr.items())
    from .drafters import RETRAIN_DRAFTERS

    runs = "\n".join(f"{name(k)}: `{v.get('command', d['command'])}`" + ("  " if i + 1 < len(dr) else "")
                     for i, (k, v) in enumerate(dr.items()))
    domains = list(next(iter(d["eval"].values())))
    rows = "\n".join(f"| {name(k)} | {d['added_params'].get(k, 0):,} | "
                     + " | ".join(f"{e[dom]['alpha']:.3f} | {e[dom]['tau']:.2f}" for dom in domains) + " |"
                     for k, e in d["eval"].items())
    heads = ""
    if "medusa" in d["eval"]:
        n = dr["medusa"]["n_heads"] if "medusa" in dr else 0
        heads = ("\n\nMedusa, greedy α per head (head i on h_t against the target's argmax for token t+1+i, "
                 "teacher-forced).\nWith k drafts per round Medusa proposes min(k, heads) tokens, all from one "
                 "hidden state:\n\n| domain | " + " | ".join(f"head {i}" for i in range(1, n + 1)) + " |\n|---|"
                 + "---|" * n + "\n" + "\n".join(f"| {dom} | " + " | ".join(
                     f"{d['eval']['medusa'][dom][f'head_{i}']:.3f}" for i in range(1, n + 1)) + " |" for dom in domains))
    e, s = d["eval"].get("eagle"), d["eval"].get("draft")
    if e and s:
        wins = [dom for dom in domains if e[dom]["tau"] > s[dom]["tau"] and e[dom]["alpha"] > s[dom]["alpha"]]
        versus = (f"its α and τ beat the separate draft's on {', '.join(wins) if wins else 'no domain'} "
                  f"(of {', '.join(domains)}), with {d['added_params']['eagle']:,} parameters against the draft's "
                  f"{d['added_params']['draft']:,}.")
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
`specdec.models.padded_target` have the same hidden states) with `specdec.drafters.load_medusa(target)` and
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
of 32 tokens per domain (seed {d['seed']}), {d['tau_tokens']} new tokens each (`specdec.drafters.greedy_tau`).
Early exit: `specdec.models.early_exit_draft(target, n)`, the target's first n layers + its norm and head.

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
        for dom, e in r["eval"].items())
    corpus = "\n".join(
        f"| {dom} | {c['train']['docs']:,} | {c['train']['chars']:,} | {c['train']['tokens']:,} | "
        f"{c['heldout']['docs']:,} | {c['heldout']['tokens']:,} | {r['domain_weights'][dom]} |"
        for dom, c in r["corpus"].items())
    arch = lambda a: (f"{a['num_hidden_layers']} layers × {a['hidden_size']} hidden, "
                      f"{a['num_attention_heads']} heads, MLP {a['intermediate_size']}, "
                      f"tied embeddings: {a['tie_word_embeddings']}")
    timing = "\n".join(f"| {phase} | {c['wall_s']:.0f} | {c['cpu_s']:.0f} | {c['cpu_s'] / r['threads']:.0f} |"
                       for phase, c in r["seconds"].items())
    return f"""# The course's tiny target/draft pair

Two Llama-style causal language models (`LlamaForCausalLM`) that share one tokenizer, trained
by this repository on this machine (2 CPU cores), so that notebooks 02–06 have a real target and
a real draft offline. Load them with `specdec.models.load_pair()`; held-out text per domain is
in `heldout.json` (`specdec.models.load_heldout()`).

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

Built at run time by `specdec.corpus` from Python {v['python']} (its standard library, `sysconfig.get_paths()["stdlib"]`,
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



# --- drafters: Medusa heads and the EAGLE feature draft on the frozen shipped target ----

DRAFTER_SMOKE = dict(seq_len=32, batch=2, medusa_steps=3, eagle_steps=3, max_chars=60_000, json_records=200,
                     eval_windows=1, eval_every=1, tau_prompts=1, tau_tokens=6, n_heads=2, eagle_mlp=32)


def parse_drafter_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specdec.train drafters",
        description="Train Medusa-style heads and an EAGLE-style feature draft on a frozen trained target "
                    "(its hidden states and logits), save them next to it, measure α and τ per domain.")
    p.add_argument("--out", type=Path, default=default_path(),
                   help="folder to write medusa/, eagle/, drafters.json, drafters_log.csv to")
    p.add_argument("--target-from", type=Path, default=None,
                   help="the trained pair whose target (and draft, for comparison) to use; default --out")
    p.add_argument("--only", choices=("medusa", "eagle", "both"), default="both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1: on shared cores, 2 threads waiting on each other ran 4x slower)")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n-heads", type=int, default=4, help="Medusa heads")
    p.add_argument("--medusa-steps", type=int, default=300)
    p.add_argument("--medusa-lr", type=float, default=2e-3)
    p.add_argument("--eagle-steps", type=int, default=1800)
    p.add_argument("--eagle-lr", type=float, default=2e-3)
    p.add_argument("--eagle-mlp", type=int, default=512, help="intermediate size of EAGLE's decoder layer")
    p.add_argument("--eagle-reg", type=float, default=1.0, help="weight of the smooth-L1 hidden-state loss")
    p.add_argument("--eagle-noise", type=float, default=0.1,
                   help="uniform noise U(-x, x) added to the input hidden states in training (EAGLE)")
    p.add_argument("--eval-windows", type=int, default=4, help="held-out windows per domain for the loss curve")
    p.add_argument("--eval-every", type=int, default=30)
    p.add_argument("--k", type=int, default=3, help="drafts per round for τ")
    p.add_argument("--tau-prompts", type=int, default=6, help="held-out prompts per domain for τ")
    p.add_argument("--tau-tokens", type=int, default=64, help="new tokens per prompt for τ")
    p.add_argument("--max-chars", type=int, default=None, help="cap each domain's text")
    p.add_argument("--json-records", type=int, default=8000, help="generated JSON records (as the pair)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and a few steps (tests)")
    argv = list(argv)
    if "--smoke" in argv:
        p.set_defaults(**DRAFTER_SMOKE)
    args = p.parse_args(argv)
    args.target_from = args.target_from or args.out
    args.command = "python -m specdec.train drafters " + shlex.join(argv)
    return args


@torch.no_grad()
def target_states(target, ids: torch.Tensor):
    """(h (B, T, H) after the final norm, log p (B, T, V) fp32) of the frozen target on ids (B, T)."""
    h = target.model(ids, use_cache=False).last_hidden_state
    return h, F.log_softmax(target.lm_head(h).float(), dim=-1)


def _kl(log_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per position, averaged: p the target's distribution, q the drafter's."""
    log_q = F.log_softmax(logits_q.float(), dim=-1)
    return F.kl_div(log_q.flatten(0, -2), log_p.flatten(0, -2), log_target=True, reduction="batchmean")


def medusa_loss(heads, ids, h, log_p, gen=None) -> tuple[torch.Tensor, dict]:
    """mean over heads of KL(p_{t+i} || head_i(h_t)): head i on h_t learns the target's distribution at
    position t+i (its prediction of token t+1+i) on the same text, teacher-forced."""
    logits = heads(h)                                                    # (B, T, n, V)
    T = h.shape[1]
    kls = [_kl(log_p[:, i:], logits[:, :T - i, i - 1]) for i in range(1, heads.n_heads + 1)]
    agree = [(logits[:, :T - i, i - 1].argmax(-1) == log_p[:, i:].argmax(-1)).float().mean().item()
             for i in range(1, heads.n_heads + 1)]
    loss = torch.stack(kls).mean()
    return loss, {"kl": loss.item(), "alpha": agree[0], "alpha_heads": agree}


def eagle_loss_fn(reg_weight: float, noise: float):
    """KL(p_{j+1} || lm_head(ĥ_{j+1})) + reg_weight * smooth-L1(ĥ_{j+1}, h_{j+1}), inputs (h_j + noise,
    x_{j+1}) teacher-forced (EAGLE's recipe; the noise stands in for its own errors when drafting)."""
    def loss_fn(eagle, ids, h, log_p, gen=None):
        h_in = h[:, :-1]
        if noise and gen is not None:
            h_in = h_in + noise * (2 * torch.rand(h_in.shape, generator=gen, dtype=h_in.dtype) - 1)
        h_hat = eagle(h_in, ids[:, 1:])                                  # (B, T-1, H)
        logits = eagle.logits(h_hat)
        kl = _kl(log_p[:, 1:], logits)
        reg = F.smooth_l1_loss(h_hat.float(), h[:, 1:].float())
        agree = (logits.argmax(-1) == log_p[:, 1:].argmax(-1)).float().mean().item()
        return kl + reg_weight * reg, {"kl": kl.item(), "reg": reg.item(), "alpha": agree}
    return loss_fn


def train_drafter(module, loss_fn, target, streams, heldout_ids, args, name, steps, lr, log) -> list:
    """AdamW on fresh batches of the corpus through the frozen target; every eval_every steps (and at the
    end) the loss on fixed held-out windows. Returns the held-out curve [(step, loss, alpha), ...]."""
    gen = torch.Generator().manual_seed(args.seed + (10 if name == "medusa" else 20))
    noise_gen = torch.Generator().manual_seed(args.seed + 30)
    opt = torch.optim.AdamW(module.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    clock, curve, recent = Clock(), [], []

    states = [(ids, *target_states(target, ids)) for ids in heldout_ids]   # the frozen target's, once

    def heldout():
        module.eval()
        with torch.no_grad():
            parts = [loss_fn(module, ids, h, log_p) for ids, h, log_p in states]
        module.train()
        return (sum(p[0].item() for p in parts) / len(parts),
                sum(p[1]["alpha"] for p in parts) / len(parts))

    module.train()
    bar = tqdm(range(steps), desc=f"{name} (distillation)")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        ids = sample_batch(streams, args.batch, args.seq_len, gen)[:, :-1]      # (B, T)
        h, log_p = target_states(target, ids)
        loss, parts = loss_fn(module, ids, h, log_p, noise_gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        recent.append(loss.item())
        if step % args.eval_every == 0 or step == steps - 1:
            held_loss, held_alpha = heldout()
            curve.append((step, round(held_loss, 4), round(held_alpha, 4)))
            log.append(dict(model=name, step=step, train_loss=round(sum(recent) / len(recent), 4),
                            heldout_loss=round(held_loss, 4), heldout_alpha=round(held_alpha, 4),
                            lr=round(opt.param_groups[0]["lr"], 6), **clock.read()))
            recent = []
            bar.set_postfix(heldout=f"{held_loss:.3f}", alpha=f"{held_alpha:.3f}")
    module.eval()
    return curve


def measure_drafters(target, proposers: dict, alpha_kwargs: dict, tokenizer, heldout: dict, args) -> dict:
    """{drafter: {domain: {alpha..., tau, rounds, tokens}}}: teacher-forced greedy α on the held-out
    texts, τ of greedy speculation with k drafts on held-out prompts (specdec.drafters.greedy_tau)."""
    from .decoding import heldout_prompts
    from .drafters import greedy_tau, teacher_forced_alpha

    results = {name: {} for name in proposers}
    for domain in DOMAINS:
        texts = [tokenizer(t, return_tensors="pt").input_ids for t in heldout[domain]]
        prompts = heldout_prompts(tokenizer, heldout[domain], args.tau_prompts, prompt_tokens=32, seed=args.seed)
        for name, make in proposers.items():
            alpha = teacher_forced_alpha(target, texts, **alpha_kwargs[name])
            runs = [greedy_tau(target, make(), p, args.tau_tokens, args.k) for p in prompts]
            rounds, tokens = sum(r["rounds"] for r in runs), sum(r["tokens"] for r in runs)
            results[name][domain] = {**{k: round(v, 4) for k, v in alpha.items()}, "tau": round(tokens / rounds, 3),
                                     "rounds": rounds, "tokens": tokens}
    return results


def _read_log(path: Path) -> list:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def main_drafters(argv) -> dict:
    from .drafters import (EagleDraft, PlainLMProposer, EagleProposer, MedusaHeads, MedusaProposer, load_eagle,
                           load_medusa, save_drafter, target_fingerprint, trainable_params)
    from .models import early_exit_draft, load_heldout

    args = parse_drafter_args(argv)
    torch.set_num_threads(args.threads)
    target, draft, tokenizer = load_pair(args.target_from)
    for p in target.parameters():
        p.requires_grad_(False)
    corpus = load_corpus(seed=0, max_chars=args.max_chars, json_records=args.json_records)
    streams = encode_streams(tokenizer, corpus)
    heldout_ids = [heldout_windows(streams[d]["heldout"], args.seq_len, args.eval_windows)[:, :-1] for d in DOMAINS]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    trained_for = {**target_fingerprint(target),
                   "target_sha256": _sha256(Path(args.target_from) / "target" / "model.safetensors")}
    H, V = target.config.hidden_size, target.config.vocab_size
    report = {"command": args.command, "seed": args.seed, "threads": args.threads, "seq_len": args.seq_len,
              "batch": args.batch, "k": args.k, "tau_prompts": args.tau_prompts, "tau_tokens": args.tau_tokens,
              "eval_windows": args.eval_windows, "trained_for": trained_for,
              "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
              "drafters": {}}
    log = []
    previous = out / "drafters.json"
    if args.only != "both" and previous.is_file():  # keep the other drafter's record when it fits this target
        old = json.loads(previous.read_text(encoding="utf-8"))
        if old.get("trained_for") == trained_for:
            report["drafters"] = {k: v for k, v in old["drafters"].items() if k != args.only}
            log = [row for row in _read_log(out / "drafters_log.csv") if row["model"] != args.only]
    tokens = args.batch * args.seq_len
    if args.only in ("medusa", "both"):
        torch.manual_seed(args.seed)
        heads = MedusaHeads(H, V, args.n_heads).bind(target)
        clock = Clock()
        curve = train_drafter(heads, medusa_loss, target, streams, heldout_ids, args, "medusa",
                              args.medusa_steps, args.medusa_lr, log)
        seconds = clock.read()
        save_drafter(heads, out / "medusa", trained_for, {"loss": "mean over heads of KL(target || head)"})
        report["drafters"]["medusa"] = {"command": args.command, "params": trainable_params(heads), "n_heads": args.n_heads,
                                        "steps": args.medusa_steps, "lr": args.medusa_lr,
                                        "train_tokens": args.medusa_steps * tokens, "seconds": seconds,
                                        "curve": curve, "disk_bytes": folder_bytes(out / "medusa")}
    if args.only in ("eagle", "both"):
        torch.manual_seed(args.seed + 1)
        eagle = EagleDraft(H, V, target.config.num_attention_heads, args.eagle_mlp,
                           target.config.max_position_embeddings).bind(target)
        with torch.no_grad():  # the output norm starts as the target's final norm: ĥ starts in h's scale
            eagle.layer.norm.weight.copy_(target.model.norm.weight)
        clock = Clock()
        curve = train_drafter(eagle, eagle_loss_fn(args.eagle_reg, args.eagle_noise), target, streams, heldout_ids,
                              args, "eagle", args.eagle_steps, args.eagle_lr, log)
        seconds = clock.read()
        save_drafter(eagle, out / "eagle", trained_for,
                     {"loss": f"KL(target || lm_head(h_hat)) + {args.eagle_reg} * smooth_l1(h_hat, h)",
                      "input_noise": args.eagle_noise})
        report["drafters"]["eagle"] = {"command": args.command, "params": trainable_params(eagle), "intermediate_size": args.eagle_mlp,
                                       "steps": args.eagle_steps, "lr": args.eagle_lr,
                                       "train_tokens": args.eagle_steps * tokens, "seconds": seconds,
                                       "curve": curve, "disk_bytes": folder_bytes(out / "eagle")}
    with (out / "drafters_log.csv").open("w", newline="") as f:
        fields = ["model", "step", "train_loss", "heldout_loss", "heldout_alpha", "lr", "wall_s", "cpu_s"]
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(log)

    # measure what ships (fp16 weights), in fp32, against the draft and self-speculation
    proposers, alpha_kwargs = {}, {}
    if "medusa" in report["drafters"]:
        heads = load_medusa(target, out / "medusa")
        proposers["medusa"], alpha_kwargs["medusa"] = (lambda: MedusaProposer(heads)), {"medusa": heads}
    if "eagle" in report["drafters"]:
        eagle = load_eagle(target, out / "eagle")
        proposers["eagle"], alpha_kwargs["eagle"] = (lambda: EagleProposer(eagle)), {"eagle": eagle}
    proposers["draft"], alpha_kwargs["draft"] = (lambda: PlainLMProposer(draft)), {"draft": draft}
    for n in range(1, target.config.num_hidden_layers - 1):
        early = early_exit_draft(target, n)
        proposers[f"early_exit_{n}"] = (lambda m=early: PlainLMProposer(m))
        alpha_kwargs[f"early_exit_{n}"] = {"draft": early}
    clock = Clock()
    report["eval"] = measure_drafters(target, proposers, alpha_kwargs, tokenizer, load_heldout(args.target_from), args)
    report["eval_seconds"] = clock.read()
    report["added_params"] = {"draft": count_params(draft), **{f"early_exit_{n}": 0 for n in
                              range(1, target.config.num_hidden_layers - 1)},
                              **{k: v["params"] for k, v in report["drafters"].items()}}
    (out / "drafters.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if (out / "training.json").is_file():
        pair = json.loads((out / "training.json").read_text(encoding="utf-8"))
        (out / "README.md").write_text(model_card(pair, report), encoding="utf-8")
    for name, per_domain in report["eval"].items():
        print(f"{name:12s} " + "  ".join(f"{d} α {r['alpha']:.3f} τ {r['tau']:.2f}" for d, r in per_domain.items()))
    return report

if __name__ == "__main__":
    main()
