"""Folders on disk: atomic writes and manifests, what pgra owns and may delete, one writer per folder, and
what a run read (provenance)."""
