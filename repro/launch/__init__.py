"""Launchers: run every cell of a sweep file (`local`: subprocesses here; `slurm`, `ray_jobs`: a scheduler).

The package imports none of its modules, so that importing one (`repro.cell_config` needs
`repro.launch.attempt`) does not pull in the launchers, which build on the cell configuration.
"""
