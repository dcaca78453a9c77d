"""Load the course's tiny target/draft pair and its held-out text, offline, from data/models.

Layout of a model folder (written by ``python -m specdec.training.train``):
  target/     LlamaForCausalLM (config.json, model.safetensors, generation_config.json) and the
              byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json): a complete checkpoint,
              so ``AutoTokenizer.from_pretrained`` and ``pipeline("text-generation", model=...)`` load it alone
  draft/      LlamaForCausalLM, same vocabulary and special tokens as the target, same tokenizer files
  heldout.json  held-out text per domain: {"code": [...], "prose": [...], "json": [...]}
  medusa/, eagle/  drafters on the target's hidden states (specdec.core.drafters;
                   ``python -m specdec.training.train drafters``)
"""

from __future__ import annotations

import json
from pathlib import Path

from specdec import DATA_DIR

# the held-out (and training) text domains; specdec.training.corpus splits its corpus into them
DOMAINS = ("code", "prose", "json")

# the files without which a folder is not a usable pair
REQUIRED_FILES = (
    "target/config.json",
    "target/model.safetensors",
    "target/tokenizer.json",
    "target/tokenizer_config.json",
    "draft/config.json",
    "draft/model.safetensors",
    "draft/tokenizer.json",
    "draft/tokenizer_config.json",
    "heldout.json",
)

RETRAIN_COMMAND = "python -m specdec.training.train --out data/models"


class ModelFilesError(FileNotFoundError, RuntimeError):
    """The model folder is missing files, or holds files that do not load."""


def default_path() -> Path:
    """the repository's data/models, found from this file (specdec/ sits next to data/)."""
    return DATA_DIR / "models"


def _fail(path: Path, problem: str) -> ModelFilesError:
    return ModelFilesError(
        f"{problem}\nmodel folder: {path}\n"
        f"retrain the pair (about 20 minutes on 2 cores) from the repository root with:\n"
        f"    {RETRAIN_COMMAND}"
    )


def check_files(path: str | Path | None = None) -> Path:
    """the folder, as a Path, after checking that every required file is there."""
    path = Path(path) if path is not None else default_path()
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise _fail(path, "missing model files: " + ", ".join(missing))
    return path


def _load_model(folder: Path, device: str):
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    return model.to(device).eval()


def load_pair(path: str | Path | None = None, device: str = "cpu"):
    """(target, draft, tokenizer): both models in eval mode, fp32, on `device`.

    Reads only local files (local_files_only=True), so it works with HF_HUB_OFFLINE=1 and
    without network. Raises ModelFilesError naming what is missing or broken.
    """
    from safetensors import SafetensorError
    from transformers import PreTrainedTokenizerFast

    path = check_files(path)
    try:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path / "target", local_files_only=True)
        target = _load_model(path / "target", device)
        draft = _load_model(path / "draft", device)
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as err:
        raise _fail(path, f"model files do not load ({type(err).__name__}: {err})") from err
    _check_same_vocab(path, target, draft, tokenizer)
    return target, draft, tokenizer


def _check_same_vocab(path: Path, target, draft, tokenizer) -> None:
    """assisted generation needs one vocabulary: same size and special tokens everywhere."""
    keys = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")
    t = {k: getattr(target.config, k) for k in keys}
    d = {k: getattr(draft.config, k) for k in keys}
    if t != d or t["vocab_size"] != len(tokenizer):
        raise _fail(path, f"target {t}, draft {d} and tokenizer ({len(tokenizer)} tokens) disagree")


def load_heldout(path: str | Path | None = None) -> dict[str, list[str]]:
    """{domain: [held-out text, ...]} for code, prose and json, never seen in training."""
    path = Path(path) if path is not None else default_path()
    file = path / "heldout.json"
    if not file.is_file():
        raise _fail(path, f"missing model files: {file.name}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise _fail(path, f"{file.name} is not valid JSON ({err})") from err
    missing = [d for d in DOMAINS if not data.get(d)]
    if missing:
        raise _fail(path, f"{file.name} has no text for: {', '.join(missing)}")
    return {d: list(data[d]) for d in DOMAINS}


def heldout_texts(domain: str, path: str | Path | None = None) -> list[str]:
    """the held-out texts of one domain ("code", "prose" or "json")."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return load_heldout(path)[domain]


def padded_target(target, intermediate_size: int, dtype=None):
    """A copy of `target` whose MLPs are `intermediate_size` wide, the extra units all zero.

    Each Llama MLP computes down(silu(gate(x)) * up(x)). The added rows of gate and up are zero, so the
    added units output silu(0) * 0 = 0, and the added columns of down are zero too: every logit equals the
    original's up to float rounding (the sums have more terms, all zero). What changes is the cost: a decode
    step reads every weight, zero or not, so the copy costs what a real model of that size costs per step.
    `dtype` (e.g. torch.bfloat16) converts the copy; None keeps the target's. The original is untouched.
    """
    import copy

    import torch

    old = target.config.intermediate_size
    if not isinstance(intermediate_size, int) or intermediate_size < old:
        raise ValueError(f"intermediate_size must be an int >= the target's {old}, got {intermediate_size!r}")
    config = copy.deepcopy(target.config)
    config.intermediate_size = intermediate_size
    with torch.device("meta"):  # no random init of weights that are overwritten below
        model = type(target)(config)
    model = model.to_empty(device="cpu").to(next(target.parameters()).dtype).eval()
    with torch.no_grad():
        for buf_name, buf in target.named_buffers():  # rotary inverse frequencies
            model.get_buffer(buf_name).copy_(buf)
        state = target.state_dict()
        for name, param in model.state_dict().items():
            src = state[name]
            if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
                param[old:].zero_()
                param[:old].copy_(src)
            elif name.endswith("mlp.down_proj.weight"):
                param[:, old:].zero_()
                param[:, :old].copy_(src)
            else:
                param.copy_(src)
    model.generation_config = copy.deepcopy(target.generation_config)
    return with_dtype(model, dtype) if dtype is not None else model


def with_dtype(model, dtype):
    """`model` with its parameters converted to `dtype` in place (e.g. torch.bfloat16), its buffers left as they
    were: the rotary inverse frequencies stay fp32, as transformers computes them, so positions are not rounded.
    Returns the model."""
    buffers = {name: buf.clone() for name, buf in model.named_buffers()}
    model.to(dtype)
    for name, buf in buffers.items():
        path, _, attr = name.rpartition(".")
        module = model.get_submodule(path) if path else model
        module.register_buffer(attr, buf, persistent=name in module.state_dict())
    return model


def early_exit_draft(target, n_layers: int):
    """LayerSkip-style self-speculation: a causal LM made of the target's first `n_layers` decoder layers,
    its final norm and its LM head. The weights are the target's own (shared, not copied): the draft adds no
    parameters. Its logits are what the target would predict if it stopped after `n_layers` layers."""
    import copy

    import torch

    total = target.config.num_hidden_layers
    if not isinstance(n_layers, int) or not 1 <= n_layers < total:
        raise ValueError(f"n_layers must be an int in [1, {total - 1}], got {n_layers!r}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:n_layers]
    with torch.device("meta"):
        draft = type(target)(config)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:n_layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval()
