"""mt: a small, real toolkit for Transformer machine translation."""

__version__ = "0.1.0"
