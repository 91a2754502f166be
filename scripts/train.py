#!/usr/bin/env python
"""Train the FiD reader: `accelerate launch scripts/train.py --config configs/demo/reader_bert2bert.yaml`.

Also `torchrun --nproc_per_node N scripts/train.py ...` or plain `python scripts/train.py ...`;
same flags as `pgra train`.
"""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
