"""A lean forward for a Llama model: a preallocated KV cache and as few operations per token as the maths needs.

Used by notebook 09 (section 2, "Where a round's time goes") to take the framework's work out of the draft: the
course's draft has 0.6 M parameters (2.4 MB in fp32), so reading its weights takes a fraction of a millisecond, yet a
step through transformers' ``LlamaForCausalLM`` costs several times that. Most of a tiny model's step is work per
*operation* (Python, module calls, the attention-mask and rotary set-up, the cache's ``torch.cat`` per layer), not
per byte. ``LeanLlama`` runs the same weights with:

- q, k, v fused into one matrix and gate, up into another (fewer, larger matrix products; nn.Linear layers only:
  an int8 layer of ``torch.ao`` keeps its own module),
- transformers' RMS norm in four operators and precomputed rotary cos/sin tables (one lookup per step),
- a key/value cache preallocated to the longest sequence: a step writes its positions in place, and rolling the
  cache back is setting its length (no copy, no ``torch.cat``),
- the LM head on the rows asked for only (``logits_to_keep``), like transformers.

It is a drop-in for the calls the course's decoding loop makes: ``model(ids, cache=..., use_cache=True)`` returns an
object with ``.logits`` (1, m, V) (and ``.hidden_states[-1]``, the final-norm states, when asked), and
``specdec.core.decoding.new_cache(model)`` returns its cache, whose ``get_seq_length()`` and ``crop(n)`` behave as
transformers' ``DynamicCache``'s. Its logits equal transformers' up to float rounding (the fused products sum in
another order): used as a *draft* that changes nothing the target accepts (exactness is the target's), and
``tests/test_lean.py`` checks greedy decoding with it against transformers' for the course's models.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps):
    """transformers' LlamaRMSNorm, its operators in its order (normalised in fp32, cast back, then scaled):
    bit for bit the same, in fewer operators than ``F.rms_norm``'s decomposition on CPU (measured: 5 of them)."""
    h = x if x.dtype == torch.float32 else x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h if x.dtype == torch.float32 else h.to(x.dtype))


def rotary_tables(rotary_emb, head_dim, max_len, dtype):
    """(cos, sin, causal): transformers' rotary embedding as tables over positions (max_len, head_dim), sin carrying
    rotate_half's sign so that rotate_half(x) * sin = x.roll(head_dim / 2) * sin, and the causal mask (max_len,
    max_len): one lookup per step (the lean forwards here and in specdec.core.moe_twin)."""
    pos = torch.arange(max_len, dtype=torch.float32)
    freqs = pos[:, None] * rotary_emb.inv_freq.float()[None, :]  # (max_len, head_dim / 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = head_dim // 2
    sign = torch.cat((-torch.ones(half), torch.ones(half)))
    cos = (emb.cos() * rotary_emb.attention_scaling).to(dtype)
    sin = (emb.sin() * rotary_emb.attention_scaling * sign).to(dtype)
    return cos, sin, torch.ones(max_len, max_len, dtype=torch.bool).tril()


class LeanCache:
    """Keys and values of every layer, preallocated: (batch, kv_heads, max_len, head_dim) each; `length` positions
    held (the same for every row of the batch)."""

    def __init__(self, layers, kv_heads, max_len, head_dim, dtype, batch=1):
        shape = (batch, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.batch, self.length, self.max_len = batch, 0, max_len

    def get_seq_length(self, layer_idx=0) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Keep the first `max_length` positions (a negative value removes that many from the end), as
        transformers' DynamicCache.crop does: only the length changes; the next step overwrites what lies beyond."""
        if max_length < 0:
            max_length = self.length + max_length
        if max_length < 0:
            raise ValueError(f"max_length: cannot crop {self.length} positions to {max_length}")
        self.length = min(self.length, max_length)


class LeanLlama(torch.nn.Module):
    """`model` (a transformers LlamaForCausalLM, eval mode) run by a lean forward; see the module text.

    The weights are the model's own (the fused q/k/v and gate/up matrices are copies, made once here). A module,
    so that forward hooks (``specdec.measure.profiling``, ``ForwardCounter``) see its calls."""

    def __init__(self, model, max_len: int | None = None):
        super().__init__()
        cfg = model.config
        if getattr(cfg, "model_type", None) != "llama":
            raise ValueError(f"model must be a Llama model, got model_type {getattr(cfg, 'model_type', None)!r}")
        self.config = cfg
        inner = model.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_len = int(max_len or cfg.max_position_embeddings)
        self.embed = inner.embed_tokens
        self.dtype = inner.embed_tokens.weight.dtype
        with torch.no_grad():
            self.layers = [self._layer(layer) for layer in inner.layers]
        self.norm_w, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = model.lm_head
        self.cos, self.sin, self.causal = rotary_tables(inner.rotary_emb, self.head_dim, self.max_len, self.dtype)

    def _layer(self, layer):
        att, mlp = layer.self_attn, layer.mlp
        plain = all(
            type(m) is torch.nn.Linear and m.bias is None
            for m in (att.q_proj, att.k_proj, att.v_proj, mlp.gate_proj, mlp.up_proj)
        )
        return SimpleNamespace(
            ln1=layer.input_layernorm.weight,
            eps1=layer.input_layernorm.variance_epsilon,
            ln2=layer.post_attention_layernorm.weight,
            eps2=layer.post_attention_layernorm.variance_epsilon,
            qkv=torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]) if plain else None,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]) if plain else None,
            q=att.q_proj,
            k=att.k_proj,
            v=att.v_proj,
            o=att.o_proj,
            gate=mlp.gate_proj,
            up=mlp.up_proj,
            down=mlp.down_proj,
            scaling=att.scaling,
        )

    def new_cache(self, batch: int = 1) -> LeanCache:
        if isinstance(batch, bool) or batch != 1:
            raise ValueError(f"batch must be 1 for LeanLlama: its cache holds one sequence, got batch {batch!r}")
        return LeanCache(len(self.layers), self.kv_heads, self.max_len, self.head_dim, self.dtype)

    @torch.no_grad()
    def forward(self, input_ids, cache=None, use_cache=True, logits_to_keep=0, output_hidden_states=False, **_):
        if cache is None:
            cache = self.new_cache()
        if not isinstance(cache, LeanCache):
            raise ValueError(f"cache must be this model's LeanCache (new_cache()), got {type(cache).__name__}")
        ids = input_ids.reshape(-1)
        m, start = ids.shape[0], cache.length
        end = start + m
        if end > self.max_len:
            raise ValueError(f"input_ids: {end} positions exceed the cache's max_len {self.max_len}")
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        x = self.embed(ids)  # (m, H)
        cos, sin = self.cos[start:end, None, :], self.sin[start:end, None, :]  # (m, 1, hd)
        causal = m > 1 and start == 0  # a prefill: the causal kernel
        mask = None if m == 1 or causal else self.causal[start:end, :end]
        half = hd // 2
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L.ln1, L.eps1)
            if L.qkv is not None:
                qkv = F.linear(h, L.qkv).view(m, nh + 2 * nkv, hd)
                qk, v = qkv[:, : nh + nkv], qkv[:, nh + nkv :]
            else:
                qk = torch.cat([L.q(h), L.k(h)], dim=-1).view(m, nh + nkv, hd)
                v = L.v(h).view(m, nkv, hd)
            qk = qk * cos + qk.roll(half, dims=-1) * sin  # rotary, q and k at once
            keys, values = cache.keys[i], cache.values[i]
            keys[0, :, start:end].copy_(qk[:, nh:].transpose(0, 1))
            values[0, :, start:end].copy_(v.transpose(0, 1))
            q = qk[:, :nh].transpose(0, 1).unsqueeze(0)  # (1, nh, m, hd)
            a = F.scaled_dot_product_attention(
                q,
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=mask,
                is_causal=causal,
                scale=L.scaling,
                enable_gqa=nh != nkv,
            )
            x = x + L.o(a[0].transpose(0, 1).reshape(m, nh * hd))
            h = rms_norm(x, L.ln2, L.eps2)
            if L.gate_up is not None:
                g, u = F.linear(h, L.gate_up).chunk(2, dim=-1)
            else:
                g, u = L.gate(h), L.up(h)
            x = x + L.down(F.silu(g) * u)
        cache.length = end
        x = rms_norm(x, self.norm_w, self.norm_eps)
        keep = x if not logits_to_keep else x[-logits_to_keep:]
        logits = self.lm_head(keep).unsqueeze(0)  # (1, m', V)
        return SimpleNamespace(logits=logits, hidden_states=(x.unsqueeze(0),) if output_hidden_states else None)


def __getattr__(name):
    """time_step_parts moved to specdec.measure.profiling (issue 64: core imports no measure); a notebook saved before
    the move still imports it from here, with a FutureWarning (specdec.moved)."""
    from specdec.moved import moved_name

    return moved_name(__name__, name)
