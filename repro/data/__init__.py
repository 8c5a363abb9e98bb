"""Training data: loading, clean-up, base-model difficulty filtering, verl Parquet."""
