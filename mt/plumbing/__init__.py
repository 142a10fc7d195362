"""Plumbing every layer leans on: the kinds of error a user can fix, atomic writes, the one validator of
records, a config's YAML as plain mappings, and writing systems."""
