"""Creates ALBERT pretraining TFRecords; see `albert/create_pretraining_data.py` (same flags).

A thin wrapper for people working from a clone: `python create_pretraining_data.py ...` is
`python -m albert.create_pretraining_data ...`.
"""

from albert.create_pretraining_data import run

if __name__ == "__main__":
    run()
