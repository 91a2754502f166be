#!/usr/bin/env python
"""Re-evaluate a finished run: `python scripts/evaluate.py --run RUN [--split S] [--data FOLDER]` (= `pgra evaluate`)."""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
