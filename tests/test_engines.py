"""llama.cpp (make engines) runs the course's pair exactly: greedy output equal token for token to transformers'
greedy decoding of the same f16 weights, with and without the draft, and no server left running afterwards.

Skipped, with the reason, where `make engines` has not been run (it builds llama.cpp: minutes)."""
import os

import pytest
import torch

from specdec.engines import gguf_path, status

pytestmark = pytest.mark.skipif(not (status()["llama.cpp"] and status()["models"]),
                                reason="engines absent: run `make engines` (builds llama.cpp, converts the pair)")
N_NEW = 48


@pytest.fixture(scope="module")
def reference():
    """(prompts, transformers' greedy continuations) of the target with its weights rounded to f16 (zero padding, as
    in the GGUF, changes no logit: notebook 09)."""
    from specdec.decoding import greedy_generate, heldout_prompts
    from specdec.models import heldout_texts, load_pair

    target, _, tokenizer = load_pair()
    target = target.to(torch.float16).to(torch.float32)          # the GGUF's f16 weights, computed in fp32
    prompts = [heldout_prompts(tokenizer, heldout_texts(d), 1, prompt_tokens=24, seed=5)[0] for d in ("code", "prose", "json")]
    return [(p[0].tolist(), greedy_generate(target, p, N_NEW)[0, p.shape[1]:].tolist()) for p in prompts]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("k", [None, 3])
def test_llama_server_greedy_equals_transformers_greedy_and_leaves_no_server(reference, k):
    from specdec.llama_server import LlamaServer

    server = LlamaServer(gguf_path("target"), draft=None if k is None else gguf_path("draft"), k=k or 3, threads=2)
    with server:
        pid = server.proc.pid
        drafted = accepted = 0
        for prompt, want in reference:
            got, timings = server.complete(prompt, N_NEW)
            assert got == want, f"k={k}: llama-server's greedy tokens differ from transformers' on a {len(prompt)}-token prompt"
            drafted += timings.get("draft_n", 0)
            accepted += timings.get("draft_n_accepted", 0)
        if k is not None:
            assert drafted > 0 and 0 < accepted <= drafted, (drafted, accepted)
            assert "llamacpp:" in server.metrics()
    assert not _alive(pid), f"llama-server (pid {pid}) still running after the block"
