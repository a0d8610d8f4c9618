"""Fine-tunes ALBERT on SQuAD v1.1 or v2.0; see `albert/run_squad.py` (same flags).

A thin wrapper for people working from a clone: `python run_squad.py ...` is
`python -m albert.run_squad ...`.
"""

from albert.run_squad import run

if __name__ == "__main__":
    run()
