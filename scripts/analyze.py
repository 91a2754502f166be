#!/usr/bin/env python
"""The analyses of an experiment: `accelerate launch scripts/analyze.py --config configs/paper/experiment_table2.yaml`.

Also `torchrun --nproc_per_node N scripts/analyze.py ...` or plain `python scripts/analyze.py ...`; same flags as
`pgra analyze`. The sweeps' and retrievers' runs shard over the processes; tables and figures come from the main one.
"""

import sys

from pgra.cli import main

if __name__ == "__main__":
    sys.exit(main(["analyze", *sys.argv[1:]]))
