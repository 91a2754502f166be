"""What a method produces: the predictions schema, its files, and the metrics that score them."""
