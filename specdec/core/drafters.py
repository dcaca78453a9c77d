"""Drafters that ride on the target: Medusa-style heads and an EAGLE-style feature draft.

Both read the target's last hidden state h_t (after its final norm: ``target.lm_head(h_t)`` is the
target's logits at position t) and both reuse the target's own LM head (and, for EAGLE, its token
embedding table): they are bound to whatever target they are loaded for, and add only their own small
weights. Trained by ``python -m specdec.training.train drafters`` (see data/models/README.md); shipped in
data/models/medusa/ and data/models/eagle/ (fp16 safetensors + config.json).

- ``MedusaHeads``: n heads; head i (1-based) maps h_t to a prediction of token t+1+i, as
  ``lm_head(h + SiLU(W_i h + b_i))`` (W_i: H x H, zero at initialisation, so every head starts as the
  target's own next-token prediction). Token t+1 is the target's own, from its LM head.
- ``EagleDraft``: one Llama decoder layer (own RoPE, own KV cache over positions) that predicts the next
  hidden state. Input at position j is ``fc([h_j ; e(x_{j+1})])`` (fc: 2H -> H), output ĥ_{j+1}, and
  ``lm_head(ĥ_{j+1})`` predicts x_{j+2}. Drafting feeds its own ĥ back in place of the target's h.

Proposers (the interface of the notebooks' one decoding loop)::

    needs_hidden: bool
    start(tokens (1, T), hidden (T-1, H) or None)       a new sequence
    propose(tokens (1, L), k, temperature, generator)   -> drafts (k',) long, q (k', V) float32
    advance(tokens (1, L), hidden (m, H) or None)       after a round: the positions verified and kept

``MedusaProposer`` and ``EagleProposer`` need the target's hidden states; ``PlainLMProposer`` (a separate
causal LM draft, or ``specdec.core.models.early_exit_draft``) does not, and serves the comparisons here.
``greedy_tau`` measures tokens per target forward of a proposer on a prompt without a decoding loop:
greedy speculative decoding outputs the target's greedy continuation, so each round's accepted length
is the longest prefix of the drafts that matches that continuation.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from specdec.core.decoding import new_cache, probs_from_logits, sample
from specdec.core.models import ModelFilesError, default_path

RETRAIN_DRAFTERS = "python -m specdec.training.train drafters --out data/models"
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


# --- modules ---------------------------------------------------------------------------


class _Bound:
    """holds the target modules a drafter reuses, out of sight of nn.Module (not its parameters,
    not in its state_dict, never saved or trained with it)."""

    def __init__(self, **modules):
        self.__dict__.update(modules)


def _target_dims(target) -> tuple[int, int]:
    return target.lm_head.in_features, target.lm_head.out_features


def _check_target(target, hidden_size: int, vocab_size: int, what: str) -> None:
    if not hasattr(target, "lm_head") or not hasattr(target, "get_input_embeddings"):
        raise ValueError(f"target must be a causal LM with lm_head and input embeddings, got {type(target).__name__}")
    h, v = _target_dims(target)
    if (h, v) != (hidden_size, vocab_size):
        raise ValueError(
            f"target has hidden size {h} and vocabulary {v}, but the {what} was trained for "
            f"hidden size {hidden_size} and vocabulary {vocab_size}"
        )


def _target_dtype(target) -> torch.dtype:
    return target.lm_head.weight.dtype


class _ReadsThroughTarget(nn.Module):
    """A drafter that reads out through a target's LM head (and, for some, its embeddings): bound, not owned.
    Subclasses name themselves (`_what`) and their loader (`_loader`) for the error when nothing is bound."""

    _what, _loader = "drafter", "bind(target)"

    def _bind(self, target, **modules):
        """check `target`'s sizes, hold `modules` (shared, not copied), take the target's dtype."""
        _check_target(target, self.hidden_size, self.vocab_size, self._what)
        self._bound = _Bound(**modules)
        return self.to(_target_dtype(target))

    @property
    def lm_head(self):
        if self._bound.lm_head is None:
            raise RuntimeError(f"no target is bound to the {self._what}: call bind(target) or {self._loader}")
        return self._bound.lm_head


class MedusaHeads(_ReadsThroughTarget):
    """n_heads residual blocks on the target's last hidden state, read out by the target's LM head.

    forward(h (..., H)) -> logits (..., n_heads, V); head i (index i-1) predicts token t+1+i from h_t.
    """

    def __init__(self, hidden_size: int, vocab_size: int, n_heads: int):
        super().__init__()
        self.hidden_size, self.vocab_size, self.n_heads = hidden_size, vocab_size, n_heads
        self.blocks = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(n_heads))
        for block in self.blocks:  # Medusa's initialisation: every head starts as the target's head
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)
        self._bound = _Bound(lm_head=None)

    _what, _loader = "Medusa heads", "load_medusa(target)"

    def bind(self, target) -> "MedusaHeads":
        """use `target`'s LM head (shared, not copied) and its dtype."""
        return self._bind(target, lm_head=target.lm_head)

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., n_heads, H): h + SiLU(W_i h + b_i) per head."""
        return torch.stack([h + F.silu(block(h)) for block in self.blocks], dim=-2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.features(h))

    @torch.no_grad()
    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """logits (n_heads, V) of every head for one hidden state h (H,) (or (1, H)); row i-1 is head i,
        the prediction of the token i+1 positions after h's. For token trees: the top-2 of each row."""
        return self(h.reshape(-1, self.hidden_size)[-1])

    def config_dict(self) -> dict:
        return {
            "kind": "medusa",
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "n_heads": self.n_heads,
        }


def eagle_layer_config(
    hidden_size: int,
    num_attention_heads: int,
    intermediate_size: int,
    max_position_embeddings: int = 1024,
    rope_theta: float = 10000.0,
    rms_norm_eps: float = 1e-6,
):
    """the LlamaConfig of EAGLE's single decoder layer (a LlamaModel fed with embeddings directly)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=1,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        num_hidden_layers=1,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        rms_norm_eps=rms_norm_eps,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


class EagleDraft(_ReadsThroughTarget):
    """fc([h_j ; e(x_{j+1})]) -> one Llama decoder layer + norm -> ĥ_{j+1}; logits = target.lm_head(ĥ).

    forward(h (B, T, H), next_ids (B, T), cache=None) -> ĥ (B, T, H): position j of the input pairs the
    hidden state of position j with the token of position j+1; positions continue from the cache length.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        num_attention_heads: int,
        intermediate_size: int,
        max_position_embeddings: int = 1024,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
    ):
        super().__init__()
        from transformers import LlamaModel

        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.layer_config = eagle_layer_config(
            hidden_size, num_attention_heads, intermediate_size, max_position_embeddings, rope_theta, rms_norm_eps
        )
        self.fc = nn.Linear(2 * hidden_size, hidden_size)
        self.layer = LlamaModel(self.layer_config)
        self.layer.embed_tokens = None  # fed with fc's output; the token embedding is the target's
        self._bound = _Bound(lm_head=None, embed=None)

    _what, _loader = "EAGLE draft", "load_eagle(target)"

    def bind(self, target) -> "EagleDraft":
        """use `target`'s LM head and token embeddings (shared, not copied) and its dtype."""
        return self._bind(target, lm_head=target.lm_head, embed=target.get_input_embeddings())

    @property
    def embed(self):
        self.lm_head  # noqa: B018 (raises when unbound)
        return self._bound.embed

    def new_cache(self, batch: int = 1):
        return new_cache(self.layer, batch)

    def forward(
        self, h: torch.Tensor, next_ids: torch.Tensor, cache=None, attention_mask=None, position_ids=None
    ) -> torch.Tensor:
        """attention_mask (B, 1, T, cached + T) bool and position_ids (B, T), both optional, as for the target:
        what a token tree of drafts needs (notebook 09 drafts EAGLE-2's dynamic trees with them)."""
        x = self.fc(torch.cat([h, self.embed(next_ids)], dim=-1))  # (B, T, H)
        return self.layer(
            inputs_embeds=x,
            cache=cache,
            use_cache=cache is not None,
            attention_mask=attention_mask,
            position_ids=position_ids,
        ).last_hidden_state

    def logits(self, h_hat: torch.Tensor) -> torch.Tensor:
        return self.lm_head(h_hat)

    def config_dict(self) -> dict:
        c = self.layer_config
        return {
            "kind": "eagle",
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "num_attention_heads": c.num_attention_heads,
            "intermediate_size": c.intermediate_size,
            "max_position_embeddings": c.max_position_embeddings,
            "rope_theta": c.rope_parameters["rope_theta"],
            "rms_norm_eps": c.rms_norm_eps,
        }


def trainable_params(module: nn.Module) -> int:
    """the drafter's own parameters (the target's LM head and embeddings are reused, not counted)."""
    return sum(p.numel() for p in module.parameters())


# --- files -----------------------------------------------------------------------------


def target_fingerprint(target) -> dict:
    """what a drafter remembers of the target it was trained for: its sizes and a checksum of its LM
    head (a float, so that a bf16 or padded copy of the same target still matches within rounding)."""
    h, v = _target_dims(target)
    w = target.lm_head.weight.detach().float()
    return {"hidden_size": h, "vocab_size": v, "lm_head_abs_mean": round(w.abs().mean().item(), 6)}


def save_drafter(module, folder: Path, trained_for: dict, extra: dict | None = None) -> None:
    """fp16 safetensors of the drafter's own weights + config.json (sizes, kind, the target it was
    trained for). The target's reused LM head and embeddings are not saved."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    config = {**module.config_dict(), "dtype_on_disk": "float16", "trained_for": trained_for, **(extra or {})}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _fail(folder: Path, problem: str) -> ModelFilesError:
    return ModelFilesError(
        f"{problem}\ndrafter folder: {folder}\nretrain the drafters (a few minutes on 2 cores) "
        f"from the repository root with:\n    {RETRAIN_DRAFTERS}"
    )


def _read(folder: Path, kind: str) -> tuple[dict, dict]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (folder / name).is_file()]
    if missing:
        raise _fail(folder, f"missing {kind} files: " + ", ".join(missing))
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        state = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError, SafetensorError) as err:
        raise _fail(folder, f"{kind} files do not load ({type(err).__name__}: {err})") from err
    if config.get("kind") != kind:
        raise _fail(folder, f"{folder / CONFIG_FILE} describes {config.get('kind')!r}, not {kind!r}")
    return config, state


def _bind_loaded(module, state: dict, config: dict, target, folder: Path, kind: str):
    _check_target(target, config["hidden_size"], config["vocab_size"], f"{kind} drafter in {folder}")
    try:
        module.load_state_dict({k: v.float() for k, v in state.items()})
    except RuntimeError as err:
        raise _fail(folder, f"{kind} weights do not match {CONFIG_FILE} ({err})") from err
    trained = config.get("trained_for", {}).get("lm_head_abs_mean")
    now = target_fingerprint(target)["lm_head_abs_mean"]
    if trained and abs(now - trained) > 2e-3 * abs(trained):
        warnings.warn(
            f"the {kind} drafter in {folder} was trained for another target (LM head checksum "
            f"{trained}, this target {now}): it loads, but expect low acceptance",
            stacklevel=3,
        )
    return module.bind(target).eval()


def load_medusa(target, path: str | Path | None = None) -> MedusaHeads:
    """the Medusa heads of `path` (default data/models/medusa), bound to `target`'s LM head, in its dtype.
    ValueError when the target's hidden size or vocabulary differ from the heads'; ModelFilesError when
    files are missing or broken."""
    folder = Path(path) if path is not None else default_path() / "medusa"
    config, state = _read(folder, "medusa")
    heads = MedusaHeads(config["hidden_size"], config["vocab_size"], config["n_heads"])
    return _bind_loaded(heads, state, config, target, folder, "medusa")


def load_eagle(target, path: str | Path | None = None) -> EagleDraft:
    """the EAGLE draft of `path` (default data/models/eagle), bound to `target`'s LM head and embeddings,
    in its dtype. Errors as load_medusa."""
    folder = Path(path) if path is not None else default_path() / "eagle"
    config, state = _read(folder, "eagle")
    eagle = EagleDraft(
        config["hidden_size"],
        config["vocab_size"],
        config["num_attention_heads"],
        config["intermediate_size"],
        config.get("max_position_embeddings", 1024),
        config.get("rope_theta", 10000.0),
        config.get("rms_norm_eps", 1e-6),
    )
    return _bind_loaded(eagle, state, config, target, folder, "eagle")


# --- proposers -------------------------------------------------------------------------


def _check_tokens(tokens) -> int:
    if not (isinstance(tokens, torch.Tensor) and tokens.dim() == 2 and tokens.shape[0] == 1 and tokens.shape[1] >= 1):
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be a (1, L) LongTensor with L >= 1, got {shape}")
    return tokens.shape[1]


def _check_k(k) -> None:
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")


def _hidden_2d(hidden, hidden_size: int, name: str = "hidden") -> torch.Tensor:
    if not (isinstance(hidden, torch.Tensor) and hidden.dim() == 2 and hidden.shape[1] == hidden_size):
        shape = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(f"{name} must be a (m, {hidden_size}) tensor of the target's last hidden states, got {shape}")
    return hidden


def _empty(vocab_size: int):
    return torch.zeros(0, dtype=torch.long), torch.zeros(0, vocab_size, dtype=torch.float32)


def _draw(logits: torch.Tensor, temperature: float, generator):
    """(V,) logits -> (token, q (V,) float32): q = probs_from_logits, token = sample(q)."""
    q = probs_from_logits(logits, temperature)
    return sample(q, generator), q


class MedusaProposer:
    """Drafts from the last hidden state the target has produced, h_{L-2}: head i proposes the token at
    position L-1+i (i = 1..k'), k' = min(k, n_heads). One call of the heads per round, no cache."""

    needs_hidden = True

    def __init__(self, heads: MedusaHeads):
        self.heads = heads
        self.last, self.seen = None, 0

    def start(self, tokens, hidden):
        length = _check_tokens(tokens)
        hidden = _hidden_2d(hidden, self.heads.hidden_size)
        if hidden.shape[0] != length - 1:
            raise ValueError(
                f"hidden must hold the {length - 1} positions before the last token, got {hidden.shape[0]}"
            )
        self.seen = hidden.shape[0]
        self.last = hidden[-1] if self.seen else None

    def propose(self, tokens, k, temperature, generator=None):
        length = _check_tokens(tokens)
        _check_k(k)
        if self.seen != length - 1:
            raise ValueError(
                f"the proposer has seen {self.seen} hidden states but tokens has {length} "
                f"tokens: call start(), then advance() after every round"
            )
        k = min(k, self.heads.n_heads)
        if k == 0 or self.last is None:
            return _empty(self.heads.vocab_size)
        logits = self.heads.head_logits(self.last)[:k]  # (k, V)
        drafts, qs = zip(*(_draw(logits[i], temperature, generator) for i in range(k)))
        return torch.stack(drafts), torch.stack(qs)

    def advance(self, tokens, hidden):
        length = _check_tokens(tokens)
        hidden = _hidden_2d(hidden, self.heads.hidden_size)
        if self.seen + hidden.shape[0] != length - 1:
            raise ValueError(
                f"after this round the proposer must have seen {length - 1} hidden states; it had "
                f"{self.seen} and got {hidden.shape[0]}"
            )
        self.seen = length - 1
        if hidden.shape[0]:
            self.last = hidden[-1]

    def topk_tree(self, k: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens (n_heads, k), logits (n_heads, V)): the top-k candidates of every head for the next
        round, from the last seen hidden state (row i-1: candidates for the token i positions ahead)."""
        if self.last is None:
            raise ValueError("no hidden state seen yet: start() with a prompt of at least 2 tokens")
        logits = self.heads.head_logits(self.last)
        return logits.topk(k, dim=-1).indices, logits


class EagleProposer:
    """Autoregressive drafting over features: the layer's KV cache holds positions 0..n-1 computed from the
    target's true hidden states; each round feeds the positions not cached yet, then drafts k tokens feeding
    its own ĥ back, and crops its cache back to the true positions (drafts are re-fed with the target's
    hidden states once verified, as EAGLE does)."""

    needs_hidden = True

    def __init__(self, eagle: EagleDraft):
        self.eagle = eagle
        self.hidden, self.cache = None, None

    def start(self, tokens, hidden):
        length = _check_tokens(tokens)
        hidden = _hidden_2d(hidden, self.eagle.hidden_size)
        if hidden.shape[0] != length - 1:
            raise ValueError(
                f"hidden must hold the {length - 1} positions before the last token, got {hidden.shape[0]}"
            )
        self.hidden = hidden.detach().clone()
        self.cache = self.eagle.new_cache()

    @torch.no_grad()
    def propose(self, tokens, k, temperature, generator=None):
        length = _check_tokens(tokens)
        _check_k(k)
        if self.hidden is None or self.hidden.shape[0] != length - 1:
            seen = None if self.hidden is None else self.hidden.shape[0]
            raise ValueError(
                f"the proposer has seen {seen} hidden states but tokens has {length} tokens: "
                f"call start(), then advance() after every round"
            )
        n = length - 1  # true positions 0..n-1, pairs (h_j, x_{j+1})
        if k == 0 or n == 0:
            return _empty(self.eagle.vocab_size)
        cached = self.cache.get_seq_length()
        if cached >= n:  # the last true position is fed again: its output ĥ_{L-1} gives the first draft
            self.cache.crop(-(cached - n + 1))
            cached = n - 1
        h = self.hidden[cached:].unsqueeze(0)  # (1, n - cached, H)
        h_hat = self.eagle(h, tokens[:, cached + 1 :], self.cache)[0, -1]  # ĥ_{L-1}
        drafts, qs = [], []
        for i in range(k):
            token, q = _draw(self.eagle.logits(h_hat), temperature, generator)
            drafts.append(token)
            qs.append(q)
            if i + 1 < k:
                h_hat = self.eagle(h_hat.view(1, 1, -1), token.view(1, 1), self.cache)[0, -1]
        extra = self.cache.get_seq_length() - n
        if extra:
            self.cache.crop(-extra)
        return torch.stack(drafts), torch.stack(qs)

    def advance(self, tokens, hidden):
        length = _check_tokens(tokens)
        hidden = _hidden_2d(hidden, self.eagle.hidden_size)
        if self.hidden.shape[0] + hidden.shape[0] != length - 1:
            raise ValueError(
                f"after this round the proposer must have seen {length - 1} hidden states; it had "
                f"{self.hidden.shape[0]} and got {hidden.shape[0]}"
            )
        self.hidden = torch.cat([self.hidden, hidden.detach().to(self.hidden.dtype)])


class PlainLMProposer:
    """A causal LM as the draft (the separate draft, or early_exit_draft), for the model card's τ: k greedy or
    sampled steps per round, each a full forward over the sequence so far, with **no KV cache**. Slow but
    simple: it exists to measure acceptance, not speed. (Drafting with a cache that is rolled back every round
    is notebook 04's graded work, and the notebooks' decoding loop holds that version.)"""

    needs_hidden = False

    def __init__(self, model):
        self.model = model

    def start(self, tokens, hidden=None):
        _check_tokens(tokens)

    @torch.no_grad()
    def propose(self, tokens, k, temperature, generator=None):
        _check_tokens(tokens)
        _check_k(k)
        if k == 0:
            return _empty(self.model.config.vocab_size)
        seq, drafts, qs = tokens, [], []
        for _ in range(k):
            token, q = _draw(self.model(seq).logits[0, -1], temperature, generator)
            drafts.append(token)
            qs.append(q)
            seq = torch.cat([seq, token.view(1, 1)], dim=1)
        return torch.stack(drafts), torch.stack(qs)

    def advance(self, tokens, hidden=None):
        _check_tokens(tokens)


# --- measurement -----------------------------------------------------------------------


@torch.no_grad()
def last_hidden(target, ids: torch.Tensor) -> torch.Tensor:
    """(T, H): the target's last hidden states (after its final norm) at every position of ids (1, T)."""
    return target.model(ids, use_cache=False).last_hidden_state[0]


@torch.no_grad()
def greedy_tau(target, proposer, prompt: torch.Tensor, new_tokens: int, k: int) -> dict:
    """Tokens per target forward of greedy speculative decoding with `proposer` and k drafts per round,
    measured without a decoding loop: greedy speculative decoding outputs exactly the target's greedy
    continuation G, so a round that drafts d accepts the longest prefix of d that matches G and adds one
    token of G (the correction, or the bonus after k matches). The hidden states the proposer gets are the
    target's on prompt + G in one forward (a real loop computes them in pieces: equal up to rounding).

    {"rounds": target forwards, "tokens": new tokens, "tau": tokens / rounds, "accepted": drafts accepted,
    "drafted": drafts proposed}.
    """
    from specdec.core.decoding import greedy_generate

    full = greedy_generate(target, prompt, new_tokens)  # (1, T + N)
    hidden = last_hidden(target, full[:, :-1]) if proposer.needs_hidden else None
    length, end = prompt.shape[1], full.shape[1]
    proposer.start(full[:, :length], hidden[: length - 1] if hidden is not None else None)
    rounds = accepted = drafted = 0
    while length < end:
        seq = full[:, :length]
        drafts, _ = proposer.propose(seq, min(k, end - length), 0.0)
        truth = full[0, length : length + len(drafts)]
        match = (drafts == truth).long()
        a = int(match.cumprod(0).sum().item()) if len(drafts) else 0
        rounds, accepted, drafted = rounds + 1, accepted + a, drafted + len(drafts)
        new_length = min(length + a + 1, end)
        proposer.advance(full[:, :new_length], hidden[length - 1 : new_length - 1] if hidden is not None else None)
        length = new_length
    produced = end - prompt.shape[1]
    return {"rounds": rounds, "tokens": produced, "tau": produced / rounds, "accepted": accepted, "drafted": drafted}


@torch.no_grad()
def teacher_forced_alpha(target, texts_ids: list[torch.Tensor], medusa=None, eagle=None, draft=None) -> dict:
    """Greedy α teacher-forced on token ids (each (1, T)): the fraction of positions where the drafter's
    argmax equals the target's argmax for the same token.

    medusa: {"head_1": ..., "head_i": ...}, head i on h_t against the target's argmax at position t+i
    (head 1 is the position-1 prediction); eagle: fed (h_j, x_{j+1}) with the target's true states,
    lm_head(ĥ_{j+1}) against the target's argmax at j+1; draft: a causal LM against the target, position
    by position.
    """
    agree, total = {}, {}

    def add(name, a, b):
        agree[name] = agree.get(name, 0) + (a == b).sum().item()
        total[name] = total.get(name, 0) + a.numel()

    for ids in texts_ids:
        h = last_hidden(target, ids)  # (T, H)
        top = target.lm_head(h).argmax(-1)  # (T,)
        if medusa is not None:
            pred = medusa(h).argmax(-1)  # (T, n_heads)
            for i in range(1, medusa.n_heads + 1):
                if len(top) > i:
                    add(f"head_{i}", pred[:-i, i - 1], top[i:])
        if eagle is not None and len(top) > 1:
            h_hat = eagle(h[None, :-1], ids[:, 1:])[0]  # (T-1, H)
            add("alpha", eagle.logits(h_hat).argmax(-1), top[1:])
        if draft is not None:
            add("alpha", draft(ids, use_cache=False).logits[0].argmax(-1), top)
    out = {name: agree[name] / total[name] for name in agree}
    if medusa is not None:
        out["alpha"] = out["head_1"]
    return out
