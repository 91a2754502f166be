#!/usr/bin/env python
"""Train SimCSE: `accelerate launch scripts/train_simcse.py --config configs/demo/simcse.yaml`.

Also `torchrun --nproc_per_node N scripts/train_simcse.py ...` or plain `python scripts/train_simcse.py ...`;
same flags as `pgra train-simcse`.
"""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["train-simcse", *sys.argv[1:]]))
