#!/usr/bin/env python
"""Build a first-stage index: `python scripts/build_index.py --config configs/demo/index_minilm.yaml`.

Multi-process: `torchrun --nproc_per_node N scripts/build_index.py ...` (or `accelerate launch`).
Same flags as `pgra build-index`.
"""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["build-index", *sys.argv[1:]]))
