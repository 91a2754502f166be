"""The Fusion-in-Decoder reader: model wrapper, input formatting, training loop, prediction."""
