"""Notebook 09's measurements as a benchmark: ``python -m specdec.measure.cpu_speedup``.

Runs the solution of notebook 09 (solutions/09_speculation_that_pays) headless, in full mode unless --quick, with
the benchmark's fixed test set (4 prompts per domain; SPECDEC_BENCH=1), and prints what its cells print: the CPU's
kernel capability, the table of kernel paths (step, v(k), c per path and padded width) and the path chosen from it,
c and v(k), alpha and the k the rule picks,
the speedup of speculative decoding over the fastest plain decoding per domain (measured and predicted),
exactness, prompt lookup against its copy-rate bound, the drafter table (alpha, tau, c, speedup) and the token
trees. The notebook is the single source of the measurement code; this only runs it. Nothing is asserted:
run it on a quiet machine (no other work on the cores) and read the ratios. About two minutes on 2 cores.
--avx2 caps an AVX-512 machine to AVX2 behaviour (ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS, ATEN_CPU_CAPABILITY,
set for the notebook's kernel before torch loads there), to see what a learner's laptop without AVX-512 sees.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from specdec import REPO

NAME = "09_speculation_that_pays"


def main(argv=None) -> int:
    import nbformat
    import torch
    import transformers
    from nbclient import NotebookClient

    p = argparse.ArgumentParser(
        prog="python -m specdec.measure.cpu_speedup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="the notebook's quick mode (smaller sweeps, about 1 minute)")
    p.add_argument("--avx2", action="store_true", help="cap the CPU to AVX2 kernels for the run (see above)")
    args = p.parse_args(argv)
    from specdec.measure.kernels import AVX2_CAP, cpu_capability, cpu_name

    native = cpu_capability()
    if args.avx2:
        os.environ.update(AVX2_CAP)
    path = REPO / "solutions" / NAME / f"{NAME}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    os.environ["SPECDEC_QUICK"] = "1" if args.quick else "0"
    os.environ["SPECDEC_BENCH"] = "1"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}: {cpu_name()}, {os.cpu_count()} logical CPUs, torch's kernels "
        f"{native}" + (" capped to AVX2" if args.avx2 else "") + f"; torch {torch.__version__}, transformers "
        f"{transformers.__version__}; 2 threads, the kernel path the notebook chooses; "
        f"{'quick' if args.quick else 'full'} mode"
    )
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                sys.stdout.write(out["text"])
    print(f"ran in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
