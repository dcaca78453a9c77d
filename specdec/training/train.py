"""Train the course's tiny target/draft pair and ship it: ``python -m specdec.training.train``.

Steps: build the three-domain corpus (specdec.training.corpus), train one byte-level BPE tokenizer,
train the target (LlamaForCausalLM) on next-token cross-entropy, train the draft (a much
smaller LlamaForCausalLM, same vocabulary) by distillation on the target's logits, save both
in fp16 with save_pretrained, then reload them and measure held-out loss and greedy α per
domain for the model card. Everything is seeded; with the same seed, thread count and
Python version the run reproduces.

    python -m specdec.training.train --out data/models           # the shipped pair (~20 min, 2 cores)
    python -m specdec.training.train --smoke --out /tmp/pair     # a few steps, tiny sizes (CI)

``python -m specdec.training.train drafters`` trains the drafters that ride on a trained target (Medusa heads and
an EAGLE feature draft, specdec.core.drafters) against the frozen target of ``--target-from`` (default
``--out``), saves them in medusa/ and eagle/, and measures greedy α and τ per domain against the
separate draft and early exit; ``--smoke`` for tests. Its numbers go to drafters.json and the card.

    python -m specdec.training.train drafters --out data/models              # the shipped drafters (~15 min)
"""

import sys

# the model card (data/models/README.md, MEASURED_NOTES in specdec.training.cards) names
# specdec.training.train.copy_skill
from specdec.training.train_pair import copy_skill  # noqa: F401


def main(argv=None) -> dict:
    """``python -m specdec.training.train [drafters] ...``: train the pair (specdec.training.train_pair), or with
    ``drafters`` the drafters on its target (specdec.training.train_drafters); returns the run's report."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["drafters"]:
        from specdec.training.train_drafters import main_drafters

        return main_drafters(argv[1:])
    from specdec.training.train_pair import main as train_pair

    return train_pair(argv)


if __name__ == "__main__":
    main()
