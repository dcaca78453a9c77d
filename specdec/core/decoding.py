"""Decoding plumbing: the plain KV-cached decoder every speedup is measured against, and small tools.

Nothing here is speculative: the draft/verify loop and its acceptance rule are the learner's work
(notebook 04). What is here:

- ``probs_from_logits``: logits -> next-token probabilities; temperature 0 gives the one-hot argmax.
- ``sample``: one token per row of a probability table, from an optional seeded generator.
- ``feed``: run a model on the tokens its KV cache does not hold yet (the cache bookkeeping rule).
- ``plain_generate`` / ``greedy_generate``: one model forward per new token, with a KV cache.
- ``tiny_llama``: a randomly initialised LlamaForCausalLM of a chosen size (tests, timing experiments).
- ``ForwardCounter``: counts a module's forward calls, the tokens they processed and their seconds.
- ``forward_step``: one cached forward pass of w tokens, as a callable to time with specdec.measure.timing.

transformers 5.x names used here (checked against the installed 5.24 source):
``model(input_ids, cache=DynamicCache(config=model.config), use_cache=True)`` (``past_key_values=``
is deprecated, removed in 5.40), and ``DynamicCache.crop(-n)`` removes the last n positions
(a positive argument raises).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def new_cache(model, batch=1):
    """An empty KV cache for `model`: transformers' DynamicCache, or the model's own where it has one
    (``specdec.core.lean.LeanLlama``, whose cache is preallocated). batch: the sequences it holds; a model's own
    cache takes it and refuses what it cannot hold (LeanLlama holds one sequence)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if hasattr(model, "new_cache"):
        return model.new_cache(batch)
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def probs_from_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """(..., V) logits -> (..., V) probabilities at `temperature` (>= 0).

    Temperature 0 is greedy decoding: the one-hot vector of the argmax (first index on ties,
    like torch.argmax), so that sampling from it always returns the argmax.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(torch.float32)
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of (..., V) probabilities (LongTensor of shape (...)).

    Inverse-CDF sampling: draw u uniform in [0, total) and take the first token whose cumulative
    probability exceeds u (a token of probability 0 is never drawn; a one-hot row always gives its
    token). Same distribution as torch.multinomial, several times faster for one draw over a
    few thousand tokens on a CPU.
    """
    flat = probs.reshape(-1, probs.shape[-1])
    cdf = flat.cumsum(dim=-1)  # (N, V)
    u = torch.rand(flat.shape[0], 1, generator=generator, dtype=cdf.dtype) * cdf[:, -1:]
    ids = torch.searchsorted(cdf, u, right=True).clamp_(max=flat.shape[-1] - 1)  # (N, 1)
    return ids.reshape(probs.shape[:-1])


@torch.no_grad()
def feed(model, cache, tokens: torch.Tensor) -> torch.Tensor:
    """Run `model` on the tokens of `tokens` (1, L) that `cache` does not hold yet.

    The cache holds the keys and values of tokens[:, :n] (n = cache.get_seq_length()); this feeds
    tokens[:, n:], which appends them to the cache, and returns their logits, shape (L - n, V).
    Position ids follow from the cache length, so a cropped cache simply resumes from there.
    """
    n_cached = cache.get_seq_length()
    if n_cached >= tokens.shape[1]:
        raise ValueError(f"cache holds {n_cached} positions, tokens has only {tokens.shape[1]}: nothing to feed")
    out = model(tokens[:, n_cached:], cache=cache, use_cache=True)
    return out.logits[0]  # (L - n, V)


def check_ids(input_ids, max_new_tokens):
    """ValueError unless input_ids is a (1, T) LongTensor, T >= 1, and max_new_tokens >= 1 (the decoders' inputs)."""
    if not (
        isinstance(input_ids, torch.Tensor)
        and input_ids.dim() == 2
        and input_ids.shape[0] == 1
        and input_ids.shape[1] >= 1
    ):
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a (1, T) LongTensor with T >= 1, got {shape}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


@torch.no_grad()
def plain_generate(model, input_ids, max_new_tokens, temperature=0.0, generator=None):
    """(1, T + max_new_tokens) tokens from plain decoding: one forward of `model` per new token.

    input_ids: (1, T) prompt. temperature 0 is greedy (argmax). End-of-sequence is ignored:
    exactly max_new_tokens tokens are produced, as speculative_generate does.
    """
    check_ids(input_ids, max_new_tokens)
    cache = new_cache(model)
    logits = model(input_ids, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]  # (V,)
    out = [input_ids]
    for i in range(max_new_tokens):
        token = sample(probs_from_logits(logits, temperature), generator).view(1, 1)
        out.append(token)
        if i + 1 < max_new_tokens:
            logits = model(token, cache=cache, use_cache=True).logits[0, -1]
    return torch.cat(out, dim=1)


def greedy_generate(model, input_ids, max_new_tokens):
    """The target's own greedy decoding, KV-cached: the reference speculative decoding must equal."""
    return plain_generate(model, input_ids, max_new_tokens, temperature=0.0)


def keep_cache_positions(cache, positions) -> None:
    """Keep only `positions` (increasing ints) of every layer of a DynamicCache, dropping the rest.

    After a token tree's forward pass the cache holds every node; keeping the prefix and the accepted path
    leaves it exactly as if the path alone had been fed (notebook 09).
    """
    idx = torch.as_tensor(list(positions), dtype=torch.long)
    if idx.dim() != 1 or (len(idx) > 1 and not bool((idx[1:] > idx[:-1]).all())):
        raise ValueError(f"positions must be increasing ints, got {idx.tolist()}")
    for layer in cache.layers:
        if not len(idx) or int(idx[-1]) >= layer.keys.shape[-2] or int(idx[0]) < 0:
            raise ValueError(f"positions must lie in [0, {layer.keys.shape[-2]}), got {idx.tolist()}")
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)


def tiny_llama(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=None,
    seed=0,
    max_position_embeddings=2048,
):
    """A randomly initialised LlamaForCausalLM (eval mode, fp32, CPU), reproducible from `seed`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        intermediate_size=intermediate_size or 4 * hidden_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def count_params(model) -> int:
    """distinct parameters (a tied embedding counts once: parameters() yields it once)."""
    return sum(p.numel() for p in model.parameters())


class ForwardCounter:
    """Counts forward calls of a module, the tokens they processed and the seconds spent inside them
    (``each``: the seconds of every call, in order).

        with ForwardCounter(target) as calls:
            ...
        calls.calls, calls.tokens, calls.seconds, calls.each
    """

    def __init__(self, module):
        self.module, self.calls, self.tokens, self.seconds, self.each = module, 0, 0, 0.0, []
        self._handles, self._t0 = [], []

    def _pre(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls += 1
        self.tokens += int(ids.shape[-1]) if isinstance(ids, torch.Tensor) else 0
        self._t0.append(time.perf_counter())

    def _post(self, module, args, kwargs, output):
        if self._t0:
            self.each.append(time.perf_counter() - self._t0.pop())
            self.seconds += self.each[-1]

    def __enter__(self):
        self._handles = [
            self.module.register_forward_pre_hook(self._pre, with_kwargs=True),
            self.module.register_forward_hook(self._post, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        return False


def heldout_prompts(tokenizer, texts, n_prompts, prompt_tokens=24, seed=0):
    """`n_prompts` prompts, each a (1, prompt_tokens) LongTensor cut from `texts` at a seeded random
    token offset (texts too short for one window are skipped)."""
    import random

    if n_prompts < 1:
        raise ValueError(f"n_prompts must be >= 1, got {n_prompts}")
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    encoded = [tokenizer(text)["input_ids"] for text in texts]
    encoded = [ids for ids in encoded if len(ids) > prompt_tokens]
    if not encoded:
        raise ValueError(f"texts must hold at least one text longer than prompt_tokens = {prompt_tokens} tokens")
    rng = random.Random(seed)
    prompts = []
    for _ in range(n_prompts):
        ids = rng.choice(encoded)
        start = rng.randrange(0, len(ids) - prompt_tokens)
        prompts.append(torch.tensor([ids[start : start + prompt_tokens]], dtype=torch.long))
    return prompts


def forward_step(model, width, context=64, vocab_size=None, seed=0, batch=1):
    """A zero-argument callable that runs one cached forward pass of `width` tokens after `context`
    cached tokens, then crops the cache back, so every call sees the same context length.

    width 1 is a plain decode step; width k+1 is a verify step; batch sequences run side by side (each
    `width` tokens after its own `context`). Time it with specdec.measure.timing (median_seconds, or
    interleaved_medians to compare several under the same load).
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    vocab_size = vocab_size or model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    cache = new_cache(model, batch)
    with torch.no_grad():
        model(torch.randint(0, vocab_size, (batch, context), generator=gen), cache=cache, use_cache=True)
    x = torch.randint(0, vocab_size, (batch, width), generator=gen)

    @torch.no_grad()
    def step():
        model(x, cache=cache, use_cache=True)
        cache.crop(-width)

    return step
