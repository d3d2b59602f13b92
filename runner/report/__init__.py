"""Reports: the console summary, reading runs back from MLflow, the comparison's table, plots and a sweep's report.

What the commands over stored runs share lives here, so no module imports a command.
"""
