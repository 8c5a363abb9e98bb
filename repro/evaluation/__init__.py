"""Evaluation: grading sampled responses against reference answers (PROTOCOL.md "Evaluation: Ave@32")."""
