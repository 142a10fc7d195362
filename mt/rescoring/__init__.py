"""After the search: translations given scored (`mt score`), and a line's translation chosen among its
candidates (MBR, reranking by a reverse run)."""
