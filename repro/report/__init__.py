"""Results, tables and figures: run folders -> results/ -> paper-style tables and plots."""
