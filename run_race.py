"""Fine-tunes ALBERT on RACE; see `albert/run_race.py` (same flags).

A thin wrapper for people working from a clone: `python run_race.py ...` is
`python -m albert.run_race ...`.
"""

from albert.run_race import run

if __name__ == "__main__":
    run()
