"""Fine-tunes ALBERT on a GLUE task; see `albert/run_classifier.py` (same flags).

A thin wrapper for people working from a clone: `python run_classifier.py ...` is
`python -m albert.run_classifier ...`.
"""

from albert.run_classifier import run

if __name__ == "__main__":
    run()
