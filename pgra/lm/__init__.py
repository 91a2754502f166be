"""Language models: loading, the causal-LM base, key/value caches, token helpers, the paper's prompts and
label-word scoring."""
