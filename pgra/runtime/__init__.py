"""Where and how models run: device and threads, process groups, costs, training pieces, the environment."""
