"""Fine-tunes ALBERT on SQuAD v2.0; see `albert/run_squad_v2.py` (same flags).

A thin wrapper for people working from a clone, where the original's script has this name:
`python run_squad_v2.py ...` is `python -m albert.run_squad_v2 ...`.
"""

from albert.run_squad_v2 import run

if __name__ == "__main__":
    run()
