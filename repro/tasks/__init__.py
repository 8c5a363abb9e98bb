"""Tasks the CPU path trains and evaluates on."""
