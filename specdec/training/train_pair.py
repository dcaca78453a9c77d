"""Train the course's tiny target/draft pair and ship it (``python -m specdec.training.train``, specdec.training.train).

Steps: build the three-domain corpus (specdec.training.corpus), train one byte-level BPE tokenizer,
train the target (LlamaForCausalLM) on next-token cross-entropy, train the draft (a much
smaller LlamaForCausalLM, same vocabulary) by distillation on the target's logits, save both
in fp16 with save_pretrained, then reload them and measure held-out loss and greedy α per
domain for the model card (specdec.training.cards). Everything is seeded; with the same seed, thread count and
Python version the run reproduces.

    python -m specdec.training.train --out data/models           # the shipped pair (~20 min, 2 cores)
    python -m specdec.training.train --smoke --out /tmp/pair     # a few steps, tiny sizes (CI)

``python -m specdec.training.train drafters`` (specdec.training.train_drafters) trains the drafters that ride on the
trained target.
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

from specdec.core.decoding import count_params
from specdec.core.models import default_path, load_pair
from specdec.training.cards import matching_drafters, model_card
from specdec.training.corpus import DOMAINS, corpus_versions, load_corpus

EOS = "<|endoftext|>"
PAD = "<|pad|>"
MAX_POSITIONS = 1024  # rope positions; prompts + generation in the notebooks stay below

TARGET_ARCH = dict(
    hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, tie_word_embeddings=False
)
DRAFT_ARCH = dict(
    hidden_size=96, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2, tie_word_embeddings=True
)
SMOKE_TARGET_ARCH = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, tie_word_embeddings=False
)
SMOKE_DRAFT_ARCH = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1, tie_word_embeddings=True
)

# defaults under --smoke: tiny sizes, a capped corpus, a few steps
SMOKE = dict(
    vocab_size=384,
    seq_len=32,
    batch=4,
    target_steps=3,
    draft_steps=3,
    max_chars=60_000,
    eval_windows=2,
    log_every=1,
    json_records=200,
)

# the share of training sequences drawn from each domain
DOMAIN_WEIGHTS = {"code": 0.6, "prose": 0.2, "json": 0.2}

# held-out text shipped for the notebooks: about this many characters per domain
HELDOUT_SHIP_CHARS = 4000
HELDOUT_SNIPPET_CHARS = 1000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specdec.training.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.add_argument(
        "--draft-loss",
        choices=("kd", "ce"),
        default="kd",
        help="kd: KL to the target's logits (distillation); ce: next-token cross-entropy",
    )
    p.add_argument(
        "--target-from",
        type=Path,
        default=None,
        help="reuse the tokenizer and target of this trained folder; train only the draft",
    )
    p.add_argument("--max-chars", type=int, default=None, help="cap each domain's text")
    p.add_argument("--json-records", type=int, default=8000, help="generated JSON records")
    p.add_argument(
        "--copy-share",
        type=float,
        default=0.0,
        help="share of training rows that are copy-with-edit rows (a window, a blank line, "
        "the same window with a few tokens replaced); 0 trains on plain windows only",
    )
    p.add_argument("--eval-windows", type=int, default=32, help="held-out windows per domain")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--smoke", action="store_true", help="tiny sizes and a few steps (CI)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv:
        p.set_defaults(**SMOKE)  # explicit flags still win
    args = p.parse_args(argv)
    args.target_arch = SMOKE_TARGET_ARCH if args.smoke else TARGET_ARCH
    args.draft_arch = SMOKE_DRAFT_ARCH if args.smoke else DRAFT_ARCH
    args.command = "python -m specdec.training.train " + shlex.join(argv)
    return args


# --- tokenizer -------------------------------------------------------------------------


def train_tokenizer(corpus: dict, vocab_size: int):
    """one byte-level BPE for both models, trained on the training split of all domains."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [t for d in DOMAINS for t in corpus[d]["train"]]
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, pad_token=PAD, model_max_length=MAX_POSITIONS
    )


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

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **arch,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# --- training --------------------------------------------------------------------------


def copy_row(
    stream: torch.Tensor, length: int, sep: torch.Tensor, gen: torch.Generator, max_edits: int = 3
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, copied) for one copy-with-edit row of `length` tokens: a window A of the stream, the
    separator, then A again with 1..max_edits tokens replaced by tokens drawn from the stream (an
    edit), cut to length. `copied` (length,) is True where the row's token repeats the first copy
    (predictable by looking back), i.e. in the second copy except at the edits.

    Plain text rarely repeats itself within a window, so a small model trained on windows alone
    never learns to look back and copy; these rows teach it, as re-emitting an edited record or
    file asks of a served model.
    """
    half = (length - len(sep)) // 2
    rest = length - half - len(sep)  # second copy; >= half
    start = torch.randint(0, len(stream) - rest, (1,), generator=gen).item()
    first = stream[start : start + half]
    second = stream[start : start + rest].clone()
    n_edits = torch.randint(1, max_edits + 1, (1,), generator=gen).item()
    where = torch.randint(0, half, (n_edits,), generator=gen)
    second[where] = stream[torch.randint(0, len(stream), (n_edits,), generator=gen)]
    copied = torch.zeros(length, dtype=torch.bool)
    copied[half + len(sep) : half + len(sep) + half] = True
    copied[half + len(sep) + where] = False
    return torch.cat([first, sep, second]), copied


def sample_batch(
    streams: dict,
    batch: int,
    seq_len: int,
    gen: torch.Generator,
    copy_share: float = 0.0,
    sep: torch.Tensor | None = None,
) -> torch.Tensor:
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
        rows.append(stream[start : start + seq_len + 1])
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
        return F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True, reduction="batchmean")

    return kd_loss


class Clock:
    """wall and CPU seconds since creation; CPU time counts every thread of this process,
    so it says more than wall time when other work shares the cores."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict:
        return {"wall_s": round(time.perf_counter() - self.wall, 1), "cpu_s": round(time.process_time() - self.cpu, 1)}


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
            log.append(
                dict(
                    model=name,
                    step=step,
                    loss=round(loss.item(), 4),
                    lr=round(opt.param_groups[0]["lr"], 6),
                    **clock.read(),
                )
            )
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


# --- evaluation ------------------------------------------------------------------------


def heldout_windows(stream: torch.Tensor, seq_len: int, n: int) -> torch.Tensor:
    """n windows of seq_len + 1 tokens spread evenly over the stream."""
    n = max(1, min(n, (len(stream) - 1) // seq_len))
    starts = torch.linspace(0, len(stream) - seq_len - 1, n).long().tolist()
    return torch.stack([stream[s : s + seq_len + 1] for s in starts])  # (N, T+1)


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
def copy_skill(target, draft, stream: torch.Tensor, length: int, sep: torch.Tensor, n: int, seed: int = 0) -> dict:
    """teacher-forced on n held-out copy-with-edit rows, at the positions whose next token repeats
    the first copy: how often the target's argmax is that token (copy_target), the draft's
    (copy_draft), and how often the two argmaxes agree (alpha_copy)."""
    gen = torch.Generator().manual_seed(seed)
    rows, masks = zip(*(copy_row(stream, length, sep, gen) for _ in range(n)))
    ids, copied = torch.stack(rows), torch.stack(masks)[:, 1:]  # (N, T+1), (N, T)
    p_top = target(ids[:, :-1], use_cache=False).logits.argmax(-1)  # (N, T)
    q_top = draft(ids[:, :-1], use_cache=False).logits.argmax(-1)
    labels = ids[:, 1:]
    return {
        "copy_target": (p_top == labels)[copied].float().mean().item(),
        "copy_draft": (q_top == labels)[copied].float().mean().item(),
        "alpha_copy": (p_top == q_top)[copied].float().mean().item(),
    }


def evaluate(target, draft, tokenizer, streams, heldout: dict, args) -> dict:
    """per domain: the windowed metrics, copying, and greedy α on the shipped held-out texts."""
    results = {}
    sep = separator(tokenizer)
    for domain in DOMAINS:
        windows = heldout_windows(streams[domain]["heldout"], args.seq_len, args.eval_windows)
        results[domain] = agreement(target, draft, windows)
        results[domain].update(
            copy_skill(
                target, draft, streams[domain]["heldout"], args.seq_len + 1, sep, args.eval_windows, seed=args.seed
            )
        )
        results[domain]["alpha_greedy_shipped_texts"] = greedy_alpha_on_texts(target, draft, tokenizer, heldout[domain])
    return results


# --- shipping --------------------------------------------------------------------------


def _snippet(text: str, limit: int) -> str:
    """whole lines from the middle of text, at most `limit` characters (file headers are
    licences and docstrings, not typical code)."""
    if len(text) <= limit:
        return text
    start = text.find("\n", (len(text) - limit) // 2) + 1
    piece = text[start : start + limit]
    return piece[: piece.rfind("\n")] if "\n" in piece else piece


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
    """train, ship and measure the pair; returns the report (training.json)."""
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
        "versions": {
            **corpus_versions(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "tokenizers": __import__("tokenizers").__version__,
        },
        "vocab_size": len(tokenizer),
        "target": {
            "params": count_params(target),
            "arch": args.target_arch,
            "steps": args.target_steps,
            "train_tokens": args.target_steps * tokens,
            "lr": args.target_lr,
            "from": str(args.target_from) if args.target_from else None,
        },
        "draft": {
            "params": count_params(draft),
            "arch": args.draft_arch,
            "loss": args.draft_loss,
            "steps": args.draft_steps,
            "train_tokens": args.draft_steps * tokens,
            "lr": args.draft_lr,
        },
        "seq_len": args.seq_len,
        "batch": args.batch,
        "copy_share": args.copy_share,
        "domain_weights": DOMAIN_WEIGHTS,
        "corpus": {
            d: {
                s: {"docs": len(corpus[d][s]), "chars": sum(map(len, corpus[d][s])), "tokens": len(streams[d][s])}
                for s in ("train", "heldout")
            }
            for d in DOMAINS
        },
        "heldout_shipped_chars": {d: sum(map(len, heldout[d])) for d in DOMAINS},
        "seconds": times,
        "disk_bytes": {
            **{name: folder_bytes(out / name) for name in ("target", "draft")},
            "tokenizer": tokenizer_bytes(out / "target"),
        },
        "eval": evaluate(target, draft, tokenizer, streams, heldout, args),
    }


def print_summary(report: dict) -> None:
    print(f"seconds {report['seconds']}")
    for domain, r in report["eval"].items():
        print(
            f"{domain:6s} loss target {r['loss_target']:.3f} draft {r['loss_draft']:.3f} "
            f"alpha greedy {r['alpha_greedy']:.3f} sampled {r['alpha_sampled']:.3f} "
            f"(shipped texts {r['alpha_greedy_shipped_texts']:.3f}) copy target {r['copy_target']:.3f} "
            f"draft {r['copy_draft']:.3f} alpha {r['alpha_copy']:.3f}"
        )
