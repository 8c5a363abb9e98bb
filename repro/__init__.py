"""repro: reproduce and extend Reinforce-Ada (arXiv 2510.04996)."""

__version__ = "0.1.0"
