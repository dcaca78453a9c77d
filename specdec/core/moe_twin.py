"""A mixture-of-experts twin of a dense Llama target: the same logits, the cost of routing (notebook 12).

Notebook 12 predicts that a verify pass of an MoE target reads more weights than a plain step, because its k + 1
tokens route to different experts. ``MoeTwin`` lets the learner measure that on a CPU with the course's own target,
built the way notebook 09 pads (``specdec.core.models.padded_target``):

- every layer's MLP is copied into ``experts`` experts, each widened with zeros to ``width`` (the added units
  output silu(0) * 0 = 0), so every expert computes the target's own MLP; the copies are separate tensors, so
  reading two experts reads twice the bytes;
- a router (a random linear map of the hidden state, seeded) picks ``per_token`` distinct experts per token, top-r
  of its scores; the gate weights are 1 / r each, applied as a pairwise mean (r a power of two), so the r identical
  outputs average to exactly one of them: the router's choice changes what a pass reads, never what it computes;
- each pass runs every expert that at least one of its tokens chose, once, on those tokens' rows, and records how
  many distinct experts each layer read (``experts_read``).

The forward is lean like ``specdec.core.lean.LeanLlama`` (fused q/k/v, a preallocated cache whose ``crop`` only
sets a length) and takes a batch: ``model(ids, cache=...)`` with ids (B, m) and ``cache = model.new_cache(B)``
returns ``.logits`` (B, m', V). With batch 1 it is a drop-in for the calls the course's decoding loop makes.
``moe_twin(target, 1, 1, width)`` is a dense target of that MLP width through the same code, the twin's fair
baseline. ``tests/test_moe_twin.py`` checks the twin's greedy output against the dense target's, token for token.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from specdec.core.lean import LeanCache, rms_norm, rotary_tables


def _power_of_two(n):
    return n >= 1 and n & (n - 1) == 0


class MoeTwin(torch.nn.Module):
    """See the module text. Build it with ``moe_twin``."""

    def __init__(
        self, target, experts: int, per_token: int, width: int, dtype=None, seed: int = 0, max_len: int | None = None
    ):
        super().__init__()
        cfg = target.config
        if getattr(cfg, "model_type", None) != "llama":
            raise ValueError(f"target must be a Llama model, got model_type {getattr(cfg, 'model_type', None)!r}")
        if not isinstance(experts, int) or isinstance(experts, bool) or experts < 1:
            raise ValueError(f"experts must be an int >= 1, got {experts!r}")
        if (
            not isinstance(per_token, int)
            or isinstance(per_token, bool)
            or not 1 <= per_token <= experts
            or not _power_of_two(per_token)
        ):
            raise ValueError(
                f"per_token must be a power of two in [1, experts = {experts}] (the gates are a "
                f"pairwise mean), got {per_token!r}"
            )
        old = cfg.intermediate_size
        if not isinstance(width, int) or isinstance(width, bool) or width < old:
            raise ValueError(f"width must be an int >= the target's MLP width {old}, got {width!r}")
        self.config = copy.deepcopy(cfg)
        self.config.intermediate_size = width
        self.experts, self.per_token, self.width = experts, per_token, width
        dtype = dtype or next(target.parameters()).dtype
        self.dtype = dtype
        inner = target.model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_len = int(max_len or cfg.max_position_embeddings)
        gen = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            self.embed = inner.embed_tokens.weight.detach().to(dtype).clone()
            self.layers = [self._layer(layer, gen) for layer in inner.layers]
            self.norm_w, self.norm_eps = inner.norm.weight.detach().to(dtype).clone(), inner.norm.variance_epsilon
            self.lm_head = target.lm_head.weight.detach().to(dtype).clone()
        self.cos, self.sin, self.causal = rotary_tables(inner.rotary_emb, self.head_dim, self.max_len, dtype)
        self.experts_read: list[int] = []  # distinct experts each layer read in the last forward

    def _layer(self, layer, gen):
        att, mlp = layer.self_attn, layer.mlp
        dt, old, H = self.dtype, mlp.gate_proj.weight.shape[0], mlp.gate_proj.weight.shape[1]

        def expert():
            gate_up = torch.zeros(2 * self.width, H, dtype=dt)
            gate_up[:old] = mlp.gate_proj.weight
            gate_up[self.width : self.width + old] = mlp.up_proj.weight
            down = torch.zeros(H, self.width, dtype=dt)
            down[:, :old] = mlp.down_proj.weight
            return gate_up, down

        return SimpleNamespace(
            ln1=layer.input_layernorm.weight.detach().to(dt).clone(),
            eps1=layer.input_layernorm.variance_epsilon,
            ln2=layer.post_attention_layernorm.weight.detach().to(dt).clone(),
            eps2=layer.post_attention_layernorm.variance_epsilon,
            qkv=torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).to(dt),
            o=att.o_proj.weight.detach().to(dt).clone(),
            scaling=att.scaling,
            router=torch.randn(self.experts, H, generator=gen).to(dt),
            experts=[expert() for _ in range(self.experts)],
        )

    def new_cache(self, batch: int = 1) -> LeanCache:
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        return LeanCache(len(self.layers), self.kv_heads, self.max_len, self.head_dim, self.dtype, batch=batch)

    def expert_megabytes(self) -> float:
        """MB of weights one expert of one layer holds (its gate, up and down matrices)."""
        gate_up, down = self.layers[0].experts[0]
        return (gate_up.numel() + down.numel()) * gate_up.element_size() / 1e6

    def other_megabytes(self) -> float:
        """MB of the weights every pass reads besides the experts: attention, routers, norms, the LM head."""
        per_layer = sum(t.numel() * t.element_size() for L in self.layers for t in (L.qkv, L.o, L.router, L.ln1, L.ln2))
        return (per_layer + self.lm_head.numel() * self.lm_head.element_size()) / 1e6

    def _moe(self, h, L):
        """Every expert some row chose, run once on its rows; the r outputs of a row averaged pairwise."""
        M, r = h.shape[0], self.per_token
        if self.experts == 1:
            gate_up, down = L.experts[0]
            g, u = F.linear(h, gate_up).chunk(2, dim=-1)
            self.experts_read.append(1)
            return F.linear(F.silu(g) * u, down)
        choice = F.linear(h, L.router).topk(r, dim=-1).indices  # (M, r) distinct experts per row
        flat = choice.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.experts).tolist()
        rows, slots = order // r, order % r
        out = h.new_empty(r, M, h.shape[1])
        start, read = 0, 0
        for e, n in enumerate(counts):
            if not n:
                continue
            rows_e, slots_e = rows[start : start + n], slots[start : start + n]
            gate_up, down = L.experts[e]
            g, u = F.linear(h.index_select(0, rows_e), gate_up).chunk(2, dim=-1)
            out[slots_e, rows_e] = F.linear(F.silu(g) * u, down)
            start, read = start + n, read + 1
        self.experts_read.append(read)
        while out.shape[0] > 1:  # equal outputs: (y + y) * 0.5 == y exactly
            out = (out[0::2] + out[1::2]) * 0.5
        return out[0]

    @torch.no_grad()
    def forward(self, input_ids, cache=None, use_cache=True, logits_to_keep=0, **_):
        ids = input_ids if input_ids.dim() == 2 else input_ids.reshape(1, -1)
        B, m = ids.shape
        if cache is None:
            cache = self.new_cache(B)
        if not isinstance(cache, LeanCache) or cache.batch != B:
            raise ValueError(
                f"cache must be this model's LeanCache for batch {B} (new_cache({B})), got {type(cache).__name__}"
            )
        start = cache.length
        end = start + m
        if end > self.max_len:
            raise ValueError(f"input_ids: {end} positions exceed the cache's max_len {self.max_len}")
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)  # (B, m, H)
        cos, sin = self.cos[start:end, None, :], self.sin[start:end, None, :]  # (m, 1, hd)
        causal = m > 1 and start == 0
        mask = None if m == 1 or causal else self.causal[start:end, :end]
        half = hd // 2
        self.experts_read = []
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L.ln1, L.eps1)
            qkv = F.linear(h, L.qkv).view(B, m, nh + 2 * nkv, hd)
            qk, v = qkv[:, :, : nh + nkv], qkv[:, :, nh + nkv :]
            qk = qk * cos + qk.roll(half, dims=-1) * sin
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, start:end].copy_(qk[:, :, nh:].transpose(1, 2))
            values[:, :, start:end].copy_(v.transpose(1, 2))
            q = qk[:, :, :nh].transpose(1, 2)  # (B, nh, m, hd)
            a = F.scaled_dot_product_attention(
                q,
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=mask,
                is_causal=causal,
                scale=L.scaling,
                enable_gqa=nh != nkv,
            )
            x = x + F.linear(a.transpose(1, 2).reshape(B, m, nh * hd), L.o)
            h = rms_norm(x, L.ln2, L.eps2)
            x = x + self._moe(h.reshape(B * m, -1), L).view(B, m, -1)
        cache.length = end
        x = rms_norm(x, self.norm_w, self.norm_eps)
        keep = x if not logits_to_keep else x[:, -logits_to_keep:]
        return SimpleNamespace(logits=F.linear(keep, self.lm_head), hidden_states=None)


def moe_twin(target, experts: int, per_token: int, width: int, dtype=None, seed: int = 0, max_len=None) -> MoeTwin:
    """A mixture-of-experts twin of `target` (a transformers LlamaForCausalLM): each layer's MLP copied into
    `experts` experts of MLP width `width` (zero-padded), `per_token` of them (a power of two) chosen per token by a
    seeded random router, gates 1 / per_token. Its logits are the target's up to float rounding; its cost follows
    the routing. `dtype` (e.g. torch.bfloat16) converts the copy; the target is untouched."""
    return MoeTwin(target, experts, per_token, width, dtype=dtype, seed=seed, max_len=max_len).eval()
