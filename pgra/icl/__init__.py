"""In-context learning: a causal LM reads selected demonstrations and the input; labels scored by likelihood.

``config`` (ICLConfig), :mod:`pgra.lm.label_scoring` (LabelScorer: label-word log-likelihoods with the prompt's KV cache shared by
its label words), ``classify`` (ICLClassifier: select, prompt, score), ``run`` (``pgra icl`` and ICLPredictor).
The package import stays light: import the modules for their contents.
"""
