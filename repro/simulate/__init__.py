"""Sampling statistics at paper scale with no model: every method through the same core."""
