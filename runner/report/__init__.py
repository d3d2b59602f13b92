"""Reports: the console summary, reading runs back from MLflow, the comparison's table, plots and a sweep's report.

What the commands over stored runs share (`selection`: which runs; `table`: the comparison's
rows; `sweep_report`: the comparison a sweep logs to its parent run) lives here, so no module
imports a command.
"""
