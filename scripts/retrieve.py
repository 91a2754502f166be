#!/usr/bin/env python
"""`python scripts/retrieve.py ...` = `pgra retrieve ...`; multi-process: `torchrun --nproc_per_node N scripts/retrieve.py ...`."""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["retrieve", *sys.argv[1:]]))
