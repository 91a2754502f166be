"""Language models: loading, the causal-LM base, KV caches, tokens, the paper's prompts and label-word scoring."""
