#!/usr/bin/env python
"""`python scripts/rerank.py ...` = `pgra rerank ...`; multi-process: `torchrun --nproc_per_node N scripts/rerank.py ...`."""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["rerank", *sys.argv[1:]]))
