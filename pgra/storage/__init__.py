"""Folders on disk: atomic writes and manifests, ownership, one writer per folder, and provenance."""
