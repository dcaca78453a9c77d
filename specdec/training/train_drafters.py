"""Train the drafters that ride on a trained target: ``python -m specdec.training.train drafters``
(specdec.training.train).

Medusa heads and an EAGLE feature draft (specdec.core.drafters) are trained against the frozen target of
``--target-from`` (default ``--out``), saved in medusa/ and eagle/, and measured (greedy α and τ per domain)
against the separate draft and early exit; ``--smoke`` for tests. Their numbers go to drafters.json and the
model card (specdec.training.cards).

    python -m specdec.training.train drafters --out data/models              # the shipped drafters (~15 min)
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from specdec.core.decoding import count_params
from specdec.core.models import default_path, load_pair
from specdec.training.cards import file_sha256, model_card
from specdec.training.corpus import DOMAINS, load_corpus
from specdec.training.train_pair import Clock, encode_streams, folder_bytes, heldout_windows, lr_at, sample_batch

DRAFTER_SMOKE = dict(
    seq_len=32,
    batch=2,
    medusa_steps=3,
    eagle_steps=3,
    max_chars=60_000,
    json_records=200,
    eval_windows=1,
    eval_every=1,
    tau_prompts=1,
    tau_tokens=6,
    n_heads=2,
    eagle_mlp=32,
)


def parse_drafter_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m specdec.training.train drafters",
        description="Train Medusa-style heads and an EAGLE-style feature draft on a frozen trained target "
        "(its hidden states and logits), save them next to it, measure α and τ per domain.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=default_path(),
        help="folder to write medusa/, eagle/, drafters.json, drafters_log.csv to",
    )
    p.add_argument(
        "--target-from",
        type=Path,
        default=None,
        help="the trained pair whose target (and draft, for comparison) to use; default --out",
    )
    p.add_argument("--only", choices=("medusa", "eagle", "both"), default="both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1: on shared cores, 2 threads waiting on each other ran 4x slower)",
    )
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n-heads", type=int, default=4, help="Medusa heads")
    p.add_argument("--medusa-steps", type=int, default=300)
    p.add_argument("--medusa-lr", type=float, default=2e-3)
    p.add_argument("--eagle-steps", type=int, default=1800)
    p.add_argument("--eagle-lr", type=float, default=2e-3)
    p.add_argument("--eagle-mlp", type=int, default=512, help="intermediate size of EAGLE's decoder layer")
    p.add_argument("--eagle-reg", type=float, default=1.0, help="weight of the smooth-L1 hidden-state loss")
    p.add_argument(
        "--eagle-noise",
        type=float,
        default=0.1,
        help="uniform noise U(-x, x) added to the input hidden states in training (EAGLE)",
    )
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
    args.command = "python -m specdec.training.train drafters " + shlex.join(argv)
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
    logits = heads(h)  # (B, T, n, V)
    T = h.shape[1]
    kls = [_kl(log_p[:, i:], logits[:, : T - i, i - 1]) for i in range(1, heads.n_heads + 1)]
    agree = [
        (logits[:, : T - i, i - 1].argmax(-1) == log_p[:, i:].argmax(-1)).float().mean().item()
        for i in range(1, heads.n_heads + 1)
    ]
    loss = torch.stack(kls).mean()
    return loss, {"kl": loss.item(), "alpha": agree[0], "alpha_heads": agree}


def eagle_loss_fn(reg_weight: float, noise: float):
    """KL(p_{j+1} || lm_head(ĥ_{j+1})) + reg_weight * smooth-L1(ĥ_{j+1}, h_{j+1}), inputs (h_j + noise,
    x_{j+1}) teacher-forced (EAGLE's recipe; the noise stands in for its own errors when drafting)."""

    def loss_fn(eagle, ids, h, log_p, gen=None):
        h_in = h[:, :-1]
        if noise and gen is not None:
            h_in = h_in + noise * (2 * torch.rand(h_in.shape, generator=gen, dtype=h_in.dtype) - 1)
        h_hat = eagle(h_in, ids[:, 1:])  # (B, T-1, H)
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

    states = [(ids, *target_states(target, ids)) for ids in heldout_ids]  # the frozen target's, once

    def heldout():
        module.eval()
        with torch.no_grad():
            parts = [loss_fn(module, ids, h, log_p) for ids, h, log_p in states]
        module.train()
        return (sum(p[0].item() for p in parts) / len(parts), sum(p[1]["alpha"] for p in parts) / len(parts))

    module.train()
    bar = tqdm(range(steps), desc=f"{name} (distillation)")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        ids = sample_batch(streams, args.batch, args.seq_len, gen)[:, :-1]  # (B, T)
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
            log.append(
                dict(
                    model=name,
                    step=step,
                    train_loss=round(sum(recent) / len(recent), 4),
                    heldout_loss=round(held_loss, 4),
                    heldout_alpha=round(held_alpha, 4),
                    lr=round(opt.param_groups[0]["lr"], 6),
                    **clock.read(),
                )
            )
            recent = []
            bar.set_postfix(heldout=f"{held_loss:.3f}", alpha=f"{held_alpha:.3f}")
    module.eval()
    return curve


def measure_drafters(target, proposers: dict, alpha_kwargs: dict, tokenizer, heldout: dict, args) -> dict:
    """{drafter: {domain: {alpha..., tau, rounds, tokens}}}: teacher-forced greedy α on the held-out
    texts, τ of greedy speculation with k drafts on held-out prompts (specdec.core.drafters.greedy_tau)."""
    from specdec.core.decoding import heldout_prompts
    from specdec.core.drafters import greedy_tau, teacher_forced_alpha

    results = {name: {} for name in proposers}
    for domain in DOMAINS:
        texts = [tokenizer(t, return_tensors="pt").input_ids for t in heldout[domain]]
        prompts = heldout_prompts(tokenizer, heldout[domain], args.tau_prompts, prompt_tokens=32, seed=args.seed)
        for name, make in proposers.items():
            alpha = teacher_forced_alpha(target, texts, **alpha_kwargs[name])
            runs = [greedy_tau(target, make(), p, args.tau_tokens, args.k) for p in prompts]
            rounds, tokens = sum(r["rounds"] for r in runs), sum(r["tokens"] for r in runs)
            results[name][domain] = {
                **{k: round(v, 4) for k, v in alpha.items()},
                "tau": round(tokens / rounds, 3),
                "rounds": rounds,
                "tokens": tokens,
            }
    return results


def _read_log(path: Path) -> list:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def main_drafters(argv) -> dict:
    from specdec.core.drafters import (
        EagleDraft,
        EagleProposer,
        MedusaHeads,
        MedusaProposer,
        PlainLMProposer,
        load_eagle,
        load_medusa,
        save_drafter,
        target_fingerprint,
        trainable_params,
    )
    from specdec.core.models import early_exit_draft, load_heldout

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
    trained_for = {
        **target_fingerprint(target),
        "target_sha256": file_sha256(Path(args.target_from) / "target" / "model.safetensors"),
    }
    H, V = target.config.hidden_size, target.config.vocab_size
    report = {
        "command": args.command,
        "seed": args.seed,
        "threads": args.threads,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "k": args.k,
        "tau_prompts": args.tau_prompts,
        "tau_tokens": args.tau_tokens,
        "eval_windows": args.eval_windows,
        "trained_for": trained_for,
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        "drafters": {},
    }
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
        curve = train_drafter(
            heads, medusa_loss, target, streams, heldout_ids, args, "medusa", args.medusa_steps, args.medusa_lr, log
        )
        seconds = clock.read()
        save_drafter(heads, out / "medusa", trained_for, {"loss": "mean over heads of KL(target || head)"})
        report["drafters"]["medusa"] = {
            "command": args.command,
            "params": trainable_params(heads),
            "n_heads": args.n_heads,
            "steps": args.medusa_steps,
            "lr": args.medusa_lr,
            "train_tokens": args.medusa_steps * tokens,
            "seconds": seconds,
            "curve": curve,
            "disk_bytes": folder_bytes(out / "medusa"),
        }
    if args.only in ("eagle", "both"):
        torch.manual_seed(args.seed + 1)
        eagle = EagleDraft(
            H, V, target.config.num_attention_heads, args.eagle_mlp, target.config.max_position_embeddings
        ).bind(target)
        with torch.no_grad():  # the output norm starts as the target's final norm: ĥ starts in h's scale
            eagle.layer.norm.weight.copy_(target.model.norm.weight)
        clock = Clock()
        curve = train_drafter(
            eagle,
            eagle_loss_fn(args.eagle_reg, args.eagle_noise),
            target,
            streams,
            heldout_ids,
            args,
            "eagle",
            args.eagle_steps,
            args.eagle_lr,
            log,
        )
        seconds = clock.read()
        save_drafter(
            eagle,
            out / "eagle",
            trained_for,
            {
                "loss": f"KL(target || lm_head(h_hat)) + {args.eagle_reg} * smooth_l1(h_hat, h)",
                "input_noise": args.eagle_noise,
            },
        )
        report["drafters"]["eagle"] = {
            "command": args.command,
            "params": trainable_params(eagle),
            "intermediate_size": args.eagle_mlp,
            "steps": args.eagle_steps,
            "lr": args.eagle_lr,
            "train_tokens": args.eagle_steps * tokens,
            "seconds": seconds,
            "curve": curve,
            "disk_bytes": folder_bytes(out / "eagle"),
        }
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
        proposers[f"early_exit_{n}"] = lambda m=early: PlainLMProposer(m)
        alpha_kwargs[f"early_exit_{n}"] = {"draft": early}
    clock = Clock()
    report["eval"] = measure_drafters(target, proposers, alpha_kwargs, tokenizer, load_heldout(args.target_from), args)
    report["eval_seconds"] = clock.read()
    report["added_params"] = {
        "draft": count_params(draft),
        **{f"early_exit_{n}": 0 for n in range(1, target.config.num_hidden_layers - 1)},
        **{k: v["params"] for k, v in report["drafters"].items()},
    }
    (out / "drafters.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if (out / "training.json").is_file():
        pair = json.loads((out / "training.json").read_text(encoding="utf-8"))
        (out / "README.md").write_text(model_card(pair, report), encoding="utf-8")
    for name, per_domain in report["eval"].items():
        print(f"{name:12s} " + "  ".join(f"{d} α {r['alpha']:.3f} τ {r['tau']:.2f}" for d, r in per_domain.items()))
    return report
