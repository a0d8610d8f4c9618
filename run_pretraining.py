"""Pretrains ALBERT (masked LM + sentence order); see `albert/run_pretraining.py` (same flags).

A thin wrapper for people working from a clone: `python run_pretraining.py ...` is
`python -m albert.run_pretraining ...`.
"""

from albert.run_pretraining import run

if __name__ == "__main__":
    run()
