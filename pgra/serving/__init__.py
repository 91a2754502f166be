"""A finished run put to use: Pipeline.load(run).predict(texts), pgra export (its model card and the wheel it
carries), and the Hub upload."""
