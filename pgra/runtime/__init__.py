"""Where and how models run: device and threads, process groups, the cost meter, the shared training loop
pieces, trackers, and the environment a result was made in."""
