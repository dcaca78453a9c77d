"""The shipped draft/target pair (data/models), its loader and its training entry point."""

import copy
import os
import shutil
import subprocess
import sys

import pytest
import torch

from specdec.core.decoding import count_params
from specdec.core.models import DOMAINS, ModelFilesError, default_path, heldout_texts, load_heldout, load_pair
from specdec.training import cards, train, train_pair

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = default_path().parent.parent

# greedy α (teacher-forced argmax agreement) on the texts of heldout.json, measured on the
# shipped pair: code 0.612, prose 0.660, json 0.888. The floors leave room for float noise
# across machines but fail if a retrain or a loader change makes the draft much worse
# (a draft trained without distillation measures code 0.490, prose 0.478, json 0.829).
ALPHA_FLOOR = {"code": 0.57, "prose": 0.6, "json": 0.85}


@pytest.fixture(scope="module")
def assisted_pair(pair):
    """The shared pair with a copy of the draft whose generation config asks for 4 constant draft tokens
    (transformers reads the draft length from the draft's generation config, not generate())."""
    target, draft, tokenizer = pair
    draft = copy.deepcopy(draft)
    draft.generation_config.num_assistant_tokens = 4
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    return target, draft, tokenizer


def prompt_ids(tokenizer, domain: str, chars: int = 120) -> torch.Tensor:
    """the start of the first held-out text of a domain, as ids (1, T)."""
    return tokenizer(heldout_texts(domain)[0][:chars], return_tensors="pt").input_ids


def smoke_train(out):
    return train.main(["--smoke", "--threads", "1", "--out", str(out)])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """(folder, report) of one smoke training: a few steps at tiny sizes."""
    out = tmp_path_factory.mktemp("smoke") / "pair"
    return out, smoke_train(out)


def test_smoke_training_writes_a_loadable_pair(smoke):
    out, report = smoke
    target, draft, tokenizer = load_pair(out)
    assert target.config.vocab_size == draft.config.vocab_size == len(tokenizer) == 384
    assert not target.training and not draft.training
    assert type(draft).from_pretrained(out / "draft").dtype == torch.float32  # fp16 on disk
    assert count_params(target) == report["target"]["params"] > count_params(draft) == report["draft"]["params"]
    ids = tokenizer("def f(x):", return_tensors="pt").input_ids  # (1, T)
    out_ids = target.generate(
        ids, assistant_model=draft, do_sample=False, max_new_tokens=4, min_new_tokens=4
    )  # (1, T+4)
    assert out_ids.shape == (1, ids.shape[1] + 4)
    assert set(load_heldout(out)) == set(DOMAINS)
    assert "python -m specdec.training.train --smoke" in (out / "README.md").read_text()
    assert (out / "train_log.csv").read_text().startswith("model,step,loss")


def test_training_reproduces_from_the_seed(smoke, tmp_path):
    out, _ = smoke
    smoke_train(tmp_path / "again")
    for name in (
        "target/model.safetensors",
        "draft/model.safetensors",
        "target/tokenizer.json",
        "draft/tokenizer.json",
        "heldout.json",
    ):
        assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name


def test_shipped_pair_loads_offline(tmp_path):
    code = (
        "from specdec.core.models import load_pair\n"
        "t, d, tok = load_pair()\n"
        "ids = tok('import os', return_tensors='pt').input_ids\n"
        "print(t.generate(ids, max_new_tokens=3, do_sample=False).shape[1] - ids.shape[1])\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "3"


def test_shipped_pair_is_small():
    def size(folder):
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    assert size(default_path()) < 20e6
    assert size(REPO / "data") < 25e6


def test_missing_files_name_what_and_how_to_retrain(tmp_path):
    with pytest.raises(ModelFilesError) as err:
        load_pair(tmp_path)
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, RuntimeError)
    assert "target/model.safetensors" in str(err.value)
    assert "python -m specdec.training.train" in str(err.value)


def test_corrupt_weights_raise_the_same_error(tmp_path):
    broken = tmp_path / "models"
    shutil.copytree(default_path(), broken)
    (broken / "draft" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelFilesError, match="do not load"):
        load_pair(broken)


def test_vocab_and_special_tokens_match(pair):
    target, draft, tokenizer = pair
    for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(target.config, key) == getattr(draft.config, key), key
        assert getattr(target.generation_config, key, None) == getattr(draft.generation_config, key, None)
    assert target.config.vocab_size == len(tokenizer)
    assert target.config.eos_token_id == tokenizer.eos_token_id == tokenizer.bos_token_id
    assert target.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert target.lm_head.out_features == draft.lm_head.out_features == len(tokenizer)


def test_shipped_sizes_are_a_target_and_a_much_smaller_draft(pair):
    target, draft, _ = pair
    assert 5e6 <= count_params(target) <= 10e6
    assert count_params(target) >= 7 * count_params(draft)


def test_sampled_generation_is_deterministic_under_a_seed(assisted_pair):
    target, draft, tokenizer = assisted_pair
    ids = prompt_ids(tokenizer, "prose")

    def sample(seed, **kw):
        torch.manual_seed(seed)
        return target.generate(ids, do_sample=True, max_new_tokens=16, min_new_tokens=16, **kw)

    first = sample(0)
    assert torch.equal(first, sample(0))
    assert not torch.equal(first, sample(1))
    assert torch.equal(sample(3, assistant_model=draft), sample(3, assistant_model=draft))


@pytest.mark.parametrize("domain", DOMAINS)
def test_assisted_greedy_equals_target_greedy(assisted_pair, domain):
    target, draft, tokenizer = assisted_pair
    ids = prompt_ids(tokenizer, domain)
    plain = target.generate(ids, do_sample=False, max_new_tokens=32, min_new_tokens=32)  # (1, T+32)
    assisted = target.generate(
        ids, assistant_model=draft, do_sample=False, max_new_tokens=32, min_new_tokens=32
    )  # (1, T+32)
    assert torch.equal(plain, assisted)


def test_greedy_alpha_per_domain_stays_above_its_floor(pair):
    target, draft, tokenizer = pair
    alpha = {d: train_pair.greedy_alpha_on_texts(target, draft, tokenizer, heldout_texts(d)) for d in DOMAINS}
    for domain, floor in ALPHA_FLOOR.items():
        assert alpha[domain] >= floor, (domain, alpha)
    assert alpha["json"] > alpha["prose"] + 0.1, alpha  # the gap between traffic types


def test_heldout_domains():
    texts = load_heldout()
    assert set(texts) == set(DOMAINS)
    for domain in DOMAINS:
        assert 1000 < sum(map(len, texts[domain])) < 10_000
    with pytest.raises(ValueError, match="domain"):
        heldout_texts("poetry")


def test_copy_rows_repeat_the_window_except_at_the_edits():
    stream = torch.arange(1000) % 97 + 3  # no token repeats within 97 positions
    sep = torch.tensor([1, 2])
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        row, copied = train_pair.copy_row(stream, 33, sep, gen)
        half = (33 - 2) // 2  # 15, then sep, then 16 tokens
        assert row.shape == copied.shape == (33,)
        assert row[half : half + 2].tolist() == [1, 2]
        second = row[half + 2 :]
        assert (
            row[half + 2 : 2 * half + 2][copied[half + 2 : 2 * half + 2]] == row[:half][copied[half + 2 : 2 * half + 2]]
        ).all()
        edits = (~copied[half + 2 : 2 * half + 2]).sum().item()
        assert 1 <= edits <= 3 and not copied[: half + 2].any() and not copied[-1]
        assert second[-1] == row[half - 1] + 1 or second[-1] == 3  # the second copy runs one token further


def test_model_folders_are_complete_checkpoints_for_stock_transformers(tmp_path):
    """AutoTokenizer and pipeline() load each model folder alone, offline, with no specdec code."""
    code = (
        "import sys\n"
        "from transformers import AutoTokenizer, pipeline\n"
        "for folder in sys.argv[1:]:\n"
        "    tok = AutoTokenizer.from_pretrained(folder)\n"
        "    gen = pipeline('text-generation', model=folder)\n"
        "    out = gen('import os', max_new_tokens=3, do_sample=False)[0]['generated_text']\n"
        "    print(len(tok), out.startswith('import os'), len(tok(out).input_ids) >= 3)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", code, str(default_path() / "target"), str(default_path() / "draft")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["4096 True True"] * 2, done.stdout


def test_model_card_names_no_machine_specific_path():
    import json
    import re

    absolute = re.compile(r"(^|[\s(`'\"=])(/[\w.+-]+){2,}|[A-Za-z]:\\\\")
    card = (default_path() / "README.md").read_text(encoding="utf-8")
    assert not absolute.search(card), absolute.search(card)
    report = json.loads((default_path() / "training.json").read_text(encoding="utf-8"))
    report["versions"]["stdlib"] = "/opt/somewhere/lib/python3.11"  # as a fresh run on another machine
    regenerated = cards.model_card(report)
    assert "/opt/somewhere" not in regenerated and "lib/python3.11" in regenerated
    assert not absolute.search(regenerated), absolute.search(regenerated)
