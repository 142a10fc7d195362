"""Corpora the project generates itself, with no download: the toy German->English pairs and the
WMT-shaped synthetic corpus."""
